"""softmax, log_softmax, logsumexp against scipy.special's formulas in float64 NumPy; std against NumPy."""

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array
from pygpukit._backend.cuda.softmax import SPLIT_THREADS, SPLIT_VECS, max_items, row_plan, split_chunks

FUNCS = ["softmax", "log_softmax", "logsumexp"]


@pytest.fixture(autouse=True)
def poisoned_pool():
    """Leave freed pool blocks full of 7e37 (garbage in any dtype): the pool hands them out
    again, so an output element that a kernel forgets to write fails the comparison."""
    for n in (1 << 10, 1 << 14, 1 << 18, 1 << 21):
        gp.full((n,), 7e37, gp.float32)


def _max_keep(x: np.ndarray, axis) -> np.ndarray:
    return np.max(x, axis=axis, keepdims=True)


def ref(name: str, x: np.ndarray, axis):
    """scipy.special.softmax / log_softmax / logsumexp, written out (scipy is not a test dependency)."""
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if name == "softmax":
            e = np.exp(x - _max_keep(x, axis))
            return e / np.sum(e, axis=axis, keepdims=True)
        if name == "log_softmax":
            m = _max_keep(x, axis)
            m = np.where(np.isfinite(m), m, 0)
            tmp = x - m
            return tmp - np.log(np.sum(np.exp(tmp), axis=axis, keepdims=True))
        if math.prod(x.shape[a] for a in (range(x.ndim) if axis is None else np.atleast_1d(axis))) == 0:
            return np.full(np.sum(x, axis=axis).shape, -np.inf)
        m = _max_keep(x, axis)
        m = np.where(np.isfinite(m), m, 0)
        return np.asarray(np.log(np.sum(np.exp(x - m), axis=axis)) + np.squeeze(m, axis=axis))


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or dtype in (gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2)


def call(name: str, a, axis):
    return getattr(gp, name)(a, axis=axis)


