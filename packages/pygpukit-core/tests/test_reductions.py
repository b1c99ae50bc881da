"""Reductions against NumPy: every op, axis forms, keepdims, dtype, empty and NaN cases."""

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, FLOAT_DTYPES, random_array

AXES = [None, 0, 1, 2, -1, (0, 1), (1, 2), (0, 2), (0, 1, 2)]


def _close(got: np.ndarray, want: np.ndarray, dtype) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    # float32 tree accumulation vs NumPy's pairwise sum: both within a few ulp of
    # the float64 result for these sizes; results then rounded once to dtype
    eps = float(ml_dtypes.finfo(want.dtype).eps)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=4 * eps, atol=4 * eps * 30)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.float16, gp.bfloat16, gp.int32, gp.uint8, gp.bool_, gp.int64], ids=str)
def test_sum_prod_max_min_all_any(rng, dtype, axis):
    host = random_array(rng, (5, 7, 9), dtype)
    a = gp.from_numpy(host)
    for name in ("sum", "max", "min", "all", "any"):
        got = getattr(gp, name)(a, axis=axis).to_numpy()
        want = np.asarray(getattr(np, name)(host, axis=axis))
        if name == "sum" and dtype in (gp.float16, gp.bfloat16):
            want = np.asarray(np.sum(host.astype(np.float32), axis=axis)).astype(dtype)  # float32 accumulation, as documented
        _close(got, want, dtype)
    small = random_array(rng, (5, 7, 9), dtype) if np.dtype(dtype).kind in "iub" else (host.astype(np.float64) / 8 + 1).astype(dtype)
    if np.dtype(dtype).kind in "iu":
        small = np.clip(small, -2, 2).astype(dtype)
    got = gp.prod(gp.from_numpy(small), axis=axis).to_numpy()
    want = np.asarray(np.prod(small.astype(np.float64) if np.dtype(dtype).kind == "f" or dtype == gp.bfloat16 else small, axis=axis))
    want = want.astype(got.dtype)
    if np.dtype(dtype).kind in "iub":
        np.testing.assert_array_equal(got, np.asarray(np.prod(small, axis=axis)))
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=float(ml_dtypes.finfo(dtype).eps) * 16)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_all_dtypes_full_and_last_axis(rng, dtype):
    host = random_array(rng, (33, 65), dtype)
    a = gp.from_numpy(host)
    _close(a.max(axis=1).to_numpy(), np.max(host, axis=1), dtype)
    _close(a.min().to_numpy(), np.asarray(np.min(host)), dtype)
    assert a.any().item() == bool(np.any(host))
    assert a.all(axis=0).to_numpy().tolist() == np.all(host, axis=0).tolist()
    np.testing.assert_array_equal(
        a.argmax(axis=1).to_numpy(), np.argmax(host.astype(np.float64) if np.dtype(dtype).kind not in "biuf" else host, axis=1)
    )


def test_keepdims_dtype_and_strided_input(rng):
    host = random_array(rng, (6, 4, 5), np.float32)
    a = gp.from_numpy(host)
    got = gp.sum(a, axis=(0, 2), keepdims=True)
    assert got.shape == (1, 4, 1)
    _close(got.to_numpy(), np.sum(host, axis=(0, 2), keepdims=True), gp.float32)
    ints = gp.from_numpy(random_array(rng, (10, 10), np.int8))
    assert gp.sum(ints, axis=0, dtype=gp.float64).dtype == np.float64
    t = a.transpose(2, 0, 1)[::2]  # strided view
    ht = host.transpose(2, 0, 1)[::2]
    for axis in (None, 0, 1, (1, 2)):
        _close(gp.max(t, axis=axis).to_numpy(), np.asarray(np.max(ht, axis=axis)), gp.float32)
        _close(gp.sum(t, axis=axis).to_numpy(), np.asarray(np.sum(ht, axis=axis)), gp.float32)


