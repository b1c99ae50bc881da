"""The array API standard's spellings, __array_namespace__, tril/triu."""

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, random_array


def _generic_normalize(x):
    # written against the standard only: runs on any conforming namespace
    xp = x.__array_namespace__()
    centered = x - xp.mean(x, axis=-1, keepdims=True)
    angles = xp.atan2(centered, xp.ones_like(centered))
    parts = xp.concat([xp.acos(xp.clip(centered / 10, -1, 1)), xp.pow(angles, 2)], axis=0)
    return xp.astype(parts, xp.float32), xp.vecdot(centered, centered), xp.matrix_transpose(parts)


def test_generic_code_runs_on_the_namespace(rng):
    host = random_array(rng, (3, 8), np.float64)
    x = gp.from_numpy(host)
    assert x.__array_namespace__() is gp and gp.__array_api_version__ == "2023.12"
    parts, dots, t = _generic_normalize(x)
    c = host - host.mean(axis=-1, keepdims=True)
    want = np.concatenate([np.arccos(np.clip(c / 10, -1, 1)), np.arctan2(c, 1) ** 2]).astype(np.float32)
    np.testing.assert_allclose(parts.to_numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(dots.to_numpy(), (c * c).sum(-1), rtol=1e-12)
    assert t.shape == (8, 6) and parts.dtype == gp.float32
    with pytest.raises(ValueError, match=r"2023\.12"):
        x.__array_namespace__(api_version="2099.01")


def test_aliases_are_the_same_functions():
    assert gp.acos is gp.arccos and gp.atan2 is gp.arctan2 and gp.pow is gp.power and gp.concat is gp.concatenate
    assert gp.bitwise_invert is gp.invert and gp.bitwise_left_shift is gp.left_shift and gp.asinh is gp.arcsinh


def test_astype_can_cast_isdtype():
    x = gp.arange(4, dtype=gp.int32)
    assert gp.astype(x, gp.int32, copy=False) is x and gp.astype(x, gp.int32) is not x
    assert gp.astype(x, gp.float16).dtype == gp.float16
    assert gp.can_cast(gp.int8, gp.float16) and gp.can_cast(x, gp.int64) and not gp.can_cast(gp.int64, gp.int8)
    assert not gp.can_cast(gp.float32, gp.int64) and gp.can_cast(gp.bfloat16, gp.float32)
    assert gp.isdtype(gp.bfloat16, "real floating") and gp.isdtype(gp.uint8, ("bool", "unsigned integer"))
    assert not gp.isdtype(gp.int8, "unsigned integer") and gp.isdtype(gp.float32, gp.float32)
    assert gp.isdtype(gp.int16, "numeric") and not gp.isdtype(gp.bool_, "numeric")
    with pytest.raises(ValueError, match="unknown dtype kind"):
        gp.isdtype(gp.int8, "integer")
    with pytest.raises(TypeError):
        gp.astype(np.zeros(2), gp.float32)
    with pytest.raises(ValueError, match="length"):
        gp.vecdot(gp.ones((3,)), gp.ones((4,)))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("k", [0, 1, -2, 5])
def test_tril_triu(rng, dtype, k):
    host = random_array(rng, (2, 4, 6), dtype)
    x = gp.from_numpy(host)
    for name in ("tril", "triu"):
        got = getattr(gp, name)(x, k)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got.to_numpy(), getattr(np, name)(host, k), err_msg=name)
    np.testing.assert_array_equal(gp.tril(x.T, k).to_numpy(), np.tril(host.T, k))  # strided input


def test_tril_errors():
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        gp.tril(gp.ones((3,)))
    with pytest.raises(TypeError):
        gp.triu(np.ones((3, 3)))
