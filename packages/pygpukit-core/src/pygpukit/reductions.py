"""Reductions with NumPy's semantics: sum, prod, max, min, all, any, mean, var,
std, argmax, argmin, over an axis, a tuple of axes or everything, with
``keepdims`` and ``dtype``.

Every reduction becomes one of three shapes of work on a contiguous array
(a copy is made only when the reduced axes cannot be addressed that way):
``all`` (everything: a grid-wide two-pass reduction), ``rows`` (reduce the
innermost run: one block per row) or ``cols`` (reduce a run of axes with
contiguous axes after it: coalesced across threads). Accumulation is in
float32 for the 8/16/32-bit floats, float64 for float64, 64-bit integers for
integers, in a tree, so the float error does not grow with n.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray, _normalize_axis
from .creation import full
from .streams import current_stream_handle, on_stream
from .ufuncs import not_equal, sqrt

_NAMES = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum"}


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    out = sorted(_normalize_axis(a, ndim) for a in items)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(out)


def _plan(op: str, dt: np.dtype, dtype: Any) -> tuple[np.dtype, np.dtype, Any]:
    """(result dtype, accumulator dtype, identity) of reduction ``op`` over ``dt``."""
    if op in ("sum", "prod"):
        out, acc = _dtypes.reduction_dtypes(op, dt, _linear_dtype(op, dt, dtype))
        return out, acc, 0 if op == "sum" else 1
    out, acc = _dtypes.reduction_dtypes(op, dt)
    if op in ("all", "any"):
        return out, acc, 1 if op == "all" else 0
    # max / min: the input dtype, compared in its compare dtype
    if _dtypes.is_float(acc):
        init: Any = -math.inf if op == "max" else math.inf
    elif dt == _dtypes.bool_:
        init = int(op == "min")
    else:
        info = np.iinfo(dt)
        init = int(info.min) if op == "max" else int(info.max)
    return out, acc, init


def _layout(x: GPUArray, axes: tuple[int, ...]) -> tuple[str, GPUArray, tuple[int, ...]]:
    """("all" | "rows" | "cols", contiguous source, (M, K) or (outer, K, N))."""
    nd = x.ndim
    if len(axes) == nd:
        return "all", x if x.is_contiguous else x.copy(), (x.size,)
    shape = x.shape
    run = axes == tuple(range(axes[0], axes[-1] + 1)) if axes else True
    if x.is_contiguous and run:
        outer = math.prod(shape[: axes[0]])
        k = math.prod(shape[axes[0] : axes[-1] + 1])
        n = math.prod(shape[axes[-1] + 1 :])
        if n == 1:
            return "rows", x, (outer, k)
        return "cols", x, (outer, k, n)
    kept = [i for i in range(nd) if i not in axes]
    src = x.transpose([*kept, *axes]).copy()
    return "rows", src, (math.prod(shape[i] for i in kept), math.prod(shape[i] for i in axes))


def _reduce(op: str, x: Any, axis: Any, keepdims: bool, dtype: Any = None) -> GPUArray:
    if not isinstance(x, GPUArray):
        raise TypeError(f"{op}() expects a GPUArray, got {type(x).__name__}")
    if _dtypes.is_complex(x.dtype) and op not in ("sum", "prod"):
        return _reduce_complex(op, x, axis, keepdims)
    axes = _axes(axis, x.ndim)
    out_dt, acc_dt, init = _plan(op, x.dtype, dtype)
    kept_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    count = math.prod(x.shape[i] for i in axes)
    if count == 0 and op in ("max", "min"):
        raise ValueError(f"zero-size array to reduction operation {_NAMES[op]} which has no identity")
    if math.prod(kept_shape) == 0:
        out = GPUArray._empty(kept_shape, out_dt)
    elif count == 0:  # empty reduction: the identity everywhere
        out = full(kept_shape, init, out_dt)
    else:
        kind, src, dims = _layout(x, axes)
        stream = current_stream_handle()
        out = GPUArray._empty(kept_shape, out_dt, stream)
        _runtime.get().ops.reduce(op, kind, src, dims, acc_dt, init, out, stream)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def _reduce_complex(op: str, x: GPUArray, axis: Any, keepdims: bool) -> GPUArray:
    """all/any of a complex array on ``x != 0``; complex numbers have no order."""
    if op in ("max", "min"):
        raise TypeError(f"{_NAMES[op]} is not supported for complex input (complex numbers have no order)")
    return _reduce(op, not_equal(x, 0), axis, keepdims)


def _linear_dtype(name: str, dt: np.dtype, dtype: Any) -> np.dtype:
    """The result dtype of sum/prod/cumsum/cumprod of a ``dt`` array, NumPy's unless
    ``dtype`` is given; a complex input keeps its imaginary part or raises."""
    out = _dtypes.sum_dtype(dt) if dtype is None else _dtypes.as_dtype(dtype)
    if _dtypes.is_complex(dt) and not _dtypes.is_complex(out):
        raise TypeError(f"{name} of a complex array into {out} would discard the imaginary part")
    return out


@on_stream
def sum(x: GPUArray, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> GPUArray:
    """Sum with NumPy's result dtype (int64 for integers and bool, uint64 for unsigned)."""
    return _reduce("sum", x, axis, keepdims, dtype)


