"""The fused decode ops add_rms_norm_linear and swiglu_linear (fused.py):
against float64 NumPy with the rounded intermediate, on whichever
implementation serves here (nn's reference, the unfused ops, on the CPU
backend and for shapes no fused kernel takes; pygpukit-gemm's GEMV for
decode rows on a GPU); the reference is exactly the unfused path; argument
errors."""

import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_nn import functional as F

TOL = {gp.float32: 1e-5, gp.float16: 1e-2, gp.bfloat16: 1e-2, gp.float64: 1e-10}
# (leading axes, K, N): one row as 1-D and 2-D, 8 rows, batched axes; K = 36 is no multiple of 8
SHAPES = [((), 128, 24), ((1,), 256, 40), ((8,), 128, 33), ((2, 3), 384, 16), ((3,), 36, 20)]


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _round(a, dtype):
    return a.astype(dtype).astype(np.float64)


def _np_add_rms_norm_linear(x, r, g, eps, w, b, dtype):
    h = x.astype(np.float64) if r is None else _round(x.astype(np.float64) + r.astype(np.float64), dtype)
    normed = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + eps)
    if g is not None:
        normed = normed * g.astype(np.float64)
    y = _round(normed, dtype) @ w.astype(np.float64).T
    return (y if b is None else y + b.astype(np.float64)), h


def _dev(*arrays):
    return [None if a is None else gp.from_numpy(a) for a in arrays]


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_add_rms_norm_linear_against_float64(rng, dtype):
    for (lead, k, n), with_res, with_g, with_b in itertools.product(SHAPES, (False, True), (False, True), (False, True)):
        x, r = (rng.standard_normal((*lead, k)).astype(dtype) for _ in range(2))
        g = (1 + 0.2 * rng.standard_normal(k)).astype(dtype) if with_g else None
        w = rng.standard_normal((n, k)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype) if with_b else None
        r = r if with_res else None
        dx, dr, dg, dw, db = _dev(x, r, g, w, b)
        y, h = F.add_rms_norm_linear(dx, dr, dg, 1e-5, dw, db)
        ref_y, ref_h = _np_add_rms_norm_linear(x, r, g, 1e-5, w, b, dtype)
        case = (lead, k, n, with_res, with_g, with_b)
        assert y.shape == (*lead, n) and y.dtype == dtype and h.shape == x.shape and h.dtype == dtype, case
        assert _rel(y.to_numpy(), ref_y) < TOL[dtype], case
        np.testing.assert_array_equal(h.to_numpy().astype(np.float64), ref_h)
        if r is None:
            assert h is dx  # no residual: h is x itself


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
def test_swiglu_linear_against_float64(rng, dtype):
    for (lead, k, n), with_b in itertools.product(SHAPES, (False, True)):
        gu = rng.standard_normal((*lead, 2 * k)).astype(dtype)
        w = rng.standard_normal((n, k)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype) if with_b else None
        y = F.swiglu_linear(*_dev(gu, w, b))
        g, u = gu[..., :k].astype(np.float64), gu[..., k:].astype(np.float64)
        ref = _round(g / (1 + np.exp(-g)) * u, dtype) @ w.astype(np.float64).T + (0 if b is None else b.astype(np.float64))
        assert y.shape == (*lead, n) and y.dtype == dtype, (lead, k, n, with_b)
        assert _rel(y.to_numpy(), ref) < TOL[dtype], (lead, k, n, with_b)


