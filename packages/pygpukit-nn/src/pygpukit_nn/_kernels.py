"""What the package's kernels share on the host: their CUDA sources (package
data, read once) and the (rows, n) layout with a row stride that the row
kernels take."""

from __future__ import annotations

import functools
import os

import pygpukit as gp

KERNEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")


@functools.cache
def source(name: str) -> str:
    """The text of kernels/<name>.cu."""
    with open(os.path.join(KERNEL_DIR, f"{name}.cu")) as f:
        return f.read()


def rows_of(a: gp.GPUArray) -> tuple[gp.GPUArray, int]:
    """``a`` as rows of its last axis with one row stride (in elements): ``a``
    itself when the last axis is contiguous and the leading axes collapse to
    one stride (a slice of a wider row, say), else a contiguous copy."""
    n = a.shape[-1]
    item = a.dtype.itemsize
    s = a.strides
    last_ok = n == 1 or s[-1] == item
    if a.ndim == 1 and last_ok:
        return a, n
    lead_ok = all(s[i] == s[i + 1] * a.shape[i + 1] for i in range(a.ndim - 2))
    if a.ndim >= 2 and last_ok and lead_ok and s[-2] >= 0 and s[-2] % item == 0:
        return a, (s[-2] // item if a.shape[-2] > 1 else n)
    return a.copy(), n
