"""The decode GEMV with a fused prologue (gemv.py, kernels/gemv.cu), this
plugin's implementation of pygpukit-nn's ops add_rms_norm_linear and
swiglu_linear: the kernels against float64 NumPy with the rounded
intermediate (GPU); which implementation the ops pick and what they give on
every backend, and the kernels against nn's reference (with pygpukit-nn
installed, which defines the ops); the predicates turn away what the kernels
do not take; every kernel instantiation compiles (NVRTC, no GPU needed)."""

import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import gemv

TOL = {gp.float32: 1e-5, gp.float16: 1e-2, gp.bfloat16: 1e-2, gp.float64: 1e-10}
# (leading axes, K, N): one row as 1-D and 2-D, 8 rows, batched axes; the kernel takes K a multiple of 128,
# the reference the others (K = 36: not a multiple of 8)
SHAPES = [((), 128, 24), ((1,), 256, 40), ((8,), 128, 33), ((2, 3), 384, 16), ((3,), 96, 20), ((3,), 36, 20)]
# what the kernels take: 1 or 2 rows of a half dtype, K a multiple of 128
KERNEL_SHAPES = [((), 128, 24), ((1,), 256, 40), ((2,), 384, 16), ((1, 2), 128, 33), ((2,), 1024, 200)]


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _round(a, dtype):
    return a.astype(dtype).astype(np.float64)


def _rms_ref(x, r, g, eps, w, b, dtype):
    h = x.astype(np.float64) if r is None else _round(x.astype(np.float64) + r.astype(np.float64), dtype)
    normed = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps)
    if g is not None:
        normed = normed * g.astype(np.float64)
    y = _round(normed, dtype) @ w.astype(np.float64).T
    return (y if b is None else y + b.astype(np.float64)), h


def _swiglu_ref(gu, w, b, dtype):
    k = gu.shape[-1] // 2
    g, u = gu[..., :k].astype(np.float64), gu[..., k:].astype(np.float64)
    return _round(g / (1 + np.exp(-g)) * u, dtype) @ w.astype(np.float64).T + (0 if b is None else b.astype(np.float64))