@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float32], ids=str)
def test_the_reference_is_the_unfused_path(rng, dtype):
    """Where nn's reference serves, the result is bit for bit the unfused ops' (add_rms_norm or
    rms_norm, swiglu, then gp.linear): a model loses nothing by always calling the fused op."""
    x, r, gu = (gp.from_numpy(rng.standard_normal(shape).astype(dtype)) for shape in ((5, 64), (5, 64), (5, 128)))
    g, w, b = (gp.from_numpy(rng.standard_normal(shape).astype(dtype)) for shape in ((64,), (24, 64), (24,)))
    for res in (r, None):
        assert gp.ops.which("add_rms_norm_linear", x, res, g, 1e-6, w, b) == "nn:reference"
        y, h = gp.ops.add_rms_norm_linear(x, res, g, 1e-6, w, b)
        normed, h2 = F.add_rms_norm(x, res, g, 1e-6) if res is not None else (F.rms_norm(x, g, 1e-6), x)
        np.testing.assert_array_equal(h.to_numpy(), h2.to_numpy())
        np.testing.assert_array_equal(y.to_numpy(), gp.linear(normed, w, b).to_numpy())
    assert gp.ops.which("swiglu_linear", gu, w, b) == "nn:reference"
    np.testing.assert_array_equal(gp.ops.swiglu_linear(gu, w, b).to_numpy(), gp.linear(F.swiglu(gu), w, b).to_numpy())


def test_ops_are_nn_s_and_in_gp_nn():
    assert gp.nn.add_rms_norm_linear is F.add_rms_norm_linear and gp.nn.swiglu_linear is F.swiglu_linear
    x, w = gp.zeros((2, 8), gp.float32), gp.zeros((4, 8), gp.float32)
    assert gp.ops.which("add_rms_norm_linear", x, None, None, 1e-6, w, None).startswith(("nn:", "gemm:"))
    assert gp.ops.which("swiglu_linear", gp.zeros((2, 16), gp.float32), w, None).startswith(("nn:", "gemm:"))


def test_bad_arguments_say_what_is_wrong():
    x, w = gp.zeros((2, 8), gp.float32), gp.zeros((4, 8), gp.float32)
    cases = [
        (lambda: F.add_rms_norm_linear(np.zeros((2, 8)), None, None, 1e-6, w), TypeError, "x must be a GPUArray"),
        (lambda: F.add_rms_norm_linear(x, "r", None, 1e-6, w), TypeError, "residual must be a GPUArray or None"),
        (lambda: F.add_rms_norm_linear(x, gp.zeros((2, 7)), None, 1e-6, w), ValueError, "residual must match x"),
        (lambda: F.add_rms_norm_linear(x, gp.zeros((2, 8), gp.float16), None, 1e-6, w), ValueError, "residual must match x"),
        (lambda: F.add_rms_norm_linear(x, None, gp.zeros(7), 1e-6, w), ValueError, r"weight must be \(8,\)"),
        (lambda: F.add_rms_norm_linear(x, None, None, -1.0, w), ValueError, "eps must be a number >= 0"),
        (lambda: F.add_rms_norm_linear(x, None, None, True, w), ValueError, "eps must be a number >= 0"),
        (lambda: F.add_rms_norm_linear(x, None, None, 1e-6, gp.zeros((4, 9))), ValueError, r"w must be \(out_features, 8\)"),
        (lambda: F.add_rms_norm_linear(x, None, None, 1e-6, w, gp.zeros(3)), ValueError, r"bias must be \(4,\)"),
        (lambda: F.add_rms_norm_linear(gp.zeros((2, 8), gp.int32), None, None, 1e-6, w), TypeError, "x must be float16"),
        (lambda: F.add_rms_norm_linear(gp.zeros((), gp.float32), None, None, 1e-6, gp.zeros((4, 0))), ValueError, "at least one axis"),
        (lambda: F.swiglu_linear(gp.zeros((2, 7)), w), ValueError, r"gate_up must be \(\.\.\., 2 \* k\)"),
        (lambda: F.swiglu_linear(gp.zeros((2, 16)), gp.zeros((4, 9))), ValueError, r"w must be \(out_features, 8\)"),
        (lambda: F.swiglu_linear(gp.zeros((2, 16)), "w"), TypeError, "w must be a GPUArray"),
        (lambda: F.swiglu_linear(gp.zeros((2, 16)), gp.zeros((4, 8)), gp.zeros(5)), ValueError, r"bias must be \(4,\)"),
        (lambda: F.swiglu_linear(gp.zeros((2, 16), gp.int64), w), TypeError, "gate_up must be float16"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
