"""sort, argsort, topk, unique and searchsorted against NumPy (and torch.topk's
semantics): every dtype, any axis, non-contiguous inputs, NaN / inf / -0.0,
ties, empty and 0-d arrays, rows on both sides of the one-block limit (4096,
2048 for 8-byte keys) and of the radix-select limit of topk."""

import math

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, FLOAT_DTYPES, random_array
from pygpukit._backend import sort as sorting


def _ref(x: np.ndarray) -> np.ndarray:
    """What NumPy sorts for us: bfloat16 / float8 as float32 (exact), the rest as is."""
    return x.astype(np.float32) if x.dtype in (gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2) else x


def _values(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaN payloads
        return np.asarray(x).astype(np.float64) if x.dtype.kind not in "iub" else x


def _special(rng, shape, dtype) -> np.ndarray:
    """Random values with duplicates, and for floats NaN (both signs), +-inf, -0.0 and 0.0."""
    x = random_array(rng, shape, dtype)
    dt = np.dtype(dtype)
    if dt.kind in "iub" or x.size == 0:
        if dt.kind in "iu" and x.size >= 4:
            info = np.iinfo(dt)
            flat = x.reshape(-1)
            flat[rng.integers(0, x.size, 4)] = [info.min, info.max, info.min, 0]
        return x
    flat = x.reshape(-1)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, -0.0, 1.0, 1.0], dtype=np.float32)
    if dt == gp.float8_e4m3fn:  # no inf in e4m3fn
        specials = specials[np.isfinite(specials) | np.isnan(specials)]
    pos = rng.integers(0, x.size, size=min(x.size, 3 * specials.size))
    flat[pos] = np.resize(specials, pos.size).astype(dt)
    return x


def _stable_desc(x: np.ndarray, axis: int) -> np.ndarray:
    """NumPy reference of a stable descending argsort with NaN first: rank the values
    (NaNs share the top rank, -0.0 == 0.0), then stable-sort the negated ranks."""
    v = _values(_ref(x))
    _, inv = np.unique(v, return_inverse=True)  # NumPy 2: NaNs collapse
    return np.argsort(-inv.reshape(x.shape).astype(np.int64), axis=axis, kind="stable")


# -- the key transforms ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_key_transform(rng, dtype):
    """Value keys are a bijection that sorts like NumPy (NaN last); order keys map all NaNs
    to the top key and -0.0 to 0.0's; descending keys are the bitwise complements."""
    dt = np.dtype(dtype)
    u = sorting.key_info(dt).uint
    if dt == np.bool_:
        x = np.array([False, True])
    elif dt.itemsize <= 2:
        x = np.arange(2 ** (8 * dt.itemsize)).astype(u).view(dt)  # every bit pattern
    else:
        x = rng.integers(0, np.iinfo(u).max, size=20000, dtype=u, endpoint=True).view(dt)
        if dt.kind == "f":
            x[:8] = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], dtype=dt)
    vk = sorting.encode_keys(x, order=False)
    assert vk.dtype == u
    np.testing.assert_array_equal(sorting.decode_keys(vk, dt).view(u), np.asarray(x).view(u))
    assert np.unique(vk).size == x.size  # a bijection on these bit patterns
    ok = sorting.encode_keys(x, order=True)
    np.testing.assert_array_equal(sorting.encode_keys(x, order=True, descending=True), ~ok)
    np.testing.assert_array_equal(sorting.decode_keys(sorting.encode_keys(x, False, True), dt, True).view(u), np.asarray(x).view(u))
    v = _values(_ref(x))
    for keys in (vk, ok):
        s = v[np.argsort(keys, kind="stable")]
        nan = np.isnan(s) if s.dtype.kind == "f" else np.zeros(s.shape, bool)
        assert not np.any(nan[:-1] & ~nan[1:]), "NaN must sort last"
        assert np.all(np.diff(s[~nan]) >= 0)
    if dt.kind == "f" or dt in (gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2):
        nan = np.isnan(v)
        assert np.all(ok[nan] == np.iinfo(u).max) and np.all(ok[~nan] < np.iinfo(u).max)
        zeros = v == 0
        assert np.unique(ok[zeros]).size == 1
        # order keys are equal exactly when the values compare equal (or are both NaN)
        uv, inv = np.unique(v, return_inverse=True)
        assert np.unique(ok).size == uv.size
        np.testing.assert_array_equal(np.argsort(ok[np.unique(inv, return_index=True)[1]], kind="stable"), np.arange(uv.size))