def test_mean_and_var(rng):
    host = random_array(rng, (40, 30), np.float32)
    a = gp.from_numpy(host)
    for axis in (None, 0, 1):
        np.testing.assert_allclose(a.mean(axis=axis).to_numpy(), np.mean(host, axis=axis), rtol=1e-5, atol=1e-6)
        for ddof in (0, 1):
            np.testing.assert_allclose(a.var(axis=axis, ddof=ddof).to_numpy(), np.var(host, axis=axis, ddof=ddof), rtol=1e-5)
    ints = random_array(rng, (100,), np.int32)
    m = gp.mean(gp.from_numpy(ints))
    assert m.dtype == np.float64 and m.item() == pytest.approx(np.mean(ints))
    h = random_array(rng, (1000,), np.float16)
    mh = gp.mean(gp.from_numpy(h))
    assert mh.dtype == np.float16
    assert float(mh.item()) == pytest.approx(float(np.mean(h.astype(np.float32))), rel=1e-3)


def test_nan_and_argmax_semantics():
    x = np.array([[1.0, np.nan, 3.0, 3.0], [2.0, 5.0, 5.0, -1.0]], np.float32)
    a = gp.from_numpy(x)
    got = a.max(axis=1).to_numpy()
    assert np.isnan(got[0]) and got[1] == 5.0
    assert a.argmax(axis=1).to_numpy().tolist() == [1, 1]  # first NaN; first of ties
    assert a.argmin(axis=1).to_numpy().tolist() == [1, 3]
    assert a.argmax().item() == int(np.argmax(x))
    assert a.argmax(axis=0, keepdims=True).shape == (1, 4)
    assert gp.any(gp.from_numpy(np.array([0.0, np.nan]))).item() is True


def test_empty_reductions():
    e = gp.zeros((0, 3), gp.float32)
    np.testing.assert_array_equal(e.sum(axis=0).to_numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(e.prod(axis=0).to_numpy(), np.ones(3, np.float32))
    assert e.all().item() is True and e.any().item() is False
    assert e.sum(axis=1).shape == (0,)
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        e.max(axis=0)
    with pytest.raises(ValueError, match="empty sequence"):
        e.argmax()


def test_bad_axes():
    a = gp.zeros((2, 3))
    with pytest.raises(np.exceptions.AxisError):
        a.sum(axis=2)
    with pytest.raises(ValueError, match="duplicate"):
        a.sum(axis=(0, 0))
    with pytest.raises(TypeError):
        gp.sum([1, 2, 3])


@pytest.mark.gpu
def test_large_reductions_on_gpu(rng):
    host = rng.standard_normal((1024, 4096), dtype=np.float32)
    a = gp.from_numpy(host)
    np.testing.assert_allclose(a.sum(axis=1).to_numpy(), host.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(a.sum(axis=0).to_numpy(), host.astype(np.float64).sum(axis=0), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(a.max(axis=1).to_numpy(), host.max(axis=1))
    np.testing.assert_array_equal(a.argmax(axis=1).to_numpy(), host.argmax(axis=1))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("k", [160, 4096 + 16, 37])
def test_arg_reductions_ties_and_nan(rng, dtype, k):
    # rows long enough for the vectorised kernel (k a multiple of 16) and not; few distinct
    # values, so the first of tied extremes must win; NaN (floats) wins over everything
    host = rng.integers(0, 4, size=(5, k)).astype(dtype)
    if np.dtype(dtype) in FLOAT_DTYPES:
        host[1, k // 3] = np.nan
        host[1, k // 2] = np.nan
    a = gp.from_numpy(host)
    ref = host.astype(np.float64) if np.dtype(dtype) in FLOAT_DTYPES else host
    np.testing.assert_array_equal(a.argmax(axis=1).to_numpy(), np.argmax(ref, axis=1))
    np.testing.assert_array_equal(a.argmin(axis=1).to_numpy(), np.argmin(ref, axis=1))
    np.testing.assert_array_equal(a[:, 1:].argmax(axis=1).to_numpy(), np.argmax(ref[:, 1:], axis=1))  # other row lengths
