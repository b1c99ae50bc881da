"""pygpukit-nn's ``sdpa`` op on Triton's ``flash_fwd`` for the cases it serves:
bfloat16 / float16 q, k, v of one head_dim in HEAD_DIMS, causal or not,
GQA / MQA, layouts "bhsd" and "bshd", no explicit mask, no sliding window,
no kv_lens (the predicate leaves those to the native op)."""

from __future__ import annotations

import math
from typing import Any

import pygpukit as gp

from ._common import HALF, get, interpreting, launch

HEAD_DIMS = (16, 32, 64, 128)
MAX_HEADS = 65535  # batch * query heads: the grid's second axis
_LOG2E = 1.4426950408889634


def _elem_strides(x: gp.GPUArray) -> tuple[int, int, int]:
    return tuple(s // x.itemsize for s in x.strides[:3])  # type: ignore[return-value]


def _operand(x: gp.GPUArray) -> gp.GPUArray:
    """x (B, H, S, D) with unit stride along D (a copy otherwise)."""
    return x if x.shape[-1] == 1 or x.strides[-1] == x.itemsize else gp.ascontiguousarray(x)


def sdpa(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None, window: Any = None, kv_lens: Any = None,
         layout: Any = "bhsd") -> gp.GPUArray:  # fmt: skip
    """Attention ``softmax(scale * q k^T) v``, causal or not (see the module docstring)."""
    from pygpukit_nn.checks import check_attention

    a = check_attention(q, k, v, mask, causal, scale, window, kv_lens, layout)
    if not applies(q, k, v, mask, causal, scale, window, kv_lens, layout):
        raise ValueError(f"sdpa (triton): serves bfloat16/float16 q, k, v with head_dim in {HEAD_DIMS}, no mask, "
                         "no window and no kv_lens; the native op serves the rest")  # fmt: skip
    b, hq, sq, d = a.q.shape
    hkv, sk = a.k.shape[1], a.k.shape[2]
    out = gp.empty((b, sq, hq, d) if a.bshd else (b, hq, sq, d), q.dtype)
    if out.size == 0:
        return out
    if sk == 0:
        return gp.zeros(out.shape, q.dtype)
    qv, kv, vv = (_operand(x) for x in (a.q, a.k, a.v))
    ob, oh, os_ = (sq * hq * d, d, hq * d) if a.bshd else (hq * sq * d, sq * d, d)
    if interpreting():
        bm, bn, warps = 16, 16, 4
    else:
        bm, bn, warps = 128, 64, (4 if d <= 64 else 8)
    launch(get("attention").flash_fwd, (-(-sq // bm), b * hq), qv, kv, vv, out, *_elem_strides(qv), *_elem_strides(kv),
           *_elem_strides(vv), ob, oh, os_, hq, hq // hkv, sq, sk, a.scale * _LOG2E, CAUSAL=bool(causal), D=d, BLOCK_M=bm,
           BLOCK_N=bn, num_warps=warps, num_stages=3)  # fmt: skip
    return out


def applies(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None, window: Any = None, kv_lens: Any = None,
            layout: Any = "bhsd") -> bool:  # fmt: skip
    """Predicate: the cases the kernel serves (see the module docstring)."""
    if not all(isinstance(x, gp.GPUArray) and x.ndim == 4 for x in (q, k, v)):
        return False
    heads_axis = 2 if layout == "bshd" else 1
    return (
        mask is None
        and window is None
        and kv_lens is None
        and q.dtype in HALF
        and k.dtype == q.dtype
        and v.dtype == q.dtype
        and q.shape[-1] in HEAD_DIMS
        and k.shape[-1] == q.shape[-1]
        and v.shape[-1] == q.shape[-1]
        and q.shape[0] * q.shape[heads_axis] <= MAX_HEADS
        and (scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool) and 0 < scale < math.inf))
    )
