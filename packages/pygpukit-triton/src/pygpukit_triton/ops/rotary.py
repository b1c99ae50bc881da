"""pygpukit-nn's ``rope`` op (RoPE in place on q and k) on Triton's
``rope_inplace``: one launch for q, one for k. Takes q and k with unit
stride along head_dim (any batch, token and head strides: views of a fused
qkv projection), a contiguous float32 cos/sin cache and int32/int64
positions; the predicate leaves other operands to the native op."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import pygpukit as gp

from ._common import FLOATS, get, launch, next_pow2

_F32 = np.dtype(np.float32)


def _strides(x: gp.GPUArray, lead: int) -> tuple[int, int, int]:
    """(batch, token, head) strides in elements (batch 0 for (T, H, D))."""
    e = [s // x.itemsize for s in x.strides]
    return (0, e[0], e[1]) if lead == 1 else (e[0], e[1], e[2])


def _rotate(x: gp.GPUArray, cos_sin: Any, positions: Any, lead: tuple[int, ...], half: int, neox: bool) -> None:
    heads = x.shape[-2]
    tokens = math.prod(lead)
    if tokens == 0 or heads == 0 or cos_sin.shape[0] == 0:
        return
    xb, xs, xh = _strides(x, len(lead))
    pst = [s // positions.itemsize for s in positions.strides]
    pb, ps = (pst[0], pst[1]) if positions.ndim == 2 else (0, pst[0])
    bd = next_pow2(half)
    bh = max(1, min(next_pow2(heads), 2048 // bd))
    launch(get("rope").rope_inplace, (tokens, -(-heads // bh)), x, xb, xs, xh, cos_sin, positions, pb, ps, lead[-1], heads, half,
           cos_sin.shape[0], NEOX=neox, BLOCK_H=bh, BLOCK_D=bd, num_warps=4)  # fmt: skip


def rope(q: Any, k: Any, cos_sin: Any, positions: Any, layout: str, rotary_dim: int) -> tuple[gp.GPUArray, Any]:
    """Rotate q and k (or None) in place by their tokens' positions; returns (q, k)."""
    from pygpukit_nn.checks import check_rope

    lead, half = check_rope(q, k, cos_sin, positions, layout, rotary_dim)
    if not applies(q, k, cos_sin, positions, layout, rotary_dim):
        raise ValueError("rope (triton): needs float16/bfloat16/float32 q and k with unit stride along head_dim, "
                         "a contiguous float32 cos_sin cache and int32/int64 positions")  # fmt: skip
    _rotate(q, cos_sin, positions, lead, half, layout == "neox")
    if k is not None:
        _rotate(k, cos_sin, positions, lead, half, layout == "neox")
    return q, k


def _unit_last(x: Any) -> bool:
    return x.shape[-1] == 1 or x.strides[-1] == x.itemsize


def applies(q: Any, k: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any) -> bool:
    """Predicate: operands the kernel takes as they are (anything else, bad input
    included, goes to the native op, which reports it)."""
    return (
        all(isinstance(a, gp.GPUArray) for a in (q, cos_sin, positions))
        and (k is None or isinstance(k, gp.GPUArray))
        and q.dtype in FLOATS
        and q.ndim in (3, 4)
        and (k is None or (k.dtype == q.dtype and k.ndim == q.ndim and _unit_last(k) and all(s % k.itemsize == 0 for s in k.strides)))
        and _unit_last(q)
        and all(s % q.itemsize == 0 for s in q.strides)
        and cos_sin.dtype == _F32
        and cos_sin.is_contiguous
        and positions.dtype in (np.dtype(np.int32), np.dtype(np.int64))
        and all(s % positions.itemsize == 0 for s in positions.strides)
    )
