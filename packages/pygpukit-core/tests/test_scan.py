"""cumsum / cumprod against NumPy (float64 references for floats)."""

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64, gp.float16, gp.bfloat16, gp.int32, gp.uint8, gp.bool_, gp.int64], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_cumsum(rng, dtype, axis):
    x = random_array(rng, (7, 300, 3), dtype)
    got = gp.cumsum(gp.from_numpy(x), axis=axis).to_numpy()
    want = np.cumsum(x, axis=axis)
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.dtype(dtype).kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        ref = np.cumsum(x.astype(np.float64), axis=axis)
        scale = np.cumsum(np.abs(x.astype(np.float64)), axis=axis)
        eps = float(np.finfo(np.float64).eps if dtype == gp.float64 else 2.0**-23)
        out_eps = {gp.float16: 2.0**-10, gp.bfloat16: 2.0**-7}.get(dtype, 0.0)
        # float32 (float64) accumulation, each output rounded once to dtype
        assert (np.abs(got.astype(np.float64) - ref) <= 1e3 * eps * scale + out_eps * np.abs(ref) + 1e-12).all()


def test_cumprod_and_dtype(rng):
    x = (random_array(rng, (4, 50), np.float64) / 20 + 1).astype(np.float32)
    np.testing.assert_allclose(gp.cumprod(gp.from_numpy(x), axis=1).to_numpy(), np.cumprod(x.astype(np.float64), axis=1), rtol=1e-5)
    ints = np.array([[1, 2, 3], [4, 5, 6]], np.int8)
    np.testing.assert_array_equal(gp.cumprod(gp.from_numpy(ints)).to_numpy(), np.cumprod(ints))
    assert gp.cumsum(gp.from_numpy(ints), dtype=gp.float32).dtype == np.float32
    long = np.ones(100_003, np.int64)
    assert gp.cumsum(gp.from_numpy(long)).to_numpy()[-1] == 100_003  # many chunks: the carry
    np.testing.assert_array_equal(gp.cumsum(gp.zeros((0, 3)), axis=0).to_numpy(), np.zeros((0, 3)))
    with pytest.raises(TypeError):
        gp.cumsum([1, 2])
    with pytest.raises(np.exceptions.AxisError):
        gp.cumsum(gp.zeros((2, 2)), axis=3)
