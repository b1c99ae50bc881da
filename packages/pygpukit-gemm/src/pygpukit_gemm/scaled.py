"""``gp.ops.scaled_mm``: products of float8 matrices with per-tensor scales,
as ``torch._scaled_mm``: out = (scale_a * a) @ (scale_b * b) (+ bias) in
``out_dtype`` (bfloat16, float16 or float32), accumulated in float32.

On SM 89+ with cuBLASLt the product runs on fp8 tensor cores; cuBLASLt reads
``a`` row-major and ``b`` column-major (``b = w.T`` for ``w`` of shape (n, k), the
layout of a Linear weight), so other layouts are copied into those first, and
it needs k and n to be multiples of 16. Everything else (other shapes, e5m2
with e5m2, older GPUs, the CPU backend) takes the reference implementation:
dequantize to float32, multiply, round once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import cublaslt

FP8 = (np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2))
OUT_DTYPES = (np.dtype(gp.bfloat16), np.dtype(gp.float16), np.dtype(gp.float32))


def check(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any, bias: Any) -> np.dtype:
    """Validate the operands of scaled_mm; returns the output dtype."""
    for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(x, gp.GPUArray):
            raise TypeError(f"scaled_mm: {name} must be a GPUArray, got {type(x).__name__}")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"scaled_mm: a and b must be 2-D, got shapes {a.shape} and {b.shape}")
    if a.dtype not in FP8 or b.dtype not in FP8:
        raise TypeError(f"scaled_mm: a and b must be float8_e4m3fn or float8_e5m2, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm: a is {a.shape} and b is {b.shape}: the inner dimensions differ")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s.size != 1 or s.dtype != np.float32:
            raise ValueError(f"scaled_mm: {name} must be one float32 value (per-tensor scale), got shape {s.shape} of {s.dtype}")
    out = np.dtype(out_dtype)
    if out not in OUT_DTYPES:
        raise TypeError(f"scaled_mm: out_dtype must be bfloat16, float16 or float32, got {out}")
    if bias is not None and (not isinstance(bias, gp.GPUArray) or bias.shape != (b.shape[1],)):
        raise ValueError(f"scaled_mm: bias must be a GPUArray of shape ({b.shape[1]},)")
    return out


def reference(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = gp.bfloat16, bias: Any = None) -> gp.GPUArray:
    """Dequantize to float32, multiply (exact FP32), scale, add the bias, round once."""
    out = check(a, b, scale_a, scale_b, out_dtype, bias)
    y = gp.matmul(a.astype(gp.float32), b.astype(gp.float32)) * (scale_a.reshape(()) * scale_b.reshape(()))
    if bias is not None:
        y = y + bias.astype(gp.float32)
    return y.astype(out)


def _unit_row(x: gp.GPUArray) -> bool:  # row-major readable: unit stride along the last axis
    return x.shape[1] == 1 or x.strides[1] == x.itemsize


def _unit_col(x: gp.GPUArray) -> bool:  # column-major readable
    return x.shape[0] == 1 or x.strides[0] == x.itemsize


def fits_tensor_cores(a: Any, b: Any, *args: Any, **kwargs: Any) -> bool:
    """What cuBLASLt's fp8 path takes: k and n multiples of 16, not e5m2 with e5m2."""
    return a.shape[1] % 16 == 0 and b.shape[1] % 16 == 0 and not (a.dtype == FP8[1] and b.dtype == FP8[1])


def scaled_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = gp.bfloat16, bias: Any = None) -> gp.GPUArray:
    """The cuBLASLt fp8 product (see the module docstring)."""
    out = check(a, b, scale_a, scale_b, out_dtype, bias)
    if not _unit_row(a):
        a = a.copy()
    if not _unit_col(b):
        b = b.T.copy().T  # column-major
    if bias is not None:
        bias = bias.astype(out, copy=False)
        bias = bias if bias.is_contiguous else bias.copy()
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    call = cublaslt.prepare(a, b, (), m, n, k, (m, n), bias is not None, out, scaled=True)
    if call is None:  # an empty product
        return reference(a, b, scale_a, scale_b, out, bias)
    return call(a.data_ptr, b.data_ptr, 0 if bias is None else bias.data_ptr, scale_a.data_ptr, scale_b.data_ptr)
