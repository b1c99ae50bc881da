"""GPUArray basics against NumPy: creation, transfers, arithmetic with broadcasting."""

import math

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, FLOAT_DTYPES, random_array


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype, shape and values (NaN == NaN), compared bit for bit through float64 views."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if got.dtype.kind == "f" or got.dtype in (gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2):
        g, w = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(g[~np.isnan(g)], w[~np.isnan(w)])
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (3, 5), (2, 3, 4), (1000, 3)], ids=str)
def test_round_trip(rng, dtype, shape):
    host = random_array(rng, shape, dtype)
    a = gp.from_numpy(host)
    assert a.shape == shape and a.dtype == dtype and a.size == host.size and a.nbytes == host.nbytes
    assert a.ndim == len(shape) and a.itemsize == host.itemsize
    same(a.to_numpy(), host)
    same(np.asarray(a), host)
    same(a.copy().to_numpy(), host)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_creation(dtype):
    same(gp.zeros((3, 4), dtype).to_numpy(), np.zeros((3, 4), dtype))
    same(gp.ones((5,), dtype).to_numpy(), np.ones((5,), dtype))
    same(gp.full((2, 3), 3, dtype).to_numpy(), np.full((2, 3), 3, dtype))
    assert gp.empty((4, 2), dtype).shape == (4, 2)


def test_creation_defaults_follow_numpy():
    assert gp.zeros(3).dtype == np.float64
    assert gp.full((2,), 7).dtype == np.int64
    assert gp.full((2,), 7.5).dtype == np.float64
    assert gp.full((2,), True).dtype == np.bool_
    assert gp.arange(5).dtype == np.int64
    assert gp.arange(0.5, 3).dtype == np.float64


@pytest.mark.parametrize(
    "args,dtype",
    [((10,), None), ((2, 11, 3), None), ((0.5, 4.25, 0.5), None), ((5, -7, -2), None), ((3, 3), None),
     ((100,), gp.float32), ((0.0, 1.0, 0.1), gp.float16), ((-3, 40, 7), gp.int8), ((1000,), gp.bfloat16)],
)  # fmt: skip
def test_arange(args, dtype):
    got = gp.arange(*args, dtype=dtype).to_numpy()
    want = np.arange(*args, dtype=dtype)
    same(got, want)


def test_bad_creation_input():
    with pytest.raises(ValueError, match="negative dimensions"):
        gp.zeros((2, -1))
    with pytest.raises(TypeError, match="shape must be"):
        gp.zeros("abc")
    with pytest.raises(TypeError, match="not supported"):
        gp.zeros(3, np.clongdouble)
    with pytest.raises(ValueError, match="step must not be zero"):
        gp.arange(0, 10, 0)
    with pytest.raises(TypeError, match="real number"):
        gp.arange("5")
    with pytest.raises(TypeError, match="fill_value must be a number"):
        gp.full((2,), "x", gp.float32)
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        gp.GPUArray()


def test_from_numpy_rejects_non_contiguous_and_objects():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match="C-contiguous"):
        gp.from_numpy(host.T)
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        gp.from_numpy([1, 2, 3])
    with pytest.raises(TypeError, match="not supported"):
        gp.from_numpy(np.array(["a", "b"]))
    # asarray takes care of the layout instead
    same(gp.asarray(host.T).to_numpy(), np.ascontiguousarray(host.T))
    with pytest.raises(TypeError, match="Python objects"):
        gp.asarray([object()])


@pytest.mark.parametrize("obj", [np.float32(3.5), np.array(-2, np.int16), 7, 2.5, True], ids=repr)
def test_asarray_keeps_zero_d(obj):
    a = gp.asarray(obj)
    expect = np.asarray(obj)
    assert a.shape == () and a.dtype == expect.dtype
    same(a.to_numpy(), expect)


