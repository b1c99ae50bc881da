"""fp8 quantization with float32 scales, the inputs of ``gp.ops.scaled_mm``.

``quantize_fp8(x, dtype, granularity, block)`` splits a 2-D float array x (M, K)
into groups and gives each one float32 scale = amax / finfo(dtype).max, where
amax is the largest finite |x| of the group (a group without one gets scale
1); the values are x / scale, clipped to the format's largest finite value
and cast (round to nearest even), so inf saturates to +-max and NaN stays NaN.
The groups:

- ``"tensor"``: the whole array, one scale of shape ();
- ``"row"``: each row, scales (M, 1) (torch._scaled_mm's row-wise operand a);
- ``"block"``: tiles of ``block`` = (bm, bk), scales (ceil(M / bm), ceil(K / bk));
  the last row and column of tiles may be partial. DeepGEMM's recipe is
  (1, 128) for activations and (128, 128) for weights.

``dequantize_fp8(t)`` gives data * scale back. Made of core's ops, so both
backends run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp

FP8 = (np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2))
INPUTS = (np.dtype(gp.float32), np.dtype(gp.float16), np.dtype(gp.bfloat16))
GRANULARITIES = ("tensor", "row", "block")


@dataclass(frozen=True)
class Fp8Tensor:
    """An fp8 matrix and its float32 scales: x ~= data * scale, groupwise."""

    data: gp.GPUArray  # (M, K) float8_e4m3fn or float8_e5m2
    scale: gp.GPUArray  # float32: () per tensor, (M, 1) per row, (ceil(M/bm), ceil(K/bk)) per block
    granularity: str
    block: tuple[int, int]  # the shape of a group: (M, K) per tensor, (1, K) per row

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape


def _groups(x: Any, granularity: str, block: Any) -> tuple[int, int]:
    m, k = x.shape
    if granularity == "tensor":
        return m, k
    if granularity == "row":
        return 1, k
    if granularity != "block":
        raise ValueError(f"quantize_fp8: granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if not isinstance(block, (tuple, list)) or len(block) != 2 or not all(isinstance(b, int) and not isinstance(b, bool) for b in block):
        raise TypeError(f"quantize_fp8: block must be two ints (rows, columns), got {block!r}")
    if block[0] < 1 or block[1] < 1:
        raise ValueError(f"quantize_fp8: block sizes must be positive, got {tuple(block)}")
    return block[0], block[1]


def quantize_fp8(x: Any, dtype: Any = gp.float8_e4m3fn, granularity: str = "tensor", block: tuple[int, int] = (128, 128)) -> Fp8Tensor:
    """Quantize x (M, K) to fp8 with one float32 scale per group (see the module docstring)."""
    if not isinstance(x, gp.GPUArray):
        raise TypeError(f"quantize_fp8: x must be a GPUArray, got {type(x).__name__}")
    if x.dtype not in INPUTS:
        raise TypeError(f"quantize_fp8: x must be float32, float16 or bfloat16, got {x.dtype}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in FP8:
        raise TypeError(f"quantize_fp8: dtype must be float8_e4m3fn or float8_e5m2, got {dtype!r}")
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"quantize_fp8: x must be a non-empty 2-D array (M, K), got shape {x.shape}")
    bm, bk = _groups(x, granularity, block)
    m, k = x.shape
    gm, gk = -(-m // bm), -(-k // bk)
    fmax = float(gp.finfo(dt).max)
    x32 = x.astype(gp.float32)
    if gm * bm != m or gk * bk != k:  # partial groups: padded with zeros, which leave amax as it is
        x32 = gp.pad(x32, ((0, gm * bm - m), (0, gk * bk - k)))
    groups = x32.reshape(gm, bm, gk, bk)
    amax = gp.max(gp.where(gp.isfinite(groups), gp.abs(groups), 0.0), axis=(1, 3), keepdims=True)
    scale = amax / fmax
    scale = gp.where(scale > 0, scale, 1.0).astype(gp.float32)  # zero groups (or amax / max below float32)
    values = gp.clip(groups / scale, -fmax, fmax).reshape(gm * bm, gk * bk)[:m, :k]
    shapes = {"tensor": (), "row": (m, 1), "block": (gm, gk)}
    return Fp8Tensor(values.astype(dt), scale.reshape(shapes[granularity]), granularity, (bm, bk))


def expand_scale(scale: gp.GPUArray, shape: tuple[int, int], block: tuple[int, int]) -> gp.GPUArray:
    """Group scales (any shape holding ceil(M/bm) x ceil(K/bk) values) as an
    array that broadcasts against ``shape`` (M, K): repeated over the axes with
    more than one group, cut back to the partial last group."""
    (m, k), (bm, bk) = shape, block
    s = scale.reshape(-(-m // bm), -(-k // bk))
    if s.shape[0] > 1:
        s = gp.repeat(s, bm, axis=0)[:m]
    if s.shape[1] > 1:
        s = gp.repeat(s, bk, axis=1)[:, :k]
    return s


def dequantize_fp8(t: Fp8Tensor, dtype: Any = gp.float32) -> gp.GPUArray:
    """data * scale, groupwise, computed in float32 and returned in ``dtype``."""
    if not isinstance(t, Fp8Tensor):
        raise TypeError(f"dequantize_fp8: expects an Fp8Tensor (from quantize_fp8), got {type(t).__name__}")
    m, k = t.data.shape
    y = t.data.astype(gp.float32) * expand_scale(t.scale, (m, k), t.block)
    return y.astype(dtype)
