"""resample_poly and resample against scipy.signal.resample_poly: the rate
pairs of audio work and small ones, odd and very short lengths, every
padtype, cval, windows by name and as arrays, any axis; float64 to rounding,
float32 as scipy computes it (float32 filter and sums); NVRTC compilation of
the kernel anywhere (the kernel on the GPU: test_gpu_kernels.py)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import resampling as resample
from pygpukit_audio._errors import AudioTypeError, AudioValueError

ss = pytest.importorskip("scipy.signal", reason="the reference is scipy.signal.resample_poly (pip install scipy)")

PAIRS = [(160, 441), (441, 160), (147, 160), (160, 147), (2, 3), (1, 1), (3, 1), (1, 4), (4, 6)]


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


@pytest.mark.parametrize("up, down", PAIRS)
def test_resample_poly_matches_scipy(rng, up, down):
    for n in (1, 2, 7, 333, 1001):
        x = rng.standard_normal((2, n))
        got = resample.resample_poly(gp.asarray(x), up, down)
        ref = ss.resample_poly(x, up, down, axis=-1)
        assert got.shape == ref.shape and rel_err(got.to_numpy(), ref) < 1e-12, n
        x32 = x.astype(np.float32)
        got = resample.resample_poly(gp.asarray(x32), up, down)
        ref = ss.resample_poly(x32, up, down, axis=-1)
        # scipy's float32 filter, float64 sums here (float32 there): a few float32 ulps
        assert got.dtype == np.float32 and rel_err(got.to_numpy(), ref) < 2e-6, n


def test_padtypes_windows_axes(rng):
    x = rng.standard_normal((3, 257)) + 2.0  # an offset makes the background matter
    for padtype, cval in [("constant", 0.75), ("mean", None), ("median", None), ("minimum", None), ("maximum", None)]:
        got = resample.resample_poly(gp.asarray(x), 3, 7, padtype=padtype, cval=cval)
        assert rel_err(got.to_numpy(), ss.resample_poly(x, 3, 7, axis=-1, padtype=padtype, cval=cval)) < 1e-12, padtype
    x4 = x[:, :256]  # an even length: the median averages two samples
    got = resample.resample_poly(gp.asarray(x4), 5, 2, padtype="median")
    assert rel_err(got.to_numpy(), ss.resample_poly(x4, 5, 2, axis=-1, padtype="median")) < 1e-12
    for window in ["hann", "hamming", "blackman", "boxcar", ("kaiser", 8.6), np.hanning(31), list(np.hamming(20))]:
        got = resample.resample_poly(gp.asarray(x), 2, 5, window=window)
        assert rel_err(got.to_numpy(), ss.resample_poly(x, 2, 5, axis=-1, window=window)) < 1e-12, window
    x3 = rng.standard_normal((4, 101, 3))
    for axis in (0, 1, -1):
        got = resample.resample_poly(gp.asarray(x3), 3, 2, axis=axis)
        assert rel_err(got.to_numpy(), ss.resample_poly(x3, 3, 2, axis=axis)) < 1e-12, axis


def test_resample_rates(rng):
    x = rng.standard_normal((2, 4410))
    for orig, target in [(44100, 16000), (16000, 44100), (48000, 44100), (44100, 48000), (22050, 16000), (48000, 16000), (16000, 16000)]:
        got = resample.resample(gp.asarray(x), orig, target)
        assert got.shape[-1] == -(-4410 * target // orig)
        g = np.gcd(orig, target)
        assert rel_err(got.to_numpy(), ss.resample_poly(x, target // g, orig // g, axis=-1)) < 1e-12
    assert resample.resample(gp.asarray(x), 44100.0, 16000.0).shape == (2, 1600)


def test_filter_design_matches_firwin():
    for taps, cutoff, window in [(8821, 1 / 441, ("kaiser", 5.0)), (61, 1 / 3, "hann"), (20, 0.3, "blackman")]:
        np.testing.assert_allclose(
            resample.firwin_lowpass(taps, cutoff, window), ss.firwin(taps, cutoff, window=window), rtol=1e-10, atol=1e-15
        )
    table = resample.polyphase_table(np.arange(1.0, 8.0), 3)
    assert table.tolist() == [[1, 2, 3], [4, 5, 6], [7, 0, 0]]


def test_errors():
    x = gp.asarray(np.linspace(0.0, 1.0, 20))
    cases = [
        (lambda: resample.resample_poly(x, 0, 2), AudioValueError, r"up must be in \[1,"),
        (lambda: resample.resample_poly(x, 2, -1), AudioValueError, r"down must be in \[1,"),
        (lambda: resample.resample_poly(x, 2.5, 1), AudioTypeError, "up must be an integer"),
        (lambda: resample.resample_poly(x, 2, 3, padtype="line"), AudioValueError, "padtype must be one of"),
        (lambda: resample.resample_poly(x, 2, 3, padtype="mean", cval=1.0), AudioValueError, "cval has no effect"),
        (lambda: resample.resample_poly(x, 2, 3, window="triangle"), AudioValueError, "window must be"),
        (lambda: resample.resample_poly(x, 2, 3, window=("kaiser",)), AudioValueError, "needs its beta"),
        (lambda: resample.resample_poly(x, 2, 3, window=np.ones((2, 3))), AudioValueError, "1-d and non-empty"),
        (lambda: resample.resample_poly(x, 2, 3, window=3), AudioTypeError, "window must be a name"),
        (lambda: resample.resample_poly(gp.asarray(np.array([0.0, np.nan])), 2, 3), AudioValueError, "NaN or infinite"),
        (lambda: resample.resample_poly(gp.asarray(np.float32(1.0)), 2, 3), AudioValueError, "at least one axis"),
        (lambda: resample.resample_poly(x, 2, 3, axis=2), AudioValueError, "axis must be in"),
        (lambda: resample.resample(x, 0, 16000), AudioValueError, r"orig_sr must be in \[1,"),
        (lambda: resample.resample(x, 44100, 16000.5), AudioTypeError, "target_sr must be an integer"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_kernel_compiles(need_nvrtc):
    from pygpukit.jit import compiler

    kernels = [resample.polyphase_kernel(ct) for ct in ("float", "double")]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "resample.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)


def test_empty_signals():
    assert resample.resample_poly(gp.zeros((2, 0)), 2, 3).shape == (2, 0)
    assert resample.resample_poly(gp.zeros((0, 7)), 2, 3, padtype="mean").shape == (0, 5)