# -- sort / argsort --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape, axis", [((40,), -1), ((5, 37), 0), ((5, 37), 1), ((3, 4, 6), 1), ((6, 3000), -1)])
def test_sort_argsort(rng, dtype, shape, axis):
    x = _special(rng, shape, dtype)
    a = gp.from_numpy(x)
    ref = _ref(x)
    got = gp.sort(a, axis=axis)
    assert got.dtype == a.dtype and got.shape == x.shape
    np.testing.assert_array_equal(_ref(got.to_numpy()), np.sort(ref, axis=axis, kind="stable"))
    # the sorted values are a permutation of the input's bits (-0.0 and NaN payloads kept)
    u = f"u{x.itemsize}"
    np.testing.assert_array_equal(np.sort(got.to_numpy().view(u), axis=axis, kind="stable"), np.sort(x.view(u), axis=axis, kind="stable"))
    idx = gp.argsort(a, axis=axis)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx.to_numpy(), np.argsort(ref, axis=axis, kind="stable"))


@pytest.mark.parametrize(
    "dtype", [gp.float32, gp.float16, gp.bfloat16, gp.int8, gp.uint64, gp.bool_, gp.float8_e4m3fn, gp.float64], ids=str
)
@pytest.mark.parametrize("shape, axis", [((9, 31), 1), ((9, 31), 0), ((2, 5000), -1)])
def test_descending(rng, dtype, shape, axis):
    x = _special(rng, shape, dtype)
    a = gp.from_numpy(x)
    want = _stable_desc(x, axis)
    np.testing.assert_array_equal(gp.argsort(a, axis=axis, descending=True).to_numpy(), want)
    got = gp.sort(a, axis=axis, descending=True, stable=False).to_numpy()
    np.testing.assert_array_equal(_ref(got), np.flip(np.sort(_ref(x), axis=axis, kind="stable"), axis=axis))  # NaN first


