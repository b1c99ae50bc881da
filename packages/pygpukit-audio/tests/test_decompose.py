"""median_filter against scipy.ndimage.median_filter (odd and even sizes, any
axis, windows longer than the axis), softmask and hpss against librosa on
random, tonal and silent spectrograms, real and complex, float32 and float64;
bad arguments; NVRTC compilation of the median kernel (run on the GPU:
test_gpu_pitch_decompose.py)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import decompose
from pygpukit_audio._errors import AudioTypeError, AudioValueError

librosa = pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")
ndimage = pytest.importorskip("scipy.ndimage")


def test_median_filter_matches_scipy(rng):
    x = rng.standard_normal((3, 7, 5))
    x[1, 2:5, 1] = 0.25  # ties
    for size in (1, 2, 3, 4, 5, 8, 15, 31):
        for axis in (0, 1, 2, -1):
            shape = [1, 1, 1]
            shape[axis] = size
            ref = ndimage.median_filter(x, size=shape, mode="reflect")
            got = decompose.median_filter(gp.asarray(x), size, axis=axis)
            assert np.array_equal(got.to_numpy(), ref), (size, axis)
    x32 = rng.standard_normal(1001).astype(np.float32)
    got = decompose.median_filter(x32, 17)
    assert got.dtype == np.float32 and np.array_equal(got.to_numpy(), ndimage.median_filter(x32, size=17, mode="reflect"))


def spectrograms(rng):
    t = np.arange(16000) / 16000
    tones = np.sin(2 * np.pi * 440 * t) + (rng.uniform(size=16000) < 0.002) * 5.0  # tone plus clicks
    yield "noise", librosa.stft(rng.standard_normal(12001), n_fft=512)
    yield "tones", librosa.stft(tones, n_fft=1024)
    silent = librosa.stft(np.concatenate([np.zeros(3000), rng.standard_normal(3000)]), n_fft=256)
    yield "silence", silent
    yield "batch", librosa.stft(rng.standard_normal((2, 3, 4000)), n_fft=128)


# Median filtering selects values exactly; the masks are a few flops in S's
# dtype, as librosa's: float64 measured exact, float32 within a few ulps.
TOL = {np.dtype(np.complex128): 1e-12, np.dtype(np.complex64): 1e-6, np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-6}


def rel(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got) - ref)) / max(np.max(np.abs(ref)), 1e-300))


@pytest.mark.parametrize("kw", [{}, dict(kernel_size=(17, 9), margin=(2.0, 3.0)), dict(power=np.inf), dict(mask=True),
                                dict(power=1.0, margin=1.5, kernel_size=[4, 6])])  # fmt: skip
def test_hpss_matches_librosa(rng, kw):
    for name, D in spectrograms(rng):
        for S in (D, D.astype(np.complex64), np.abs(D), np.abs(D).astype(np.float32)):
            rh, rp = librosa.decompose.hpss(S, **kw)
            h, p = decompose.hpss(gp.asarray(S), **kw)
            assert h.shape == rh.shape and p.shape == rp.shape
            if rh.dtype == np.bool_:
                assert np.array_equal(h.to_numpy(), rh) and np.array_equal(p.to_numpy(), rp), name
                continue
            assert h.dtype == rh.dtype, (name, h.dtype, rh.dtype)
            tol = TOL[np.dtype(S.dtype)]
            assert rel(h.to_numpy(), rh) < tol and rel(p.to_numpy(), rp) < tol, (name, S.dtype, kw)


def test_softmask_matches_librosa(rng):
    X = np.abs(rng.standard_normal((40, 30)))
    R = np.abs(rng.standard_normal((40, 30)))
    X[:5], R[:5] = 0.0, 0.0  # both zero: split or not
    for power in (1.0, 2.0, 0.5, np.inf):
        for split in (False, True):
            ref = librosa.util.softmask(X, R, power=power, split_zeros=split)
            got = decompose.softmask(gp.asarray(X), gp.asarray(R), power=power, split_zeros=split).to_numpy()
            if power == np.inf:
                assert np.array_equal(got, ref)
            else:
                assert rel(got, ref) < 1e-14, (power, split)


def test_magphase(rng):
    D = rng.standard_normal((9, 7)) + 1j * rng.standard_normal((9, 7))
    D[0, :3] = 0
    mag, phase = decompose.magphase(gp.asarray(D))
    rm, rp = librosa.magphase(D)
    assert rel(mag.to_numpy(), rm) < 1e-15 and rel(phase.to_numpy(), rp) < 1e-15
    with pytest.raises(AudioTypeError, match="complex"):
        decompose.magphase(np.abs(D))


def test_bad_arguments(rng):
    S = np.abs(rng.standard_normal((10, 12)))
    with pytest.raises(AudioValueError, match="margins must be >= 1"):
        decompose.hpss(S, margin=0.5)
    with pytest.raises(AudioValueError, match="pair"):
        decompose.hpss(S, kernel_size=(3, 4, 5))
    with pytest.raises(AudioValueError, match=r"\(..., bins, frames\)"):
        decompose.hpss(S[0])
    with pytest.raises(AudioTypeError, match="complex64"):
        decompose.hpss(np.ones((4, 4), np.int32))
    with pytest.raises(AudioValueError, match="kernel_size"):
        decompose.hpss(S, kernel_size=0)
    with pytest.raises(AudioValueError, match="power"):
        decompose.hpss(S, power=-1.0)
    with pytest.raises(AudioValueError, match="NaN"):
        decompose.hpss(np.full((4, 4), np.nan))
    with pytest.raises(AudioValueError, match="non-negative"):
        decompose.softmask(-S, S)
    with pytest.raises(AudioValueError, match="same shape"):
        decompose.softmask(S, S[:, :3])
    with pytest.raises(AudioTypeError, match="integer"):
        decompose.median_filter(S, 2.5)


def test_median_kernel_compiles(need_nvrtc):
    from pygpukit.jit import compiler

    kernels = [decompose.median_kernel(ct) for ct in ("float", "double")]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "decompose.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)
