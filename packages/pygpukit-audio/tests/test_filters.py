"""sosfilt, sosfilt_zi, sosfiltfilt and fir_filter against scipy.signal in
float64: Butterworth, Chebyshev I/II and elliptic designs of orders 2 to 8,
initial and final delays, batches along any axis, signals long enough that
the GPU scan runs many chunks; the NumPy twin of the GPU scan's host
tables; NVRTC compilation of the kernels anywhere (the kernels on the GPU:
test_gpu_kernels.py)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import filters
from pygpukit_audio._errors import AudioTypeError, AudioValueError

ss = pytest.importorskip("scipy.signal", reason="the references are scipy.signal's filters (pip install scipy)")

# float64: the cascade runs in float64 (scan or not), measured ~1e-13 for the
# sharpest design here; float32: float64 results rounded once (2^-24).
TOL = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-6}


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def designs():
    for order in (2, 3, 4, 5, 6, 8):
        yield f"butter{order}", ss.butter(order, 0.1, output="sos")
        yield f"cheby1_{order}", ss.cheby1(order, 1.0, [0.1, 0.4], btype="bandpass", output="sos")
        yield f"cheby2_{order}", ss.cheby2(order, 40.0, 0.3, btype="highpass", output="sos")
        yield f"ellip{order}", ss.ellip(order, 0.5, 50.0, 0.05, output="sos")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sosfilt_designs(rng, dtype):
    x = rng.standard_normal((2, 3001)).astype(dtype)
    for name, sos in designs():
        got = filters.sosfilt(sos, gp.asarray(x))
        assert got.dtype == np.dtype(dtype) and got.shape == x.shape
        assert rel_err(got.to_numpy(), ss.sosfilt(sos, x.astype(np.float64))) < TOL[np.dtype(dtype)], name


def test_sosfilt_zi_axes_and_batches(rng):
    sos = ss.ellip(6, 1.0, 60.0, 0.2, output="sos")
    for shape, axis in [((4, 5, 257), -1), ((300, 3), 0), ((2, 999, 3), 1), ((1,), 0), ((40,), -1)]:
        x = rng.standard_normal(shape)
        zshape = (3, *shape[: axis % len(shape)], 2, *shape[axis % len(shape) + 1 :])
        zi = rng.standard_normal(zshape)
        y, zf = filters.sosfilt(sos, gp.asarray(x), axis=axis, zi=gp.asarray(zi))
        ry, rzf = ss.sosfilt(sos, x, axis=axis, zi=zi)
        assert y.shape == ry.shape and zf.shape == rzf.shape
        assert rel_err(y.to_numpy(), ry) < 1e-9 and rel_err(zf.to_numpy(), rzf) < 1e-9, (shape, axis)
        # zi may come as NumPy; the output without zi is a plain array
        assert rel_err(filters.sosfilt(sos, x, axis=axis, zi=zi)[1].to_numpy(), rzf) < 1e-9
        assert isinstance(filters.sosfilt(sos, gp.asarray(x), axis=axis), gp.GPUArray)


def test_sosfilt_long_signal_in_blocks(rng):
    # many chunks on either path; the final delays carry across two calls
    sos = ss.butter(8, 0.02, output="sos")
    x = rng.standard_normal((2, 120_001))
    zi = np.zeros((4, 2, 2))
    ry, _ = ss.sosfilt(sos, x, zi=zi)
    y1, z1 = filters.sosfilt(sos, gp.asarray(x[:, :70_000]), zi=zi)
    y2, _ = filters.sosfilt(sos, gp.asarray(x[:, 70_000:]), zi=z1)
    assert rel_err(np.concatenate([y1.to_numpy(), y2.to_numpy()], axis=1), ry) < 1e-9


def test_scan_tables_twin(rng):
    """The GPU scan's math in NumPy: chunks from zero delays, the threads' folds
    of g chunks joined by a Hillis-Steele scan with Q_k = (P^g)^(2^k), zi folded
    into thread 0, then the replay; equals scipy on a length that leaves a short
    last chunk and a partial last scan segment."""
    sos = ss.cheby1(6, 1.0, 0.15, output="sos")
    flat = filters._flat_coef(sos)
    d, n, length = 6, 32 * 700 + 5, 32
    x = rng.standard_normal((1, n))
    zi = rng.standard_normal((1, d))
    chunks = -(-n // length)
    ends = np.zeros((chunks, d))
    for c in range(chunks - 1):
        z = np.zeros((1, d))
        filters._run_cascade(flat, x[:, c * length : (c + 1) * length], z)
        ends[c] = z[0]
    p, q, g = filters.scan_tables(flat, length, chunks)
    threads, m = filters._SCAN_THREADS, chunks - 1
    segs = [(min(t * g, m), min(min(t * g, m) + g, m)) for t in range(threads)]
    acc = np.zeros((threads, d))
    for t, (j0, j1) in enumerate(segs):
        for j in range(j0, j1):
            acc[t] = p @ acc[t] + ends[j]
    acc[0] = q[0] @ zi[0] + acc[0]
    for k in range(filters._SCAN_LOG):
        acc = acc + np.vstack([np.zeros((1 << k, d)), acc[: threads - (1 << k)] @ q[k].T])
    starts = np.zeros((chunks, d))
    for t, (j0, j1) in enumerate(segs):
        cur = zi[0] if t == 0 else acc[t - 1]
        for j in range(j0, j1):
            cur = p @ cur + ends[j]
            starts[j + 1] = cur
    starts[0] = zi[0]
    y = np.concatenate(
        [filters._run_cascade(flat, x[:, c * length : (c + 1) * length], starts[c : c + 1].copy()) for c in range(chunks)], 1
    )
    assert g > 1 and rel_err(y, ss.sosfilt(sos, x, zi=zi.reshape(3, 1, 2))[0]) < 1e-9
    assert filters.chunk_length(16, 960_000) == 128 and filters.chunk_length(1, 1000) == 32


def test_sosfilt_zi_and_sosfiltfilt(rng):
    for _, sos in designs():
        np.testing.assert_allclose(filters.sosfilt_zi(sos), ss.sosfilt_zi(sos), rtol=1e-12, atol=1e-12)
    sos = ss.butter(4, [0.05, 0.3], btype="bandpass", output="sos")
    x = rng.standard_normal((3, 500))
    for padtype in ("odd", "even", "constant", None):
        got = filters.sosfiltfilt(sos, gp.asarray(x), padtype=padtype)
        assert rel_err(got.to_numpy(), ss.sosfiltfilt(sos, x, padtype=padtype)) < 1e-9, padtype
    got = filters.sosfiltfilt(sos, gp.asarray(x.T.copy()), axis=0, padlen=10)
    assert rel_err(got.to_numpy(), ss.sosfiltfilt(sos, x.T, axis=0, padlen=10)) < 1e-9


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fir_filter(rng, dtype):
    x = rng.standard_normal((3, 2, 1500)).astype(dtype)
    for k in (1, 7, 64, 301, 2000):
        b = rng.standard_normal(k) / np.sqrt(k)
        got = filters.fir_filter(b, gp.asarray(x))
        assert got.dtype == np.dtype(dtype)
        # float32 sums of up to k products, relative to the largest output
        assert rel_err(got.to_numpy(), ss.lfilter(b, [1.0], x.astype(np.float64))) < (1e-12 if dtype == np.float64 else 2e-6), k
    b = rng.standard_normal(5)
    got = filters.fir_filter(b, gp.asarray(x), axis=0)
    assert rel_err(got.to_numpy(), ss.lfilter(b, [1.0], x.astype(np.float64), axis=0)) < TOL[np.dtype(dtype)]


def test_errors():
    sos = ss.butter(2, 0.2, output="sos")
    x = gp.asarray(np.linspace(-1.0, 1.0, 50))
    unstable = sos.copy()
    unstable[0, 4:] = [-2.5, 1.2]
    a0 = sos.copy()
    a0[0, 3] = 2.0
    cases = [
        (lambda: filters.sosfilt(sos, gp.asarray(np.array([1.0, np.nan]))), AudioValueError, "NaN or infinite"),
        (lambda: filters.sosfilt(sos, gp.asarray(np.array([1.0, np.inf]))), AudioValueError, "NaN or infinite"),
        (lambda: filters.sosfilt(sos, gp.asarray(np.float64(3.0))), AudioValueError, "at least one axis"),
        (lambda: filters.sosfilt(sos, gp.asarray(np.arange(5, dtype=np.int32))), AudioTypeError, "float32 or float64"),
        (lambda: filters.sosfilt(sos, [1.0, 2.0]), AudioTypeError, "must be a GPUArray"),
        (lambda: filters.sosfilt(sos[:, :5], x), AudioValueError, r"\(n_sections, 6\)"),
        (lambda: filters.sosfilt(np.zeros((0, 6)), x), AudioValueError, r"\(n_sections, 6\)"),
        (lambda: filters.sosfilt(a0, x), AudioValueError, "must be all ones"),
        (lambda: filters.sosfilt(unstable, x), AudioValueError, "section 0 is unstable"),
        (lambda: filters.sosfilt(sos, x, axis=1), AudioValueError, "axis must be in"),
        (lambda: filters.sosfilt(sos, x, zi=np.zeros((1, 3))), AudioValueError, r"zi must have shape \(1, 2\)"),
        (lambda: filters.sosfilt(sos, x, zi=np.full((1, 2), np.nan)), AudioValueError, "NaN or infinite"),
        (lambda: filters.sosfilt(np.full((1, 6), np.nan), x), AudioValueError, "NaN or infinite"),
        (lambda: filters.sosfiltfilt(sos, x, padtype="wrap"), AudioValueError, "padtype must be"),
        (lambda: filters.sosfiltfilt(sos, x, padlen=50), AudioValueError, "greater than padlen, which is 50"),
        (lambda: filters.fir_filter([], x), AudioValueError, "non-empty 1-d"),
        (lambda: filters.fir_filter(np.ones((2, 2)), x), AudioValueError, "non-empty 1-d"),
        (lambda: filters.fir_filter(["a"], x), AudioTypeError, "real numbers"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    with pytest.raises(AudioValueError, match="pole at z = 1"):
        filters.sosfilt_zi(np.array([[1.0, 0.0, 0.0, 1.0, -1.0, 0.0]]))


def test_kernels_compile(need_nvrtc):
    """Every instantiation the host code can ask for, in one NVRTC program per SM."""
    from pygpukit.jit import compiler

    kernels = []
    for ct in ("float", "double"):
        kernels += [filters.chunk_kernel(ct, s, a) for s in range(1, filters.KERNEL_MAX_SECTIONS + 1) for a in (False, True)]
        kernels.append(filters.fir_kernel(ct))
    kernels += [filters.scan_kernel(2 * s) for s in range(1, filters.KERNEL_MAX_SECTIONS + 1)]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "filters.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)


def test_empty_signals():
    sos = ss.butter(4, 0.2, output="sos")
    zi = np.ones((2, 3, 2))
    y, zf = filters.sosfilt(sos, gp.zeros((3, 0)), zi=zi)
    assert y.shape == (3, 0) and np.array_equal(zf.to_numpy(), zi)  # no samples: the delays pass through
    assert filters.sosfilt(sos, gp.zeros((0, 5))).shape == (0, 5)
    assert filters.fir_filter([1.0, 2.0], gp.zeros((2, 0))).shape == (2, 0)
