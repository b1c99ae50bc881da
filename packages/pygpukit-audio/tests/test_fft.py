"""gp.fft against numpy.fft in float64: every transform, many lengths (powers
of two, 7-smooth, primes: one block, four-step and Bluestein plans on the
GPU), axes, n crop / pad and norms; on the CPU backend (CI) and the GPU.
The kernels' algorithms are also checked on the host through a NumPy mirror
of kernels/fft.cu (fft_emulation.py), and their NVRTC compilation anywhere.

Tolerances, max|got - ref| / max|ref|: float64 / complex128 1e-12 (the
transforms lose O(eps log n)); float32 / complex64 1e-5 (single-precision
butterflies over twiddles of an ulp or so, from
float64 tables or sincospif, a few ulps per stage)."""

import re

import fft_emulation as em
import numpy as np
import pytest
from audio_testing import rand, rel_err

import pygpukit as gp
from pygpukit_audio import AudioTypeError, AudioValueError
from pygpukit_audio import _fft_launch as L
from pygpukit_audio import _fft_plan as P
from pygpukit_audio import fft as F

TOL = {np.dtype(np.float64): 1e-12, np.dtype(np.complex128): 1e-12, np.dtype(np.float32): 1e-5, np.dtype(np.complex64): 1e-5}
LENGTHS = [1, 2, 3, 5, 7, 16, 17, 97, 128, 360, 1000, 1024, 4096, 4099, 65536, 2 * 4099, 3**9]
REAL = {"float32": np.complex64, "float64": np.complex128}


def _ref(kind, x, **kw):
    return getattr(np.fft, kind)(x.astype(np.complex128 if kind != "rfft" else np.float64), **kw)


def _out_dtype(kind, dt):
    c = np.dtype(np.complex128) if dt in (np.float64, np.complex128) else np.dtype(np.complex64)
    return np.dtype(np.float64 if c == np.complex128 else np.float32) if kind == "irfft" else c


