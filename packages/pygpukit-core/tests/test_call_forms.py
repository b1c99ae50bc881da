"""Every call form of an elementwise op (operator, function, ``out=``, in-place,
a Python scalar on either side, the unary operators) takes the contiguous fast
path where it can, and gives what the general path (``ufuncs.apply``) gives:
the same values and dtype, and the same errors where NumPy raises."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ufuncs

DTYPES = [np.float32, np.float16, gp.bfloat16, np.float64, np.int8, np.int64, np.uint8, np.bool_]
BINARY = ["add", "subtract", "multiply", "divide", "floor_divide", "power", "less", "maximum", "bitwise_and"]


def _array(dt, rng, shape=(5, 7)):
    if np.dtype(dt) == np.bool_:
        return gp.from_numpy(rng.integers(0, 2, shape).astype(bool))
    if np.dtype(dt).kind in "iu":
        return gp.from_numpy(rng.integers(1, 4, shape).astype(dt))
    return gp.from_numpy(rng.uniform(0.5, 2.0, shape).astype(dt))


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())


def _supported(uf, *args):
    try:
        ufuncs.apply(uf, args)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_binary_forms_match_the_general_path(name, dt):
    rng = np.random.default_rng(1)
    uf = getattr(gp, name)
    a, b = _array(dt, rng), _array(dt, rng)
    if not _supported(uf, a, b):
        with pytest.raises(TypeError):
            uf(a, b)
        return
    want = ufuncs.apply(uf, (a, b))
    _same(uf(a, b), want)
    out = gp.empty(want.shape, want.dtype)
    assert uf(a, b, out=out) is out
    _same(out, want)
    op = {"add": "__add__", "subtract": "__sub__", "multiply": "__mul__", "less": "__lt__"}.get(name)
    if op is not None:
        _same(getattr(a, op)(b), want)
    for s in (2, 1.5, True):
        if _supported(uf, a, s):
            _same(uf(a, s), ufuncs.apply(uf, (a, s)))
        if _supported(uf, s, a):
            _same(uf(s, a), ufuncs.apply(uf, (s, a)))


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_inplace_and_unary_operators(dt):
    rng = np.random.default_rng(2)
    a, b = _array(dt, rng), _array(dt, rng)
    if np.dtype(dt) != np.bool_:
        want = ufuncs.apply(gp.add, (a, b))
        c = a.copy()
        c += b
        _same(c, want)
        c = a.copy()
        c += 1
        _same(c, ufuncs.apply(gp.add, (a, 1), a.copy()))
        _same(-a, ufuncs.apply(gp.negative, (a,)))
    _same(abs(a), ufuncs.apply(gp.abs, (a,)))
    if np.dtype(dt).kind in "biu":
        _same(~a, ufuncs.apply(gp.invert, (a,)))
    if np.dtype(dt).kind == "f" or np.dtype(dt) == gp.bfloat16:
        _same(gp.exp(a), ufuncs.apply(gp.exp, (a,)))
        out = gp.empty(a.shape, np.float64)
        gp.exp(a, out=out)  # a wider out: the kernel for that output dtype
        _same(out, ufuncs.apply(gp.exp, (a,), gp.empty(a.shape, np.float64)))


def test_errors_are_numpys_in_every_form():
    a = gp.from_numpy(np.arange(6, dtype=np.int8))
    for call in (lambda: a + 1000, lambda: 1000 + a, lambda: gp.add(a, 1000), lambda: gp.divide(a, 1000)):
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            call()
    with pytest.raises(ValueError, match="negative integer powers"):
        a**-1
    f = gp.from_numpy(np.ones(6, np.float32))
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output from dtype\\('float32'\\) to dtype\\('int8'\\)"):
        gp.add(f, f, out=a)
    with pytest.raises(TypeError, match="add: out must be a GPUArray"):
        gp.add(f, f, out=np.empty(6, np.float32))
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        gp.add(f, f, out=gp.empty((3,), gp.float32))
    with pytest.raises(TypeError, match="unsupported operand"):
        f + object()
    with pytest.raises(TypeError, match="add: unsupported operand of type object"):
        gp.add(f, object())


def test_an_overlapping_out_reads_a_copy():
    x = np.arange(16, dtype=np.float32)
    a = gp.from_numpy(x)
    gp.add(a[:8], a[:8], out=a[4:12])  # contiguous views of one block, not the same view
    x[4:12] = x[:8] + x[:8]
    np.testing.assert_array_equal(a.to_numpy(), x)


def test_int64_against_uint64_compares_exactly():
    i = gp.from_numpy(np.array([-1, 2**62], np.int64))
    u = gp.from_numpy(np.array([2**63, 2**62], np.uint64))
    np.testing.assert_array_equal((i < u).to_numpy(), [True, False])
    np.testing.assert_array_equal(gp.less(u, i).to_numpy(), [False, False])
