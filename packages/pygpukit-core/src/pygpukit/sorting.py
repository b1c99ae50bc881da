"""Sorting and searching: sort, argsort, topk, unique, searchsorted.

Every dtype is sorted as the unsigned integer of its width, through an
order-preserving key transform (kernels/sort.cu has the same transforms):
signed integers flip their sign bit, floats flip the sign bit of positives and
every bit of negatives. Two float keys:

- the *order* key (argsort, topk, unique, searchsorted): every NaN maps to
  the top key and -0.0 to +0.0's, so NaNs sort last and equal values keep
  their input order, as NumPy's stable sort;
- the *value* key (sort): a bijection (the flipped bits rotated down by the
  number of negative NaN codes, which moves those NaNs to the top), so sorted
  keys decode to the input's bits. The only difference from NumPy is within
  runs that compare equal: -0.0 comes before +0.0 and NaNs are ordered by
  their bit patterns, which only their sign bits and payloads show.

``descending=True`` inverts the keys: NaN first (it is the largest value, as
in ``torch.sort``), and still stable: equal elements keep their input order
(not the reverse of an ascending sort). That is what the array API's
reference wrapper over NumPy does (``flip(argsort(flip(x)))``); the standard
itself leaves the place of NaNs and of -0.0 vs +0.0 to the implementation.

The GPU sort is an LSD radix sort, 8-bit digits (kernels/sort.cu); the CPU
backend sorts the same keys with NumPy's stable sort, so both give the same
results bit for bit. The GPU path sorts rows of fewer than 2^31 elements. The
key transforms and their NumPy twins are in pygpukit/_backend/sort.py.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray, _normalize_axis
from .creation import asarray, from_numpy, full
from .selection import gather, nonzero, take
from .shape import concatenate
from .streams import current_stream_handle, on_stream

# -- the public functions -----------------------------------------------------------


def _check(a: Any, name: str) -> None:
    if not isinstance(a, GPUArray):
        raise TypeError(f"{name} expects a GPUArray, got {type(a).__name__}")
    if _dtypes.is_complex(a.dtype):
        raise TypeError(f"{name} is not supported for complex input (complex numbers have no order)")


def _rows(a: GPUArray, axis: Any) -> tuple[GPUArray, int, int, Any]:
    """(contiguous rows, number of rows, row length, restore): ``axis`` moved last (the
    flattened array when None); restore(flat, length) puts a result of ``length`` per row back."""
    if axis is None:
        flat = a.reshape(-1)
        return (flat if flat.is_contiguous else flat.copy()), 1, a.size, lambda out, k: out.reshape((k,))
    ax = _normalize_axis(axis, a.ndim)
    kept = [i for i in range(a.ndim) if i != ax]
    moved = a.transpose([*kept, ax])
    src = moved if moved.is_contiguous else moved.copy()
    lead = moved.shape[:-1]
    inverse = _indexing.inverse_permutation([*kept, ax])

    def restore(out: GPUArray, k: int) -> GPUArray:
        res = out.reshape((*lead, k))
        return res if ax == a.ndim - 1 else res.transpose(inverse).copy()

    return src, math.prod(lead), a.shape[ax], restore


def _sort(a: Any, axis: Any, descending: bool, indices: bool, name: str) -> GPUArray:
    _check(a, name)
    src, rows, n, restore = _rows(a, axis)
    return restore(_sort_rows(src, rows, n, bool(descending), indices), n)


def _sort_rows(src: GPUArray, rows: int, n: int, descending: bool, indices: bool) -> GPUArray:
    """Each row of contiguous ``src`` viewed as (rows, n) sorted, flat: the values, or
    (``indices``) the int64 positions that sort it."""
    stream = current_stream_handle()
    out = GPUArray._empty((rows * n,), _dtypes.int64 if indices else src.dtype, stream)
    _runtime.get().ops.sort_rows(src, rows, n, descending, indices, out, stream)
    return out


@on_stream
def sort(a: GPUArray, axis: int | None = -1, *, descending: bool = False, stable: bool = True) -> GPUArray:
    """A sorted copy along ``axis`` (the flattened array when None). Always stable;
    NaN last (first when ``descending``), see the module docstring for -0.0 and NaN bits."""
    return _sort(a, axis, descending, False, "sort")


@on_stream
def argsort(a: GPUArray, axis: int | None = -1, *, descending: bool = False, stable: bool = True) -> GPUArray:
    """The int64 indices that sort ``a`` along ``axis``; stable (ties keep index order, also
    when ``descending``), NaN last (first when ``descending``), -0.0 equal to +0.0."""
    return _sort(a, axis, descending, True, "argsort")


# Rows at least this long with k at most 1/8 of them take the radix select (topk_select);
# others sort the whole row.
_SELECT_MIN_ROW = 8192


def _gather_rows(x: GPUArray, idx: GPUArray) -> GPUArray:
    """out[r, j] = x[r, idx[r, j]] for contiguous 2-D x and idx whose indices are known to be in
    range (they come from our kernels): no bounds check (which would synchronize), no copy of x."""
    rows, k = idx.shape
    return gather(x, idx, (rows, k), x.shape[1], k, 1, True)


def _gather(x: GPUArray, idx: GPUArray) -> GPUArray:
    """x[idx] for contiguous 1-D x and in-range indices idx (see _gather_rows)."""
    return gather(x, idx, idx.shape, x.size, max(idx.size, 1), 1, False)


@on_stream
def topk(a: GPUArray, k: int, axis: int = -1, *, largest: bool = True, sorted: bool = True) -> tuple[GPUArray, GPUArray]:
    """(values, int64 indices) of the ``k`` largest (smallest) elements along ``axis``, as
    ``torch.topk``. NaN counts as the largest value; among equal values the lower indices win.
    ``sorted=True``: in sorted order (ties by index); otherwise in an unspecified order."""
    _check(a, "topk")
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"topk: k must be an integer, got {type(k).__name__}") from None
    if axis is None:
        raise TypeError("topk: axis must be an integer")
    src, rows, n, restore = _rows(a, axis)
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for a dimension of size {n}")
    if rows * k == 0:
        return restore(GPUArray._empty((0,), a.dtype), k), restore(GPUArray._empty((0,), _dtypes.int64), k)
    x = src.reshape((rows, n))
    if n >= _SELECT_MIN_ROW and k * 8 <= n:
        stream = current_stream_handle()
        idx = GPUArray._empty((rows, k), _dtypes.int64, stream)
        _runtime.get().ops.topk_select(src, rows, n, k, bool(largest), idx, stream)
        vals = _gather_rows(x, idx)
        if sorted:
            perm = _sort_rows(vals, rows, k, bool(largest), True).reshape((rows, k))
            idx = _gather_rows(idx, perm)
            vals = _gather_rows(vals, perm)
    else:
        perm = _sort_rows(src, rows, n, bool(largest), True).reshape((rows, n))
        idx = perm[:, :k].copy()
        vals = _gather_rows(x, idx)
    return restore(vals.reshape(-1), k), restore(idx.reshape(-1), k)


@on_stream
def unique(
    a: GPUArray, *, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False, axis: int | None = None
) -> Any:
    """The sorted unique elements of the flattened array, as ``numpy.unique`` (NumPy 2:
    NaNs collapse into one, -0.0 equals +0.0; ``inverse`` has ``a``'s shape). Reads the
    number of unique elements back to the host (one synchronization)."""
    _check(a, "unique")
    if axis is not None:
        raise ValueError(f"unique: only axis=None (the flattened array) is supported, got axis={axis!r}")
    flat = a.reshape(-1)
    flat = flat if flat.is_contiguous else flat.copy()
    n = flat.size
    empty = GPUArray._empty((0,), _dtypes.int64)
    if n == 0:
        uniq, index, inverse, counts = flat, empty, GPUArray._empty(a.shape, _dtypes.int64), empty
    else:
        perm = _sort_rows(flat, 1, n, False, True) if return_index else None
        s = _gather(flat, perm) if perm is not None else _sort_rows(flat, 1, n, False, False)
        stream = current_stream_handle()
        flags = GPUArray._empty((n,), _dtypes.bool_, stream)
        _runtime.get().ops.unique_flags(s, flags, stream)
        (pos,) = nonzero(flags)
        uniq = _gather(s, pos)
        index = _gather(perm, pos) if perm is not None else empty
        inverse = _searchsorted(uniq, flat, False).reshape(a.shape) if return_inverse else empty
        counts = empty
        if return_counts:  # the distance from each run's start to the next one's
            counts = concatenate([pos[1:], full((1,), n, _dtypes.int64)]) - pos
    extra = [x for x, want in ((index, return_index), (inverse, return_inverse), (counts, return_counts)) if want]
    return (uniq, *extra) if extra else uniq


@on_stream
def searchsorted(a: GPUArray, v: Any, side: str = "left", sorter: Any = None) -> GPUArray:
    """Indices where the elements of ``v`` would be inserted into the sorted 1-D ``a``
    to keep it sorted (``side="right"``: after equal elements), int64 of ``v``'s shape, as
    ``numpy.searchsorted``; NaN sorts last. Both are compared in their common dtype."""
    _check(a, "searchsorted")
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got {a.ndim} dimensions")
    if side not in ("left", "right"):
        raise ValueError(f"search side must be 'left' or 'right' (got {side!r})")
    if sorter is not None:
        order = sorter if isinstance(sorter, GPUArray) else asarray(np.asarray(sorter))
        if order.dtype.kind not in "iu":
            raise TypeError("sorter must only contain integers")
        if order.shape != a.shape:
            raise ValueError("sorter.size must equal a.size")
        if a.size and not (0 <= int(order.min().item()) and int(order.max().item()) < a.size):
            raise ValueError("Sorter index out of range.")
        a = take(a, order)
    if isinstance(v, GPUArray):
        dt = _dtypes.result_type(a, v)
    else:
        host = np.asarray(v)
        try:
            dt = _dtypes.result_type(a, v if isinstance(v, (bool, int, float)) else host)
        except OverflowError:  # a Python int outside a's range: compare in a wider integer type
            dt = _dtypes.result_type(a, host)
        v = from_numpy(np.array(host, order="C"))  # (asarray would make a 0-d value 1-D)
    shape = v.shape
    hay = a.astype(dt, copy=False)
    needles = v.astype(dt, copy=False).reshape(-1)
    needles = needles if needles.is_contiguous else needles.copy()
    return _searchsorted(hay if hay.is_contiguous else hay.copy(), needles, side == "right").reshape(shape)


def _searchsorted(a: GPUArray, v: GPUArray, right: bool) -> GPUArray:
    """int64 insertion positions of contiguous ``v`` in the sorted contiguous 1-D ``a`` of v's dtype."""
    stream = current_stream_handle()
    out = GPUArray._empty((v.size,), _dtypes.int64, stream)
    if v.size:
        _runtime.get().ops.searchsorted(a, v, right, out, stream)
    return out
