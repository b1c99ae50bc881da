"""Hypothesis property tests: broadcasting, basic indexing and type promotion
agree with NumPy on generated shapes, indices and dtypes."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
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


_BINARY_EXACT = [
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "equal",
    "less",
    "greater_equal",
    "logical_xor",
    "bitwise_and",
    "floor_divide",
]


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(_BINARY_EXACT),
    da=st.sampled_from(NUMPY_DTYPES),
    scalar=st.one_of(st.booleans(), st.integers(-300, 300), st.floats(-100, 100, allow_nan=False, width=32)),
    left=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_weak_python_scalars_match_numpy(name, da, scalar, left, seed):
    # NumPy 2's rule for a Python scalar operand: the array's dtype decides
    # (an int that does not fit raises OverflowError), on either side
    x = _values((9,), da, seed)
    args = (scalar, x) if left else (x, scalar)
    with np.errstate(all="ignore"):
        try:
            want = getattr(np, name)(*args)
        except (TypeError, OverflowError) as e:
            with pytest.raises(type(e)):
                getattr(gp, name)(*((scalar, gp.from_numpy(x)) if left else (gp.from_numpy(x), scalar)))
            return
    got = getattr(gp, name)(*((scalar, gp.from_numpy(x)) if left else (gp.from_numpy(x), scalar)))
    assert got.dtype == want.dtype, (name, da, scalar)
    np.testing.assert_array_equal(got.to_numpy(), want)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
def test_integer_array_setitem_matches_numpy(data, shape):
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    # distinct positions (with repeats, which write lands is unspecified), negative ones too
    picks = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    idx = np.array([p - n if i % 2 else p for i, p in enumerate(picks)])
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    key = (slice(None),) * axis + (idx,)
    target_shape = x[key].shape
    value_shape = data.draw(hnp.broadcastable_shapes(target_shape, max_dims=len(target_shape)))
    assume(np.broadcast_shapes(value_shape, target_shape) == target_shape)  # v must broadcast *to* the selection
    v = (-np.arange(1, 1 + int(np.prod(value_shape)), dtype=np.float32)).reshape(value_shape)
    a = gp.from_numpy(x.copy())
    a[key] = gp.from_numpy(v)
    x[key] = v
    np.testing.assert_array_equal(a.to_numpy(), x)


@settings(max_examples=60, deadline=None)
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6), seed=st.integers(0, 2**32 - 1), scalar=st.booleans())
def test_boolean_mask_setitem_matches_numpy(shape, seed, scalar):
    rng = np.random.default_rng(seed)
    x = rng.integers(-9, 9, size=shape).astype(np.int16)
    mask = rng.integers(0, 2, size=shape).astype(bool)
    v = np.int16(42) if scalar else rng.integers(100, 200, size=int(mask.sum())).astype(np.int16)
    a = gp.from_numpy(x.copy())
    a[gp.from_numpy(mask)] = v if scalar else gp.from_numpy(v)
    x[mask] = v
    np.testing.assert_array_equal(a.to_numpy(), x)


def _advanced_key(data, shape):
    """A key with one to three integer arrays among ints and slices (NumPy's mixed indexing)."""
    entries = []
    n_arrays = 0
    for dim in shape:
        kind = data.draw(st.sampled_from(["array", "slice", "int"] if dim else ["slice"]))
        if kind == "array":
            n_arrays += 1
            entries.append(("array", dim))
        elif kind == "int":
            entries.append(data.draw(st.integers(-dim, dim - 1)))
        else:
            entries.append(data.draw(st.slices(dim)))
    assume(n_arrays >= 1)
    bshape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    key = []
    for e in entries:
        if isinstance(e, tuple):
            dim = e[1]
            key.append(np.asarray(data.draw(hnp.arrays(np.int64, bshape, elements=st.integers(-dim, dim - 1)))))
        else:
            key.append(e)
    for _ in range(data.draw(st.integers(0, 2))):  # new axes anywhere (they separate index arrays like ':')
        key.insert(data.draw(st.integers(0, len(key))), None)
    return tuple(key)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5))
def test_mixed_advanced_indexing_matches_numpy(data, shape):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    key = _advanced_key(data, shape)
    want = x[key]
    got = gp.from_numpy(x)[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.to_numpy(), want)
    # assignment: one value everywhere (repeated positions then agree), and an array when positions are distinct
    a, y = gp.from_numpy(x.copy()), x.copy()
    a[key] = -1
    y[key] = -1
    np.testing.assert_array_equal(a.to_numpy(), y)
    marks = np.zeros(shape, np.int32)
    np.add.at(marks, key, 1)
    if marks.max(initial=0) <= 1:
        v = (-np.arange(1, want.size + 1, dtype=np.int32)).reshape(want.shape)
        a, y = gp.from_numpy(x.copy()), x.copy()
        a[key] = gp.from_numpy(v)
        y[key] = v
        np.testing.assert_array_equal(a.to_numpy(), y)