def test_asarray_copy_semantics(rng):
    a = gp.from_numpy(random_array(rng, (4,), np.float32))
    assert gp.asarray(a) is a
    b = gp.asarray(a, copy=True)
    assert b is not a and b.data_ptr != a.data_ptr
    same(b.to_numpy(), a.to_numpy())
    with pytest.raises(ValueError, match="copy=False"):
        gp.asarray([1.0, 2.0], copy=False)
    with pytest.raises(ValueError, match="without a copy"):
        gp.asarray(a, dtype=gp.float64, copy=False)
    same(gp.asarray([[1, 2], [3, 4]]).to_numpy(), np.array([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match="without a copy"):
        a.__array__(copy=False)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dst", [gp.float32, gp.float16, gp.bfloat16, gp.int32, gp.uint8, gp.float8_e4m3fn, gp.bool_], ids=str)
def test_astype(rng, src, dst):
    host = random_array(rng, (257,), src)
    with np.errstate(all="ignore"):
        want = host.astype(dst)
    if np.dtype(src).kind == "f" or src in FLOAT_DTYPES:
        if np.dtype(dst).kind in "iub":
            # float -> integer is defined only for values in the target's range (C and
            # NumPy alike): negative values to unsigned types are not
            lo = 0 if np.dtype(dst).kind in "ub" else -100
            x = host.astype(np.float64)
            host = np.where((x >= lo) & (x < 100), host, np.zeros_like(host))
            want = host.astype(dst)
    same(gp.from_numpy(host).astype(dst).to_numpy(), want)


OPS = {"add": (lambda x, y: x + y), "sub": (lambda x, y: x - y), "mul": (lambda x, y: x * y), "div": (lambda x, y: x / y)}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_binary_same_dtype_matches_numpy(rng, dtype, op):
    if op == "sub" and dtype == gp.bool_:
        pytest.skip("NumPy rejects boolean subtract; tested in test_bool_subtract_is_an_error")
    a, b = random_array(rng, (1031,), dtype), random_array(rng, (1031,), dtype)
    if op == "div" and np.dtype(dtype).kind in "iub":
        b = np.where(b == 0, np.ones_like(b), b)
    with np.errstate(all="ignore"):
        want = OPS[op](a, b)
    got = OPS[op](gp.from_numpy(a), gp.from_numpy(b)).to_numpy()
    same(got, want)
    if dtype in FLOAT_DTYPES:
        # relative error against float64 on the same inputs: one rounding to dtype
        ref = OPS[op](a.astype(np.float64), b.astype(np.float64))
        eps = {
            gp.float8_e4m3fn: 2**-4,
            gp.float8_e5m2: 2**-3,
            gp.bfloat16: 2**-8,
            gp.float16: 2**-11,
            gp.float32: 2**-24,
            gp.float64: 2**-53,
        }[dtype]
        info = ml_dtypes.finfo(dtype)
        # normal range only: subnormals have fewer significant bits
        finite = np.isfinite(got.astype(np.float64)) & (np.abs(ref) >= float(info.smallest_normal)) & (np.abs(ref) <= float(info.max))
        rel = np.abs(got.astype(np.float64)[finite] - ref[finite]) / np.abs(ref[finite])
        assert rel.max() <= eps * 1.0001


@pytest.mark.parametrize(
    "sa,sb", [((4, 5), (5,)), ((4, 1), (1, 6)), ((3, 1, 5), (4, 1)), ((), (3, 2)), ((2, 3, 4, 5), (1, 1, 4, 1))], ids=str
)
@pytest.mark.parametrize("op", list(OPS))
def test_broadcasting(rng, sa, sb, op):
    a = random_array(rng, sa, np.float32)
    b = random_array(rng, sb, np.float32) + 10  # keep division away from zero
    same(OPS[op](gp.from_numpy(a), gp.from_numpy(b)).to_numpy(), OPS[op](a, b))
    same(OPS[op](gp.from_numpy(b), gp.from_numpy(a)).to_numpy(), OPS[op](b, a))


@pytest.mark.parametrize(
    "da,db", [(gp.int32, gp.float32), (gp.float16, gp.float32), (gp.uint8, gp.int8), (gp.bfloat16, gp.float16),
              (gp.int64, gp.bool_), (gp.bfloat16, gp.int32), (gp.float8_e4m3fn, gp.float32)], ids=str
)  # fmt: skip
def test_mixed_dtypes(rng, da, db):
    a, b = random_array(rng, (300,), da), random_array(rng, (300,), db)
    out_dt = gp.result_type(da, db)
    got = (gp.from_numpy(a) + gp.from_numpy(b)).to_numpy()
    same(got, a.astype(out_dt) + b.astype(out_dt))
    got = (gp.from_numpy(a) * gp.from_numpy(b)).to_numpy()
    same(got, a.astype(out_dt) * b.astype(out_dt))


@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.bfloat16, gp.int32, gp.uint8, gp.float64, gp.int64], ids=str)
@pytest.mark.parametrize("scalar", [3, 2.5, -1, True])
@pytest.mark.parametrize("op", list(OPS))
def test_python_scalars_both_sides(rng, dtype, scalar, op):
    if dtype == gp.uint8 and scalar == -1:
        with pytest.raises(OverflowError):
            OPS[op](gp.from_numpy(random_array(rng, (5,), dtype)), scalar)
        return
    a = random_array(rng, (1029,), dtype)
    if op == "div":
        a = np.where(a == 0, np.ones_like(a), a)
    # NumPy 2 casts a Python scalar to the array's dtype; ml_dtypes' bfloat16 does
    # not take part in that rule, so its reference uses the cast scalar explicitly.
    ref_scalar = dtype.type(scalar) if dtype == gp.bfloat16 else scalar
    with np.errstate(all="ignore"):
        same(OPS[op](gp.from_numpy(a), scalar).to_numpy(), OPS[op](a, ref_scalar))
        same(OPS[op](scalar, gp.from_numpy(a)).to_numpy(), OPS[op](ref_scalar, a))


