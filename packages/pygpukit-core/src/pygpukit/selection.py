"""Gathering and scattering by integer indices: take, take_along_axis, and the
advanced cases of ``a[key]`` and ``a[key] = v``. Index bounds are checked before the kernel runs, which
reads the indices' min and max back to the host (one synchronization), as
NumPy raises IndexError for an index out of bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray, _normalize_axis, broadcast_to
from .streams import on_stream


def _index_array(indices: Any) -> GPUArray:
    from .creation import asarray

    idx = indices if isinstance(indices, GPUArray) else asarray(np.asarray(indices))
    if idx.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer type, got {idx.dtype}")
    return idx if idx.is_contiguous else idx.copy()


def _check_bounds(idx: GPUArray, n: int, axis: int) -> None:
    if idx.size == 0:
        return
    lo, hi = int(idx.min().item()), int(idx.max().item())
    bad = lo if lo < -n else (hi if hi >= n else None)
    if bad is not None:
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")


@on_stream
def nonzero(a: GPUArray) -> tuple[GPUArray, ...]:
    """Indices of the non-zero (true) elements, one int64 array per dimension, in C
    order. The number of results is read back to the host (one synchronization)."""
    if not isinstance(a, GPUArray):
        raise TypeError(f"nonzero expects a GPUArray, got {type(a).__name__}")
    if a.ndim == 0:
        raise ValueError("Calling nonzero on 0d arrays is not allowed. Use np.atleast_1d(scalar).nonzero() instead.")
    from .reductions import cumsum

    mask = a.astype(_dtypes.bool_, copy=False).reshape(-1)
    csum = cumsum(mask)
    count = int(csum[-1].item()) if csum.size else 0
    idx = _runtime.get().ops.nonzero(csum, a.shape, count)
    return tuple(idx[d] for d in range(a.ndim))


@on_stream
def count_nonzero(a: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    """Number of non-zero (true) elements, as int64."""
    from .reductions import sum as _sum

    return _sum(a.astype(_dtypes.bool_, copy=False), axis=axis, dtype=_dtypes.int64, keepdims=keepdims)


def masked(a: GPUArray, mask: GPUArray) -> GPUArray:
    """``a[mask]`` for a boolean mask of a's shape: the selected elements, 1-D, C order."""
    if mask.shape != a.shape:
        raise IndexError(f"boolean index did not match indexed array: array shape {a.shape}, mask shape {mask.shape}")
    (flat,) = nonzero(mask.reshape(-1))
    return take(a.reshape(-1), flat)


@on_stream
def take(a: GPUArray, indices: Any, axis: int | None = None) -> GPUArray:
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array when None)."""
    if not isinstance(a, GPUArray):
        raise TypeError(f"take expects a GPUArray, got {type(a).__name__}")
    idx = _index_array(indices)
    if axis is None:
        a, axis = a.reshape(-1), 0
    ax = _normalize_axis(axis, a.ndim)
    n = a.shape[ax]
    _check_bounds(idx, n, ax)
    out_shape = a.shape[:ax] + idx.shape + a.shape[ax + 1 :]
    src = a if a.is_contiguous else a.copy()
    inner = math.prod(a.shape[ax + 1 :])
    return _runtime.get().ops.gather(src, idx, out_shape, n, max(idx.size, 1), inner, False)


@on_stream
def take_along_axis(a: GPUArray, indices: Any, axis: int) -> GPUArray:
    """``out[..., j, ...] = a[..., indices[..., j, ...], ...]`` along ``axis`` (NumPy broadcasting
    of the other axes), e.g. with the result of argsort or argmax(keepdims=True)."""
    idx = _index_array(indices)
    if idx.ndim != a.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    ax = _normalize_axis(axis, a.ndim)
    n = a.shape[ax]
    _check_bounds(idx, n, ax)
    shape = list(
        np.broadcast_shapes(
            tuple(1 if i == ax else d for i, d in enumerate(a.shape)), tuple(1 if i == ax else d for i, d in enumerate(idx.shape))
        )
    )
    a_shape = tuple(n if i == ax else d for i, d in enumerate(shape))
    shape[ax] = idx.shape[ax]
    src = broadcast_to(a, a_shape).copy()
    ib = broadcast_to(idx, tuple(shape))
    ib = ib if ib.is_contiguous else ib.copy()
    inner = math.prod(shape[ax + 1 :])
    return _runtime.get().ops.gather(src, ib, tuple(shape), n, max(shape[ax], 1), inner, True)


def assign(a: GPUArray, key: Any, value: GPUArray) -> None:
    """``a[key] = value`` for the advanced keys ``__getitem__`` takes: one boolean
    mask of a's shape, or one integer array on one axis. ``value`` is cast to
    a's dtype (as NumPy's assignment does) and broadcast to the selection."""
    from .creation import asarray
    from .ufuncs import where

    v = value if value.dtype == a.dtype else value.astype(a.dtype)
    mask = _indexing.boolean_mask(key)
    if mask is not None:
        m = mask if isinstance(mask, GPUArray) else asarray(np.asarray(mask))
        if m.shape != a.shape:
            raise IndexError(f"boolean index did not match indexed array: array shape {a.shape}, mask shape {m.shape}")
        if v.ndim <= 1 and v.size == 1:  # one value: a select, no count of the mask needed
            where(m, v.reshape(()), a, out=a)
            return
        (flat,) = nonzero(m.reshape(-1))
        if v.ndim != 1 or v.shape[0] != flat.size:
            raise ValueError(
                f"NumPy boolean array indexing assignment cannot assign {v.size} input values to "
                f"the {flat.size} output values where the mask is true"
            )
        _scatter(a, flat, v, 0, flat=True)
        return
    axis, indices = _indexing.single_integer_array(key, a.ndim)
    ax = _normalize_axis(axis, a.ndim)
    idx = _index_array(indices)
    _check_bounds(idx, a.shape[ax], ax)
    shape = a.shape[:ax] + idx.shape + a.shape[ax + 1 :]
    try:
        v = broadcast_to(v, shape)
    except ValueError:
        raise ValueError(
            f"shape mismatch: value array of shape {value.shape} could not be broadcast to indexing result of shape {shape}"
        ) from None
    _scatter(a, idx, v, ax)


def _scatter(a: GPUArray, idx: GPUArray, v: GPUArray, ax: int, flat: bool = False) -> None:
    """a[..., idx, ...] = v along ``ax`` (of the flattened a when ``flat``), v of
    the selection's shape. A strided ``a`` is scattered as a copy, written back."""
    if v.size == 0:
        return
    work = a if a.is_contiguous else a.copy()
    target = work.reshape(-1) if flat else work  # a view: work is contiguous
    src = v if v.is_contiguous and v._block is not a._block else v.copy()
    inner = math.prod(target.shape[ax + 1 :])
    _runtime.get().ops.scatter(src, idx, target, target.shape[ax], max(idx.size, 1), inner)
    if work is not a:
        a[...] = work
