"""What the ops share: the float dtypes the kernels take, the (rows, n) view
with a row stride, block sizes, and the kernels' launch."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from .. import _triton
from ..kernels import get
from ..launcher import launch

FLOATS = (np.dtype(gp.float16), np.dtype(gp.bfloat16), np.dtype(gp.float32))
HALF = (np.dtype(gp.float16), np.dtype(gp.bfloat16))
MAX_ROW = 32768  # longest row a row kernel keeps in registers (one block per row)

__all__ = ["FLOATS", "HALF", "MAX_ROW", "contiguous", "get", "interpreting", "launch", "next_pow2", "rows_of"]


def interpreting() -> bool:
    return _triton.interpreting()


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def rows_of(a: gp.GPUArray) -> tuple[gp.GPUArray, int]:
    """``a`` as rows of its last axis with one row stride in elements: ``a`` itself
    when its last axis is unit-stride and the leading axes collapse to one stride,
    else a contiguous copy."""
    n, item, s = a.shape[-1], a.itemsize, a.strides
    last_ok = n == 1 or s[-1] == item
    if a.ndim == 1 and last_ok:
        return a, n
    lead_ok = all(s[i] == s[i + 1] * a.shape[i + 1] for i in range(a.ndim - 2))
    if a.ndim >= 2 and last_ok and lead_ok and s[-2] >= 0 and s[-2] % item == 0:
        return a, (s[-2] // item if a.shape[-2] > 1 else n)
    return a.copy(), n


def contiguous(a: Any) -> Any:
    return a if a is None or a.is_contiguous else a.copy()


def row_blocks(rows: int, n: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) of a row kernel: whole rows of BLOCK_N >= n,
    about 4096 elements per block for short rows."""
    bn = next_pow2(n)
    bm = max(1, min(4096 // bn, next_pow2(rows)))
    elems = bm * bn
    return bm, bn, 4 if elems <= 4096 else 8 if elems <= 16384 else 16


def takes_rows(x: Any) -> bool:
    """A float16 / bfloat16 / float32 array whose rows fit a row kernel."""
    return isinstance(x, gp.GPUArray) and x.dtype in FLOATS and x.ndim > 0 and x.size > 0 and x.shape[-1] <= MAX_ROW