@pytest.mark.parametrize("n", [1, 2, 1000, 2048, 2049, 3000, 4096, 4097, 9000])
@pytest.mark.parametrize("dtype", [gp.float32, gp.int64, gp.float16], ids=str)
def test_row_lengths_and_ties(rng, n, dtype):
    """Row lengths around the one-block tiles; few distinct values, so stability matters."""
    x = rng.integers(-3, 4, size=(3, n)).astype(dtype)
    a = gp.from_numpy(x)
    np.testing.assert_array_equal(gp.argsort(a).to_numpy(), np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(gp.argsort(a, descending=True).to_numpy(), _stable_desc(x, -1))
    np.testing.assert_array_equal(gp.sort(a, descending=True).to_numpy(), np.sort(x, kind="stable")[:, ::-1])


def test_extremes_and_specials():
    i64 = np.array([0, np.iinfo(np.int64).max, -1, np.iinfo(np.int64).min, 1, np.iinfo(np.int64).min], np.int64)
    np.testing.assert_array_equal(gp.sort(gp.from_numpy(i64)).to_numpy(), np.sort(i64, kind="stable"))
    np.testing.assert_array_equal(gp.argsort(gp.from_numpy(i64)).to_numpy(), np.argsort(i64, kind="stable"))
    u64 = np.array([2**64 - 1, 0, 2**63, 2**63 - 1, 1], np.uint64)
    np.testing.assert_array_equal(gp.sort(gp.from_numpy(u64)).to_numpy(), np.sort(u64, kind="stable"))
    b = np.array([True, False, True, False, False])
    np.testing.assert_array_equal(gp.sort(gp.from_numpy(b)).to_numpy(), np.sort(b, kind="stable"))
    np.testing.assert_array_equal(gp.argsort(gp.from_numpy(b), descending=True).to_numpy(), [0, 2, 1, 3, 4])
    f = np.array([np.nan, 1.0, -0.0, np.inf, 0.0, -np.inf, -np.nan, -0.0, 2.0], np.float32)
    a = gp.from_numpy(f)
    np.testing.assert_array_equal(gp.argsort(a).to_numpy(), [5, 2, 4, 7, 1, 8, 3, 0, 6])  # zeros and NaNs keep their order
    np.testing.assert_array_equal(gp.argsort(a, descending=True).to_numpy(), [0, 6, 3, 8, 1, 2, 4, 7, 5])
    s = gp.sort(a).to_numpy()
    np.testing.assert_array_equal(s, np.sort(f, kind="stable"))
    assert list(np.signbit(s[1:4])) == [True, True, False]  # -0.0 before 0.0 (documented)
    assert np.isnan(gp.sort(a, descending=True).to_numpy()[:2]).all()


@pytest.mark.parametrize("fn", [gp.sort, gp.argsort])
def test_shapes_and_errors(rng, fn):
    x = random_array(rng, (4, 6, 5), np.float32)
    a = gp.from_numpy(x)
    np_fn = np.sort if fn is gp.sort else (lambda y, axis: np.argsort(y, axis=axis, kind="stable"))
    for view, ref in ((a.T, x.T), (a[:, ::2, 1:], x[:, ::2, 1:]), (a[::-1], x[::-1])):  # non-contiguous
        for axis in (0, 1, -1, None):
            np.testing.assert_array_equal(fn(view, axis=axis).to_numpy(), np_fn(ref, axis=axis))
    for shape, axis in (((0,), -1), ((3, 0), 1), ((3, 0), 0), ((0, 4), 1), ((0, 4), None)):
        e = np.zeros(shape, np.float32)
        got = fn(gp.from_numpy(e), axis=axis)
        assert got.shape == np_fn(e, axis=axis).shape and got.dtype == np_fn(e, axis=axis).dtype
    zero_d = gp.from_numpy(np.array(2.5, np.float32))
    with pytest.raises(np.exceptions.AxisError):
        fn(zero_d)
    np.testing.assert_array_equal(fn(zero_d, axis=None).to_numpy(), np_fn(np.array(2.5, np.float32), axis=None))
    with pytest.raises(np.exceptions.AxisError):
        fn(a, axis=3)
    with pytest.raises(TypeError, match="GPUArray"):
        fn(x)


# -- topk --------------------------------------------------------------------------------------


def _topk_ref(x, k, axis, largest):
    """torch.topk semantics with stable ties: the first k of the stable sort (descending if largest)."""
    order = _stable_desc(x, axis) if largest else np.argsort(_ref(x), axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16, gp.int32, gp.uint8, gp.float64, gp.bool_], ids=str)
