"""Array creation: from host data and from fill patterns (NumPy's defaults: float64, int64)."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from . import _context, _dtypes, _runtime, transfer
from .array import GPUArray, normalize_shape
from .scheduler import evictable_empty
from .streams import current_stream_handle, on_stream


@on_stream
def empty(shape: Any, dtype: Any = _dtypes.float64, evictable: bool = False) -> GPUArray:
    """An uninitialized array (its contents are whatever the pool block held)."""
    if evictable:
        return evictable_empty(normalize_shape(shape), _dtypes.as_dtype(dtype))
    return GPUArray._empty(normalize_shape(shape), _dtypes.as_dtype(dtype))


@on_stream
def full(shape: Any, fill_value: Any, dtype: Any = None, evictable: bool = False) -> GPUArray:
    """An array filled with ``fill_value``; dtype inferred from it as NumPy does when None."""
    if dtype is None:
        if isinstance(fill_value, GPUArray):
            raise TypeError("fill_value must be a scalar, not a GPUArray")
        dtype = np.asarray(fill_value).dtype
    if not isinstance(fill_value, (bool, int, float, complex, np.generic)):
        raise TypeError(f"fill_value must be a number, got {type(fill_value).__name__}")
    out = empty(shape, dtype, evictable)
    _runtime.get().ops.fill(out, fill_value, current_stream_handle())
    return out


@on_stream
def zeros(shape: Any, dtype: Any = _dtypes.float64, evictable: bool = False) -> GPUArray:
    return full(shape, 0, dtype, evictable)


@on_stream
def ones(shape: Any, dtype: Any = _dtypes.float64, evictable: bool = False) -> GPUArray:
    return full(shape, 1, dtype, evictable)


@on_stream
def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> GPUArray:
    """Evenly spaced values in [start, stop): ``arange(stop)``, ``arange(start, stop, step)``."""
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
            raise TypeError(f"arange: {name} must be a real number, got {type(v).__name__}")
    if step == 0:
        raise ValueError("arange: step must not be zero")
    is_float = any(isinstance(v, (float, np.floating)) for v in (start, stop, step))
    if is_float:
        start, stop, step = float(start), float(stop), float(step)
    else:
        start, stop, step = operator.index(start), operator.index(stop), operator.index(step)
    n = max(0, math.ceil((stop - start) / step))
    dt = _dtypes.as_dtype(dtype) if dtype is not None else (_dtypes.float64 if is_float else _dtypes.int64)
    out = empty((n,), dt)
    _runtime.get().ops.arange(out, start, step, current_stream_handle())
    return out


@on_stream
def from_numpy(array: np.ndarray, evictable: bool = False) -> GPUArray:
    """Copy a C-contiguous NumPy array to pygpukit memory (queued on the current stream).
    ``evictable=True`` (inside a task): an EvictableArray, see ``gp.EvictableArray``.

    A non-contiguous array raises ValueError: pass it through
    ``np.ascontiguousarray`` first, or use ``gp.asarray``, which does that for you.
    On CUDA, arrays of ``gp.transfer.ENGINE_THRESHOLD`` bytes or more go through
    the transfer engine (pinned staging on a copy stream; the current stream
    waits for it on the device), smaller ones through one direct copy.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    dt = _dtypes.as_dtype(array.dtype)
    if not array.flags.c_contiguous:
        raise ValueError(
            f"from_numpy needs a C-contiguous array, got one with shape {array.shape} and strides "
            f"{array.strides}; use np.ascontiguousarray(a) or gp.asarray(a)"
        )
    rt = _runtime.get()
    graph = _context.local.capture
    if evictable:
        out = empty(tuple(array.shape), dt, True)
    elif array.nbytes >= transfer.ENGINE_THRESHOLD and rt.backend == "cuda" and graph is None:
        return transfer.to_device(array)[0]
    else:
        out = GPUArray._empty(tuple(array.shape), dt)
    if out.size:
        if graph is not None:  # replays read the copy's source again: give it one that lives as long as the graph
            array = graph._pin(array)
        rt.ops.from_host(out, array, current_stream_handle())
    return out