def tolerance(out_dt: np.dtype, want: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(reference, rtol, atol) for a result of dtype ``out_dt`` against the float64 ``want``."""
    if out_dt == np.float64:
        return want, 1e-12, 1e-12  # float64 math: a few ulp
    if out_dt == np.float32:
        # float32 exp/log (2 ulp each) and float32 sums: partial sums of up to K/32 terms run
        # in sequence (column kernel), so the relative error of a sum grows like K * 6e-8 at
        # worst; log_softmax turns it into absolute error
        return want, 2e-5, 2e-5
    # one rounding to the small float, after float32 math that can land on the other side
    # of a rounding boundary: one ulp (eps relative), or the subnormal spacing
    fi = ml_dtypes.finfo(out_dt)
    return want.astype(out_dt).astype(np.float64), float(fi.eps), float(fi.smallest_subnormal)


def check(got: gp.GPUArray, want: np.ndarray, dtype) -> None:
    """``want`` is the float64 result; ``got`` was computed in float32 (float64 for
    float64 and integers) and rounded once to ``dtype`` (float64 for integers)."""
    out_dt = np.dtype(dtype) if _is_float(dtype) else np.dtype(np.float64)
    g = got.to_numpy()
    assert g.dtype == out_dt and g.shape == want.shape
    ref_, rtol, atol = tolerance(out_dt, want)
    np.testing.assert_allclose(g.astype(np.float64), ref_, rtol=rtol, atol=atol, equal_nan=False)


DTYPES = [gp.float32, gp.float64, gp.float16, gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2, gp.int32, gp.uint8, gp.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", FUNCS)
def test_dtypes_and_axes(rng, name, dtype):
    host = random_array(rng, (6, 7, 9), dtype)
    if _is_float(dtype):
        host = (host.astype(np.float32) / 2).astype(dtype)  # softmax of fp8 values: keep outputs above the subnormals
    a = gp.from_numpy(host)
    for axis in (-1, 0, 1, (0, 2), (1, 2), (0, 1, 2), None, ()):
        check(call(name, a, axis), ref(name, host, axis), dtype)


@pytest.mark.parametrize("name", FUNCS)
def test_strided_and_transposed_inputs(rng, name):
    host = random_array(rng, (8, 10, 12), np.float32)
    a = gp.from_numpy(host)
    views = [
        (a.transpose(2, 0, 1), host.transpose(2, 0, 1)),  # dense, not C order
        (a[::2, :, 1::3], host[::2, :, 1::3]),  # gaps
        (a.T, host.T),
    ]
    for v, h in views:
        for axis in (0, 1, -1, (0, 2), None):
            check(call(name, v, axis), ref(name, h, axis), gp.float32)


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16, gp.float64], ids=str)
@pytest.mark.parametrize("k", [1, 3, 31, 33, 1000, 4097, 8192, 16384, 16385, 40000])
def test_row_lengths(rng, dtype, k):
    # On a GPU: rows of one thread up to 512 threads, vector and scalar loads (odd k),
    # and the split path for rows beyond the register capacity (16384 floats, 8192 doubles).
    m = 3 if k > 4096 else 37
    host = (rng.standard_normal((m, k)) * 4).astype(dtype)
    a = gp.from_numpy(host)
    for name in FUNCS:
        check(call(name, a, -1), ref(name, host, -1), dtype)
    offset = a.reshape(-1)[1:]  # rows that start off the 16-byte alignment
    h = host.reshape(-1)[1:]
    check(gp.softmax(offset, axis=0), ref("softmax", h, 0), dtype)


@pytest.mark.parametrize("shape", [(50, 3), (300, 2200), (3, 100, 800), (300, 40), (5, 70, 2), (2, 5000, 3), (7000, 64)])
def test_columns(rng, shape):
    # The reduced axis has contiguous axes after it: on a GPU the column kernel (short
    # axes, or enough columns), else rows of a transposed copy.
    host = (rng.standard_normal(shape) * 4).astype(np.float32)
    a = gp.from_numpy(host)
    for name in FUNCS:
        check(call(name, a, 1 if len(shape) == 3 else 0), ref(name, host, 1 if len(shape) == 3 else 0), gp.float32)


def test_few_long_rows(rng):
    # On a GPU: rows that fit in registers but too few to fill it go through the split kernels.
    host = (rng.standard_normal((64, 16384)) * 3).astype(np.float32)
    a = gp.from_numpy(host)
    for name in FUNCS:
        check(call(name, a, -1), ref(name, host, -1), gp.float32)


def test_large_logsumexp_all(rng):
    host = (rng.standard_normal(300_000) * 3).astype(np.float32)
    check(gp.logsumexp(gp.from_numpy(host)), ref("logsumexp", host, None), gp.float32)
    big = gp.from_numpy(host.reshape(3, 100_000))
    check(gp.logsumexp(big, axis=1, keepdims=True), np.expand_dims(ref("logsumexp", host.reshape(3, -1), 1), 1), gp.float32)


SPECIAL = np.array(
    [
        [-np.inf, -np.inf, -np.inf],
        [np.inf, 1.0, 2.0],
        [np.inf, np.inf, 0.0],
        [np.inf, -np.inf, 3.0],
        [np.nan, 1.0, 2.0],
        [np.nan, np.inf, -np.inf],
        [1.0, -np.inf, -np.inf],
        [1000.0, 999.0, -1000.0],  # no overflow
        [-1000.0, -1001.0, -1002.0],  # no underflow to log(0)
    ]
)


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.bfloat16, gp.float16], ids=str)
@pytest.mark.parametrize("name", FUNCS)
def test_special_values(name, dtype):
    host = SPECIAL if dtype in (gp.float32, gp.float64) else SPECIAL[:7]  # 1000 overflows float16
    host = host.astype(dtype)
    for width in (3, 40):  # tiled: a special value among many ordinary ones
        h = np.concatenate([host, np.tile(np.array([-5.0, -6.0], dtype=host.dtype), (len(host), (width - 3) // 2))], axis=1)
        want, rtol, atol = tolerance(np.dtype(dtype), ref(name, h, -1))
        got = call(name, gp.from_numpy(h), -1).to_numpy().astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        got0 = call(name, gp.from_numpy(np.ascontiguousarray(h.T)), 0).to_numpy().astype(np.float64)  # the column kernel
        np.testing.assert_allclose(got0, want.T if name != "logsumexp" else want, rtol=rtol, atol=atol, equal_nan=True)
        assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all()


def test_documented_special_cases():
    ninf = gp.from_numpy(np.full((2, 4), -np.inf, np.float32))
    assert np.isnan(gp.softmax(ninf).to_numpy()).all()  # as scipy and torch
    assert np.isnan(gp.log_softmax(ninf).to_numpy()).all()
    assert (gp.logsumexp(ninf, axis=1).to_numpy() == -np.inf).all()
    assert gp.logsumexp(gp.from_numpy(np.array([1.0, np.inf]))).item() == np.inf
    assert np.isnan(gp.logsumexp(gp.from_numpy(np.array([np.inf, np.nan]))).item())
    assert gp.logsumexp(gp.zeros((0,), gp.float32)).item() == -np.inf
    e = gp.logsumexp(gp.zeros((2, 0, 3), gp.float32), axis=1)
    assert e.shape == (2, 3) and (e.to_numpy() == -np.inf).all()


def test_shapes_dtypes_and_empty():
    a = gp.from_numpy(np.arange(12, dtype=np.int64).reshape(3, 4))
    assert gp.softmax(a).dtype == np.float64 and gp.logsumexp(a).dtype == np.float64
    assert gp.softmax(gp.zeros((3,), gp.float16)).dtype == np.float16
    np.testing.assert_allclose(gp.softmax(gp.zeros((4,), gp.bfloat16)).to_numpy().astype(np.float32), 0.25)
    assert gp.logsumexp(a, axis=(0, 1), keepdims=True).shape == (1, 1)
    assert gp.logsumexp(a, axis=0, keepdims=True).shape == (1, 4)
    s = gp.from_numpy(np.array(2.5))
    assert gp.softmax(s, axis=None).item() == 1.0 and gp.logsumexp(s).item() == 2.5
    assert gp.log_softmax(s, axis=()).item() == 0.0
    for f in (gp.softmax, gp.log_softmax):
        z = f(gp.zeros((3, 0), gp.float32))
        assert z.shape == (3, 0) and z.dtype == np.float32
        assert f(gp.zeros((0, 5), gp.float32), axis=1).shape == (0, 5)
    assert gp.logsumexp(gp.zeros((0, 5), gp.float32), axis=1).shape == (0,)


def test_errors():
    a = gp.zeros((2, 3), gp.float32)
    for f in (gp.softmax, gp.log_softmax, gp.logsumexp):
        with pytest.raises(np.exceptions.AxisError):
            f(a, axis=2)
        with pytest.raises(ValueError, match="duplicate"):
            f(a, axis=(1, 1))
        with pytest.raises(TypeError):
            f(np.zeros(3))
        with pytest.raises(TypeError):
            f(a, axis=1.5)
    with pytest.raises(np.exceptions.AxisError):
        gp.softmax(gp.from_numpy(np.array(1.0)))  # axis=-1 of a 0-d array


def test_row_plan_and_chunks():
    # what the CUDA backend launches: the row fits in tpr * nv * vec values, nv a power of two within
    # the register budget, tpr a power of two up to 512; None beyond 16384 floats / 8192 doubles
    for comp, limit in ((gp.float32, 16384), (gp.float64, 8192)):
        for vec in (1, 2, 4, 8):
            for k in (1, 2, 7, 8, 100, 1024, 4096, 8191, 8192, 16383, 16384, 16385, 100000):
                if k % vec:
                    continue
                items = max_items(np.dtype(comp))
                plan = row_plan(k, vec, np.dtype(comp))
                if k > limit:
                    assert plan is None
                    continue
                tpr, nv = plan
                assert tpr * nv * vec >= k and nv * vec <= items
                assert tpr & (tpr - 1) == 0 and nv & (nv - 1) == 0 and tpr <= 512
                assert tpr == 1 or (tpr // 2) * items < k  # the fewest threads that hold the row
    assert row_plan(8192, 8, np.dtype(np.float32)) == (256, 4)  # the benchmark's bfloat16 rows
    assert row_plan(8192, 4, np.dtype(np.float32)) == (256, 8)  # and float32 rows
    for m, nvec in ((1, 10**6), (1, 3000), (8192, 2048), (3, 70000), (1000, 5000), (1, 1)):
        c = split_chunks(m, nvec, 132)
        cv = -(-nvec // c)
        assert 1 <= c <= nvec and cv <= SPLIT_VECS
        assert m * c >= 264 or cv <= 2 * SPLIT_THREADS or c == nvec  # two blocks per SM when the rows allow it


def test_logsumexp_precision_large_offsets():
    x = np.array([1e4, 1e4 + 1e-3, 1e4 - 2.0], np.float64)
    np.testing.assert_allclose(gp.logsumexp(gp.from_numpy(x)).item(), ref("logsumexp", x, None), rtol=1e-15)
    y = np.array([[1e-10, 2e-10]], np.float64)
    np.testing.assert_allclose(gp.log_softmax(gp.from_numpy(y)).to_numpy(), ref("log_softmax", y, -1), rtol=1e-14)


# -- std (pygpukit.reductions) ------------------------------------------------


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.float16, gp.bfloat16, gp.int32, gp.uint8, gp.bool_], ids=str)
def test_std(rng, dtype):
    host = random_array(rng, (6, 5, 7), dtype)
    a = gp.from_numpy(host)
    h64 = host.astype(np.float64)
    out_dt = np.dtype(dtype) if _is_float(dtype) else np.dtype(np.float64)
    for axis in (None, 0, -1, (0, 2)):
        for ddof in (0, 1, 3):
            for keepdims in (False, True):
                got = gp.std(a, axis=axis, ddof=ddof, keepdims=keepdims)
                want = np.std(h64, axis=axis, ddof=ddof, keepdims=keepdims)
                assert got.dtype == out_dt and got.shape == want.shape
                tol = 1e-12 if out_dt == np.float64 else (1e-5 if out_dt == np.float32 else float(ml_dtypes.finfo(out_dt).eps))
                np.testing.assert_allclose(got.to_numpy().astype(np.float64), want, rtol=tol)
    m = a.std(axis=1, ddof=1)
    np.testing.assert_allclose(m.to_numpy().astype(np.float64), np.std(h64, axis=1, ddof=1), rtol=1e-2)
    d = gp.std(a, axis=0, dtype=gp.float64)
    assert d.dtype == np.float64
    np.testing.assert_allclose(d.to_numpy(), np.std(h64, axis=0), rtol=1e-12)


def test_std_strided_and_degenerate(rng):
    host = random_array(rng, (9, 8), np.float32)
    v = gp.from_numpy(host)[::2, 1::3].T
    np.testing.assert_allclose(gp.std(v, axis=1).to_numpy(), np.std(host[::2, 1::3].T, axis=1), rtol=1e-5)
    assert gp.std(gp.from_numpy(np.full((4,), 3.25, np.float32))).item() == 0.0
    const = np.full((9, 2), 1.5, np.float32)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # "Degrees of freedom <= 0 for slice"
        want = np.std(np.concatenate([host, const], axis=1), axis=0, ddof=9)  # inf, and nan where the variance is 0
    np.testing.assert_array_equal(gp.std(gp.from_numpy(np.concatenate([host, const], axis=1)), axis=0, ddof=9).to_numpy(), want)
    assert gp.var(gp.from_numpy(host), ddof=100).item() == np.inf
    assert np.isnan(gp.std(gp.zeros((0, 3), gp.float32), axis=0).to_numpy()).all()
    with pytest.raises(TypeError):
        gp.std(host)
