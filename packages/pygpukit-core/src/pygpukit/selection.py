"""Gathering and scattering by integer indices: take, take_along_axis, and the
advanced cases of ``a[key]`` and ``a[key] = v`` (this module installs item
assignment and advanced indexing on GPUArray). Index bounds are checked before
the kernel runs, which reads the indices' min and max back to the host (one
synchronization), as NumPy raises IndexError for an index out of bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray, _normalize_axis, broadcast_to
from .creation import asarray
from .reductions import cumsum
from .reductions import sum as _sum
from .streams import current_stream_handle, on_stream
from .ufuncs import add, clip, less, multiply, remainder, where


def _index_array(indices: Any) -> GPUArray:
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
    mask = a.astype(_dtypes.bool_, copy=False).reshape(-1)
    csum = cumsum(mask)
    count = int(csum[-1].item()) if csum.size else 0
    stream = current_stream_handle()
    idx = GPUArray._empty((a.ndim, count), _dtypes.int64, stream)
    _runtime.get().ops.nonzero(csum, a.shape, idx, stream)
    return tuple(idx[d] for d in range(a.ndim))


@on_stream
def count_nonzero(a: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    """Number of non-zero (true) elements, as int64."""
    return _sum(a.astype(_dtypes.bool_, copy=False), axis=axis, dtype=_dtypes.int64, keepdims=keepdims)


def masked(a: GPUArray, mask: GPUArray) -> GPUArray:
    """``a[mask]`` for a boolean mask of a's shape: the selected elements, 1-D, C order."""
    (flat,) = nonzero(mask.reshape(-1))
    return take(a.reshape(-1), flat)


@on_stream
def take(a: GPUArray, indices: Any, axis: int | None = None, mode: str = "raise") -> GPUArray:
    """Elements of ``a`` at ``indices`` along ``axis`` (of the flattened array when None).

    ``mode`` as NumPy's: "raise" checks the indices (negative ones count from
    the end; the check reads their range back, a synchronization), "clip"
    clamps them to [0, n - 1] and "wrap" takes them modulo n, on the device
    without a synchronization (so they work inside a CUDA graph capture)."""
    if not isinstance(a, GPUArray):
        raise TypeError(f"take expects a GPUArray, got {type(a).__name__}")
    if mode not in ("raise", "clip", "wrap"):
        raise ValueError(f"take: mode must be 'raise', 'clip' or 'wrap', got {mode!r}")
    idx = _index_array(indices)
    if axis is None:
        a, axis = a.reshape(-1), 0
    ax = _normalize_axis(axis, a.ndim)
    n = a.shape[ax]
    if mode == "raise":
        _check_bounds(idx, n, ax)
    elif idx.size:
        if n == 0:
            raise IndexError(f"cannot take from axis {ax} of size 0")
        idx = clip(idx, 0, n - 1) if mode == "clip" else remainder(idx, n)
    out_shape = a.shape[:ax] + idx.shape + a.shape[ax + 1 :]
    if math.prod(out_shape) == 0:
        return GPUArray._empty(out_shape, a.dtype)
    src = a if a.is_contiguous else a.copy()
    inner = math.prod(a.shape[ax + 1 :])
    return gather(src, idx, out_shape, n, max(idx.size, 1), inner, False)


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
    return gather(src, ib, tuple(shape), n, max(shape[ax], 1), inner, True)


def gather(src: GPUArray, idx: GPUArray, shape: tuple[int, ...], axis_len: int, n_idx: int, inner: int, along: bool) -> GPUArray:
    """A new array of ``shape``: out[o, j, i] = src[o, idx[j], i] (``along``: idx[o, j, i]),
    src and idx contiguous, indices known to be in bounds (no check, no synchronization)."""
    stream = current_stream_handle()
    out = GPUArray._empty(shape, src.dtype, stream)
    _runtime.get().ops.gather(src, idx, axis_len, n_idx, inner, along, out, stream)
    return out


