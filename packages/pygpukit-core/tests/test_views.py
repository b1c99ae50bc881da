"""Views without copying: basic indexing, reshape, transpose, squeeze, broadcast_to;
strided arrays through every op; __setitem__ with broadcasting."""

import random

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, random_array


def _random_key(r: random.Random, ndim: int):
    items = []
    for _ in range(r.randint(0, ndim)):
        c = r.random()
        if c < 0.3:
            items.append(r.randint(-2, 1))
        elif c < 0.85:
            items.append(slice(r.choice([None, -3, 0, 1, 2]), r.choice([None, -1, 2, 4, 10]), r.choice([None, 1, 2, -1, -2, 3])))
        else:
            items.append(None)
    if r.random() < 0.3:
        items.insert(r.randint(0, len(items)), Ellipsis)
    return tuple(items)


def test_basic_indexing_matches_numpy_and_shares_memory(rng):
    host = random_array(rng, (4, 5, 6), np.float32)
    a = gp.from_numpy(host)
    r = random.Random(7)
    checked = 0
    for _ in range(300):
        key = _random_key(r, 3)
        try:
            want = host[key]
        except IndexError:
            with pytest.raises(IndexError):
                a[key]
            continue
        v = a[key]
        assert v.shape == np.shape(want)
        np.testing.assert_array_equal(v.to_numpy(), want)
        if v.size:
            assert a.data_ptr <= v.data_ptr < a.data_ptr + a.nbytes  # a view, not a copy
        checked += 1
    assert checked > 150


def test_index_errors():
    a = gp.zeros((3, 4), gp.float32)
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 4"):
        a[0, 4]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        a[..., ...]
    with pytest.raises(IndexError, match="only integers, slices"):
        a[1.5]
    np.testing.assert_array_equal(a[[0, 1], 1:].to_numpy(), np.zeros((2, 3), np.float32))  # mixed advanced and basic
    np.testing.assert_array_equal(a[[0, 1], None].to_numpy(), np.zeros((2, 1, 4), np.float32))  # with newaxis


@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.int64, gp.bfloat16, gp.uint8], ids=str)
def test_ops_on_strided_views(rng, dtype):
    host = random_array(rng, (6, 7, 5), dtype)
    b_host = random_array(rng, (4, 8), dtype)
    a = gp.from_numpy(host)
    b = gp.from_numpy(b_host)
    va, hva = a[::2, ::-1, 1:], host[::2, ::-1, 1:]
    vb, hvb = b.T[1:], b_host.T[1:]
    np.testing.assert_array_equal((va + vb).to_numpy(), hva + hvb)
    np.testing.assert_array_equal((va * 3).to_numpy(), hva * dtype.type(3))
    np.testing.assert_array_equal(va.copy().to_numpy(), hva)
    np.testing.assert_array_equal(va.astype(gp.float64).to_numpy(), hva.astype(np.float64))
    if np.dtype(dtype).kind in "iu":
        assert va.sum().item() == hva.sum()
    else:
        np.testing.assert_allclose(float(va.sum().astype(gp.float64).item()), hva.astype(np.float64).sum(), rtol=1e-2, atol=1e-2)


def test_misaligned_contiguous_views(rng):
    host = random_array(rng, (1001,), np.float32)
    a = gp.from_numpy(host)
    np.testing.assert_array_equal((a[1:] + a[:-1]).to_numpy(), host[1:] + host[:-1])
    np.testing.assert_array_equal((a[3:] * 2.0).to_numpy(), host[3:] * np.float32(2.0))


@pytest.mark.parametrize(
    "shape,new",
    [((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)), ((24,), (2, 3, 4)), ((2, 3, 4), (2, 1, 12, 1)), ((0, 3), (3, 0))],
)
def test_reshape(rng, shape, new):
    host = random_array(rng, shape, np.int32)
    a = gp.from_numpy(host)
    v = a.reshape(new)
    np.testing.assert_array_equal(v.to_numpy(), host.reshape(new))
    if host.size:
        assert v.data_ptr == a.data_ptr  # contiguous input: always a view
    np.testing.assert_array_equal(gp.reshape(a, new).to_numpy(), host.reshape(new))


def test_reshape_of_strided_views(rng):
    host = random_array(rng, (4, 6, 5), np.float32)
    a = gp.from_numpy(host)
    t = a.transpose(1, 0, 2)  # (6, 4, 5)
    v = t.reshape(6, 4, 5, 1)  # splitting/adding unit axes keeps a view
    assert v.data_ptr == a.data_ptr and not v.is_contiguous
    np.testing.assert_array_equal(v.to_numpy(), host.transpose(1, 0, 2).reshape(6, 4, 5, 1))
    c = t.reshape(24, 5)  # merging axes 0 and 1 of the transpose needs a copy
    assert c.is_contiguous and c.data_ptr != a.data_ptr
    np.testing.assert_array_equal(c.to_numpy(), host.transpose(1, 0, 2).reshape(24, 5))
    np.testing.assert_array_equal(t.reshape(-1).to_numpy(), host.transpose(1, 0, 2).reshape(-1))
    with pytest.raises(ValueError, match="cannot reshape"):
        a.reshape(7, -1)
    with pytest.raises(ValueError, match="one unknown dimension"):
        a.reshape(-1, -1)


