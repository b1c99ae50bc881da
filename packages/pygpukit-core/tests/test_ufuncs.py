"""Every ufunc against a float64 NumPy reference (integers and predicates:
exactly), with NumPy's result dtypes, over layouts, scalars and ``out=``."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, FLOAT_DTYPES, random_array
from pygpukit import ufuncs

_erf = np.vectorize(math.erf, otypes=[np.float64])

# Independent float64 definitions of the functions NumPy lacks.
EXTRA_REFS = {
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "erf": _erf,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "relu": lambda x: np.where(x < 0, 0, x),
}
# Inputs inside each function's domain, and small enough not to overflow float8.
DOMAIN = {
    "sqrt": (0, 50), "rsqrt": (0.01, 50), "log": (0.01, 50), "log2": (0.01, 50), "log10": (0.01, 50),
    "log1p": (-0.9, 50), "arcsin": (-1, 1), "arccos": (-1, 1), "arctanh": (-0.95, 0.95), "arccosh": (1, 50),
    "exp": (-4, 4), "exp2": (-6, 6), "expm1": (-4, 4), "sinh": (-4, 4), "cosh": (-4, 4), "tan": (-1.3, 1.3),
    "reciprocal": (0.1, 50), "square": (-12, 12), "power": (0.1, 4), "cbrt": (-50, 50),
}  # fmt: skip
_ALL = list({id(u): u for u in vars(ufuncs).values() if isinstance(u, ufuncs.Ufunc)}.values())  # aliases once
UNARY = [u for u in _ALL if u.nin == 1 and not u.name.startswith(("clip", "nan_"))]
BINARY = [u for u in _ALL if u.nin == 2]
PREDICATES = {"isnan", "isinf", "isfinite", "signbit", "logical_not"}
# Where the result cancels (x * (1 + something near -1)), judge the error
# against the size of the inputs rather than of the result.
CANCELS = {"gelu", "gelu_tanh", "silu", "sin", "tan", "subtract", "add", "logaddexp", "expm1", "arctan2", "cos"}
# one rounding of the output dtype, loosened where the GPU's math library is
# allowed a few ulp (CUDA's float32 functions: 2-4 ulp)
ULP = {gp.float8_e4m3fn: 2**-3, gp.float8_e5m2: 2**-2, gp.bfloat16: 2**-7, gp.float16: 2**-10, gp.float32: 2**-21, gp.float64: 2**-49}


def _inputs(rng, name: str, dt: np.dtype, shape) -> np.ndarray:
    dt = np.dtype(dt)
    if dt.kind == "b":
        return random_array(rng, shape, dt)
    lo, hi = DOMAIN.get(name, (-6, 6))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(math.ceil(lo), info.min, -50), min(math.floor(hi), info.max, 50)
        return rng.integers(lo, hi + 1, size=shape).astype(dt)
    x = rng.uniform(lo, hi, size=shape).astype(dt)
    # rounding to dt may step outside the domain; np.clip would promote ml_dtypes to float32
    return np.clip(x, dt.type(lo), dt.type(hi)).astype(dt) if name in DOMAIN else x


def _reference(uf, *xs: np.ndarray) -> np.ndarray:
    """NumPy's answer: computed in float64 for float loops, in the loop dtype otherwise."""
    _, res = uf.loop(*(x.dtype for x in xs))
    fn = EXTRA_REFS.get(uf.name, uf.resolver)
    floaty = _is_float(res) and uf.name not in PREDICATES
    with np.errstate(all="ignore"):
        if floaty or _is_float(np.result_type(*(np.float32 if _is_float(x.dtype) else x.dtype for x in xs))):
            return np.asarray(fn(*(x.astype(np.float64) for x in xs)))
        return np.asarray(fn(*xs))


def _is_float(dt) -> bool:
    return np.dtype(dt) in FLOAT_DTYPES


