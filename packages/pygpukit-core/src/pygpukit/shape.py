"""Shape functions as in NumPy / the array API; each returns a view when it can."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from . import _dtypes
from .array import GPUArray, _normalize_axis, broadcast_to, expand_dims
from .creation import empty, full
from .streams import on_stream

__all__ = [
    "ascontiguousarray", "broadcast_to", "concatenate", "expand_dims", "flip", "pad", "permute_dims", "ravel",
    "repeat", "reshape", "roll", "split", "squeeze", "stack", "swapaxes", "tile", "transpose",
]  # fmt: skip


@on_stream
def reshape(a: GPUArray, shape: Any) -> GPUArray:
    return a.reshape(shape)


@on_stream
def transpose(a: GPUArray, axes: Any = None) -> GPUArray:
    return a.transpose(axes)


@on_stream
def permute_dims(a: GPUArray, axes: Any) -> GPUArray:
    """The array API name of transpose with explicit axes."""
    return a.transpose(tuple(axes))


@on_stream
def swapaxes(a: GPUArray, axis1: int, axis2: int) -> GPUArray:
    return a.swapaxes(axis1, axis2)


@on_stream
def squeeze(a: GPUArray, axis: Any = None) -> GPUArray:
    return a.squeeze(axis)


@on_stream
def ravel(a: GPUArray) -> GPUArray:
    return a.ravel()


@on_stream
def ascontiguousarray(a: GPUArray) -> GPUArray:
    """``a`` itself when C-contiguous, else a contiguous copy."""
    return a if a.is_contiguous else a.copy()


def _axis(axis: int, ndim: int) -> int:
    return _normalize_axis(axis, ndim)


@on_stream
def concatenate(arrays: Any, axis: int | None = 0, dtype: Any = None) -> GPUArray:
    """Join arrays along an existing axis (``axis=None``: flatten first), with NumPy's dtype promotion."""
    arrs = list(arrays)
    if not arrs:
        raise ValueError("need at least one array to concatenate")
    if not all(isinstance(a, GPUArray) for a in arrs):
        raise TypeError("concatenate expects a sequence of GPUArrays")
    if axis is None:
        arrs = [a.reshape(-1) for a in arrs]
        axis = 0
    nd = arrs[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    if any(a.ndim != nd for a in arrs):
        raise ValueError("all the input arrays must have same number of dimensions")
    ax = _axis(axis, nd)
    for a in arrs[1:]:
        for i in range(nd):
            if i != ax and a.shape[i] != arrs[0].shape[i]:
                raise ValueError(
                    f"all the input array dimensions except for the concatenation axis must match exactly, but along "
                    f"dimension {i}, the array at index 0 has size {arrs[0].shape[i]} and another has size {a.shape[i]}"
                )
    dt = _dtypes.result_type(*arrs) if dtype is None else _dtypes.as_dtype(dtype)
    shape = list(arrs[0].shape)
    shape[ax] = sum(a.shape[ax] for a in arrs)
    out = empty(tuple(shape), dt)
    pos = 0
    for a in arrs:
        index = (slice(None),) * ax + (slice(pos, pos + a.shape[ax]),)
        out[index] = a
        pos += a.shape[ax]
    return out


@on_stream
def stack(arrays: Any, axis: int = 0) -> GPUArray:
    """Join arrays of one shape along a new axis."""
    arrs = list(arrays)
    if not arrs:
        raise ValueError("need at least one array to stack")
    if any(not isinstance(a, GPUArray) or a.shape != arrs[0].shape for a in arrs):
        raise ValueError("all input arrays must have the same shape")
    ax = _axis(axis, arrs[0].ndim + 1)
    return concatenate([expand_dims(a, ax) for a in arrs], axis=ax)


@on_stream
def split(a: GPUArray, indices_or_sections: Any, axis: int = 0) -> list[GPUArray]:
    """Views of ``a`` split along ``axis`` into equal sections or at the given indices."""
    ax = _axis(axis, a.ndim)
    n = a.shape[ax]
    if isinstance(indices_or_sections, int):
        if indices_or_sections <= 0 or n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step)) if step else [0] * (indices_or_sections + 1)
    else:
        bounds = [0, *indices_or_sections, n]
    pre = (slice(None),) * ax
    return [a[pre + (slice(lo, hi),)] for lo, hi in itertools.pairwise(bounds)]


@on_stream
def flip(a: GPUArray, axis: Any = None) -> GPUArray:
    """A view with the order of elements reversed along ``axis`` (all axes when None)."""
    axes = range(a.ndim) if axis is None else [_axis(x, a.ndim) for x in (axis if isinstance(axis, tuple) else (axis,))]
    key = [slice(None)] * a.ndim
    for x in axes:
        key[x] = slice(None, None, -1)
    return a[tuple(key)]


@on_stream
def roll(a: GPUArray, shift: int, axis: int | None = None) -> GPUArray:
    """Elements shifted cyclically along ``axis`` (flattened when None); a new array."""
    if axis is None:
        return roll(a.reshape(-1), shift, 0).reshape(a.shape)
    ax = _axis(axis, a.ndim)
    n = a.shape[ax]
    if n == 0:
        return a.copy()
    s = shift % n
    pre = (slice(None),) * ax
    return concatenate([a[pre + (slice(n - s, n),)], a[pre + (slice(0, n - s),)]], axis=ax)


@on_stream
def tile(a: GPUArray, reps: Any) -> GPUArray:
    """``a`` repeated ``reps`` times along each axis (NumPy's tile)."""
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = max(a.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    base = a.reshape((1,) * (nd - a.ndim) + a.shape)
    # (r0, s0, r1, s1, ...) broadcast view, then one copy into the result
    view = broadcast_to(
        base.reshape(tuple(x for d in base.shape for x in (1, d))), tuple(x for r, d in zip(reps, base.shape) for x in (r, d))
    )
    return view.copy().reshape(tuple(r * d for r, d in zip(reps, base.shape)))


@on_stream
def repeat(a: GPUArray, repeats: int, axis: int | None = None) -> GPUArray:
    """Each element repeated ``repeats`` times along ``axis`` (flattened when None)."""
    if not isinstance(repeats, int) or repeats < 0:
        raise ValueError("repeats must be a non-negative int (per-element counts are not supported)")
    if axis is None:
        a, axis = a.reshape(-1), 0
    ax = _axis(axis, a.ndim)
    expanded = expand_dims(a, ax + 1)
    shape = list(expanded.shape)
    shape[ax + 1] = repeats
    out_shape = list(a.shape)
    out_shape[ax] *= repeats
    return broadcast_to(expanded, tuple(shape)).copy().reshape(tuple(out_shape))


@on_stream
def pad(a: GPUArray, pad_width: Any, constant_values: Any = 0) -> GPUArray:
    """Constant padding, NumPy's ``pad(mode="constant")``."""
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (a.ndim, 2)) if a.ndim else np.zeros((0, 2), np.int64)
    if (widths < 0).any():
        raise ValueError("index can't contain negative values")
    shape = tuple(int(d + lo + hi) for d, (lo, hi) in zip(a.shape, widths))
    out = full(shape, constant_values, a.dtype)
    out[tuple(slice(int(lo), int(lo) + d) for d, (lo, _) in zip(a.shape, widths))] = a
    return out