@on_stream
def asarray(obj: Any, dtype: Any = None, copy: bool | None = None, evictable: bool = False) -> GPUArray:
    """Convert ``obj`` (GPUArray, NumPy array, scalar or nested sequence) to a GPUArray.

    ``copy=None`` copies only when needed, ``True`` always copies, ``False``
    raises ValueError when a copy would be needed (any host data needs one).
    ``evictable=True`` (inside a task) always copies into an EvictableArray.
    """
    if evictable and isinstance(obj, GPUArray):
        if copy is False:
            raise ValueError("asarray(copy=False, evictable=True): an evictable array is always a new copy")
        out = empty(obj.shape, obj.dtype if dtype is None else dtype, True)
        out[...] = obj
        return out
    if isinstance(obj, GPUArray):
        if dtype is None or _dtypes.as_dtype(dtype) == obj.dtype:
            return obj.copy() if copy else obj
        if copy is False:
            raise ValueError(f"asarray(copy=False) cannot convert {obj.dtype} to {np.dtype(dtype)} without a copy")
        return obj.astype(dtype)
    if copy is False:
        raise ValueError("asarray(copy=False): host data must be copied to pygpukit memory")
    host = np.asarray(obj, dtype=None if dtype is None else _dtypes.as_dtype(dtype))
    if host.dtype == object:
        raise TypeError(f"cannot convert {type(obj).__name__} to a GPUArray: it holds Python objects")
    return from_numpy(np.asarray(host, order="C"), evictable)  # np.ascontiguousarray would make 0-d arrays 1-d


def _like(a: GPUArray, dtype: Any, shape: Any) -> tuple[Any, Any]:
    if not isinstance(a, GPUArray):
        raise TypeError(f"expected a GPUArray, got {type(a).__name__}")
    return (a.shape if shape is None else shape), (a.dtype if dtype is None else dtype)


@on_stream
def empty_like(a: GPUArray, dtype: Any = None, shape: Any = None) -> GPUArray:
    s, d = _like(a, dtype, shape)
    return empty(s, d)


@on_stream
def zeros_like(a: GPUArray, dtype: Any = None, shape: Any = None) -> GPUArray:
    s, d = _like(a, dtype, shape)
    return zeros(s, d)


@on_stream
def ones_like(a: GPUArray, dtype: Any = None, shape: Any = None) -> GPUArray:
    s, d = _like(a, dtype, shape)
    return ones(s, d)


@on_stream
def full_like(a: GPUArray, fill_value: Any, dtype: Any = None, shape: Any = None) -> GPUArray:
    s, d = _like(a, dtype, shape)
    return full(s, fill_value, d)


@on_stream
def linspace(start: float, stop: float, num: int = 50, endpoint: bool = True, dtype: Any = None) -> GPUArray:
    """``num`` evenly spaced values from start to stop, computed as NumPy does
    (start + i * step in float64, the last value set to stop exactly)."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    step = (float(stop) - float(start)) / div if div > 0 else float("nan")
    y = arange(num, dtype=_dtypes.float64)
    y = y * step + float(start) if div > 0 else y * 0.0 + float(start)
    if endpoint and num > 1:
        y[-1] = float(stop)
    dt = _dtypes.float64 if dtype is None else _dtypes.as_dtype(dtype)
    return y.astype(dt, copy=False)


@on_stream
def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = _dtypes.float64) -> GPUArray:
    """An n x m array with ones on diagonal ``k`` (a strided view of the flat array is filled)."""
    n = operator.index(n)
    m = n if m is None else operator.index(m)
    out = zeros((n, m), dtype)
    if k >= m or -k >= n or n == 0 or m == 0:
        return out
    start = k if k >= 0 else -k * m
    count = min(n - max(-k, 0), m - max(k, 0))
    out.reshape(-1)[start : start + count * (m + 1) : m + 1] = 1
    return out


@on_stream
def identity(n: int, dtype: Any = _dtypes.float64) -> GPUArray:
    return eye(n, dtype=dtype)