def _check(uf, got: np.ndarray, ref: np.ndarray, xs) -> None:
    dt = got.dtype
    if not _is_float(dt):
        np.testing.assert_array_equal(got, ref.astype(dt), err_msg=uf.name)
        return
    g, r = got.astype(np.float64), ref.astype(np.float64)
    rtol = ULP[dt]
    atol = float(ml_dtypes.finfo(dt).smallest_normal) * 4
    if uf.name in CANCELS:
        scale = max(1.0, *(float(np.max(np.abs(x.astype(np.float64)), initial=0)) for x in xs))
        atol += rtol * scale
    # values beyond the dtype's range become inf (or NaN in float8_e4m3fn) in both
    big = np.abs(r) > float(ml_dtypes.finfo(dt).max)
    r = np.where(big, g, r)
    np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, equal_nan=True, err_msg=uf.name)


def _loop_ok(uf, *dts) -> bool:
    try:
        uf.loop(*dts)
        return True
    except TypeError:
        return False


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("uf", UNARY, ids=lambda u: u.name)
def test_unary_matches_reference(rng, uf, dtype):
    if not _loop_ok(uf, np.dtype(dtype)):
        with pytest.raises(TypeError, match=uf.name):
            uf(gp.zeros((3,), dtype))
        return
    x = _inputs(rng, uf.name, dtype, (517,))
    got = uf(gp.from_numpy(x)).to_numpy()
    ref = _reference(uf, x)
    if uf.name in EXTRA_REFS or np.dtype(dtype) in (gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2):
        # our own functions keep the float dtype of the input; integers compute in float64
        want_dt = np.dtype(dtype) if _is_float(dtype) else uf.loop(np.dtype(dtype))[1]
        want_dt = gp.bool_ if uf.name in PREDICATES else want_dt
    else:
        want_dt = uf.resolver.resolve_dtypes((np.dtype(dtype), None))[-1]
    assert got.dtype == want_dt, (uf.name, got.dtype, want_dt)
    _check(uf, got, ref, [x])


