"""matmul / @, linear, dot, vdot, outer against NumPy float64 references; each
test runs twice: with whatever implementation the registry picks here (a
plugin's, where one is installed) and routed to core's own kernel."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array


@pytest.fixture(autouse=True, params=["picked", "core"])
def implementation(request):
    if request.param == "picked":
        yield
    else:
        with gp.routing(matmul="pygpukit", linear="pygpukit"):
            yield


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((5, 7), (7, 3)),
        ((33, 17), (17, 40)),
        ((7,), (7, 4)),
        ((4, 7), (7,)),
        ((6,), (6,)),
        ((2, 3, 5, 4), (4, 6)),
        ((3, 1, 5, 4), (2, 4, 6)),
        ((1, 16), (16, 1)),
        ((3, 0), (0, 4)),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.float16, gp.bfloat16, gp.int32, gp.int64], ids=str)
def test_matmul(rng, sa, sb, dtype):
    x, y = random_array(rng, sa, dtype), random_array(rng, sb, dtype)
    got = (gp.from_numpy(x) @ gp.from_numpy(y)).to_numpy()
    ref = np.matmul(x.astype(np.float64), y.astype(np.float64))
    assert got.shape == ref.shape and got.dtype == dtype
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, np.matmul(x, y))
    else:
        # fp32 accumulation (fp64 for float64), then one rounding to dtype: error
        # bounded by K * eps_acc * sum|a||b| plus the final rounding
        k = sa[-1]
        scale = np.matmul(np.abs(x.astype(np.float64)), np.abs(y.astype(np.float64)))
        eps_acc = 2.0**-52 if dtype == gp.float64 else 2.0**-23
        eps_out = (
            float(np.finfo(np.float64).eps)
            if dtype == gp.float64
            else {gp.float32: 2.0**-23, gp.float16: 2.0**-10, gp.bfloat16: 2.0**-7}[dtype]
        )
        err = np.abs(got.astype(np.float64) - ref)
        assert (err <= k * eps_acc * scale + eps_out * np.abs(ref) + 1e-30).all()


def test_fp32_is_not_tf32(rng):
    # TF32 keeps 10 mantissa bits: a product of (1 + 2^-20) terms would lose them
    # (exactly 64.0 in TF32); in FP32 each product is 1 + 2^-19 and the sum ~64.000122
    x = np.full((64, 64), 1 + 2.0**-20, np.float32)
    got = (gp.from_numpy(x) @ gp.from_numpy(x)).to_numpy()
    assert (got > 64.0001).all() and (got < 64.0003).all()


def test_dot_vdot_outer(rng):
    x, y = random_array(rng, (5,), np.float64), random_array(rng, (5,), np.float64)
    a, b = gp.from_numpy(x), gp.from_numpy(y)
    assert gp.dot(a, b).item() == pytest.approx(np.dot(x, y), rel=1e-12)
    assert gp.vdot(a.reshape(1, 5), b).item() == pytest.approx(np.vdot(x, y), rel=1e-12)
    np.testing.assert_allclose(gp.outer(a, b).to_numpy(), np.outer(x, y), rtol=1e-15)
    m = random_array(rng, (5, 3), np.float64)
    np.testing.assert_allclose(gp.dot(a, gp.from_numpy(m)).to_numpy(), np.dot(x, m), rtol=1e-12)
    np.testing.assert_array_equal(gp.dot(a, gp.full((), 2.0)).to_numpy(), x * 2)


def test_matmul_errors():
    a = gp.zeros((3, 4))
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        a @ gp.zeros((5, 2))
    with pytest.raises(ValueError, match="0-d"):
        gp.matmul(a, gp.zeros(()))
    with pytest.raises(TypeError):
        a @ "matrix"
    r = a @ np.ones((4, 2))  # a NumPy operand is copied over, as for + - * /
    assert isinstance(r, gp.GPUArray) and r.shape == (3, 2)
    with pytest.raises(ValueError, match="vdot"):
        gp.vdot(a, gp.zeros(5))
    with pytest.raises(ValueError):
        gp.zeros((2, 3, 4)) @ gp.zeros((3, 4, 5))  # batch shapes that do not broadcast


@pytest.mark.parametrize("dtype", [np.float32, np.float64, gp.bfloat16], ids=str)
@pytest.mark.parametrize("xshape", [(5,), (3, 5), (2, 4, 5)])
def test_linear(rng, dtype, xshape):
    x, w, b = (random_array(rng, s, dtype) for s in (xshape, (6, 5), (6,)))
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    tol = 1e-2 if dtype == gp.bfloat16 else 1e-5
    got = gp.linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b))
    assert got.shape == (*xshape[:-1], 6) and got.dtype == dtype
    np.testing.assert_allclose(got.to_numpy().astype(np.float64), x64 @ w64.T + b64, rtol=tol, atol=tol * 30)
    np.testing.assert_allclose(
        gp.linear(gp.from_numpy(x), gp.from_numpy(w)).to_numpy().astype(np.float64), x64 @ w64.T, rtol=tol, atol=tol * 30
    )


def test_linear_errors(rng):
    x, w = gp.from_numpy(random_array(rng, (3, 5), np.float32)), gp.from_numpy(random_array(rng, (6, 5), np.float32))
    for call, exc, match in (
        (lambda: gp.linear(x, w.T), ValueError, r"x's last axis must have w's in_features \(6\)"),
        (lambda: gp.linear(x, w[0]), ValueError, r"w must be 2-D"),
        (lambda: gp.linear(x, w, gp.zeros((5,))), ValueError, r"bias must have shape \(6,\)"),
        (lambda: gp.linear(x, w, [0.0] * 6), TypeError, "bias must be a GPUArray or None"),
        (lambda: gp.linear(np.ones((3, 5)), w), TypeError, "linear expects GPUArrays"),
    ):
        with pytest.raises(exc, match=match):
            call()


def test_matmul_precision_setting(monkeypatch):
    assert gp.get_matmul_precision() == "highest"
    try:
        gp.set_matmul_precision("high")  # PyTorch's name for TF32
        assert gp.get_matmul_precision() == "tf32"
        gp.set_matmul_precision("ieee")
        assert gp.get_matmul_precision() == "highest"
    finally:
        gp.set_matmul_precision("highest")
    with pytest.raises(ValueError, match="matmul precision must be one of"):
        gp.set_matmul_precision("bf16x3")
    code = "import pygpukit as gp; print(gp.get_matmul_precision())"
    env = {**os.environ, "PYGPUKIT_ALLOW_TF32": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip() == "tf32"
