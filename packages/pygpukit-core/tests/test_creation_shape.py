"""Creation (*_like, linspace, eye, identity) and shape functions (concatenate,
stack, split, flip, roll, tile, repeat, pad) against NumPy."""

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array


def test_like_functions(rng):
    a = gp.from_numpy(random_array(rng, (3, 4), np.float16))
    for f, want in ((gp.zeros_like, 0), (gp.ones_like, 1)):
        r = f(a)
        assert r.shape == (3, 4) and r.dtype == np.float16
        assert (r.to_numpy() == want).all()
    r = gp.full_like(a, 7, dtype=gp.int32, shape=(2,))
    assert r.dtype == np.int32 and r.to_numpy().tolist() == [7, 7]
    assert gp.empty_like(a).shape == (3, 4)
    with pytest.raises(TypeError):
        gp.zeros_like(np.zeros(3))


@pytest.mark.parametrize(
    "args,kw",
    [
        ((0, 1, 5), {}),
        ((2.5, -3, 7), {}),
        ((0, 10, 4), {"endpoint": False}),
        ((1, 2, 1), {}),
        ((0, 1, 0), {}),
        ((0, 1, 11), {"dtype": gp.float32}),
    ],
)
def test_linspace(args, kw):
    got = gp.linspace(*args, **kw).to_numpy()
    want = np.linspace(*args, **kw)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="non-negative"):
        gp.linspace(0, 1, -1)


@pytest.mark.parametrize("n,m,k", [(4, None, 0), (3, 5, 1), (5, 3, -2), (3, 3, 5), (4, 6, -1), (0, 3, 0)])
def test_eye_identity(n, m, k):
    np.testing.assert_array_equal(gp.eye(n, m, k, dtype=gp.int32).to_numpy(), np.eye(n, m, k, dtype=np.int32))
    np.testing.assert_array_equal(gp.identity(3).to_numpy(), np.identity(3))


def test_concatenate_stack_split(rng):
    x, y = random_array(rng, (2, 3), np.float32), random_array(rng, (4, 3), np.int32)
    a, b = gp.from_numpy(x), gp.from_numpy(y)
    got = gp.concatenate([a, b])
    assert got.dtype == np.float64  # float32 with int32 promotes as in NumPy
    np.testing.assert_array_equal(got.to_numpy(), np.concatenate([x, y]))
    np.testing.assert_array_equal(gp.concatenate([a.T, b.T], axis=1).to_numpy(), np.concatenate([x.T, y.T], axis=1))
    np.testing.assert_array_equal(gp.concatenate([a, b], axis=None).to_numpy(), np.concatenate([x, y], axis=None))
    np.testing.assert_array_equal(gp.stack([a, a * 2], axis=1).to_numpy(), np.stack([x, x * 2], axis=1))
    parts = gp.split(gp.from_numpy(y), 2)
    for p, w in zip(parts, np.split(y, 2)):
        np.testing.assert_array_equal(p.to_numpy(), w)
    parts = gp.split(gp.from_numpy(y), [1, 3], axis=0)
    for p, w in zip(parts, np.split(y, [1, 3], axis=0)):
        np.testing.assert_array_equal(p.to_numpy(), w)
    with pytest.raises(ValueError, match="must match exactly"):
        gp.concatenate([a, b], axis=1)
    with pytest.raises(ValueError, match="same shape"):
        gp.stack([a, b])
    with pytest.raises(ValueError, match="equal division"):
        gp.split(a, 3, axis=1 - 1)


def test_flip_roll_tile_repeat_pad(rng):
    x = random_array(rng, (3, 4, 2), np.int64)
    a = gp.from_numpy(x)
    np.testing.assert_array_equal(gp.flip(a).to_numpy(), np.flip(x))
    np.testing.assert_array_equal(gp.flip(a, 1).to_numpy(), np.flip(x, 1))
    for shift, axis in ((1, 0), (-3, 1), (7, None), (0, 2)):
        np.testing.assert_array_equal(gp.roll(a, shift, axis).to_numpy(), np.roll(x, shift, axis))
    for reps in (2, (2, 1), (1, 2, 3), (2, 1, 1, 2)):
        np.testing.assert_array_equal(gp.tile(a, reps).to_numpy(), np.tile(x, reps))
    for axis in (None, 0, 1, -1):
        np.testing.assert_array_equal(gp.repeat(a, 3, axis).to_numpy(), np.repeat(x, 3, axis))
    for width in (1, ((1, 2), (0, 1), (3, 0))):
        np.testing.assert_array_equal(gp.pad(a, width, constant_values=9).to_numpy(), np.pad(x, width, constant_values=9))
    with pytest.raises(ValueError, match="negative"):
        gp.pad(a, -1)
    with pytest.raises(ValueError, match="non-negative int"):
        gp.repeat(a, [1, 2])