def test_numpy_scalars_and_arrays(rng):
    a = random_array(rng, (10,), np.float16)
    same((gp.from_numpy(a) + np.float32(1.5)).to_numpy(), a + np.float32(1.5))
    b = random_array(rng, (10,), np.float16)
    same((b + gp.from_numpy(a)).to_numpy(), b + a)  # NumPy defers to GPUArray


def test_bool_subtract_is_an_error():
    t = gp.from_numpy(np.array([True, False]))
    with pytest.raises(TypeError, match="boolean subtract"):
        t - t
    with pytest.raises(TypeError, match="boolean subtract"):
        t - True


def test_broadcast_mismatch_and_unsupported_operands():
    with pytest.raises(ValueError, match="broadcast"):
        gp.zeros((3, 4)) + gp.zeros((5,))
    with pytest.raises(TypeError):
        gp.zeros((3,)) + "text"
    with pytest.raises(TypeError):
        gp.zeros((3,)) + None
    # a list is an array operand, as in NumPy
    np.testing.assert_array_equal((gp.zeros((3,)) + [1, 2, 3]).to_numpy(), [1.0, 2.0, 3.0])


def test_empty_results():
    a = gp.zeros((0, 3), gp.float32)
    assert (a + a).shape == (0, 3)
    assert (a * 2).shape == (0, 3)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 5, 1000, 4099, 100_003])
def test_sum(rng, dtype, n):
    a = random_array(rng, (n,), dtype)
    got = gp.from_numpy(a).sum()
    assert got.shape == () and got.dtype == np.sum(a).dtype
    if np.dtype(dtype).kind in "iub":
        assert got.item() == np.sum(a)
    else:
        ref = np.sum(a.astype(np.float64))
        scale = np.sum(np.abs(a.astype(np.float64)))
        got64 = float(got.astype(gp.float64).item())
        if abs(ref) > float(ml_dtypes.finfo(dtype).max):
            assert not np.isfinite(got64) or abs(got64) >= float(ml_dtypes.finfo(dtype).max)
            return
        # float32 (float64) tree accumulation, then one rounding to dtype
        acc_eps = 2**-53 if dtype == gp.float64 else 2**-24
        tol = 64 * acc_eps * scale + float(ml_dtypes.finfo(dtype).eps) * abs(ref)
        assert abs(got64 - ref) <= tol


def test_sum_accuracy_float32_large(rng):
    a = rng.standard_normal(1 << 22).astype(np.float32)
    got = gp.from_numpy(a).sum().item()
    ref = np.sum(a.astype(np.float64))
    # tree accumulation: error ~ eps * sqrt(n) * scale, far below naive eps * n
    assert abs(got - ref) <= 1e-5 * np.sum(np.abs(a))


def test_sum_dtype_argument(rng):
    a = random_array(rng, (1000,), np.int32)
    s = gp.from_numpy(a).sum(dtype=gp.float64)
    assert s.dtype == np.float64 and s.item() == float(a.sum())


def test_item_scalar_conversions():
    a = gp.full((1,), 2.5, gp.float32)
    assert a.item() == 2.5 and float(a) == 2.5 and int(a) == 2 and bool(a)
    with pytest.raises(ValueError, match="size 1"):
        gp.zeros(3).item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(gp.zeros(3))
    with pytest.raises(TypeError, match="unsized"):
        len(gp.zeros(()))
    assert len(gp.zeros((4, 2))) == 4


def test_repr_and_device():
    a = gp.from_numpy(np.array([1.5, 2.5], np.float32))
    r = repr(a)
    assert r.startswith("GPUArray([1.5, 2.5]") and "dtype=float32" in r
    assert str(a.device) in ("cpu", "cuda:0")
    assert a.device == gp.Device(gp.backend(), 0)


def test_nan_and_inf_propagate():
    a = gp.from_numpy(np.array([np.nan, np.inf, -np.inf, 1.0], np.float32))
    got = (a * 2).to_numpy()
    assert math.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf and got[3] == 2


def test_layout_properties_and_module_helpers(rng):
    host = random_array(rng, (3, 4, 5), np.float16)
    a = gp.from_numpy(host)
    assert a.strides == host.strides == (40, 10, 2)
    assert a.is_contiguous and a.itemsize == 2 and a.data_ptr != 0
    assert a.data_ptr % 256 == 0  # pool blocks are aligned for vector access
    gp.synchronize()
    same(gp.to_numpy(a), host)
    b = a.astype(gp.float16, copy=False)
    assert b is a
