"""Hypothesis property tests: broadcasting, basic indexing and type promotion
agree with NumPy on generated shapes, indices and dtypes."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pygpukit as gp

NUMPY_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return np.asarray(rng.integers(0, 2, size=shape)).astype(bool)
    if np.dtype(dtype).kind in "iu":
        return np.asarray(rng.integers(0, 20, size=shape)).astype(dtype)
    return np.asarray(rng.standard_normal(shape) * 4).astype(dtype)


@settings(max_examples=60, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=5), seed=st.integers(0, 2**32 - 1))
def test_broadcasting_matches_numpy(shapes, seed):
    sa, sb = shapes.input_shapes
    x, y = _values(sa, np.float32, seed), _values(sb, np.float32, seed + 1)
    got = (gp.from_numpy(x) * gp.from_numpy(y) + gp.from_numpy(x)).to_numpy()
    np.testing.assert_array_equal(got, x * y + x)
    assert got.shape == shapes.result_shape


@settings(max_examples=80, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6))
def test_basic_indexing_matches_numpy(data, shape):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    a = gp.from_numpy(x)
    want = x[index]
    got = a[index]
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got.to_numpy(), want)


@settings(max_examples=60, deadline=None)
@given(da=st.sampled_from(NUMPY_DTYPES), db=st.sampled_from(NUMPY_DTYPES), seed=st.integers(0, 2**32 - 1))
def test_promotion_matches_numpy(da, db, seed):
    assert gp.result_type(da, db) == np.result_type(da, db)
    x, y = _values((7,), da, seed), _values((7,), db, seed + 1)
    got = gp.from_numpy(x) + gp.from_numpy(y)
    with np.errstate(all="ignore"):
        want = x + y
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.to_numpy(), want)
