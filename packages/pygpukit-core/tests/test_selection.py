"""take, take_along_axis and integer-array indexing against NumPy."""

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, random_array


@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.int64, gp.uint8, gp.bfloat16, gp.bool_], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take(rng, dtype, axis):
    x = random_array(rng, (5, 6, 7), dtype)
    n = x.size if axis is None else x.shape[axis]
    idx = rng.integers(-n, n, size=(3, 4)).astype(np.int64)
    got = gp.take(gp.from_numpy(x), gp.from_numpy(idx), axis=axis).to_numpy()
    np.testing.assert_array_equal(got, np.take(x, idx, axis=axis))
    idx32 = idx.astype(np.int32)
    np.testing.assert_array_equal(gp.take(gp.from_numpy(x), idx32, axis=axis).to_numpy(), np.take(x, idx32, axis=axis))


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("axis", [None, 1])
def test_take_modes(rng, mode, axis):
    x = random_array(rng, (4, 9), np.float32)
    n = x.size if axis is None else x.shape[axis]
    idx = rng.integers(-3 * n, 3 * n, size=(5, 3)).astype(np.int64)  # most out of range
    got = gp.take(gp.from_numpy(x), gp.from_numpy(idx), axis=axis, mode=mode).to_numpy()
    np.testing.assert_array_equal(got, np.take(x, idx, axis=axis, mode=mode))
    with gp.graph() as g:  # no synchronization: capturable
        out = gp.take(gp.from_numpy(x), gp.from_numpy(idx), axis=axis, mode=mode)
    g.replay()
    np.testing.assert_array_equal(out.to_numpy(), np.take(x, idx, axis=axis, mode=mode))
    with pytest.raises(ValueError, match="mode must be"):
        gp.take(gp.from_numpy(x), idx, mode="nearest")
    with pytest.raises(IndexError, match="size 0"):
        gp.take(gp.zeros((0, 3)), [0], axis=0, mode=mode)


def test_integer_array_indexing(rng):
    x = random_array(rng, (6, 5, 4), np.float32)
    a = gp.from_numpy(x)
    idx = np.array([5, 0, -1, 2])
    np.testing.assert_array_equal(a[idx].to_numpy(), x[idx])
    np.testing.assert_array_equal(a[[1, 1, 3]].to_numpy(), x[[1, 1, 3]])
    np.testing.assert_array_equal(a[:, gp.from_numpy(np.array([4, 0]))].to_numpy(), x[:, [4, 0]])
    np.testing.assert_array_equal(a[..., [3, 2, 1]].to_numpy(), x[..., [3, 2, 1]])
    np.testing.assert_array_equal(a.T[[0, 2]].to_numpy(), x.T[[0, 2]])  # strided source
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 6"):
        a[[0, 6]]
    with pytest.raises(IndexError, match="out of bounds"):
        gp.take(a, [-7], axis=0)
    with pytest.raises(IndexError, match="integer type"):
        gp.take(a, np.array([0.5]), axis=0)
    np.testing.assert_array_equal(a[x > 0].to_numpy(), x[x > 0])  # a boolean mask
    with pytest.raises(IndexError, match="did not match"):
        a[x[0] > 0]
    # several index arrays, mixed with slices and ints (NumPy's placement rules)
    i, j = np.array([[0, 5], [-1, 2]]), np.array([4, 0])
    for key in ((i, j), (i, slice(1, 4), np.array([3, -1])), (slice(None), j, 1), (2, slice(None), np.array([0, 3])), (i, x[0, :, 0] > 0)):
        np.testing.assert_array_equal(a[key].to_numpy(), x[key])
    with pytest.raises(IndexError, match="could not be broadcast"):
        a[[0, 1], [0, 1, 2]]


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis(rng, axis):
    x = random_array(rng, (4, 5, 6), np.float64)
    a = gp.from_numpy(x)
    order = np.argsort(x, axis=axis)
    np.testing.assert_array_equal(gp.take_along_axis(a, gp.from_numpy(order), axis).to_numpy(), np.take_along_axis(x, order, axis))
    am = np.expand_dims(np.argmax(x, axis=axis), axis)
    got = gp.take_along_axis(a, a.argmax(axis=axis, keepdims=True), axis).to_numpy()
    np.testing.assert_array_equal(got, np.take_along_axis(x, am, axis))
    with pytest.raises(ValueError, match="same number of dimensions"):
        gp.take_along_axis(a, gp.from_numpy(order[0]), axis)


