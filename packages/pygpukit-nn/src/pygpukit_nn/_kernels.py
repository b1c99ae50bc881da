"""The (rows, n) layout with a row stride that the package's row kernels take."""

from __future__ import annotations

import pygpukit as gp


def rows_of(a: gp.GPUArray) -> tuple[gp.GPUArray, int]:
    """``a`` as rows of its last axis with one row stride (in elements): ``a``
    itself when the last axis is contiguous and the leading axes collapse to
    one stride (a slice of a wider row, say), else a contiguous copy. Axes of
    size 1 are skipped: their strides say nothing about the layout."""
    n = a.shape[-1]
    item = a.dtype.itemsize
    s = a.strides
    if not (n == 1 or s[-1] == item):
        return a.copy(), n
    lead = [(a.shape[i], s[i]) for i in range(a.ndim - 1) if a.shape[i] > 1]
    if not lead:
        return a, n
    collapse = all(lead[i][1] == lead[i + 1][1] * lead[i + 1][0] for i in range(len(lead) - 1))
    row = lead[-1][1]
    if collapse and row >= 0 and row % item == 0:
        return a, row // item
    return a.copy(), n
