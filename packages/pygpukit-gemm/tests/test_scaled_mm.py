"""gp.ops.scaled_mm (fp8 with per-tensor scales): the reference everywhere, and
cuBLASLt's fp8 tensor cores on the GPU, against float64 products of the
dequantized inputs."""

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp

E4M3, E5M2 = np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2)


def _quantize(x, dtype):
    """Per-tensor scaling to the format's largest finite value, as fp8 recipes do."""
    amax = float(np.abs(x).max())
    scale = amax / float(ml_dtypes.finfo(dtype).max)
    return (x / scale).astype(dtype), np.float32(scale)


def _case(rng, m, k, n, da=E4M3, db=E4M3):
    a, sa = _quantize(rng.standard_normal((m, k)), da)
    w, sb = _quantize(rng.standard_normal((n, k)), db)  # a Linear weight: b = w.T is column-major
    ref = (a.astype(np.float64) * sa) @ (w.astype(np.float64) * sb).T
    g = (gp.from_numpy(a), gp.from_numpy(w).T, gp.from_numpy(np.array([sa])), gp.from_numpy(np.array([sb])))
    return g, ref


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("out", [gp.bfloat16, gp.float16, gp.float32], ids=str)
@pytest.mark.parametrize("mkn", [(64, 128, 96), (1, 4096, 512), (33, 48, 17), (256, 512, 1024)])
def test_against_float64(rng, out, mkn):
    (a, b, sa, sb), ref = _case(rng, *mkn)
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=out)
    assert got.dtype == out and got.shape == ref.shape
    tensor_cores = gp.backend() == "cuda" and mkn[1] % 16 == 0 and mkn[2] % 16 == 0 and _sm() >= 89
    assert gp.ops.which("scaled_mm", a, b, sa, sb) == ("gemm:cublaslt_fp8" if tensor_cores else "gemm:reference")
    # The products of fp8 values are exact; what remains is the accumulation and
    # the output rounding. The reference accumulates in FP32 (1e-5). Hopper's fp8
    # tensor cores accumulate with fewer mantissa bits than FP32 (measured on an
    # H100: 1.4e-4 to 3.5e-4 into float32 at these shapes), hence 1e-3 there.
    tol = 1e-2 if out != gp.float32 else (1e-3 if tensor_cores else 1e-5)
    assert _rel(got.to_numpy(), ref) < tol


def _sm():
    from pygpukit import _runtime

    return _runtime.get().sm


def test_bias_layouts_and_e5m2(rng):
    (a, b, sa, sb), ref = _case(rng, 32, 64, 48, E4M3, E5M2)
    bias = rng.standard_normal(48).astype(np.float32)
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=gp.from_numpy(bias.astype(gp.bfloat16)))
    assert _rel(got.to_numpy(), ref + bias.astype(gp.bfloat16).astype(np.float64)) < 1e-2
    row_major_b = b.T.copy().T.copy()  # b stored row-major: copied to column-major on the GPU path
    assert not row_major_b.T.is_contiguous
    np.testing.assert_array_equal(gp.ops.scaled_mm(a, row_major_b, sa, sb).to_numpy(), gp.ops.scaled_mm(a, b, sa, sb).to_numpy())


def test_errors(rng):
    (a, b, sa, sb), _ = _case(rng, 16, 32, 16)
    for call, exc, match in (
        (lambda: gp.ops.scaled_mm(a.astype(gp.float16), b, sa, sb), TypeError, "must be float8_e4m3fn or float8_e5m2"),
        (lambda: gp.ops.scaled_mm(a, b[:16], sa, sb), ValueError, "inner dimensions differ"),
        (lambda: gp.ops.scaled_mm(a, b, gp.ones((2,)), sb), ValueError, "scale_a must be one float32 value"),
        (lambda: gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.int8), TypeError, "out_dtype must be bfloat16"),
        (lambda: gp.ops.scaled_mm(a, b, sa, sb, bias=gp.zeros((3,))), ValueError, r"bias must be a GPUArray of shape \(16,\)"),
        (lambda: gp.ops.scaled_mm(a, b, 1.0, sb), TypeError, "scale_a must be a GPUArray"),
    ):
        with pytest.raises(exc, match=match):
            call()
