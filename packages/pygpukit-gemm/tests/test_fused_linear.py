"""gp.ops.fused_linear: act(x @ w.T + bias) + residual against float64 NumPy,
for every activation, with and without bias and residual, every float dtype and
odd shapes, on whichever implementation runs here (the reference on the CPU
backend, cuBLASLt on a GPU); the cuBLASLt implementation itself on the GPU;
argument errors. The cuBLASLt plumbing is tested on a fake library in
test_cublaslt_plumbing.py."""

import itertools
from math import erf

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import epilogue

# norm-wise relative error bounds (max |C - ref| / max |ref|) by dtype: float32
# is exact FP32 (no TF32 unless asked); the 16-bit floats round the product and
# then each unfused step once (2^-8 for bfloat16)
# float64: cuBLASLt 13.1's float64 products on the H100 measured 1.2e-11 here (M = 1, K = 40)
TOL = {gp.float32: 1e-5, gp.float16: 1e-2, gp.bfloat16: 1e-2, gp.float64: 1e-10}
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]
# (leading axes of x, K, N): M = 1 as 1-D and 2-D x, N and K not multiples of 16, batched leading axes
SHAPES = [((), 40, 24), ((1,), 37, 23), ((5,), 64, 48), ((2, 3), 19, 33)]


def _act64(y, activation):
    if activation is None:
        return y
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "gelu":
        return 0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))
    if activation == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    return y / (1 + np.exp(-y))


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _inputs(rng, lead, k, n, dtype):
    """x, w, bias, residual in ``dtype`` (NumPy), and as GPUArrays."""
    host = [rng.standard_normal(s).astype(dtype) for s in ((*lead, k), (n, k), (n,), (*lead, n))]
    return host, [gp.from_numpy(h) for h in host]


def _ref(x, w, b, r, activation):
    f = [a.astype(np.float64) for a in (x, w)]
    y = _act64(f[0] @ f[1].T + (0 if b is None else b.astype(np.float64)), activation)
    return y if r is None else y + r.astype(np.float64)


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
def test_fused_linear_against_float64(rng, dtype, activation):
    for (lead, k, n), with_bias, with_res in itertools.product(SHAPES, (False, True), (False, True)):
        (x, w, b, r), (gx, gw, gb, gr) = _inputs(rng, lead, k, n, dtype)
        gb, b = (gb, b) if with_bias else (None, None)
        gr, r = (gr, r) if with_res else (None, None)
        got = gp.ops.fused_linear(gx, gw, gb, activation=activation, residual=gr)
        assert got.shape == (*lead, n) and got.dtype == dtype
        err = _rel(got.to_numpy(), _ref(x, w, b, r, activation))
        assert err < TOL[dtype], (lead, k, n, with_bias, with_res, err)
        impl = gp.ops.which("fused_linear", gx, gw, gb, activation=activation, residual=gr)
        if gp.backend() == "cpu":
            assert impl == "gemm:reference"
        elif dtype in (gp.float32, gp.float64):
            assert impl == "gemm:cublaslt"
        else:  # cuBLASLt, or a faster kernel registered above it for the 16-bit floats
            assert impl != "gemm:reference"


def test_fused_linear_mixed_dtypes_and_strided_operands(rng):
    x = rng.standard_normal((6, 48)).astype(np.float16)
    w = rng.standard_normal((48, 20)).astype(np.float32)  # used as w.T: a transposed view
    b = rng.standard_normal(40).astype(np.float16)
    r = rng.standard_normal((20, 6)).astype(np.float32)
    gx, gw = gp.from_numpy(x)[:, ::2], gp.from_numpy(w).T[:, ::2]  # no unit stride along K
    gb, gr = gp.from_numpy(b)[::2], gp.from_numpy(r).T  # a strided bias, a transposed residual
    for activation in ACTIVATIONS:
        got = gp.ops.fused_linear(gx, gw, gb, activation=activation, residual=gr)
        assert got.dtype == np.float32 and got.shape == (6, 20)  # float16 with float32 promotes, as gp.linear
        ref = _ref(x[:, ::2], w.T[:, ::2], b[::2], r.T, activation)
        assert _rel(got.to_numpy(), ref) < 1e-5


def test_fused_linear_empty(rng):
    w, b = gp.from_numpy(rng.standard_normal((3, 0)).astype(np.float32)), gp.from_numpy(np.array([-1.0, 0.5, 2.0], np.float32))
    r = gp.from_numpy(np.full((4, 3), 0.25, np.float32))
    got = gp.ops.fused_linear(gp.empty((4, 0), gp.float32), w, b, activation="relu", residual=r)
    np.testing.assert_allclose(got.to_numpy(), np.broadcast_to([0.25, 0.75, 2.25], (4, 3)))  # K = 0: act(bias) + residual
    wk = gp.from_numpy(rng.standard_normal((3, 5)).astype(np.float32))
    assert gp.ops.fused_linear(gp.empty((0, 5), gp.float32), wk, b, activation="silu").shape == (0, 3)
    assert gp.ops.fused_linear(gp.ones((2, 5), gp.float32), gp.ones((0, 5), gp.float32)).shape == (2, 0)


