"""The DSP modules' CUDA kernels on the GPU against their NumPy float64
references (which the CPU tests hold to scipy and librosa), so that the GPU
machine needs neither scipy nor librosa; against scipy and torchaudio too
where they are installed. Sizes large enough that sosfilt's scan joins
thousands of chunks per row."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.registry import REGISTRY
from pygpukit_audio import filters, mel
from pygpukit_audio import resampling as resample

pytestmark = pytest.mark.gpu


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def stable_sos(rng, sections: int, radius: tuple[float, float] = (0.3, 0.99)) -> np.ndarray:
    """Random biquads with their poles r e^(+-i theta) inside the unit circle."""
    r = rng.uniform(*radius, sections)
    theta = rng.uniform(0.01, np.pi - 0.01, sections)
    sos = np.empty((sections, 6))
    sos[:, :3] = rng.standard_normal((sections, 3))
    sos[:, 3] = 1.0
    sos[:, 4], sos[:, 5] = -2.0 * r * np.cos(theta), r * r
    return sos


# float64: both sides compute in float64 with different chunkings (1e-12 and
# below for poles up to radius 0.999); float32: each rounds that result once.
SOS_TOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-6}


def test_sosfilt_kernel_against_reference(rng):
    cases = [((16, 160_000), np.float32, 3), ((3, 100_003), np.float64, 4), ((1, 31), np.float64, 2), ((700, 64), np.float32, 1),
             ((2, 50_000), np.float64, 8), ((4, 30_000), np.float64, 5)]  # fmt: skip
    for (rows, n), dtype, sections in cases:
        sos = stable_sos(rng, sections, (0.3, 0.999))
        x = gp.asarray(rng.standard_normal((rows, n)).astype(dtype))
        zi = gp.asarray(rng.standard_normal((rows, 2 * sections)))
        assert REGISTRY.which("sosfilt_rows", x, sos, zi, True).endswith("kernel")
        y, zf = filters.kernel_sosfilt_rows(x, sos, zi, True)
        ry, rzf = filters.reference_sosfilt_rows(x, sos, zi, True)
        assert y.dtype == np.dtype(dtype)
        assert rel_err(y.to_numpy(), ry.to_numpy()) < SOS_TOL[np.dtype(dtype)], (rows, n, sections)
        assert rel_err(zf.to_numpy(), rzf.to_numpy()) < 1e-9, (rows, n, sections)
        y0, _ = filters.kernel_sosfilt_rows(x, sos, None, False)  # zero initial delays
        assert rel_err(y0.to_numpy(), filters.reference_sosfilt_rows(x, sos, None, False)[0].to_numpy()) < SOS_TOL[np.dtype(dtype)]
    # the public function takes the kernel, along any axis
    sos = stable_sos(rng, 3)
    x = rng.standard_normal((5, 20_000, 3))
    zi = rng.standard_normal((3, 5, 2, 3))
    y, zf = filters.sosfilt(sos, gp.asarray(x), axis=1, zi=zi)
    moved = np.ascontiguousarray(np.moveaxis(x, 1, -1)).reshape(-1, 20_000)
    ry, rzf = filters.reference_sosfilt_rows(gp.asarray(moved), sos, gp.asarray(np.moveaxis(zi, (0, 2), (-2, -1)).reshape(15, 6)), True)
    assert rel_err(np.moveaxis(y.to_numpy(), 1, -1).reshape(-1, 20_000), ry.to_numpy()) < 1e-9
    assert rel_err(np.moveaxis(zf.to_numpy(), (0, 2), (-2, -1)).reshape(15, 6), rzf.to_numpy()) < 1e-9


def test_fir_kernel_against_reference(rng):
    for k, dtype in [(1, np.float64), (64, np.float32), (513, np.float64), (2048, np.float32), (2048, np.float64)]:
        x = gp.asarray(rng.standard_normal((4, 50_001)).astype(dtype))
        taps = rng.standard_normal(k) / np.sqrt(k)
        assert REGISTRY.which("fir_filter_rows", x, taps).endswith("kernel")
        got = filters.kernel_fir_filter_rows(x, taps)
        # float32 sums of k products against float64 ones
        tol = 1e-12 if dtype == np.float64 else 2e-6
        assert rel_err(got.to_numpy(), filters.reference_fir_filter_rows(x, taps).to_numpy()) < tol, k


def test_resample_kernel_against_reference(rng):
    x = rng.standard_normal((16, 44_100 * 2))
    for up, down in [(160, 441), (441, 160), (147, 160), (2, 3), (3, 1)]:
        for dtype in (np.float64, np.float32):
            rows = gp.asarray(x.astype(dtype))
            h, half = resample.design_filter("test", up, down, ("kaiser", 5.0), np.dtype(dtype))
            table = resample.polyphase_table(h, up)
            nout = -(-x.shape[1] * up // down)
            args = (rows, table, up, down, half, nout, 0.5)
            assert REGISTRY.which("resample_poly_rows", *args).endswith("kernel")
            got = resample.kernel_resample_poly_rows(*args)
            ref = resample.reference_resample_poly_rows(*args)
            assert rel_err(got.to_numpy(), ref.to_numpy()) < (1e-12 if dtype == np.float64 else 2e-6), (up, down, dtype)
    got = resample.resample(gp.asarray(x[:2]), 44100, 16000)
    assert got.shape == (2, 32_000)


def test_power_to_db_kernel(rng):
    S = rng.uniform(0.0, 10.0, (16, 128, 3751)) ** 3
    S[0, 0, :10] = 0.0  # floored at amin
    for dtype in (np.float32, np.float64):
        s = S.astype(dtype)
        gs = gp.asarray(s)
        assert REGISTRY.which("power_to_db_core", gs, None, 1.0, 1e-10, 80.0).endswith("kernel")
        for ref, ref_value in ((1.0, 1.0), (np.max, float(s.max())), (2.5, 2.5)):
            for top_db in (80.0, None, 30.0):
                want = 10.0 * np.log10(np.maximum(1e-10, s.astype(np.float64))) - 10.0 * np.log10(ref_value)
                if top_db is not None:
                    want = np.maximum(want, want.max() - top_db)
                got = mel.power_to_db(gs, ref=ref, top_db=top_db)
                assert got.dtype == np.dtype(dtype)
                np.testing.assert_allclose(got.to_numpy(), want, rtol=2e-6, atol=2e-5)
        want = 20.0 * np.log10(np.maximum(1e-5, s.astype(np.float64)) / s.max())
        np.testing.assert_allclose(
            mel.amplitude_to_db(gs, ref=np.max).to_numpy(), np.maximum(want, want.max() - 80.0), rtol=2e-6, atol=4e-5
        )


def test_against_scipy_where_installed(rng):
    ss = pytest.importorskip("scipy.signal", reason="scipy is not installed on this machine")
    x = rng.standard_normal((16, 160_000))
    for sos in (ss.butter(6, 0.1, output="sos"), ss.ellip(8, 0.5, 60.0, 0.05, output="sos")):
        assert rel_err(filters.sosfilt(sos, gp.asarray(x)).to_numpy(), ss.sosfilt(sos, x)) < 1e-9
        got = filters.sosfilt(sos, gp.asarray(x.astype(np.float32))).to_numpy()
        assert rel_err(got, ss.sosfilt(sos, x.astype(np.float32).astype(np.float64))) < 1e-6
    assert rel_err(filters.sosfiltfilt(sos, gp.asarray(x[:2])).to_numpy(), ss.sosfiltfilt(sos, x[:2])) < 1e-9
    assert rel_err(resample.resample_poly(gp.asarray(x), 160, 441).to_numpy(), ss.resample_poly(x, 160, 441, axis=-1)) < 1e-12


def test_against_torchaudio_where_installed(rng):
    torch = pytest.importorskip("torch")
    taf = pytest.importorskip("torchaudio.functional")
    sos = stable_sos(rng, 3, (0.5, 0.95))
    x = rng.standard_normal((4, 20_000))
    y = filters.sosfilt(sos, gp.asarray(x)).to_numpy()
    t = torch.from_numpy(x).cuda()
    for b0, b1, b2, _, a1, a2 in sos:
        a = torch.tensor([1.0, a1, a2], dtype=torch.float64).cuda()
        b = torch.tensor([b0, b1, b2], dtype=torch.float64).cuda()
        t = taf.lfilter(t, a, b, clamp=False)
    assert rel_err(y, t.cpu().numpy()) < 1e-9
