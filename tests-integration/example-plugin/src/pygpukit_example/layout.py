"""Which array layouts the example's kernels read in place: "row-strided"
arrays, whose rows (the last axis) are unit-stride and evenly spaced."""

from __future__ import annotations

import pygpukit as gp

VEC_BYTES = 16  # one vector access


def rows_of(a: gp.GPUArray) -> tuple[int, int] | None:
    """(rows, row stride in elements) of ``a`` (at least one axis) read as rows
    of its last axis, or None when its rows are not unit-stride or not evenly
    spaced (a transpose, a[:, ::2]). A C-contiguous array has the row stride
    shape[-1]; a slice a[:, :n] of a wider array the wider row; a[::2] twice that."""
    shape, strides, item = a.shape, a.strides, a.itemsize
    if shape[-1] > 1 and strides[-1] != item:
        return None
    rows, ld, span = 1, None, None
    for n, st in zip(reversed(shape[:-1]), reversed(strides[:-1])):  # the innermost outer axis first
        if n == 1:
            continue  # its stride is never used
        if st % item or (span is not None and st != span):
            return None
        if ld is None:
            ld = st // item
        rows *= n
        span = st * n
    return rows, shape[-1] if ld is None else ld


def vector_width(itemsize: int, ptr_offsets: tuple[int, ...], *multiples: int) -> int:
    """Elements per 16-byte access: 16 // itemsize when every pointer is 16-byte
    aligned (``ptr_offsets``: addresses modulo 16) and every count or stride in
    ``multiples`` is a multiple of it, else 1."""
    vec = VEC_BYTES // itemsize
    if any(ptr_offsets) or any(m % vec for m in multiples):
        return 1
    return vec
