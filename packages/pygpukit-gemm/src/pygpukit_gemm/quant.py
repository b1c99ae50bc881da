"""Weight-only quantization with group scales (GPTQ/AWQ-style symmetric layout)
and ``gp.ops.qlinear``, the Linear layer over such weights.

``quantize_weight(w, bits=8|4, group_size=128)`` turns a Linear weight w
(out_features N, in_features K) into ``QuantizedWeight``: int8 values q[N, K],
or int4 values packed two per byte (k even in the low nibble, each nibble the
value + 8), and float16 scales[N, K / group_size] = max |w| over the group /
127 (int8) or / 7 (int4); values are round(w / scale) clipped to -127..127 or
-8..7. Works on both backends (it is made of core's ops).

``qlinear(x, qw, bias=None)`` = x @ dequantize(qw).T + bias. With pygpukit-gemm
on a CUDA GPU (SM 80+), up to 8 rows of activations (decode) run a GEMV kernel
that reads the packed weights once (``kernels/gemv_q.cu``); more rows, or the
CPU, dequantize and take ``gp.linear``.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import _runtime
from pygpukit.streams import current_stream_handle

MAX_ROWS = 8  # rows of activations the GEMV kernel takes


@dataclass(frozen=True)
class QuantizedWeight:
    q: gp.GPUArray  # int8 [N, K], or uint8 [N, K // 2] for 4 bits
    scales: gp.GPUArray  # float16 [N, K // group_size]
    bits: int
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        """(out_features, in_features) of the original weight."""
        n, packed = self.q.shape
        return n, packed * (2 if self.bits == 4 else 1)


def quantize_weight(w: Any, bits: int = 8, group_size: int = 128) -> QuantizedWeight:
    """Symmetric per-group quantization of a Linear weight (see the module docstring)."""
    if not isinstance(w, gp.GPUArray) or w.ndim != 2:
        raise TypeError("quantize_weight: w must be a 2-D GPUArray (out_features, in_features)")
    if w.dtype.kind != "f" and w.dtype not in (np.dtype(gp.bfloat16),):
        raise TypeError(f"quantize_weight: w must be a float array, got {w.dtype}")
    if bits not in (4, 8):
        raise ValueError(f"quantize_weight: bits must be 4 or 8, got {bits}")
    if group_size <= 0 or group_size % 32:
        raise ValueError(f"quantize_weight: group_size must be a positive multiple of 32, got {group_size}")
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"quantize_weight: in_features ({k}) must be a multiple of group_size ({group_size})")
    qmax = 127 if bits == 8 else 7
    groups = w.astype(gp.float32).reshape(n, k // group_size, group_size)
    amax = gp.max(gp.abs(groups), axis=2, keepdims=True)
    scales = gp.where(amax > 0, amax / qmax, 1.0).astype(gp.float16)
    if not bool(gp.all(gp.isfinite(scales))):
        raise ValueError("quantize_weight: a group's scale overflows float16 (|w| above 8.3e6 for int8)")
    values = gp.clip(gp.rint(groups / scales.astype(gp.float32)), -qmax - (bits == 4), qmax)
    if bits == 8:
        q = values.astype(gp.int8).reshape(n, k)
    else:
        nib = (values + 8).astype(gp.uint8).reshape(n, k // 2, 2)
        q = nib[:, :, 0] | (nib[:, :, 1] << 4)
    return QuantizedWeight(q, scales.reshape(n, k // group_size), bits, group_size)


def dequantize_weight(qw: QuantizedWeight, dtype: Any = gp.float32) -> gp.GPUArray:
    """The weight ``qw`` stands for, (N, K) in ``dtype``."""
    n, k = qw.shape
    if qw.bits == 8:
        values = qw.q.astype(gp.float32)
    else:
        lo = (qw.q & 15).astype(gp.float32) - 8
        hi = (qw.q >> 4).astype(gp.float32) - 8
        values = gp.stack([lo, hi], axis=2).reshape(n, k)
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


def decode_rows(x: Any, qw: Any, bias: Any = None) -> bool:
    """The GEMV kernel's case: at most MAX_ROWS rows of float activations."""
    return isinstance(qw, QuantizedWeight) and x.ndim >= 1 and x.size // max(x.shape[-1], 1) <= MAX_ROWS


@cache
def _kernel(rows: int, int4: bool, ctype: str) -> Any:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", "gemv_q.cu")) as f:
        source = f.read()
    return gp.jit(
        source,
        f"pgk::gemv_q<{rows}, {'true' if int4 else 'false'}, {ctype}>",
        signature="const void* x, const void* q, const void* scales, void* y, int N, int K, int G",
        name="gemv_q.cu",
    )


_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
WARPS, COLS = 4, 4  # gemv_q.cu kWarps, kCols: a block computes WARPS * COLS output columns


# Launches prepared per call signature: (CUfunction, grid, output shape).
_launches: dict[tuple, tuple[int, int, tuple[int, ...]]] = {}
_PARAMS = struct.Struct("@PPPPiii")  # gemv_q's parameters, in the CUDA ABI layout


def gemv(x: Any, qw: Any, bias: Any = None) -> gp.GPUArray:
    """The GEMV kernel for up to MAX_ROWS rows (see the module docstring). A
    repeated call signature goes straight to the launch: the host must stay
    ahead of a ~15-40 us kernel."""
    try:
        key = (x._shape, x._dtype, x._strides, x._ptr & 15, qw.bits, qw.q._shape, qw.group_size)
        fn, grid, out_shape = _launches[key]
    except (KeyError, AttributeError):
        return _gemv_first(x, qw, bias)
    n, k = qw.shape
    rt = _runtime.get()
    stream = current_stream_handle()
    y = gp.GPUArray._empty(out_shape, x._dtype, stream)
    rt.native.launch(
        fn, grid, 1, 1, WARPS * 32, 1, 1, 0, stream, _PARAMS.pack(x._ptr, qw.q._ptr, qw.scales._ptr, y._ptr, n, k, qw.group_size)
    )
    if bias is None:
        return y
    _check(x, qw, bias)
    return y + bias.astype(x.dtype, copy=False)


def _gemv_first(x: Any, qw: Any, bias: Any) -> gp.GPUArray:
    _check(x, qw, bias)
    n, k = qw.shape
    lead = x.shape[:-1]
    rows = x.size // k
    x2 = x.reshape(rows, k)
    direct = x2.is_contiguous and x2.data_ptr == x.data_ptr and x2.data_ptr % 16 == 0
    if not direct:
        x2 = x2.copy()
    y = gp.empty((rows, n), x.dtype)
    if rows:
        kernel = _kernel(rows, qw.bits == 4, _CTYPES[np.dtype(x.dtype)])
        grid = -(-n // (WARPS * COLS))
        kernel(grid, WARPS * 32, x2, qw.q, qw.scales, y, n, k, qw.group_size)
        if direct:
            fn = kernel._function(_runtime.get())
            _launches[x._shape, x._dtype, x._strides, x._ptr & 15, qw.bits, qw.q._shape, qw.group_size] = (fn, grid, (*lead, n))
    y = y.reshape(*lead, n)
    return y if bias is None else y + bias.astype(x.dtype, copy=False)