def _binary_inputs(rng, name, da, db, shape_a=(263,), shape_b=(263,)):
    a = _inputs(rng, name, da, shape_a)
    if name in ("left_shift", "right_shift") and np.dtype(db).kind in "iu":
        bits = np.dtype(da).itemsize * 8 if np.dtype(da).kind in "iu" else 8
        return a, rng.integers(0, bits + 3, size=shape_b).astype(db)  # shifts of the width or more: 0 / sign
    if name == "power" and np.dtype(db).kind in "iub":
        return a, rng.integers(0, 5, size=shape_b).astype(db)
    b = _inputs(rng, name, db, shape_b)
    if name in ("floor_divide", "remainder", "fmod", "divide") and np.dtype(db).kind in "iu":
        b[: len(b) // 8] = 0  # integer division by zero gives 0, as in NumPy
    return a, b


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("uf", BINARY, ids=lambda u: u.name)
def test_binary_matches_reference(rng, uf, dtype):
    dt = np.dtype(dtype)
    if not _loop_ok(uf, dt, dt):
        with pytest.raises(TypeError, match=uf.name):
            uf(gp.zeros((3,), dt), gp.zeros((3,), dt))
        return
    a, b = _binary_inputs(rng, uf.name, dt, dt)
    got = uf(gp.from_numpy(a), gp.from_numpy(b)).to_numpy()
    if dt in FLOAT_DTYPES[:4] or dt.kind in "biu":
        with np.errstate(all="ignore"):
            assert got.dtype == uf.resolver(a, b).dtype
    _check(uf, got, _reference(uf, a, b), [a, b])


MIXED = [(gp.int8, gp.uint8), (gp.int32, gp.float32), (gp.bfloat16, gp.float16), (gp.bool_, gp.int16),
         (gp.uint64, gp.int64), (gp.float16, gp.int8), (gp.float8_e4m3fn, gp.bfloat16), (gp.uint32, gp.float64)]  # fmt: skip


@pytest.mark.parametrize("da,db", MIXED, ids=str)
@pytest.mark.parametrize("uf", BINARY, ids=lambda u: u.name)
def test_binary_mixed_dtypes(rng, uf, da, db):
    promoted = gp.result_type(da, db)
    if not _loop_ok(uf, np.dtype(da), np.dtype(db)):
        with pytest.raises(TypeError):
            uf(gp.zeros((2,), da), gp.zeros((2,), db))
        return
    a, b = _binary_inputs(rng, uf.name, da, db)
    got = uf(gp.from_numpy(a), gp.from_numpy(b)).to_numpy()
    if np.dtype(da) in FLOAT_DTYPES[4:] or np.dtype(db) in FLOAT_DTYPES[4:] or gp.bfloat16 in (da, db):
        assert got.dtype == uf.loop(promoted, promoted)[1]  # ml_dtypes: promote, then NumPy's rule
    else:
        with np.errstate(all="ignore"):
            assert got.dtype == uf.resolver(a, b).dtype
    _check(uf, got, _reference(uf, a.astype(promoted), b.astype(promoted)), [a, b])


LAYOUTS = {
    "transposed": lambda x: x.T,
    "strided": lambda x: x[::2, 1::3],
    "negative_step": lambda x: x[::-1, ::-2],
    "zero_d": lambda x: x[3, 4],
    "empty": lambda x: x[:0],
    "column": lambda x: x[:, 2:3],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["exp", "negative", "isnan", "sqrt", "invert"])
def test_unary_layouts(rng, name, layout):
    uf = getattr(gp, name)
    dt = np.int16 if name == "invert" else np.float32
    host = _inputs(rng, name, dt, (12, 10))
    x = LAYOUTS[layout](gp.from_numpy(host))
    ref = LAYOUTS[layout](host)
    got = uf(x)
    assert got.shape == ref.shape
    _check(uf, got.to_numpy(), _reference(uf, np.asarray(ref)), [host])
    if layout == "transposed":  # the result keeps the operand's memory order
        assert got.strides == tuple(s // x.itemsize * got.itemsize for s in x.strides)


@pytest.mark.parametrize(
    "sa,sb",
    [((12, 10), (10,)), ((12, 1), (1, 10)), ((), (3, 4)), ((2, 3, 4, 5), (1, 3, 1, 5)), ((0, 4), (4,)), ((4, 1, 3), (5, 1))],
    ids=str,
)
@pytest.mark.parametrize("name", ["hypot", "maximum", "less", "remainder", "bitwise_xor"])
def test_binary_broadcasting(rng, name, sa, sb):
    uf = getattr(gp, name)
    dt = np.int32 if name == "bitwise_xor" else np.float32
    a, b = _binary_inputs(rng, name, dt, dt, sa, sb)
    got = uf(gp.from_numpy(a), gp.from_numpy(b))
    with np.errstate(all="ignore"):
        ref = uf.resolver(a.astype(np.float64), b.astype(np.float64)) if dt == np.float32 else uf.resolver(a, b)
    assert got.shape == np.broadcast_shapes(sa, sb)
    _check(uf, got.to_numpy(), np.asarray(ref), [a, b])
    # transposed and strided operands
    at, bt = gp.from_numpy(np.ascontiguousarray(a.T)).T, gp.from_numpy(np.repeat(b, 2, axis=-1))[..., ::2]
    _check(uf, uf(at, bt).to_numpy(), np.asarray(ref), [a, b])


def test_python_scalars_are_weak(rng):
    x = gp.from_numpy(random_array(rng, (50,), np.int8))
    assert (x + 3).dtype == gp.int8 and (3 + x).dtype == gp.int8
    assert (x * 2.5).dtype == gp.float64
    h = gp.from_numpy(random_array(rng, (50,), np.float16))
    assert (h + 2.5).dtype == gp.float16 and (2.5 - h).dtype == gp.float16
    assert (h + np.float32(2.5)).dtype == gp.float32  # NumPy scalars are strong
    np.testing.assert_array_equal(gp.maximum(x, 7).to_numpy(), np.maximum(x.to_numpy(), 7))
    np.testing.assert_array_equal((x > True).to_numpy(), x.to_numpy() > True)
    with pytest.raises(OverflowError, match="out of bounds for int8"):
        x + 1000
    with pytest.raises(OverflowError, match="uint8"):
        gp.zeros((2,), gp.uint8) + (-1)
    np.testing.assert_array_equal((gp.zeros((2,), gp.uint8) - 1).to_numpy(), [255, 255])  # 1 fits: wraps


def test_comparisons_with_out_of_range_integers(rng):
    x = random_array(rng, (64,), np.int8)
    g = gp.from_numpy(x)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
        for s in (1000, -1000, 2**70):
            np.testing.assert_array_equal(getattr(g, op)(s).to_numpy(), getattr(x.astype(object), op)(s).astype(bool))
    u = gp.from_numpy(np.array([0, 1, 255], np.uint8))
    np.testing.assert_array_equal((u > -1).to_numpy(), [True, True, True])
    np.testing.assert_array_equal((gp.from_numpy(np.array([2**63 - 1, -5])) < 2**64).to_numpy(), [True, True])
    # int64 against uint64 compares exactly, beyond float64's 2**53
    big_u = np.array([0, 5, 2**63 + 5, 2**64 - 1, 2**53 + 1], np.uint64)
    big_i = np.array([-1, 5, 2**63 - 1, -(2**63), 2**53], np.int64)
    for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
        f, ref = getattr(gp, name), getattr(np, name)
        gu, gi = gp.from_numpy(big_u), gp.from_numpy(big_i)
        np.testing.assert_array_equal(f(gu, gi).to_numpy(), ref(big_u, big_i), err_msg=name)
        np.testing.assert_array_equal(f(gi, gu).to_numpy(), ref(big_i, big_u), err_msg=name)
        np.testing.assert_array_equal(f(gu, np.int64(-1)).to_numpy(), ref(big_u, np.int64(-1)), err_msg=name)


def test_scalar_only_and_host_operands(rng):
    np.testing.assert_allclose(gp.sqrt(4.0).to_numpy(), 2.0)
    assert gp.add(2, 3).dtype == gp.int64 and gp.add(2, 3).shape == ()
    h = random_array(rng, (4, 3), np.float32)
    _check(gp.add, gp.add(h, gp.ones((3,))).to_numpy(), h.astype(np.float64) + 1, [h])
    np.testing.assert_array_equal(gp.multiply([[1, 2]], (3,)).to_numpy(), [[3, 6]])
    with pytest.raises(TypeError, match="add"):
        gp.add(gp.ones((2,)), "x")
    with pytest.raises(TypeError, match="takes 2 positional arguments"):
        gp.add(gp.ones((2,)))


def test_int_division_by_zero_and_negative_powers():
    a = gp.from_numpy(np.array([7, -7, 0, 5], np.int32))
    z = gp.zeros((4,), gp.int32)
    np.testing.assert_array_equal((a // z).to_numpy(), [0, 0, 0, 0])
    np.testing.assert_array_equal((a % z).to_numpy(), [0, 0, 0, 0])
    np.testing.assert_array_equal(gp.fmod(a, z).to_numpy(), [0, 0, 0, 0])
    np.testing.assert_array_equal((a // -2).to_numpy(), [-4, 3, 0, -3])
    np.testing.assert_array_equal((a % -2).to_numpy(), [-1, -1, 0, -1])
    with pytest.raises(ValueError, match="negative integer powers"):
        a**-1
    # arrays of exponents: 1 and -1 have exact negative powers, everything else gives 0
    base = gp.from_numpy(np.array([1, -1, -1, 2, 0], np.int64))
    np.testing.assert_array_equal((base ** gp.from_numpy(np.array([-3, -3, -2, -1, 2]))).to_numpy(), [1, -1, 1, 0, 0])
    np.testing.assert_array_equal(gp.reciprocal(gp.from_numpy(np.array([1, -1, 2, 0], np.int16))).to_numpy(), [1, -1, 0, 0])


def test_float_special_values():
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.5, 2.5], np.float32)
    g = gp.from_numpy(x)
    for name in ("isnan", "isinf", "isfinite", "signbit", "sign", "floor", "ceil", "trunc", "rint", "abs", "relu"):
        uf = getattr(gp, name)
        np.testing.assert_array_equal(uf(g).to_numpy(), EXTRA_REFS.get(name, uf.resolver)(x), err_msg=name)
    y = np.array([1.0, np.nan, 2.0, np.nan, -0.0, 0.0, 3.0, 3.0], np.float32)
    for name in ("maximum", "minimum", "fmax", "fmin", "copysign"):
        uf = getattr(gp, name)
        np.testing.assert_array_equal(uf(g, gp.from_numpy(y)).to_numpy(), uf.resolver(x, y), err_msg=name)


def test_operators_map_to_ufuncs(rng):
    a, b = random_array(rng, (40,), np.int32), random_array(rng, (40,), np.int32)
    b = np.where(b == 0, 3, b)
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    pairs = [
        (ga + gb, a + b), (ga - gb, a - b), (ga * gb, a * b), (ga / gb, a / b), (ga // gb, a // b), (ga % gb, a % b),
        (ga & gb, a & b), (ga | gb, a | b), (ga ^ gb, a ^ b), (ga << 2, a << 2), (ga >> 1, a >> 1), (-ga, -a), (+ga, +a),
        (abs(ga), abs(a)), (~ga, ~a), (ga**2, a**2), (2**gb.__abs__() % 7, 2 ** np.abs(b) % 7), (10 - ga, 10 - a),
        (ga == gb, a == b), (ga != gb, a != b), (ga < gb, a < b), (ga <= gb, a <= b), (ga > gb, a > b), (ga >= gb, a >= b),
    ]  # fmt: skip
    for got, want in pairs:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.to_numpy(), want)
    q, r = divmod(ga, gb)
    np.testing.assert_array_equal(q.to_numpy(), a // b)
    np.testing.assert_array_equal(r.to_numpy(), a % b)
    q, r = divmod(100, gb)
    np.testing.assert_array_equal(r.to_numpy(), 100 % b)
    with pytest.raises(TypeError, match="unhashable"):
        hash(ga)


def test_in_place_operators_and_overlap(rng):
    x = random_array(rng, (33,), np.float32)
    g = gp.from_numpy(x.copy())
    ptr = g.data_ptr
    g += 1.5
    g *= gp.from_numpy(x)
    assert g.data_ptr == ptr
    np.testing.assert_array_equal(g.to_numpy(), (x + np.float32(1.5)) * x)
    # overlapping views read the input as it was before the operation (NumPy's rule)
    h, gh = x.copy(), gp.from_numpy(x.copy())
    h[1:] += h[:-1]
    gh[1:] += gh[:-1]
    np.testing.assert_array_equal(gh.to_numpy(), h)
    i = gp.from_numpy(np.arange(6, dtype=np.int32))
    with pytest.raises(TypeError, match="same_kind"):
        i += 1.5
    np.testing.assert_array_equal(i.to_numpy(), np.arange(6))  # untouched


def test_out_argument(rng):
    a = random_array(rng, (6, 5), np.float32)
    out = gp.empty((5, 6), gp.float64).T  # non-contiguous, wider dtype
    r = gp.exp(gp.from_numpy(a), out=out)
    assert r is out
    # computed in float32 (the loop NumPy picks), then widened
    np.testing.assert_allclose(out.to_numpy(), np.exp(a.astype(np.float64)), rtol=ULP[gp.float32])
    with pytest.raises(ValueError, match="non-broadcastable output"):
        gp.exp(gp.from_numpy(a), out=gp.empty((5,), gp.float32))
    with pytest.raises(TypeError, match="same_kind"):
        gp.exp(gp.from_numpy(a), out=gp.empty((6, 5), gp.int32))
    with pytest.raises(TypeError, match="out must be a GPUArray"):
        gp.exp(gp.from_numpy(a), out=np.empty((6, 5), np.float32))
    # out may be one of the inputs
    g = gp.from_numpy(a.copy())
    gp.multiply(g, g, out=g)
    np.testing.assert_array_equal(g.to_numpy(), a * a)


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16, gp.int16, gp.uint8, gp.float64, gp.bool_], ids=str)
def test_where(rng, dtype):
    c = random_array(rng, (7, 9), np.bool_)
    x, y = random_array(rng, (7, 9), dtype), random_array(rng, (9,), dtype)
    got = gp.where(gp.from_numpy(c), gp.from_numpy(x), gp.from_numpy(y))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.to_numpy(), np.where(c, x, y))
    # scalar branches and a non-bool condition
    np.testing.assert_array_equal(gp.where(gp.from_numpy(x.astype(np.int8)), 1, 0).to_numpy(), np.where(x.astype(np.int8), 1, 0))
    got = gp.where(gp.from_numpy(c).T, 2.5, gp.from_numpy(x).T)
    np.testing.assert_array_equal(
        got.to_numpy(), np.where(c.T, 2.5, x.T.astype(np.float64 if dtype in (gp.bool_, gp.int16, gp.uint8) else dtype))
    )


@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.int32, gp.uint8, gp.float64], ids=str)
def test_clip(rng, dtype):
    x = random_array(rng, (300,), dtype)
    g = gp.from_numpy(x)
    np.testing.assert_array_equal(gp.clip(g, 1, 20).to_numpy(), np.clip(x, 1, 20))
    np.testing.assert_array_equal(gp.clip(g, None, 5).to_numpy(), np.clip(x, None, 5))
    lo = random_array(rng, (300,), dtype)
    np.testing.assert_array_equal(gp.clip(g, gp.from_numpy(lo), 30).to_numpy(), np.clip(x, lo, 30))
    with pytest.raises(ValueError, match="at least one"):
        gp.clip(g)