def test_transpose_swapaxes_squeeze_expand_broadcast(rng):
    host = random_array(rng, (2, 1, 3, 4), np.float64)
    a = gp.from_numpy(host)
    np.testing.assert_array_equal(a.T.to_numpy(), host.T)
    np.testing.assert_array_equal(a.transpose(2, 0, 3, 1).to_numpy(), host.transpose(2, 0, 3, 1))
    np.testing.assert_array_equal(gp.permute_dims(a, (3, 2, 1, 0)).to_numpy(), np.permute_dims(host, (3, 2, 1, 0)))
    np.testing.assert_array_equal(gp.swapaxes(a, 0, -1).to_numpy(), np.swapaxes(host, 0, -1))
    np.testing.assert_array_equal(a.squeeze().to_numpy(), host.squeeze())
    np.testing.assert_array_equal(gp.squeeze(a, 1).to_numpy(), host.squeeze(1))
    np.testing.assert_array_equal(gp.expand_dims(a, (0, -1)).to_numpy(), np.expand_dims(host, (0, -1)))
    b = gp.from_numpy(host[0, 0])
    np.testing.assert_array_equal(gp.broadcast_to(b, (5, 3, 4)).to_numpy(), np.broadcast_to(host[0, 0], (5, 3, 4)))
    np.testing.assert_array_equal(a.ravel().to_numpy(), host.ravel())
    f = a.flatten()
    assert f.data_ptr != a.data_ptr
    np.testing.assert_array_equal(gp.ascontiguousarray(a.T).to_numpy(), np.ascontiguousarray(host.T))
    with pytest.raises(ValueError, match="size not equal to one"):
        a.squeeze(0)
    with pytest.raises(ValueError, match="axes don't match"):
        a.transpose(0, 1)
    with pytest.raises(np.exceptions.AxisError):
        a.swapaxes(0, 9)
    with pytest.raises(ValueError, match="broadcast"):
        gp.broadcast_to(b, (5, 4, 4))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_setitem(rng, dtype):
    host = random_array(rng, (5, 6), dtype)
    a = gp.from_numpy(host)
    want = host.copy()
    a[1:4, ::2] = 1
    want[1:4, ::2] = 1
    row = random_array(rng, (6,), dtype)
    a[0] = gp.from_numpy(row)
    want[0] = row
    col = random_array(rng, (5, 1), np.float64)
    if np.dtype(dtype).kind in "ub":
        col = np.abs(col)  # negative float -> unsigned is undefined (C and NumPy alike)
    with np.errstate(all="ignore"):
        a[:, -1:] = col  # a NumPy array, cast to dtype
        want[:, -1:] = col.astype(dtype)
    np.testing.assert_array_equal(a.to_numpy().astype(np.float64), want.astype(np.float64))


def test_setitem_overlapping_and_errors(rng):
    host = random_array(rng, (10,), np.int32)
    a = gp.from_numpy(host)
    a[1:] = a[:-1]  # overlapping source and target: NumPy semantics (source read first)
    want = host.copy()
    want[1:] = host[:-1]
    np.testing.assert_array_equal(a.to_numpy(), want)
    with pytest.raises(ValueError, match="could not broadcast"):
        a[:3] = gp.zeros(4, gp.int32)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, gp.bfloat16], ids=str)
def test_copy_is_bit_exact(dtype):
    # NaN payloads and -0.0 survive a copy of a strided view (no round trip through float)
    bits = np.array([0x7E01, 0xFE42, 0x8000, 0x3C00, 0x7C01, 0xFFFF], np.uint16)
    host = bits.astype(np.uint32) << 16 | 0x1234 if np.dtype(dtype).itemsize == 4 else bits
    x = np.repeat(host.view(dtype)[None], 3, axis=0)
    got = gp.from_numpy(x).T.copy().to_numpy()
    np.testing.assert_array_equal(got.view(host.dtype), x.T.view(host.dtype))


def test_size_one_dimensions_do_not_break_contiguity():
    # as NumPy's C_CONTIGUOUS flag: the stride of a length-1 axis is never used
    x = gp.from_numpy(np.arange(8, dtype=np.float32).reshape(1, 8))
    for v in (x.reshape(1, 8), x[None], x.T.T, gp.from_numpy(np.zeros((4, 1, 3), np.float32))[:, :, :]):
        assert v.is_contiguous
        assert v.strides == np.zeros(v.shape, np.float32).strides
    assert not x[:, ::2].is_contiguous
