"""Weight-only int8/int4 quantization with group scales, and gp.ops.qlinear:
the packing and rounding against NumPy, and the GEMV kernel (GPU) against the
float64 product of the dequantized weight."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import QuantizedWeight, dequantize_weight, quantize_weight


def _numpy_quantize(w, bits, g):
    n, k = w.shape
    qmax = 127 if bits == 8 else 7
    groups = w.astype(np.float32).reshape(n, k // g, g)
    amax = np.abs(groups).max(axis=2, keepdims=True)
    scales = np.where(amax > 0, amax / qmax, 1.0).astype(np.float16)
    values = np.clip(np.rint(groups / scales.astype(np.float32)), -qmax - (bits == 4), qmax).reshape(n, k)
    return values, scales.reshape(n, k // g)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("g", [32, 128])
def test_quantize_matches_numpy_and_round_trips(rng, bits, g):
    w = rng.standard_normal((24, 256)).astype(np.float32)
    w[3, :g] = 0  # an all-zero group: scale 1, values 0
    qw = quantize_weight(gp.from_numpy(w), bits=bits, group_size=g)
    values, scales = _numpy_quantize(w, bits, g)
    np.testing.assert_array_equal(qw.scales.to_numpy(), scales)
    if bits == 8:
        assert qw.q.dtype == np.int8 and qw.q.shape == (24, 256)
        np.testing.assert_array_equal(qw.q.to_numpy(), values.astype(np.int8))
    else:
        assert qw.q.dtype == np.uint8 and qw.q.shape == (24, 128)
        packed = qw.q.to_numpy()
        np.testing.assert_array_equal((packed & 15).astype(int) - 8, values[:, 0::2])
        np.testing.assert_array_equal((packed >> 4).astype(int) - 8, values[:, 1::2])
    assert qw.shape == (24, 256)
    deq = dequantize_weight(qw).to_numpy()
    step = np.repeat(scales.astype(np.float32), g, axis=1)
    assert np.all(np.abs(deq - w) <= step * 0.5 + 1e-6 + (bits == 4) * step * 0.5)  # int4 clips -8..7: +-1 step at the top


def test_quantize_errors():
    w = gp.zeros((4, 64), gp.float32)
    for call, exc, match in (
        (lambda: quantize_weight(w, bits=3), ValueError, "bits must be 4 or 8"),
        (lambda: quantize_weight(w, group_size=48), ValueError, "positive multiple of 32"),
        (lambda: quantize_weight(gp.zeros((4, 96)), group_size=64), ValueError, r"in_features \(96\) must be a multiple"),
        (lambda: quantize_weight(gp.zeros((4, 64), gp.int32)), TypeError, "must be a float array"),
        (lambda: quantize_weight(np.zeros((4, 64))), TypeError, "2-D GPUArray"),
        (lambda: quantize_weight(gp.full((1, 32), 1e30), group_size=32), ValueError, "overflows float16"),
    ):
        with pytest.raises(exc, match=match):
            call()
    qw = quantize_weight(w, group_size=32)
    with pytest.raises(ValueError, match=r"x's last axis must have the weight's in_features \(64\)"):
        gp.ops.qlinear(gp.zeros((1, 32)), qw)
    with pytest.raises(TypeError, match="QuantizedWeight"):
        gp.ops.qlinear(gp.zeros((1, 64)), w)


def _sm():
    from pygpukit import _runtime

    return _runtime.get().sm


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32], ids=str)
@pytest.mark.parametrize("xshape", [(1, 512), (3, 512), (2, 4, 512), (8, 512), (9, 512), (512,)])
def test_qlinear_against_float64(rng, bits, dtype, xshape):
    n = 200  # not a multiple of the block's 8 columns
    w = rng.standard_normal((n, 512)).astype(np.float32)
    qw = quantize_weight(gp.from_numpy(w), bits=bits)
    x = rng.standard_normal(xshape).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    deq = dequantize_weight(qw, gp.float64).to_numpy()
    ref = x.astype(np.float64) @ deq.T + bias.astype(np.float64)
    got = gp.ops.qlinear(gp.from_numpy(x), qw, gp.from_numpy(bias))
    assert got.shape == (*xshape[:-1], n) and got.dtype == dtype
    again = gp.ops.qlinear(gp.from_numpy(x), qw, gp.from_numpy(bias))  # the prepared launch, on the GPU
    np.testing.assert_array_equal(again.to_numpy(), got.to_numpy())
    rel = np.max(np.abs(got.to_numpy().astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert rel < (1e-5 if dtype == gp.float32 else 1e-2)
    rows = int(np.prod(xshape[:-1]))
    kernel = gp.backend() == "cuda" and _sm() >= 80 and rows <= 8
    assert gp.ops.which("qlinear", gp.from_numpy(x), qw) == ("gemm:gemv_q" if kernel else "gemm:reference")


def test_quantized_weight_is_plain_data():
    qw = quantize_weight(gp.ones((2, 64)), bits=4, group_size=64)
    assert isinstance(qw, QuantizedWeight) and qw.bits == 4 and qw.group_size == 64 and qw.scales.shape == (2, 1)


def test_gemv_kernels_compile_for_sm80_and_sm90(tmp_path, monkeypatch):
    """Every instantiation the plugin can launch compiles with NVRTC (no GPU needed)."""
    import os

    from pygpukit.jit import nvrtc
    from pygpukit_gemm import quant

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    for rows in range(1, quant.MAX_ROWS + 1):
        for int4 in (False, True):
            for ctype in quant._CTYPES.values():
                kernel = quant._kernel(rows, int4, ctype)
                for sm in (80, 90):
                    assert kernel.compile(sm).image[:4] == b"\x7fELF"