def test_clip_keeps_nan():
    x = np.array([np.nan, -5, 5, 0.5], np.float32)
    np.testing.assert_array_equal(gp.clip(gp.from_numpy(x), -1, 1).to_numpy(), np.clip(x, -1, 1))


@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.bfloat16, gp.float64], ids=str)
def test_nan_to_num(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], dtype)
    g = gp.from_numpy(x)
    big = gp.finfo(dtype).max
    np.testing.assert_array_equal(gp.nan_to_num(g).to_numpy(), np.array([0, big, -big, 1.5, -0.0], dtype))
    got = gp.nan_to_num(g, nan=7.0, posinf=1.0, neginf=-2.0)
    np.testing.assert_array_equal(got.to_numpy(), np.array([7, 1, -2, 1.5, -0.0], dtype))
    same_buffer = gp.nan_to_num(g, copy=False)
    assert same_buffer is g and not np.isnan(g.to_numpy()).any()
    i = gp.arange(4)
    assert gp.nan_to_num(i) is not i and gp.nan_to_num(i, copy=False) is i


@pytest.mark.parametrize("decimals", [0, 2, -1, -2])
@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.int32, gp.int64, gp.float16], ids=str)
def test_round(rng, dtype, decimals):
    if np.dtype(dtype).kind == "i":
        x = rng.integers(-1000, 1000, size=200).astype(dtype)
        x[:4] = [15, 25, -15, 150]  # ties round to even
    else:
        x = (rng.standard_normal(200) * 100).astype(dtype)
        x[:3] = [0.5, 1.5, -2.5]
    got = gp.round(gp.from_numpy(x), decimals).to_numpy()
    want = np.round(x, decimals)
    assert got.dtype == want.dtype
    if np.dtype(dtype).kind == "i" or decimals <= 0:
        np.testing.assert_array_equal(got, want)
    else:  # scaling by 10**decimals rounds; NumPy does the same, in its own order
        np.testing.assert_allclose(got, want, rtol=ULP[dtype] * 4, atol=10.0**-decimals)
    assert gp.around is gp.round