@on_stream
def prod(x: GPUArray, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> GPUArray:
    return _reduce("prod", x, axis, keepdims, dtype)


@on_stream
def max(x: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    """Maximum; NaN propagates (as numpy.max)."""
    return _reduce("max", x, axis, keepdims)


@on_stream
def min(x: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    """Minimum; NaN propagates (as numpy.min)."""
    return _reduce("min", x, axis, keepdims)


@on_stream
def all(x: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    return _reduce("all", x, axis, keepdims)


@on_stream
def any(x: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    return _reduce("any", x, axis, keepdims)


def _mean_dtype(dt: np.dtype, dtype: Any) -> np.dtype:
    if dtype is not None:
        return _dtypes.as_dtype(dtype)
    return dt if _dtypes.is_float(dt) or _dtypes.is_complex(dt) else _dtypes.float64


@on_stream
def mean(x: GPUArray, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> GPUArray:
    """Arithmetic mean; integers give float64, floats keep their dtype (float16 and
    bfloat16 are accumulated in float32, as NumPy does for float16)."""
    out_dt = _mean_dtype(x.dtype, dtype)
    if _dtypes.is_complex(out_dt):
        acc = out_dt
    else:
        acc = _dtypes.float64 if out_dt == _dtypes.float64 else _dtypes.float32
    count = math.prod(x.shape[i] for i in _axes(axis, x.ndim))
    s = _reduce("sum", x, axis, keepdims, acc)
    return (s / float(count) if count else s * math.nan).astype(out_dt, copy=False)


@on_stream
def var(x: GPUArray, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False) -> GPUArray:
    """Variance, two passes (mean, then squared deviations), with ``ddof`` as NumPy.
    Complex: the mean of |x - mean|^2, a real number (the parts' variances added)."""
    if isinstance(x, GPUArray) and _dtypes.is_complex(x.dtype):
        part = None if dtype is None else _dtypes.as_dtype(dtype)
        return var(x.real, axis, part, ddof, keepdims) + var(x.imag, axis, part, ddof, keepdims)
    out_dt = _mean_dtype(x.dtype, dtype)
    acc = _dtypes.float64 if out_dt == _dtypes.float64 else _dtypes.float32
    axes = _axes(axis, x.ndim)
    count = math.prod(x.shape[i] for i in axes)
    xa = x.astype(acc, copy=False)
    m = mean(xa, axis, acc, keepdims=True)
    d = xa - m
    ss = _reduce("sum", d * d, axis, keepdims, acc)
    denom = count - operator.index(ddof)
    # as NumPy: with no degrees of freedom left the division by 0 gives inf (nan for 0/0)
    return (ss / float(denom if denom > 0 else 0)).astype(out_dt, copy=False)


@on_stream
def std(x: GPUArray, axis: Any = None, dtype: Any = None, ddof: int = 0, keepdims: bool = False) -> GPUArray:
    """Standard deviation, sqrt(var) with NumPy's ``ddof`` and dtype rules; the square
    root is taken in the accumulator dtype and the result rounded once."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"std() expects a GPUArray, got {type(x).__name__}")
    if _dtypes.is_complex(x.dtype):
        return sqrt(var(x, axis, dtype, ddof, keepdims))
    out_dt = _mean_dtype(x.dtype, dtype)
    acc = _dtypes.float64 if out_dt == _dtypes.float64 else _dtypes.float32
    return sqrt(var(x, axis, acc, ddof, keepdims)).astype(out_dt, copy=False)


def _scan(op: str, x: Any, axis: int | None, dtype: Any) -> GPUArray:
    if not isinstance(x, GPUArray):
        raise TypeError(f"{op}() expects a GPUArray, got {type(x).__name__}")
    if axis is None:
        x, axis = x.reshape(-1), 0
    ax = _normalize_axis(axis, x.ndim)
    out_dt = _linear_dtype(op, x.dtype, dtype)
    kept = [i for i in range(x.ndim) if i != ax]
    src = x.transpose([*kept, ax])
    src = src if src.is_contiguous else src.copy()
    moved_shape = src.shape
    m = math.prod(moved_shape[:-1])
    stream = current_stream_handle()
    out = GPUArray._empty(moved_shape, out_dt, stream)
    _runtime.get().ops.scan(op, src, (m, x.shape[ax]), _dtypes.accumulator(out_dt), out, stream)
    return out.transpose(_indexing.inverse_permutation([*kept, ax])).copy() if ax != x.ndim - 1 else out


@on_stream
def cumsum(x: GPUArray, axis: int | None = None, dtype: Any = None) -> GPUArray:
    """Inclusive cumulative sum along ``axis`` (of the flattened array when None);
    NumPy's dtype (int64 for integers), floats accumulated in float32 or float64."""
    return _scan("cumsum", x, axis, dtype)


@on_stream
def cumprod(x: GPUArray, axis: int | None = None, dtype: Any = None) -> GPUArray:
    """Inclusive cumulative product along ``axis`` (of the flattened array when None)."""
    return _scan("cumprod", x, axis, dtype)


def _arg(is_max: bool, x: Any, axis: Any, keepdims: bool) -> GPUArray:
    name = "argmax" if is_max else "argmin"
    if not isinstance(x, GPUArray):
        raise TypeError(f"{name}() expects a GPUArray, got {type(x).__name__}")
    if _dtypes.is_complex(x.dtype):
        raise TypeError(f"{name} is not supported for complex input (complex numbers have no order)")
    if x.size == 0:
        raise ValueError(f"attempt to get {name} of an empty sequence")
    stream = current_stream_handle()
    if axis is None:
        flat = x.reshape(-1)
        out = GPUArray._empty((1,) * x.ndim if keepdims else (), _dtypes.int64, stream)
        _runtime.get().ops.arg_reduce(is_max, flat if flat.is_contiguous else flat.copy(), (1, x.size), out, stream)
        return out
    ax = _normalize_axis(axis, x.ndim)
    kept = [i for i in range(x.ndim) if i != ax]
    src = x.transpose([*kept, ax])
    src = src if src.is_contiguous else src.copy()
    kept_shape = tuple(x.shape[i] for i in kept)
    out = GPUArray._empty(kept_shape, _dtypes.int64, stream)
    _runtime.get().ops.arg_reduce(is_max, src, (math.prod(kept_shape), x.shape[ax]), out, stream)
    if keepdims:
        out = out.reshape(tuple(1 if i == ax else d for i, d in enumerate(x.shape)))
    return out


@on_stream
def argmax(x: GPUArray, axis: int | None = None, keepdims: bool = False) -> GPUArray:
    """Index of the first maximum (of the flattened array when axis is None); NaN counts as maximal."""
    return _arg(True, x, axis, keepdims)


@on_stream
def argmin(x: GPUArray, axis: int | None = None, keepdims: bool = False) -> GPUArray:
    return _arg(False, x, axis, keepdims)


def _install_methods() -> None:
    """The reductions as GPUArray methods (``a.sum(axis=0)``...): the functions
    above take the array first, so they are the methods as they stand."""
    for fn in (sum, prod, max, min, all, any, mean, var, std, argmax, argmin):
        setattr(GPUArray, fn.__name__, fn)


_install_methods()
