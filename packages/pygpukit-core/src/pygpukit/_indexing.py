"""Basic indexing (ints, slices, None, Ellipsis) as pure stride arithmetic.

``basic_index(shape, strides, itemsize, key)`` returns the view's shape,
strides (bytes) and byte offset, or raises IndexError/TypeError with NumPy's
messages. Advanced indexing (integer and boolean arrays) is not basic: it is
reported with ``is_advanced`` so the caller can take the gather/scatter path.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

_VALID = "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or boolean arrays are valid indices"


def is_advanced(key: Any) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if isinstance(k, (list, np.ndarray)) or hasattr(k, "_ptr") or isinstance(k, (bool, np.bool_)):
            return True
    return False


def boolean_mask(key: Any) -> Any:
    """The mask of ``a[mask]`` when the key is one boolean array, else None."""
    if isinstance(key, tuple):
        if len(key) != 1:
            return None
        key = key[0]
    dt = getattr(key, "dtype", None)
    if dt is None and isinstance(key, list):
        dt = np.asarray(key).dtype
    return key if dt is not None and np.dtype(dt).kind == "b" and not isinstance(key, (bool, np.bool_)) else None


def single_integer_array(key: Any, ndim: int) -> tuple[int, Any]:
    """(axis, index array) for ``a[idx]`` or ``a[:, ..., idx]``: one integer array,
    every other entry a full slice or an Ellipsis. Other advanced forms raise IndexError."""
    items = key if isinstance(key, tuple) else (key,)
    arrays = [i for i, k in enumerate(items) if not (k is Ellipsis or (isinstance(k, slice) and k == slice(None)))]
    if len(arrays) != 1 or isinstance(items[arrays[0]], (bool, np.bool_)):
        raise IndexError(
            "supported advanced indexing: one integer array on one axis, other entries ':' or '...' "
            "(or one boolean mask of the array's shape; mixed advanced/basic indexing is not supported yet)"
        )
    pos = arrays[0]
    if any(k is Ellipsis for k in items[:pos]):
        axis = ndim - (len(items) - pos)
    else:
        axis = pos
    idx = items[pos]
    kind = getattr(getattr(idx, "dtype", None), "kind", None) or np.asarray(idx).dtype.kind
    if kind == "b":
        raise IndexError("a boolean mask must be the only index and have the array's shape")
    return axis, idx


def _as_index(k: Any) -> int:
    if isinstance(k, (bool, np.bool_)):
        raise IndexError(_VALID)
    try:
        return operator.index(k)
    except TypeError:
        raise IndexError(_VALID) from None


def basic_index(shape: tuple[int, ...], strides: tuple[int, ...], key: Any) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    items = key if isinstance(key, tuple) else (key,)
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in items if k is not None and k is not Ellipsis)
    if n_real > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but {n_real} were indexed")
    if n_ellipsis:
        i = next(j for j, k in enumerate(items) if k is Ellipsis)
        items = items[:i] + (slice(None),) * (len(shape) - n_real) + items[i + 1 :]
    else:
        items = items + (slice(None),) * (len(shape) - n_real)
    out_shape: list[int] = []
    out_strides: list[int] = []
    offset = 0
    axis = 0
    for k in items:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        dim, st = shape[axis], strides[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(dim)
            length = len(range(start, stop, step))
            if length:
                offset += start * st
            out_shape.append(length)
            out_strides.append(st * step)
        else:
            i = _as_index(k)
            if not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {dim}")
            offset += (i + dim if i < 0 else i) * st
        axis += 1
    return tuple(out_shape), tuple(out_strides), offset


def reshape_strides(shape: tuple[int, ...], strides: tuple[int, ...], new_shape: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy, or None.

    Groups of old axes that are contiguous with each other (stride[i] ==
    stride[i+1] * shape[i+1]) can be split or merged freely, as NumPy's
    attempt_nocopy_reshape does.
    """
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new_strides = [0] * len(new_shape)
    if any(d == 0 for d in shape):
        acc = itemsize
        for i in range(len(new_shape) - 1, -1, -1):
            new_strides[i] = acc
            acc *= max(new_shape[i], 1)
        return tuple(new_strides)
    oi, ni = 0, 0
    nnew = len(new_shape)
    while oi < len(old) or ni < nnew:
        if ni < nnew and new_shape[ni] == 1:
            new_strides[ni] = itemsize if not old else old[min(oi, len(old) - 1)][1]
            ni += 1
            continue
        if oi >= len(old) or ni >= nnew:
            return None
        # grow a group of old axes and a group of new axes until their sizes match
        o_end, n_end = oi + 1, ni + 1
        o_size, n_size = old[oi][0], new_shape[ni]
        while o_size != n_size:
            if o_size < n_size:
                if o_end >= len(old):
                    return None
                o_size *= old[o_end][0]
                o_end += 1
            else:
                if n_end >= nnew:
                    return None
                n_size *= new_shape[n_end]
                n_end += 1
        for k in range(oi, o_end - 1):  # the old group must be one contiguous run
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        st = old[o_end - 1][1]
        for k in range(n_end - 1, ni - 1, -1):
            new_strides[k] = st
            st *= new_shape[k]
        oi, ni = o_end, n_end
    return tuple(new_strides)


def inverse_permutation(perm: Any) -> list[int]:
    """The axis order that undoes ``transpose(perm)``."""
    inverse = [0] * len(perm)
    for pos, axis in enumerate(perm):
        inverse[axis] = pos
    return inverse
