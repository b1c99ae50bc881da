"""softmax over the last axis on Triton's ``softmax_rows`` (core's op
``softmax``; other axes stay with core's kernel through the predicate)."""

from __future__ import annotations

from typing import Any

import pygpukit as gp

from ._common import get, launch, row_blocks, rows_of, takes_rows


def _last_axis(x: Any, axis: Any) -> bool:
    return isinstance(axis, int) and not isinstance(axis, bool) and axis in (-1, x.ndim - 1)


def softmax(x: Any, axis: Any = -1) -> gp.GPUArray:
    """exp(x - max) / sum(exp(x - max)) along the last axis; a row of -inf gives NaN."""
    if not isinstance(x, gp.GPUArray):
        raise TypeError(f"softmax() expects a GPUArray, got {type(x).__name__}")
    if not takes_rows(x) or not _last_axis(x, axis):
        raise ValueError(f"softmax (triton): takes the last axis of a non-empty float16/bfloat16/float32 array with rows of "
                         f"at most 32768 elements, got shape {x.shape}, dtype {x.dtype}, axis {axis!r}")  # fmt: skip
    xv, xs = rows_of(x)
    n = x.shape[-1]
    rows = x.size // n
    y = gp.empty(x.shape, x.dtype)
    bm, bn, warps = row_blocks(rows, n)
    launch(get("rows").softmax_rows, (-(-rows // bm),), xv, xs, y, rows, n, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
    return y


def applies(x: Any, axis: Any = -1) -> bool:
    """Predicate: the last axis of a float16 / bfloat16 / float32 array (rows <= MAX_ROW)."""
    return takes_rows(x) and _last_axis(x, axis)