def _rms_case(rng, lead, k, n, dtype, with_res, with_g, with_b):
    x, r = (rng.standard_normal((*lead, k)).astype(dtype) for _ in range(2))
    g = (1 + 0.2 * rng.standard_normal(k)).astype(dtype) if with_g else None
    w = rng.standard_normal((n, k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype) if with_b else None
    return x, (r if with_res else None), g, w, b


def _dev(*arrays):
    return [None if a is None else gp.from_numpy(a) for a in arrays]


def _needs_nn():
    """pygpukit-nn defines the ops (with their reference): skip where it is not installed or is disabled."""
    pytest.importorskip("pygpukit_nn")
    if "add_rms_norm_linear" not in gp.ops.names():
        pytest.skip("pygpukit-nn, which defines add_rms_norm_linear and swiglu_linear, is disabled")


def _kernel_here(rows, k, dtype):
    return gp.backend() == "cuda" and np.dtype(dtype) in gemv.HALF and k % 128 == 0 and 0 < rows <= gemv.MAX_FUSED_ROWS


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
def test_add_rms_norm_linear_kernel_against_float64(rng, dtype):
    for (lead, k, n), with_res, with_g, with_b in itertools.product(KERNEL_SHAPES, (False, True), (False, True), (False, True)):
        x, r, g, w, b = _rms_case(rng, lead, k, n, dtype, with_res, with_g, with_b)
        dev = _dev(x, r, g, w, b)
        assert gemv.takes_add_rms_norm_linear(dev[0], dev[1], dev[2], 1e-5, dev[3], dev[4])
        y, h = gemv.add_rms_norm_linear(dev[0], dev[1], dev[2], 1e-5, dev[3], dev[4])
        ref_y, ref_h = _rms_ref(x, r, g, 1e-5, w, b, dtype)
        case = (lead, k, n, with_res, with_g, with_b)
        assert y.shape == (*lead, n) and y.dtype == dtype and h.shape == x.shape, case
        assert _rel(y.to_numpy(), ref_y) < TOL[dtype], case
        np.testing.assert_array_equal(h.to_numpy().astype(np.float64), ref_h)
        assert (h is dev[0]) == (r is None)  # no residual: h is x itself


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
def test_swiglu_linear_kernel_against_float64(rng, dtype):
    for (lead, k, n), with_b in itertools.product(KERNEL_SHAPES, (False, True)):
        gu = rng.standard_normal((*lead, 2 * k)).astype(dtype)
        w, b = rng.standard_normal((n, k)).astype(dtype), (rng.standard_normal(n).astype(dtype) if with_b else None)
        dev = _dev(gu, w, b)
        assert gemv.takes_swiglu_linear(*dev)
        y = gemv.swiglu_linear(*dev)
        assert y.shape == (*lead, n) and y.dtype == dtype
        assert _rel(y.to_numpy(), _swiglu_ref(gu, w, b, dtype)) < TOL[dtype], (lead, k, n, with_b)


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_add_rms_norm_linear_op_against_float64(rng, dtype):
    """Through the op (nn defines it): the GEMV where it takes the call, nn's reference elsewhere."""
    _needs_nn()
    for (lead, k, n), with_res, with_g, with_b in itertools.product(SHAPES, (False, True), (False, True), (False, True)):
        x, r, g, w, b = _rms_case(rng, lead, k, n, dtype, with_res, with_g, with_b)
        dev = _dev(x, r, g, w, b)
        y, h = gp.ops.add_rms_norm_linear(dev[0], dev[1], dev[2], 1e-5, dev[3], dev[4])
        ref_y, ref_h = _rms_ref(x, r, g, 1e-5, w, b, dtype)
        assert y.shape == (*lead, n) and y.dtype == dtype and h.shape == x.shape
        assert _rel(y.to_numpy(), ref_y) < TOL[dtype], (lead, k, n, with_res, with_g, with_b)
        np.testing.assert_array_equal(h.to_numpy().astype(np.float64), ref_h)
        rows = int(np.prod(lead))
        want = "gemm:gemv" if _kernel_here(rows, k, dtype) else "nn:reference"
        assert gp.ops.which("add_rms_norm_linear", dev[0], dev[1], dev[2], 1e-5, dev[3], dev[4]) == want


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_swiglu_linear_op_against_float64(rng, dtype):
    """Through the op (nn defines it): the GEMV where it takes the call, nn's reference elsewhere."""
    _needs_nn()
    for (lead, k, n), with_b in itertools.product(SHAPES, (False, True)):
        gu = rng.standard_normal((*lead, 2 * k)).astype(dtype)
        w, b = rng.standard_normal((n, k)).astype(dtype), (rng.standard_normal(n).astype(dtype) if with_b else None)
        dev = _dev(gu, w, b)
        y = gp.ops.swiglu_linear(*dev)
        assert y.shape == (*lead, n) and y.dtype == dtype
        assert _rel(y.to_numpy(), _swiglu_ref(gu, w, b, dtype)) < TOL[dtype], (lead, k, n, with_b)
        want = "gemm:gemv" if _kernel_here(int(np.prod(lead)), k, dtype) else "nn:reference"
        assert gp.ops.which("swiglu_linear", *dev) == want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
@pytest.mark.parametrize("rows,k,n", [(1, 896, 1152), (1, 2048, 11264), (2, 896, 9728), (2, 2048, 2560), (2, 4864, 896), (1, 5632, 2048)])
def test_fused_kernels_match_the_unfused_ops(rng, dtype, rows, k, n):
    """Decode shapes of Qwen2-0.5B / Llama-1.1B layers: the fused GEMV against
    nn's reference (the same rounded intermediate; the products differ by summation order)."""
    _needs_nn()
    x, r = (gp.from_numpy(rng.standard_normal((rows, k)).astype(dtype)) for _ in range(2))
    g, w = gp.from_numpy((1 + 0.1 * rng.standard_normal(k)).astype(dtype)), gp.from_numpy((rng.standard_normal((n, k)) / 30).astype(dtype))
    b = gp.from_numpy(rng.standard_normal(n).astype(dtype))
    assert gp.ops.which("add_rms_norm_linear", x, r, g, 1e-6, w, b) == "gemm:gemv"
    y, h = gp.ops.add_rms_norm_linear(x, r, g, 1e-6, w, b)
    with gp.routing(add_rms_norm_linear="nn:reference", swiglu_linear="nn:reference"):
        ry, rh = gp.ops.add_rms_norm_linear(x, r, g, 1e-6, w, b)
    np.testing.assert_array_equal(h.to_numpy(), rh.to_numpy())
    assert _rel(y.to_numpy(), ry.to_numpy().astype(np.float64)) < 1e-2
    y0, _ = gp.ops.add_rms_norm_linear(x, r, None, 1e-6, w, b)  # no norm weight
    with gp.routing(add_rms_norm_linear="nn:reference"):
        ry0, _ = gp.ops.add_rms_norm_linear(x, r, None, 1e-6, w, b)
    assert _rel(y0.to_numpy(), ry0.to_numpy().astype(np.float64)) < 1e-2
    shifted = gp.from_numpy(rng.standard_normal(rows * k + 1).astype(dtype))[1:].reshape(rows, k)  # 2 bytes past alignment
    assert gp.ops.which("add_rms_norm_linear", x, shifted, g, 1e-6, w, b) == "nn:reference"
    y1, h1 = gp.ops.add_rms_norm_linear(x, None, g, 1e-6, w, None)  # the first layer: no residual yet
    assert h1 is x and _rel(y1.to_numpy(), gp.ops.add_rms_norm_linear(x, None, g, 1e-6, w, None)[0].to_numpy().astype(np.float64)) == 0
    gu = gp.from_numpy(rng.standard_normal((rows, 2 * k)).astype(dtype))
    assert gp.ops.which("swiglu_linear", gu, w) == "gemm:gemv"
    got = gp.ops.swiglu_linear(gu, w)
    with gp.routing(swiglu_linear="nn:reference"):
        ref = gp.ops.swiglu_linear(gu, w)
    assert _rel(got.to_numpy(), ref.to_numpy().astype(np.float64)) < 1e-2
    np.testing.assert_array_equal(gp.ops.swiglu_linear(gu, w).to_numpy(), got.to_numpy())  # deterministic


def test_rows_past_shared_memory_take_the_reference():
    w = gp.zeros((16, 65536), gp.bfloat16)
    assert not gemv.takes_add_rms_norm_linear(gp.zeros((1, 65536), gp.bfloat16), None, None, 1e-6, w)  # 128 KB: over the 96 KB
    assert gemv.takes_swiglu_linear(gp.zeros((1, 2 * 32768), gp.bfloat16), w[:, :32768].copy())  # 64 KB: taken
    assert not gemv.takes_swiglu_linear(gp.zeros((3, 2 * 1024), gp.bfloat16), w[:, :1024].copy())  # 3 rows: over MAX_FUSED_ROWS


def test_predicates_turn_away_bad_arguments():
    """The kernels check nothing themselves: their predicates say no (without
    raising) to every argument they cannot take, so the op's reference gets
    the call and says what is wrong."""
    bf = gp.bfloat16
    x, w, g = gp.zeros((2, 128), bf), gp.zeros((4, 128), bf), gp.zeros(128, bf)
    assert gemv.takes_add_rms_norm_linear(x, x, g, 1e-6, w, gp.zeros(4, bf))  # what it takes
    for args in [
        (np.zeros((2, 128)), None, None, 1e-6, w),
        (x, gp.zeros((2, 127), bf), None, 1e-6, w),
        (x, x.astype(gp.float16), None, 1e-6, w),
        (x, None, gp.zeros(127, bf), 1e-6, w),
        (x, None, None, -1.0, w),
        (x, None, None, True, w),
        (x, None, None, "eps", w),
        (x, None, None, 1e-6, gp.zeros((4, 129), bf)),
        (x, None, None, 1e-6, "w"),
        (x, None, None, 1e-6, w, gp.zeros(3, bf)),
        (x, None, None, 1e-6, w, gp.zeros(4, gp.float32)),
        (gp.zeros((2, 128), gp.float32), None, None, 1e-6, w.astype(gp.float32)),
        (gp.zeros((), bf), None, None, 1e-6, w),
    ]:
        assert not gemv.takes_add_rms_norm_linear(*args), args
    gu = gp.zeros((2, 256), bf)
    assert gemv.takes_swiglu_linear(gu, w, gp.zeros(4, bf))
    for args in [
        (gp.zeros((2, 255), bf), w),
        (gu, gp.zeros((4, 129), bf)),
        (gu, "w"),
        (gu, w, gp.zeros(5, bf)),
        (gp.zeros((2, 256), gp.int32), w),
        (np.zeros((2, 256)), w),
    ]:
        assert not gemv.takes_swiglu_linear(*args), args


def test_fused_kernels_compile_for_sm80_and_sm90(tmp_path, monkeypatch):
    import os

    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    for kind in ("add_rms", "swiglu"):
        for rows in range(1, gemv.MAX_FUSED_ROWS + 1):
            for dtype in gemv.HALF:
                for tile in {gemv.tile_of("plain_mma", rows, n, k) for n, k in ((1152, 896), (896, 4864), (2048, 5632))}:
                    kernel = gemv.fused_kernel(kind, rows, gemv._CTYPES[dtype], tile)
                    for sm in (80, 90) if rows in (1, gemv.MAX_FUSED_ROWS) else (90,):
                        assert kernel.compile(sm).image[:4] == b"\x7fELF"