def _check(kind, x, tol, **kw):
    got = getattr(F, kind)(gp.from_numpy(x), **kw)
    ref = _ref(kind, x, **kw)
    assert got.shape == ref.shape and got.dtype == _out_dtype(kind, x.dtype), (kind, got.shape, ref.shape, got.dtype)
    err = rel_err(got.to_numpy(), ref)
    assert err < tol, (kind, x.shape, x.dtype, kw, err)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_transform_against_numpy(rng, n, dtype):
    batch = 3 if n <= 4096 else 1
    real = rand(rng, (batch, n), dtype)
    cplx = rand(rng, (batch, n), REAL[dtype])
    tol = TOL[np.dtype(dtype)]
    _check("fft", cplx, tol)
    _check("ifft", cplx, tol)
    _check("fft", real, tol)  # a real input of the complex transform
    _check("rfft", real, tol)
    spec = rand(rng, (batch, n // 2 + 1), REAL[dtype])
    _check("irfft", spec, tol, n=n)  # DC and Nyquist imaginary parts ignored as numpy does


@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft"])
@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
def test_norms_axes_and_n(rng, kind, norm):
    dt = np.float64 if kind == "rfft" else np.complex128
    x = rand(rng, (4, 6, 10), dt)
    for axis in (0, 1, 2, -1, -2):
        for n in (None, 3, 10, 17):  # default, crop, same, zero-pad
            _check(kind, x, 1e-12, n=n, axis=axis, norm=norm)


def test_strided_and_transposed_inputs(rng):
    x = rand(rng, (8, 40), np.complex128)
    g = gp.from_numpy(x)
    for view, ref in ((g[:, 3:35], x[:, 3:35]), (g.swapaxes(0, 1), x.T), (g[::2, ::-1], x[::2, ::-1])):
        for axis in (0, 1):
            assert rel_err(F.fft(view, axis=axis).to_numpy(), np.fft.fft(ref, axis=axis)) < 1e-12


def test_input_dtypes_as_numpy(rng):
    ints = rng.integers(-5, 5, size=(3, 12))
    got = F.fft(gp.from_numpy(ints))
    assert got.dtype == np.complex128 and rel_err(got.to_numpy(), np.fft.fft(ints)) < 1e-12
    half = rand(rng, (2, 16), np.float16)
    got = F.rfft(gp.from_numpy(half))
    assert got.dtype == np.complex64 and rel_err(got.to_numpy(), np.fft.rfft(half.astype(np.float64))) < 1e-5
    assert rel_err(F.fft(list(range(1, 9))).to_numpy(), np.fft.fft(np.arange(1, 9))) < 1e-12
    real_spec = rng.standard_normal(9)  # a real input of irfft is a spectrum with zero imaginary parts
    assert rel_err(F.irfft(gp.from_numpy(real_spec)).to_numpy(), np.fft.irfft(real_spec)) < 1e-12


def test_round_trips(rng):
    for n in (1, 6, 7, 128, 1001):
        x = rand(rng, (2, n), np.float64)
        back = F.irfft(F.rfft(gp.from_numpy(x)), n=n).to_numpy()
        assert rel_err(back, x) < 1e-12
        c = rand(rng, (2, n), np.complex128)
        assert rel_err(F.ifft(F.fft(gp.from_numpy(c), norm="ortho"), norm="ortho").to_numpy(), c) < 1e-12


def test_frequencies_and_shifts(rng):
    for n in (1, 2, 7, 8, 101):
        for d in (1.0, 0.25, 1 / 16000):
            np.testing.assert_allclose(F.fftfreq(n, d).to_numpy(), np.fft.fftfreq(n, d), rtol=1e-15)
            np.testing.assert_allclose(F.rfftfreq(n, d).to_numpy(), np.fft.rfftfreq(n, d), rtol=1e-15)
    x = rand(rng, (5, 8, 3), np.float32)
    for axes in (None, 0, 1, (0, 2), -1):
        np.testing.assert_array_equal(F.fftshift(gp.from_numpy(x), axes).to_numpy(), np.fft.fftshift(x, axes))
        np.testing.assert_array_equal(F.ifftshift(gp.from_numpy(x), axes).to_numpy(), np.fft.ifftshift(x, axes))


def test_gp_fft_namespace():
    assert gp.fft is F
    for name in ("fft", "ifft", "rfft", "irfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"):
        assert callable(getattr(gp.fft, name))


def test_bad_input_raises_clear_errors(rng):
    x = gp.from_numpy(rand(rng, (4, 8), np.float64))
    cases = [
        (lambda: F.fft(gp.asarray(np.array(1.0))), AudioValueError, "at least one axis"),
        (lambda: F.fft(x, axis=2), AudioValueError, "out of bounds"),
        (lambda: F.fft(x, n=0), AudioValueError, "positive integer"),
        (lambda: F.rfft(x, n=2.5), AudioValueError, "positive integer"),
        (lambda: F.fft(x, norm="unitary"), AudioValueError, "norm must be"),
        (lambda: F.rfft(gp.from_numpy(rand(rng, (4,), np.complex64))), AudioTypeError, "must be real"),
        (lambda: F.irfft(gp.from_numpy(rand(rng, (1,), np.complex64))), AudioValueError, "n >= 1"),
        (lambda: F.fft(np.array(["a", "b"])), AudioTypeError, "numeric"),
        (lambda: F.fftfreq(0), AudioValueError, "positive integer"),
        (lambda: F.fftfreq(4, 0.0), AudioValueError, "non-zero"),
        (lambda: F.fftshift(x, axes=3), AudioValueError, "out of bounds"),
    ]
    for call, err, msg in cases:
        with pytest.raises(err, match=msg):
            call()
    assert issubclass(AudioValueError, gp.PyGPUkitError) and issubclass(AudioValueError, ValueError)


# -- the kernels' algorithms on the host ---------------------------------------------


def test_plans():
    assert P.radices(4096) == (16, 16, 16) and P.radices(512) == (8, 8, 8) and P.radices(8192) == (16, 8, 8, 8)
    assert P.radices(360) == (8, 3, 3, 5) and P.radices(97) is None
    assert P.radices(1) == ()
    assert P.split(65536) == (256, 256) and P.split(3**9)[0] * P.split(3**9)[1] == 3**9
    assert P.bluestein_length(97) == 256 and P.bluestein_length(1) == 1
    assert L.block_length(4096, 16) == (4096, False) and L.block_length(97, 16) == (256, True) and L.block_length(4099, 16) is None
    assert L.block_length(8192, 8) == (8192, False) and L.block_length(8192, 16) is None
    assert L.supported(4099) and L.supported(2**24) and not L.supported(2**24 + 1)
    for m in (1, 8, 360, 4096):
        t, tpb = L.geometry(m, 8)
        assert 1 <= t * tpb <= 256 and tpb * L.padded(m) * 8 <= 48 * 1024


def test_column_blocks_and_launch_bounds(monkeypatch):
    """The four-step passes move COLS adjacent columns a block where threads and
    MAX_ROW_SMEM allow; the long rows and the passes are compiled for REGS
    registers a thread (resident blocks per SM in the launch bounds), the rest as the compiler likes."""
    monkeypatch.setattr(L, "COLS", 16)
    assert L.geometry(256, 8, cols=True) == L.geometry(256, 8) == (16, 16)
    assert L.geometry(1024, 8) == (64, 2) and L.geometry(1024, 8, cols=True) == (64, 8)
    monkeypatch.setattr(L, "COLS", 32)
    assert L.geometry(256, 8, cols=True) == (16, 32) and L.geometry(256, 16, cols=True) == (16, 16)
    for m, item in ((256, 8), (1024, 8), (4096, 8), (4096, 16), (360, 8)):
        t, tpb = L.geometry(m, item, cols=True)
        assert t * tpb <= 1024 and (tpb == 1 or tpb * (L.padded(m) + 1) * item <= L.MAX_ROW_SMEM)
    monkeypatch.setattr(L, "REGS", 64)
    assert L.min_blocks(8192, 8, 512, False) == 2 and L.min_blocks(256, 8, 256, True) == 4 and L.min_blocks(256, 16, 128, True) == 4
    assert L.min_blocks(2048, 8, 128, False) == 0 and L.min_blocks(4096, 16, 256, False) == 0
    monkeypatch.setattr(L, "REGS", 0)
    assert L.min_blocks(8192, 8, 512, False) == 0


def test_long_row_kernel_fits_two_blocks_per_sm(need_nvrtc):
    """Unbounded, the 8192-point rfft kernel took 80 registers: one 512-thread block per SM."""
    from pygpukit import _native
    from pygpukit.jit import compiler

    kern, t, tpb, _ = L._block_kernel(np.dtype(np.complex64), 8192, -1, L.LD_PAIRS, L.ST_RPOST, False)
    opts = [*compiler.BASE_OPTIONS, "--gpu-architecture=sm_90", "-Xptxas=-v", *kern.options]
    log = _native.nvrtc_compile(kern.source, "fft.cu", opts, [kern.func], "cubin")[1]
    used = re.search(r"Used (\d+) registers", log)
    assert used, log
    regs = int(used.group(1))
    assert 2 * t * tpb * regs <= 65536 and "0 bytes spill stores" in log, log


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 30, 32, 64, 97, 98, 256, 343, 360, 625, 1000, 1024, 2048, 2050, 4096])
def test_block_kernel_mirror(rng, n):
    c = rand(rng, (2, n), np.complex128)
    r = rand(rng, (2, n), np.float64)
    spec = rand(rng, (2, n // 2 + 1), np.complex128)
    for kind, x, ref in (
        ("fft", c, np.fft.fft(c)),
        ("ifft", c, np.fft.ifft(c) * n),
        ("fft", r, np.fft.fft(r)),
        ("rfft", r, np.fft.rfft(r)),
        ("irfft", spec, np.fft.irfft(spec, n) * n),
    ):
        if L.block_length(L.modes(kind, n)[1], 16) is None:
            continue
        assert rel_err(em.block(kind, x, n), ref) < 1e-12, (kind, n)


@pytest.mark.parametrize("n1, n2", [(2, 3), (2, 8), (4, 2), (16, 16), (6, 5), (64, 32), (128, 256)])
def test_real_four_step_mirror(rng, n1, n2):
    x = rand(rng, (2, n1 * n2), np.float64)
    assert rel_err(em.real_four_step(x, n1, n2), np.fft.rfft(x)) < 1e-12


@pytest.mark.parametrize("n1, n2", [(2, 3), (8, 9), (64, 32), (7, 125)])
def test_four_step_mirror(rng, n1, n2):
    x = rand(rng, (3, n1 * n2), np.complex128)
    assert rel_err(em.four_step(x, -1, n1, n2), np.fft.fft(x)) < 1e-12
    assert rel_err(em.four_step(x, 1, n1, n2), np.fft.ifft(x) * n1 * n2) < 1e-12


def test_kernels_compile(need_nvrtc):
    """Every load / store mode, both precisions, Bluestein, the elementwise steps."""
    c64, c128 = np.dtype(np.complex64), np.dtype(np.complex128)
    for cdt, m, d, ld, st, blue, *cols in [
        (c64, 512, -1, L.LD_PAIRS, L.ST_RPOST, False),
        (c64, 512, 1, L.LD_IRPRE, L.ST_IRPOST, False),
        (c64, 4096, -1, L.LD_C2C, L.ST_C2C, False),
        (c128, 4096, 1, L.LD_C2C, L.ST_C2C, False),
        (c64, 360, -1, L.LD_REAL, L.ST_HALF, False),
        (c128, 343, 1, L.LD_HERM, L.ST_REAL, False),
        (c64, 256, -1, L.LD_REAL, L.ST_HALF, True),
        (c128, 1, -1, L.LD_C2C, L.ST_C2C, False),
        (c64, 256, -1, L.LD_C2C, L.ST_C2C, False, True, True),  # the four-step passes
        (c128, 4096, 1, L.LD_C2C, L.ST_C2C, False, False, True),
        (c64, 8192, -1, L.LD_PAIRS, L.ST_RPOST, False),  # the longest one-block row, 512 threads
        (c64, 256, -1, L.LD_REAL, L.ST_C2C, False, True, True),  # the real four-step passes
        (c128, 128, -1, L.LD_C2C, L.ST_HMIRROR, False, False, True),
    ]:
        kernel = L._block_kernel(cdt, m, d, ld, st, blue, *cols)[0]
        for sm in (80, 90) if m >= 4096 else (90,):
            assert kernel.compile(sm=sm).image[:4] == b"\x7fELF"
    for name, d in (("chirp_in", -1), ("mul_rows", 1), ("chirp_out", 1), ("rfft_post", None), ("irfft_pre", None), ("herm_expand", None)):
        L._elementwise(name, c64, d).compile(sm=90)


# -- the kernel (GPU) ------------------------------------------------------------------


@pytest.mark.gpu
def test_kernel_is_chosen_on_the_gpu():
    x = gp.zeros((4, 64), np.float32)
    for kind in ("fft", "ifft", "rfft"):
        assert gp.ops.which(kind, x, None, -1, None) == "audio:kernel"
    assert gp.ops.which("irfft", x.astype(np.complex64), None, -1, None) == "audio:kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernel_large_batches_and_lengths(rng, dtype):
    """Many transforms per block (short rows), big batches, two-pass and Bluestein lengths."""
    for shape in [(5000, 8), (700, 1024), (64, 4096), (3, 2**20), (2, 99991), (2, 3 * 5 * 7 * 11 * 13)]:
        x = rand(rng, shape, dtype)
        _check("rfft", x, TOL[np.dtype(dtype)])
        _check("fft", rand(rng, shape, REAL[dtype]), TOL[np.dtype(dtype)])


def test_row_addressing_of_any_axis_and_view(rng):
    """transform's (batch, inner, outer, inner and element strides) address the
    same elements as NumPy for every axis of contiguous, sliced and transposed views."""
    base = rand(rng, (5, 6, 7), np.float64)
    g = gp.from_numpy(base)
    for view, ref in ((g, base), (g[:, 1:5], base[:, 1:5]), (g.swapaxes(0, 2), base.swapaxes(0, 2)), (g[1:4, :, ::2], base[1:4, :, ::2])):
        for axis in range(3):
            got = L.groups(view, axis)
            if got is None:  # transform copies such views first
                continue
            batch, inner, bs, is_, es = got
            offset = (view._ptr - g._ptr) // 8
            flat = np.concatenate([base.reshape(-1), np.zeros(1)])
            seen = em.rows(flat[offset:], batch, (inner, bs, is_, es), view.shape[axis])
            want = np.moveaxis(ref, axis, -1).reshape(batch, -1)
            np.testing.assert_array_equal(seen, want)