def test_finfo_iinfo():
    assert gp.finfo(gp.bfloat16).bits == 16 and float(gp.finfo(gp.bfloat16).max) == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    assert float(gp.finfo(gp.float8_e4m3fn).max) == 448.0
    assert gp.finfo(gp.float32).eps == np.finfo(np.float32).eps
    assert gp.iinfo(gp.int8).min == -128 and gp.iinfo(gp.uint16).max == 65535
    assert gp.finfo(gp.zeros((2,), gp.float16)).bits == 16
    with pytest.raises(ValueError):
        gp.finfo(gp.int32)
    with pytest.raises(ValueError):
        gp.iinfo(gp.float32)


def test_ufunc_metadata():
    assert repr(gp.exp) == "<pygpukit ufunc 'exp'>" and gp.exp.nin == 1 and gp.add.nin == 2
    assert gp.absolute is gp.abs and gp.bitwise_not is gp.invert and gp.true_divide is gp.divide and gp.mod is gp.remainder
    assert gp.exp.loop(np.dtype(np.int8)) == (np.dtype(np.float16), np.dtype(np.float16))
    assert gp.add.loop(np.dtype(np.float16), float) == (np.dtype(np.float16), np.dtype(np.float16))
    assert {u.name for u in UNARY + BINARY} <= set(dir(gp))
