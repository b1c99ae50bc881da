"""Weight-only quantization with group scales (GPTQ/AWQ-style symmetric layout)
and ``gp.ops.qlinear``, the Linear layer over such weights.

``quantize_weight(w, format="int8" | "int4" | "fp8", group_size=128)`` turns a
Linear weight w (out_features N, in_features K) into ``QuantizedWeight``:
  int8: values q int8 [N, K], scale = max |w| over the group / 127;
  int4: values packed two per byte (k even in the low nibble, each nibble the
        value + 8) in q uint8 [N, K / 2], scale = max |w| / 7, values -8..7;
  fp8:  q float8_e4m3fn [N, K], scale = max |w| / 448 (float32 scales: a
        float16 scale would go subnormal for small weights).
Integer values are round(w / scale) clipped to the range; integer scales
are float16 [N, K / group_size], as GPTQ/AWQ store them. A group of zeros
gets scale 1. Works on both backends (it is made of core's ops).

``qlinear(x, qw, bias=None)`` = x @ dequantize(qw).T + bias. With pygpukit-gemm
on a CUDA GPU (SM 80+), up to 8 rows of activations (decode) run the GEMV
kernel that reads the packed weights once (gemv.py), and up to GEMV_CHUNKS
times as many (a short prompt's prefill) run it on 8 rows at a time, reading
them once a chunk: less than dequantizing them for one product would move;
more rows, or the CPU, dequantize and take ``gp.linear``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp

from . import gemv

# format -> (largest value, values per byte)
FORMATS = {"int8": (127.0, 1), "int4": (7.0, 2), "fp8": (448.0, 1)}


@dataclass(frozen=True)
class QuantizedWeight:
    q: gp.GPUArray  # int8 [N, K], uint8 [N, K // 2] (int4) or float8_e4m3fn [N, K]
    scales: gp.GPUArray  # float16 (int8/int4) or float32 (fp8), [N, K // group_size]
    format: str
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features) of the original weight."""
        n, packed = self.q.shape
        return n, packed * FORMATS[self.format][1]