def test_fused_linear_errors(rng):
    x, w = gp.ones((4, 8), gp.float32), gp.ones((6, 8), gp.float32)
    with pytest.raises(TypeError, match="x must be a GPUArray"):
        gp.ops.fused_linear(np.ones((4, 8), np.float32), w)
    with pytest.raises(TypeError, match="bias must be a GPUArray or None"):
        gp.ops.fused_linear(x, w, np.ones(6, np.float32))
    with pytest.raises(TypeError, match="residual must be a GPUArray or None"):
        gp.ops.fused_linear(x, w, residual=1.0)
    with pytest.raises(TypeError, match="w must be float16, bfloat16, float32 or float64, got int32"):
        gp.ops.fused_linear(x, gp.ones((6, 8), gp.int32))
    with pytest.raises(ValueError, match=r"w must be 2-D"):
        gp.ops.fused_linear(x, gp.ones((6, 8, 1), gp.float32))
    with pytest.raises(ValueError, match=r"x's last axis must have w's in_features \(8\)"):
        gp.ops.fused_linear(gp.ones((4, 7), gp.float32), w)
    with pytest.raises(ValueError, match=r"bias must have shape \(6,\)"):
        gp.ops.fused_linear(x, w, gp.ones((1, 6), gp.float32))
    with pytest.raises(ValueError, match=r"residual must have the output's shape \(4, 6\), got \(1, 6\)"):
        gp.ops.fused_linear(x, w, residual=gp.ones((1, 6), gp.float32))  # no broadcasting
    with pytest.raises(ValueError, match="activation must be one of None, 'relu', 'gelu', 'gelu_tanh', 'silu', got 'swish'"):
        gp.ops.fused_linear(x, w, activation="swish")
    with pytest.raises(ValueError, match="activation must be one of"):
        gp.ops.fused_linear(x, w, activation=["relu"])  # unhashable: reported, not a cache error
    assert epilogue.check(x, w, None, "gelu_tanh", gp.ones((4, 6), gp.float32)) == "gelu_tanh"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_cublaslt_fused_linear_against_float64(rng, dtype):
    """The cuBLASLt implementation itself (whatever outranks it in the registry),
    twice per signature: the prepared call gives the same bits."""
    for (lead, k, n), activation, with_bias, with_res in itertools.product(SHAPES, ACTIVATIONS, (False, True), (False, True)):
        (x, w, b, r), (gx, gw, gb, gr) = _inputs(rng, lead, k, n, dtype)
        gb, b = (gb, b) if with_bias else (None, None)
        gr, r = (gr, r) if with_res else (None, None)
        got = epilogue.fused_linear(gx, gw, gb, activation=activation, residual=gr).to_numpy()
        assert _rel(got, _ref(x, w, b, r, activation)) < TOL[dtype], (lead, k, n, activation, with_bias, with_res)
        again = epilogue.fused_linear(gx, gw, gb, activation=activation, residual=gr).to_numpy()
        assert np.array_equal(got.view(np.uint8), again.view(np.uint8))


@pytest.mark.gpu
def test_cublaslt_gelu_epilogue_is_the_tanh_approximation(rng):
    """With w = I the product is exact, so the epilogue's GELU shows: within
    float32 rounding of the tanh form, and measurably away from the erf form."""
    y = np.linspace(-4, 4, 64 * 64, dtype=np.float32).reshape(64, 64)
    gx, eye = gp.from_numpy(y), gp.from_numpy(np.eye(64, dtype=np.float32))
    got = epilogue.fused_linear(gx, eye, activation="gelu_tanh").to_numpy().astype(np.float64)
    y64 = y.astype(np.float64)
    assert np.max(np.abs(got - _act64(y64, "gelu_tanh"))) < 1e-5
    assert np.max(np.abs(got - _act64(y64, "gelu"))) > 1e-4
    exact = epilogue.fused_linear(gx, eye, activation="gelu").to_numpy().astype(np.float64)  # not the epilogue: core's erf GELU
    assert np.max(np.abs(exact - _act64(y64, "gelu"))) < 1e-5


@pytest.mark.gpu
def test_reference_on_the_gpu(rng):
    (x, w, b, r), g = _inputs(rng, (3,), 40, 24, np.float32)
    for activation in ACTIVATIONS:
        got = epilogue.reference(*g[:3], activation=activation, residual=g[3]).to_numpy()
        assert _rel(got, _ref(x, w, b, r, activation)) < 1e-5