def assign(a: GPUArray, key: Any, value: GPUArray) -> None:
    """``a[key] = value`` for an advanced key (NumPy's rules). ``value`` is cast to
    a's dtype (as NumPy's assignment does) and broadcast to the selection. A full
    mask with one value is one select kernel; one index array on one axis one
    scatter; everything else goes through ``_Plan``."""
    v = value if value.dtype == a.dtype else value.astype(a.dtype)
    mask = _indexing.boolean_mask(key)
    if mask is not None:
        m = mask if isinstance(mask, GPUArray) else asarray(np.asarray(mask))
        if m.shape != a.shape:  # a mask over the leading axes: the general path
            _assign_general(a, key, v, value)
            return
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
    try:
        axis, indices = _indexing.single_integer_array(key, a.ndim)
    except IndexError:
        _assign_general(a, key, v, value)
        return
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
    _runtime.get().ops.scatter(src, idx, target, target.shape[ax], max(idx.size, 1), inner, current_stream_handle())
    if work is not a:
        a[...] = work


# -- general advanced indexing: several index arrays, mixed with slices and ints ------------------
def _is_mask(k: Any) -> bool:
    return isinstance(k, GPUArray) and k.dtype == _dtypes.bool_


class _Plan:
    """``a[key]`` for an advanced key, as NumPy: ``view`` is ``a`` with the key's
    slices applied and the indexed axes moved first; ``flat`` the broadcast index
    arrays raveled into one int64 index over those axes (of total length ``n``);
    the broadcast index shape ``bshape`` goes to result axis ``pos``."""

    def __init__(self, a: GPUArray, key: Any) -> None:
        items = list(key) if isinstance(key, tuple) else [key]
        items = [k if isinstance(k, GPUArray) else asarray(np.asarray(k)) if isinstance(k, (list, np.ndarray)) else k for k in items]
        if any(k is None for k in items):
            # new axes first, as a basic view; they then separate index arrays like ':' does
            basic = [k if k is None or k is Ellipsis or isinstance(k, slice) else slice(None) for k in items]
            basic = [b for k, b in zip(items, basic, strict=True) for b in ([b] * (k.ndim if _is_mask(k) else 1))]
            a = a[tuple(basic)]
            items = [slice(None) if k is None or isinstance(k, slice) else k for k in items]
        width = [k.ndim if _is_mask(k) else 0 if k is Ellipsis else 1 for k in items]
        if items.count(Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if sum(width) > a.ndim:
            raise IndexError(f"too many indices for array: array is {a.ndim}-dimensional, but {sum(width)} were indexed")
        if Ellipsis in items:
            i = items.index(Ellipsis)
            fill = a.ndim - sum(width)
            items[i : i + 1], width[i : i + 1] = [slice(None)] * fill, [1] * fill
        expanded: list[Any] = []
        for k, w in zip(items, width, strict=True):  # a boolean array stands for the integer arrays of its true positions
            if _is_mask(k):
                dims = a.shape[len(expanded) : len(expanded) + w]
                if w == 0 or k.shape != dims:
                    raise IndexError(
                        f"boolean index of shape {k.shape} did not match the indexed dimensions {dims} of an array of shape {a.shape}"
                    )
                expanded += list(nonzero(k))
            else:
                expanded.append(k)
        expanded += [slice(None)] * (a.ndim - len(expanded))
        arrays: dict[int, GPUArray] = {}
        for ax, k in enumerate(expanded):
            if isinstance(k, GPUArray):
                if k.dtype.kind not in "iu":
                    raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {k.dtype}")
                arrays[ax] = k
            elif not isinstance(k, slice):
                arrays[ax] = asarray(np.asarray(_indexing._as_index(k), np.int64))  # an int among arrays is a 0-d array
        sliced = a[tuple(slice(None) if ax in arrays else k for ax, k in enumerate(expanded))]
        axes = sorted(arrays)
        rest = [ax for ax in range(a.ndim) if ax not in arrays]
        self.view = sliced.transpose([*axes, *rest])
        self.pos = axes[0] if axes == list(range(axes[0], axes[-1] + 1)) else 0
        try:
            self.bshape = tuple(np.broadcast_shapes(*(arrays[ax].shape for ax in axes)))
        except ValueError:
            shapes = " ".join(str(arrays[ax].shape) for ax in axes)
            raise IndexError(f"shape mismatch: indexing arrays could not be broadcast together with shapes {shapes}") from None
        sizes = [sliced.shape[ax] for ax in axes]
        flat = None
        for ax, dim in zip(axes, sizes, strict=True):
            idx = arrays[ax]
            _check_bounds(idx, dim, ax)
            idx = idx.astype(_dtypes.int64, copy=False)
            idx = where(less(idx, 0), add(idx, dim), idx)
            flat = idx if flat is None else add(multiply(flat, dim), idx)
        assert flat is not None
        self.flat = broadcast_to(flat, self.bshape).copy() if flat.shape != self.bshape else flat
        self.n = math.prod(sizes)
        self.rest = tuple(self.view.shape[len(axes) :])

    def result_order(self) -> list[int]:
        """The permutation from (broadcast dims, rest dims) to the result's axis order."""
        nb, nr = len(self.bshape), len(self.rest)
        rest = list(range(nb, nb + nr))
        return [*rest[: self.pos], *range(nb), *rest[self.pos :]]


def get_advanced(a: GPUArray, key: Any) -> GPUArray:
    """``a[key]`` for any key with integer or boolean arrays (NumPy's rules)."""
    mask = _indexing.boolean_mask(key)
    if mask is not None:  # one boolean array: the compaction when it covers every axis
        m = mask if isinstance(mask, GPUArray) else asarray(np.asarray(mask))
        if m.shape == a.shape:
            return masked(a, m)
    try:
        axis, idx = _indexing.single_integer_array(key, a.ndim)
    except IndexError:
        pass
    else:
        return take(a, idx, axis)
    plan = _Plan(a, key)
    if plan.flat.size == 0 or math.prod(plan.rest) == 0:
        out = GPUArray._empty((*plan.bshape, *plan.rest), a.dtype)
    else:
        src = plan.view.reshape((plan.n, *plan.rest))
        out = take(src, plan.flat.reshape(-1), 0).reshape((*plan.bshape, *plan.rest))
    order = plan.result_order()
    return out if order == sorted(order) else out.transpose(order)


def _assign_general(a: GPUArray, key: Any, v: GPUArray, value: GPUArray) -> None:
    plan = _Plan(a, key)
    order = plan.result_order()
    shape = tuple((*plan.bshape, *plan.rest)[i] for i in order)
    try:
        vb = broadcast_to(v, shape)
    except ValueError:
        raise ValueError(
            f"shape mismatch: value array of shape {value.shape} could not be broadcast to indexing result of shape {shape}"
        ) from None
    src = vb.transpose(_indexing.inverse_permutation(order)).reshape((plan.flat.size, *plan.rest))  # (broadcast dims, rest), contiguous
    work = plan.view if plan.view.is_contiguous else plan.view.copy()
    if src._block is a._block:
        src = src.copy()
    target = work.reshape((plan.n, *plan.rest))
    if src.size:
        _runtime.get().ops.scatter(
            src if src.is_contiguous else src.copy(),
            plan.flat.reshape(-1),
            target,
            plan.n,
            max(plan.flat.size, 1),
            math.prod(plan.rest),
            current_stream_handle(),
        )
    if work is not plan.view:
        plan.view[...] = work


def _value(a: GPUArray, value: Any) -> GPUArray:
    """A value to store into ``a``, as a GPUArray (scalars: 0-d, of a's dtype)."""
    if isinstance(value, GPUArray):
        return value
    if isinstance(value, (bool, int, float, complex, np.generic)):
        stream = current_stream_handle()
        src = GPUArray._empty((), a.dtype, stream)
        _runtime.get().ops.fill(src, value, stream)
        return src
    return asarray(np.asarray(value))


def setitem(a: GPUArray, key: Any, value: Any) -> None:
    """``a[key] = value``: ``value`` (scalar, array or NumPy array) broadcasts
    to the indexed shape and is cast to a's dtype. Advanced keys (a boolean
    mask, an integer array) as in ``a[key]``; with a repeated index, which of
    its values lands is unspecified (NumPy: the last)."""
    if _indexing.is_advanced(key):
        assign(a, key, _value(a, value))
        return
    target = a[key]
    src = _value(a, value)
    try:
        shape = np.broadcast_shapes(src.shape, target.shape)
    except ValueError:
        raise ValueError(f"could not broadcast input array from shape {src.shape} into shape {target.shape}") from None
    if src.ndim > target.ndim or shape != target.shape:
        raise ValueError(f"could not broadcast input array from shape {src.shape} into shape {target.shape}")
    if target.size:
        if src._block is a._block:  # overlapping memory: copy the source first
            src = src.copy()
        _runtime.get().ops.cast(src, target, current_stream_handle())


GPUArray.__setitem__ = setitem  # type: ignore[method-assign]
GPUArray._get_advanced = get_advanced  # type: ignore[method-assign, assignment]