def quantize_weight(w: Any, format: str = "int8", group_size: int = 128) -> QuantizedWeight:
    """Symmetric per-group quantization of a Linear weight (see the module docstring)."""
    if not isinstance(w, gp.GPUArray) or w.ndim != 2:
        raise TypeError("quantize_weight: w must be a 2-D GPUArray (out_features, in_features)")
    if w.dtype.kind != "f" and w.dtype not in (np.dtype(gp.bfloat16),):
        raise TypeError(f"quantize_weight: w must be a float array, got {w.dtype}")
    if format not in FORMATS:
        raise ValueError(f"quantize_weight: format must be one of {', '.join(FORMATS)}, got {format!r}")
    if group_size <= 0 or group_size % 32:
        raise ValueError(f"quantize_weight: group_size must be a positive multiple of 32, got {group_size}")
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"quantize_weight: in_features ({k}) must be a multiple of group_size ({group_size})")
    qmax = FORMATS[format][0]
    groups = w.astype(gp.float32).reshape(n, k // group_size, group_size)
    if not bool(gp.all(gp.isfinite(groups))):
        raise ValueError("quantize_weight: w has NaN or infinite values")
    amax = gp.max(gp.abs(groups), axis=2, keepdims=True)
    scales = gp.where(amax > 0, amax / qmax, 1.0).astype(gp.float32 if format == "fp8" else gp.float16)
    if not bool(gp.all(gp.isfinite(scales))):
        raise ValueError("quantize_weight: a group's scale overflows float16 (|w| above 8.3e6 for int8)")
    scaled = groups / scales.astype(gp.float32)
    if format == "fp8":
        q = gp.clip(scaled, -qmax, qmax).astype(gp.float8_e4m3fn).reshape(n, k)
    elif format == "int8":
        q = gp.clip(gp.rint(scaled), -qmax, qmax).astype(gp.int8).reshape(n, k)
    else:
        nib = (gp.clip(gp.rint(scaled), -qmax - 1, qmax) + 8).astype(gp.uint8).reshape(n, k // 2, 2)
        q = nib[:, :, 0] | (nib[:, :, 1] << 4)
    return QuantizedWeight(q, scales.reshape(n, k // group_size), format, group_size)


def dequantize_weight(qw: QuantizedWeight, dtype: Any = gp.float32) -> gp.GPUArray:
    """The weight ``qw`` stands for, (N, K) in ``dtype``: value * scale in
    float32, rounded to ``dtype`` (one kernel on a CUDA GPU, core's ops elsewhere)."""
    n, k = qw.shape
    if gemv.dequantizes(qw.q, qw.scales, dtype):
        return gemv.dequantize(qw.q, qw.scales, qw.format, n, k, qw.group_size, dtype)
    if qw.format == "int4":
        lo = (qw.q & 15).astype(gp.float32) - 8
        hi = (qw.q >> 4).astype(gp.float32) - 8
        values = gp.stack([lo, hi], axis=2).reshape(n, k)
    else:
        values = qw.q.astype(gp.float32)
    groups = values.reshape(n, k // qw.group_size, qw.group_size) * qw.scales.astype(gp.float32).reshape(n, -1, 1)
    return groups.reshape(n, k).astype(dtype)


def _check(x: Any, qw: Any, bias: Any) -> None:
    if not isinstance(x, gp.GPUArray) or not isinstance(qw, QuantizedWeight):
        raise TypeError("qlinear expects a GPUArray x and a QuantizedWeight (from quantize_weight)")
    if x.ndim == 0 or x.shape[-1] != qw.shape[1]:
        raise ValueError(f"qlinear: x's last axis must have the weight's in_features ({qw.shape[1]}), got x of shape {x.shape}")
    if bias is not None and (not isinstance(bias, gp.GPUArray) or bias.shape != (qw.shape[0],)):
        raise ValueError(f"qlinear: bias must be a GPUArray of shape ({qw.shape[0]},)")


def reference(x: Any, qw: Any, bias: Any = None) -> gp.GPUArray:
    """Dequantize to x's dtype, then ``gp.linear``."""
    _check(x, qw, bias)
    return gp.linear(x, dequantize_weight(qw, x.dtype), bias)


# Rows past gemv.MAX_ROWS run the GEMV in chunks of MAX_ROWS, up to this many chunks; each reads the packed weights
# again, which for 4 chunks is still less than dequantizing them moves (int4: 4 x 0.25 of the bf16 bytes, against
# reading them and writing and reading bf16 ones).
GEMV_CHUNKS = 4


def decode_rows(x: Any, qw: Any, bias: Any = None) -> bool:
    """The GEMV kernel's case: at most GEMV_CHUNKS * gemv.MAX_ROWS rows of float activations."""
    return isinstance(qw, QuantizedWeight) and x.ndim >= 1 and x.size // max(x.shape[-1], 1) <= GEMV_CHUNKS * gemv.MAX_ROWS


def qlinear_gemv(x: Any, qw: Any, bias: Any = None) -> gp.GPUArray:
    """The GEMV kernel over the packed weights (see the module docstring)."""
    _check(x, qw, bias)
    n, k = qw.shape
    rows = x.size // k
    if rows <= gemv.MAX_ROWS:
        return gemv.run(x, qw.q, qw.scales, qw.format, n, k, qw.group_size, bias)
    flat, out = x.reshape(rows, k), gp.empty((rows, n), x.dtype)
    for r in range(0, rows, gemv.MAX_ROWS):
        out[r : r + gemv.MAX_ROWS] = gemv.run(flat[r : r + gemv.MAX_ROWS], qw.q, qw.scales, qw.format, n, k, qw.group_size, bias)
    return out.reshape(*x.shape[:-1], n)
