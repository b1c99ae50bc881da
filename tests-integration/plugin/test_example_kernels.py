"""The example plugin's kernels on the GPU, against float64 NumPy: the new op
``scaled_residual_add`` and the softmax / log_softmax of row-strided arrays,
over several shapes (odd sizes, vector and scalar paths, slices, every other
row, broadcast and reversed rows), with NaN left in the pool beforehand so
that an element a kernel forgets to write fails."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import plans

pytestmark = pytest.mark.gpu
DTYPES = [gp.float16, gp.bfloat16, gp.float32]
# result dtype -> (relative, absolute) error allowed: twice the rounding of the
# result, float32 math for the 16-bit floats, float16's subnormal spacing
TOL = {gp.float16: (2**-10, 2**-24), gp.bfloat16: (2**-7, 0.0), gp.float32: (2**-20, 0.0)}
F32_MATH = 2**-18  # a few float32 rounding errors


@pytest.fixture(autouse=True)
def nan_pool():
    """Free pool blocks full of NaN: the next outputs land there."""
    for n in (1 << 10, 1 << 14, 1 << 18, 1 << 22):
        gp.full((n,), np.nan, gp.float32)
    yield
    for op in ("scaled_residual_add", "softmax", "log_softmax"):
        gp.route(op, None)


def _random(rng, shape, dtype):
    return np.asarray(rng.standard_normal(shape) * 3).astype(dtype)


# -- scaled_residual_add ----------------------------------------------------------------

# name -> (shape of the arrays made, view taken of each operand): contiguous
# arrays of odd sizes (the vector body and the scalar tail), row slices with
# aligned and unaligned starts, every other row, an operand broadcast from one row
LAYOUTS = {
    "1": ((1,), lambda a: a),
    "7": ((7,), lambda a: a),
    "1000003": ((1000003,), lambda a: a),
    "33x65": ((33, 65), lambda a: a),
    "3x5x129": ((3, 5, 129), lambda a: a),
    "unaligned-1-d": ((4099,), lambda a: a[1:]),
    "slice-aligned": ((40, 72), lambda a: a[:, 8:72]),
    "slice-odd": ((37, 101), lambda a: a[:, 3:100]),
    "every-other-row": ((64, 96), lambda a: a[::2]),
    "3-d-slice": ((4, 6, 40), lambda a: a[:, :, :32]),
    "many-rows": ((40000, 72), lambda a: a[:, :64]),  # more vectors than one sweep of the grid
    "reversed-rows": ((20, 16), lambda a: a[::-1]),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_scaled_residual_add_kernel(rng, dtype, layout):
    shape, view = LAYOUTS[layout]
    xh, rh = _random(rng, shape, dtype), _random(rng, shape, dtype)
    x, r = view(gp.from_numpy(xh)), view(gp.from_numpy(rh))
    alpha = float(rng.uniform(-2, 2))
    assert gp.ops.which("scaled_residual_add", x, r, alpha) == "example:kernel"
    got = gp.ops.scaled_residual_add(x, r, alpha)
    assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous
    x64, r64 = view(xh).astype(np.float64), view(rh).astype(np.float64)
    rel, tiny = TOL[dtype]
    err = np.abs(got.to_numpy().astype(np.float64) - (r64 + alpha * x64))
    assert np.all(err <= rel * (np.abs(r64) + np.abs(alpha * x64)) + tiny), err.max()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scaled_residual_add_mixed_layouts_and_alphas(rng, dtype):
    """One operand contiguous and one sliced; an int alpha; a broadcast residual (row stride 0)."""
    xh, wide = _random(rng, (50, 33), dtype), _random(rng, (50, 40), dtype)
    x, r = gp.from_numpy(xh), gp.from_numpy(wide)[:, 7:]
    rel, tiny = TOL[dtype]
    for a, b, ah, bh, alpha in ((x, r, xh, wide[:, 7:], 3), (r, x, wide[:, 7:], xh, -0.5)):
        got = gp.ops.scaled_residual_add(a, b, alpha).to_numpy().astype(np.float64)
        want = bh.astype(np.float64) + alpha * ah.astype(np.float64)
        assert np.all(np.abs(got - want) <= rel * (np.abs(bh.astype(np.float64)) + np.abs(alpha * ah.astype(np.float64))) + tiny)
    row = _random(rng, (33,), dtype)
    b = gp.broadcast_to(gp.from_numpy(row), (50, 33))
    assert gp.ops.which("scaled_residual_add", x, b, 2.0) == "example:kernel"
    want = row.astype(np.float64) + 2.0 * xh.astype(np.float64)
    got = gp.ops.scaled_residual_add(x, b, 2.0).to_numpy().astype(np.float64)
    assert np.all(np.abs(got - want) <= rel * (np.abs(row.astype(np.float64)) + np.abs(2.0 * xh.astype(np.float64))) + tiny)


def test_scaled_residual_add_declined_layouts_take_the_reference(rng):
    xh, rh = _random(rng, (40, 24), gp.float32), _random(rng, (40, 24), gp.float32)
    x, r = gp.from_numpy(xh).T, gp.from_numpy(rh).T
    assert gp.ops.which("scaled_residual_add", x, r, 0.5) == "example:reference"
    want = rh.T.astype(np.float64) + 0.5 * xh.T.astype(np.float64)
    np.testing.assert_allclose(gp.ops.scaled_residual_add(x, r, 0.5).to_numpy(), want, rtol=1e-6, atol=1e-6)
    x64 = gp.from_numpy(xh.astype(np.float64))
    assert gp.ops.which("scaled_residual_add", x64, x64, 0.5) == "example:reference"


def test_one_plan_per_layout(rng):
    x = gp.from_numpy(_random(rng, (16, 40), gp.float32))[:, :32]
    gp.ops.scaled_residual_add(x, x, 1.0)
    before = {s["name"]: s["plans"] for s in plans.stats()}["example.scaled_residual_add"]
    for _ in range(3):
        gp.ops.scaled_residual_add(x, x, float(rng.uniform()))  # the plan does not depend on alpha
    assert {s["name"]: s["plans"] for s in plans.stats()}["example.scaled_residual_add"] == before


# -- softmax / log_softmax of row-strided arrays ------------------------------------------


def _softmax64(x: np.ndarray, log: bool) -> np.ndarray:
    x = x.astype(np.float64)
    z = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


# name -> (shape made, view): the row lengths of every vectors-per-lane step
# (1, 32, 33, 1000, 1024), vector and scalar loads, aligned and unaligned starts
ROWS = {
    "k1": ((9, 8), lambda a: a[:, 2:3]),
    "k3": ((300, 10), lambda a: a[:, :3]),
    "k32": ((17, 40), lambda a: a[:, :32]),
    "k33": ((17, 40), lambda a: a[:, 1:34]),
    "k100-unaligned": ((65, 128), lambda a: a[:, 1:101]),
    "k257": ((33, 300), lambda a: a[:, :257]),
    "k1000": ((130, 1024), lambda a: a[:, :1000]),
    "k1024-every-other-row": ((18, 1024), lambda a: a[::2]),
    "3-d": ((3, 7, 80), lambda a: a[:, :, :64]),
    "reversed-rows": ((20, 48), lambda a: a[::-1, :40]),
    "many-rows": ((20000, 72), lambda a: a[:, :64]),
}


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(ROWS))
def test_softmax_of_row_strided_arrays(rng, op, dtype, layout):
    shape, view = ROWS[layout]
    xh = _random(rng, shape, dtype)
    x = view(gp.from_numpy(xh))
    assert not x.is_contiguous
    assert gp.ops.which(op, x) == "example:kernel"
    got = getattr(gp, op)(x, axis=-1)
    assert got.dtype == dtype and got.shape == x.shape and got.is_contiguous
    want = _softmax64(view(xh), op == "log_softmax")
    rel, tiny = TOL[dtype]
    # the result's rounding, and float32 math: a row's sum is off by a few of its
    # rounding errors, relative in softmax and absolute in log_softmax
    bound = rel * np.abs(want) + F32_MATH * (np.abs(want) + (op == "log_softmax")) + tiny
    err = np.abs(got.to_numpy().astype(np.float64) - want)
    assert np.all(err <= bound), err.max()


def test_softmax_of_broadcast_rows(rng):
    row = _random(rng, (77,), gp.float32)
    x = gp.broadcast_to(gp.from_numpy(row), (5, 77))
    assert gp.ops.which("softmax", x) == "example:kernel"
    np.testing.assert_allclose(gp.softmax(x).to_numpy(), np.broadcast_to(_softmax64(row, False), (5, 77)), rtol=1e-5)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values_as_pygpukit(rng, op, dtype):
    """NaN, rows of -inf and +inf give what pygpukit's own softmax gives."""
    wide = _random(rng, (6, 50), dtype)
    wide[1, 5] = np.nan
    wide[2, :40] = -np.inf
    wide[3, 7] = np.inf
    wide[4, 3] = -np.inf
    wide[5, [1, 9]] = np.inf
    x = gp.from_numpy(wide)[:, :40]
    got = getattr(gp, op)(x).to_numpy()
    with gp.routing(**{op: "pygpukit"}):
        want = getattr(gp, op)(x).to_numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0))
    fin = np.isfinite(want)
    rel, tiny = TOL[dtype]
    np.testing.assert_allclose(got[fin].astype(np.float64), want[fin].astype(np.float64), rtol=16 * rel, atol=16 * rel + tiny)


def test_other_calls_stay_with_pygpukit(rng):
    wide = gp.from_numpy(_random(rng, (8, 1100), gp.float32))
    for x, kwargs in ((wide[:, :1024].copy(), {}), (wide[:, :1025], {}), (wide[:, :100], {"axis": 0}), (wide[:, ::2], {})):
        assert gp.ops.which("softmax", x, **kwargs) != "example:kernel"
    x64 = gp.from_numpy(_random(rng, (8, 40), gp.float64))[:, :20]
    assert gp.ops.which("softmax", x64) != "example:kernel"
