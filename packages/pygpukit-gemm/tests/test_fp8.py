"""quantize_fp8 / dequantize_fp8 against float64 NumPy: the scales, the round
trip within the format's precision, partial groups, zero groups, NaN and inf."""

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import Fp8Tensor, dequantize_fp8, quantize_fp8

E4M3, E5M2 = np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2)
# Half a unit in the last place, relative: 3 mantissa bits (e4m3), 2 (e5m2)
HALF_ULP = {E4M3: 2.0**-4, E5M2: 2.0**-3}
GROUPINGS = [("tensor", None), ("row", None), ("block", (1, 128)), ("block", (128, 128)), ("block", (32, 48))]


def _group_shape(granularity, block, shape):
    return {"tensor": shape, "row": (1, shape[1])}.get(granularity, block)


def _group_amax(x, group):
    """Largest finite |x| of each group, float64, shape (ceil(M/bm), ceil(K/bk))."""
    (m, k), (bm, bk) = x.shape, group
    gm, gk = -(-m // bm), -(-k // bk)
    mag = np.zeros((gm * bm, gk * bk))
    mag[:m, :k] = np.where(np.isfinite(x), np.abs(x), 0)
    return mag.reshape(gm, bm, gk, bk).max(axis=(1, 3))


def _expand(g, shape, group):
    (m, k), (bm, bk) = shape, group
    return np.repeat(np.repeat(g, bm, axis=0), bk, axis=1)[:m, :k]


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
@pytest.mark.parametrize("granularity,block", GROUPINGS, ids=lambda v: str(v))
@pytest.mark.parametrize("shape", [(130, 300), (1, 200), (257, 128), (5, 7)], ids=str)
def test_round_trip(rng, dtype, granularity, block, shape):
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 100, (shape[0], 1))).astype(np.float32)  # rows of different ranges
    t = quantize_fp8(gp.from_numpy(x), dtype, granularity, block or (128, 128))
    group = _group_shape(granularity, block, shape)
    gm, gk = -(-shape[0] // group[0]), -(-shape[1] // group[1])
    want_scale_shape = {"tensor": (), "row": (shape[0], 1), "block": (gm, gk)}[granularity]
    assert isinstance(t, Fp8Tensor) and t.granularity == granularity and t.block == group
    assert t.data.dtype == dtype and t.data.shape == shape and t.data.is_contiguous
    assert t.scale.dtype == np.float32 and t.scale.shape == want_scale_shape
    fmax = float(ml_dtypes.finfo(dtype).max)
    amax = _group_amax(x.astype(np.float64), group)
    scale = t.scale.to_numpy().astype(np.float64).reshape(gm, gk)
    np.testing.assert_allclose(scale, amax / fmax, rtol=1e-6)
    data = t.data.to_numpy().astype(np.float64)
    # every group uses the whole range: its largest value lands on the format's max
    np.testing.assert_array_equal(_group_amax(data, group), fmax)
    # round trip: within half an ulp of the format, relative to the group's amax
    err = np.abs(dequantize_fp8(t).to_numpy().astype(np.float64) - x)
    assert np.all(err <= HALF_ULP[dtype] * _expand(amax, shape, group) * (1 + 1e-6))


@pytest.mark.parametrize("src", [gp.bfloat16, gp.float16], ids=str)
def test_half_inputs_and_output_dtype(rng, src):
    x = rng.standard_normal((64, 256)).astype(src)
    t = quantize_fp8(gp.from_numpy(x), granularity="block", block=(1, 128))
    y = dequantize_fp8(t, gp.bfloat16)
    assert y.dtype == np.dtype(gp.bfloat16) and y.shape == x.shape
    x64 = x.astype(np.float64)
    bound = HALF_ULP[E4M3] * _expand(_group_amax(x64, (1, 128)), x.shape, (1, 128))
    # plus the bfloat16 rounding of the output (8 bits): 2^-9 of the value
    assert np.all(np.abs(y.to_numpy().astype(np.float64) - x64) <= bound * (1 + 1e-6) + 2.0**-9 * np.abs(x64))


def test_zero_groups_get_scale_one(rng):
    x = rng.standard_normal((200, 300)).astype(np.float32)
    x[3] = 0  # a zero row
    x[128:, 128:256] = 0  # a zero 128x128 block (partial in M)
    row = quantize_fp8(gp.from_numpy(x), granularity="row")
    assert row.scale.to_numpy()[3, 0] == 1 and not np.any(row.data.to_numpy()[3].astype(np.float32))
    blk = quantize_fp8(gp.from_numpy(x), granularity="block", block=(128, 128))
    assert blk.scale.to_numpy()[1, 1] == 1
    back = dequantize_fp8(blk).to_numpy()
    assert np.all(np.isfinite(back)) and not np.any(back[128:, 128:256])
    zeros = quantize_fp8(gp.zeros((3, 5), gp.float32))
    assert float(zeros.scale.to_numpy()) == 1 and not np.any(dequantize_fp8(zeros).to_numpy())


@pytest.mark.parametrize("dtype", [E4M3, E5M2], ids=str)
def test_nan_stays_nan_and_inf_saturates(rng, dtype):
    fmax = float(ml_dtypes.finfo(dtype).max)
    x = rng.standard_normal((4, 160)).astype(np.float32)
    x[0, 5], x[0, 6], x[0, 7] = np.nan, np.inf, -np.inf
    x[1, :] = np.inf  # no finite value: scale 1, every value saturates
    x[2, 9] = 3e38  # finite and huge: it sets the scale, the rest of the row underflows towards 0
    t = quantize_fp8(gp.from_numpy(x), dtype, "row")
    data = t.data.to_numpy().astype(np.float64)
    scale = t.scale.to_numpy()[:, 0].astype(np.float64)
    assert np.isnan(data[0, 5]) and (data[0, 6], data[0, 7]) == (fmax, -fmax)
    assert np.isnan(data[0]).sum() == 1
    finite = np.isfinite(x[0])
    np.testing.assert_allclose(scale[0], np.abs(x[0][finite]).max() / fmax, rtol=1e-6)  # NaN and inf do not set the scale
    assert scale[1] == 1 and np.all(data[1] == fmax)
    np.testing.assert_allclose(scale[2], 3e38 / fmax, rtol=1e-6)
    assert data[2, 9] == fmax and np.all(np.isfinite(data[2]))
    back = dequantize_fp8(t).to_numpy().astype(np.float64)
    assert np.isnan(back[0, 5])
    np.testing.assert_allclose(back[0, 6:8], [fmax * scale[0], -fmax * scale[0]], rtol=1e-6)
    np.testing.assert_array_equal(np.isnan(back), np.isnan(x))


def test_does_not_touch_the_input(rng):
    x = rng.standard_normal((33, 65)).astype(np.float32)
    g = gp.from_numpy(x)
    quantize_fp8(g, granularity="block", block=(16, 16))
    np.testing.assert_array_equal(g.to_numpy(), x)


def test_errors(rng):
    x = gp.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))
    for call, exc, match in (
        (lambda: quantize_fp8(np.ones((4, 8), np.float32)), TypeError, "x must be a GPUArray"),
        (lambda: quantize_fp8(gp.ones((4, 8), gp.int32)), TypeError, "x must be float32, float16 or bfloat16, got int32"),
        (lambda: quantize_fp8(x.astype(gp.float8_e4m3fn)), TypeError, "x must be float32, float16 or bfloat16"),
        (lambda: quantize_fp8(x, gp.float16), TypeError, "dtype must be float8_e4m3fn or float8_e5m2"),
        (lambda: quantize_fp8(x, "not a dtype"), TypeError, "dtype must be float8_e4m3fn or float8_e5m2"),
        (lambda: quantize_fp8(x.reshape(32)), ValueError, r"non-empty 2-D array \(M, K\), got shape \(32,\)"),
        (lambda: quantize_fp8(gp.zeros((0, 8), gp.float32)), ValueError, "non-empty 2-D array"),
        (lambda: quantize_fp8(x, granularity="column"), ValueError, "granularity must be one of tensor, row, block, got 'column'"),
        (lambda: quantize_fp8(x, granularity="block", block=(0, 128)), ValueError, r"block sizes must be positive, got \(0, 128\)"),
        (lambda: quantize_fp8(x, granularity="block", block=128), TypeError, "block must be two ints"),
        (lambda: quantize_fp8(x, granularity="block", block=(1.0, 128)), TypeError, "block must be two ints"),
        (lambda: dequantize_fp8(x), TypeError, "expects an Fp8Tensor"),
    ):
        with pytest.raises(exc, match=match):
            call()
    assert quantize_fp8(x, granularity="block", block=[2, 4]).block == (2, 4)  # a list serves as well