@pytest.mark.parametrize("shape, k, axis", [((7, 50), 5, -1), ((50, 7), 7, 0), ((3, 10000), 40, -1), ((2, 9000), 1, 1), ((4, 4, 9), 0, 1)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(rng, dtype, shape, k, axis, largest):
    x = _special(rng, shape, dtype)
    if np.dtype(dtype).kind in "iu":
        x = (x % 7).astype(dtype)  # many ties
    a = gp.from_numpy(x)
    vals, idx = gp.topk(a, k, axis=axis, largest=largest)
    want_v, want_i = _topk_ref(x, k, axis, largest)
    assert vals.dtype == a.dtype and idx.dtype == np.int64 and vals.shape == want_v.shape
    np.testing.assert_array_equal(idx.to_numpy(), want_i)
    np.testing.assert_array_equal(_ref(vals.to_numpy()), _ref(want_v))
    uv, ui = gp.topk(a, k, axis=axis, largest=largest, sorted=False)  # same elements, any order
    np.testing.assert_array_equal(np.sort(ui.to_numpy(), axis=axis, kind="stable"), np.sort(want_i, axis=axis, kind="stable"))
    np.testing.assert_array_equal(_ref(np.take_along_axis(x, ui.to_numpy(), axis=axis)), _ref(uv.to_numpy()))


def test_topk_errors(rng):
    a = gp.from_numpy(random_array(rng, (3, 8), np.float32))
    for k in (-1, 9):
        with pytest.raises(ValueError, match="out of range"):
            gp.topk(a, k)
    with pytest.raises(TypeError):
        gp.topk(a, 1.5)
    with pytest.raises(np.exceptions.AxisError):
        gp.topk(a, 1, axis=2)
    v, i = gp.topk(a.T, 2, axis=1)  # non-contiguous input
    assert v.shape == (8, 2) and i.shape == (8, 2)


# -- unique ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 13), (3000,)])
def test_unique(rng, dtype, shape):
    x = _special(rng, shape, dtype)
    if np.dtype(dtype).kind not in "b":
        x = np.where(rng.random(shape) < 0.5, x, np.zeros_like(x))  # many duplicates
    a = gp.from_numpy(np.ascontiguousarray(x))
    ref = _ref(x)
    want = np.unique(ref, return_index=True, return_inverse=True, return_counts=True)
    got = gp.unique(a, return_index=True, return_inverse=True, return_counts=True)
    assert got[0].dtype == a.dtype
    np.testing.assert_array_equal(_ref(got[0].to_numpy()), want[0])
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == np.int64 and g.shape == w.shape
        np.testing.assert_array_equal(g.to_numpy(), w)
    np.testing.assert_array_equal(_ref(gp.unique(a).to_numpy()), want[0])
    _, c = gp.unique(a, return_counts=True)
    np.testing.assert_array_equal(c.to_numpy(), want[3])


def test_unique_details(rng):
    f = np.array([np.nan, 1.0, -0.0, 0.0, -np.nan, 1.0, np.nan], np.float32)
    u, i, inv, c = gp.unique(gp.from_numpy(f), return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(u.to_numpy(), [0.0, 1.0, np.nan])  # NumPy 2: one NaN
    np.testing.assert_array_equal(i.to_numpy(), [2, 1, 0])
    np.testing.assert_array_equal(inv.to_numpy(), [2, 1, 0, 0, 2, 1, 2])
    np.testing.assert_array_equal(c.to_numpy(), [2, 2, 3])
    x = random_array(rng, (6, 8), np.int16)
    inv = gp.unique(gp.from_numpy(x).T, return_inverse=True)[1]  # non-contiguous, inverse of the input's shape
    np.testing.assert_array_equal(inv.to_numpy(), np.unique(x.T, return_inverse=True)[1])
    zero_d = gp.unique(gp.from_numpy(np.array(3, np.int8)), return_inverse=True)
    assert zero_d[0].shape == (1,) and zero_d[1].shape == ()
    with pytest.raises(ValueError, match="axis=None"):
        gp.unique(gp.from_numpy(x), axis=0)
    with pytest.raises(TypeError):
        gp.unique(x)


# -- searchsorted ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(rng, dtype, side):
    hay = _special(rng, (300,), dtype)
    hay = hay[np.argsort(_ref(hay), kind="stable")]  # (NumPy puts bfloat16 NaNs elsewhere)
    hay_ref = _ref(hay)
    needles = _special(rng, (4, 25), dtype)
    needles.reshape(-1)[:5] = hay[[0, 7, 150, -1, 299]]
    got = gp.searchsorted(gp.from_numpy(hay), gp.from_numpy(needles), side=side)
    assert got.dtype == np.int64 and got.shape == needles.shape
    np.testing.assert_array_equal(got.to_numpy(), np.searchsorted(hay_ref, _ref(needles), side=side))
    np.testing.assert_array_equal(gp.searchsorted(gp.from_numpy(hay[:0]), gp.from_numpy(needles), side=side).to_numpy(), 0)


def test_searchsorted_details(rng):
    hay = np.array([-np.inf, -1.0, -0.0, 0.0, 2.0, 2.0, np.inf, np.nan], np.float32)
    a = gp.from_numpy(hay)
    for v in (0.0, -0.0, 2.0, np.nan, np.inf, 5.0, -5.0):
        for side in ("left", "right"):
            got = gp.searchsorted(a, v, side=side)
            assert got.shape == () and got.item() == np.searchsorted(hay, v, side=side)
    ints = np.array([1, 2, 100], np.int8)
    b = gp.from_numpy(ints)
    assert gp.searchsorted(b, 2.5).item() == 2  # compared in float64, as NumPy
    assert gp.searchsorted(b, 1000).item() == 3 and gp.searchsorted(b, -1000).item() == 0
    np.testing.assert_array_equal(gp.searchsorted(b, [[1, 2]], side="right").to_numpy(), [[1, 2]])
    unsorted = random_array(rng, (50,), np.float64)
    sorter = np.argsort(unsorted, kind="stable")
    v = random_array(rng, (20,), np.float64)
    got = gp.searchsorted(gp.from_numpy(unsorted), gp.from_numpy(v), sorter=gp.from_numpy(sorter))
    np.testing.assert_array_equal(got.to_numpy(), np.searchsorted(unsorted, v, sorter=sorter))
    strided = gp.from_numpy(np.sort(random_array(rng, (40,), np.float32), kind="stable"))[::2]
    np.testing.assert_array_equal(gp.searchsorted(strided, gp.from_numpy(v)).to_numpy(), np.searchsorted(strided.to_numpy(), v))
    with pytest.raises(ValueError, match="1-D"):
        gp.searchsorted(gp.from_numpy(np.ones((2, 2))), 1.0)
    with pytest.raises(ValueError, match="side"):
        gp.searchsorted(a, 1.0, side="middle")
    with pytest.raises(ValueError, match=r"sorter\.size"):
        gp.searchsorted(a, 1.0, sorter=[0, 1])
    with pytest.raises(TypeError, match="integers"):
        gp.searchsorted(a, 1.0, sorter=np.zeros(8))
    with pytest.raises(ValueError, match="out of range"):
        gp.searchsorted(a, 1.0, sorter=np.arange(1, 9))


@pytest.mark.gpu
def test_large_rows_gpu(rng):
    """The multi-pass radix sort and the radix select at sizes that take many blocks per row."""
    x = rng.standard_normal((1, 1 << 20)).astype(np.float32)
    x[0, rng.integers(0, x.size, 1000)] = np.nan
    a = gp.from_numpy(x)
    np.testing.assert_array_equal(gp.sort(a).to_numpy(), np.sort(x, kind="stable"))
    np.testing.assert_array_equal(gp.argsort(a).to_numpy(), np.argsort(x, kind="stable"))
    y = rng.integers(0, 1000, size=(64, 1 << 17)).astype(np.int32)
    vals, idx = gp.topk(gp.from_numpy(y), 50)
    want_v, want_i = _topk_ref(y, 50, -1, True)
    np.testing.assert_array_equal(idx.to_numpy(), want_i)
    np.testing.assert_array_equal(vals.to_numpy(), want_v)
    z = rng.standard_normal((300, 5000)).astype(np.float64)
    np.testing.assert_array_equal(gp.argsort(gp.from_numpy(z), axis=0).to_numpy(), np.argsort(z, axis=0, kind="stable"))
    assert math.isfinite(float(gp.sort(gp.from_numpy(z)).to_numpy()[0, 0]))


def test_dtypes_in_float_list():
    # every float dtype has a float key (guards _KEYS against a new float dtype)
    for dt in FLOAT_DTYPES:
        assert sorting.key_info(np.dtype(dt)).abs_max is not None
    assert ml_dtypes.finfo(gp.float8_e4m3fn).max == float(np.array([0x7E], np.uint8).view(gp.float8_e4m3fn)[0])
