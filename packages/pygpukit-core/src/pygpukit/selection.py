"""Gathering by integer indices: take, take_along_axis, and the integer-array
case of ``a[idx]``. Index bounds are checked before the kernel runs, which
reads the indices' min and max back to the host (one synchronization), as
NumPy raises IndexError for an index out of bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from .array import GPUArray, _normalize_axis, broadcast_to


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