@pytest.mark.parametrize("dtype", [gp.bool_, gp.float32, gp.int8, gp.bfloat16], ids=str)
def test_nonzero_and_count_nonzero(rng, dtype):
    x = random_array(rng, (9, 1000), dtype)
    if np.dtype(dtype) != np.bool_:
        x = np.where(rng.random((9, 1000)) < 0.7, np.zeros_like(x), x)
    a = gp.from_numpy(x)
    got = gp.nonzero(a)
    want = np.nonzero(x)
    assert len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.to_numpy(), w)
    assert gp.count_nonzero(a).item() == np.count_nonzero(x)
    np.testing.assert_array_equal(gp.count_nonzero(a, axis=1).to_numpy(), np.count_nonzero(x, axis=1))
    np.testing.assert_array_equal(a[gp.from_numpy(x != 0)].to_numpy(), x[x != 0])
    (none,) = gp.nonzero(gp.zeros(5))
    assert none.shape == (0,)
    with pytest.raises(ValueError, match="0d arrays"):
        gp.nonzero(gp.zeros(()))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_setitem_integer_array(rng, dtype):
    x = random_array(rng, (6, 7, 5), dtype)
    g = gp.from_numpy(x.copy())
    idx = np.array([4, -1, 0])
    v = random_array(rng, (6, 3, 5), dtype)
    x[:, idx] = v
    g[:, gp.from_numpy(idx)] = gp.from_numpy(v)
    np.testing.assert_array_equal(g.to_numpy(), x)
    # broadcast values, a list index, the first axis, a scalar cast to the dtype
    x[[5, 2]] = v[0, :1]
    g[[5, 2]] = gp.from_numpy(v[0, :1])
    x[..., np.array([1, 3], np.int32)] = 1
    g[..., np.array([1, 3], np.int32)] = 1
    np.testing.assert_array_equal(g.to_numpy(), x)


def test_setitem_integer_array_strided_and_errors(rng):
    x = random_array(rng, (8, 9), np.float32)
    g = gp.from_numpy(x.copy())
    x.T[[0, 7]] = -3.5  # strided views take the write through a copy
    g.T[[0, 7]] = -3.5
    x[::2][:, [1, 3]] = 9.0
    g[::2][:, [1, 3]] = 9.0
    np.testing.assert_array_equal(g.to_numpy(), x)
    with pytest.raises(IndexError, match="out of bounds"):
        g[[0, 9]] = 1.0
    with pytest.raises(ValueError, match="could not be broadcast"):
        g[[0, 1]] = gp.ones((3, 9))
    with pytest.raises(IndexError, match="integer type"):
        g[gp.ones((2,))] = 1.0
    np.testing.assert_array_equal(g.to_numpy(), x)  # nothing written by the failed calls
    # a value read from the array itself is taken before the write
    h = np.arange(10.0)
    gh = gp.from_numpy(h.copy())
    h[[1, 2, 3]] = h[:3]
    gh[[1, 2, 3]] = gh[:3]
    np.testing.assert_array_equal(gh.to_numpy(), h)


@pytest.mark.parametrize("dtype", [np.float32, np.int16, gp.bfloat16, np.bool_], ids=str)
def test_setitem_boolean_mask(rng, dtype):
    x = random_array(rng, (7, 11), dtype)
    m = random_array(rng, (7, 11), np.bool_)
    g = gp.from_numpy(x.copy())
    x[m] = 1
    g[gp.from_numpy(m)] = 1
    np.testing.assert_array_equal(g.to_numpy(), x)
    v = random_array(rng, (int(m.sum()),), dtype)
    x[m] = v
    g[m] = gp.from_numpy(v)  # a NumPy mask works too
    np.testing.assert_array_equal(g.to_numpy(), x)
    xt, gt = x.T.copy(), gp.from_numpy(x).T  # strided target
    xt[m.T] = v
    gt[gp.from_numpy(m).T] = gp.from_numpy(v)
    np.testing.assert_array_equal(gt.to_numpy(), xt)


def test_setitem_boolean_mask_errors():
    g = gp.zeros((3, 4), gp.int32)
    m = gp.from_numpy(np.eye(3, 4, dtype=bool))
    with pytest.raises(ValueError, match="cannot assign 2 input values to the 3 output values"):
        g[m] = gp.from_numpy(np.array([1, 2], np.int32))
    with pytest.raises(IndexError, match="did not match"):
        g[gp.zeros((4,), gp.bool_)] = 1
    rows = np.array([True, False, True])  # a mask over the leading axis selects rows
    g[rows] = 5
    h = np.zeros((3, 4), np.int32)
    h[rows] = 5
    np.testing.assert_array_equal(g.to_numpy(), h)
    g[...] = 0
    g[m] = 2.7  # cast as NumPy's assignment casts
    np.testing.assert_array_equal(g.to_numpy(), np.eye(3, 4, dtype=np.int32) * 2)
