"""softmax, log_softmax and logsumexp along axes, with scipy.special's semantics.

Result dtype: the input dtype for floats (float16, bfloat16 and float8 are
computed in float32, float32 in float32, float64 in float64); float64 for
integers and bool. Special values as scipy.special: a NaN in a slice gives NaN;
logsumexp of an empty slice or of a slice of -inf is -inf, and +inf when the
slice holds +inf; softmax (and log_softmax) of a slice of -inf is NaN, as in
scipy and PyTorch; a +inf makes softmax NaN and log_softmax -inf (NaN at the
+inf itself).

Work is planned as for the reductions: the reduced axes become K of a
contiguous (outer, K, N) view without copying when they are one run of a
contiguous array ("rows" when N == 1, else "cols"), or when moving them last
gives a contiguous view; otherwise of a transposed copy. The kernels' plans
are in pygpukit/_backend/cuda/softmax.py.
"""

from __future__ import annotations

import math
from typing import Any

from . import _dtypes, _indexing, _runtime
from .array import GPUArray
from .creation import full
from .reductions import _axes
from .registry import builtin
from .streams import current_stream_handle, on_stream

_FLOATS = frozenset(dt for dt in _dtypes.SUPPORTED if _dtypes.is_float(dt))


def _run(mode: str, src: GPUArray, dims: tuple[int, int, int], shape: tuple[int, ...]) -> GPUArray:
    """``mode`` along K of contiguous float ``src`` viewed as (outer, K, N): a new
    array of ``shape`` (outer*K*N elements, outer*N for logsumexp) of src's dtype."""
    stream = current_stream_handle()
    out = GPUArray._empty(shape, src._dtype, stream)
    _runtime.get().ops.softmax(mode, src, dims, _dtypes.compute_dtype(src._dtype), out, stream)
    return out


def _plan(x: GPUArray, axes: tuple[int, ...]) -> tuple[GPUArray, tuple[int, int, int], tuple[int, ...] | None]:
    """(contiguous source, (outer, K, N), permutation applied to x or None)."""
    shape = x.shape
    if not axes:  # axis=(): every element is its own slice
        src = x if x.is_contiguous else x.copy()
        return src, (x.size, 1, 1), None
    if x.is_contiguous and axes == tuple(range(axes[0], axes[-1] + 1)):
        dims = (math.prod(shape[: axes[0]]), math.prod(shape[axes[0] : axes[-1] + 1]), math.prod(shape[axes[-1] + 1 :]))
        return x, dims, None
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    perm = kept + axes
    src = x.transpose(perm)
    if not src.is_contiguous:
        src = src.copy()
    return src, (math.prod(shape[i] for i in kept), math.prod(shape[i] for i in axes), 1), perm


def _prepare(name: str, x: Any, axis: Any) -> tuple[GPUArray, tuple[int, ...]]:
    if not isinstance(x, GPUArray):
        raise TypeError(f"{name}() expects a GPUArray, got {type(x).__name__}")
    axes = _axes(axis, x.ndim)
    if not _dtypes.is_float(x.dtype):
        x = x.astype(_dtypes.float64)
    return x, axes


def _last_axis_fast(mode: str, x: Any, axis: Any) -> GPUArray | None:
    """The common call (contiguous float array, last axis) without the general planning."""
    if type(x) is not GPUArray or type(axis) is not int or not x._contig or not x._size or x._dtype not in _FLOATS:
        return None
    nd = len(x._shape)
    if not nd or axis not in (-1, nd - 1):
        return None
    k = x._shape[-1]
    return _run(mode, x, (x._size // k, k, 1), x._shape[:-1] if mode == "logsumexp" else x._shape)


def _along(mode: str, x: Any, axis: Any) -> GPUArray:
    fast = _last_axis_fast(mode, x, axis)
    if fast is not None:
        return fast
    x, axes = _prepare(mode, x, axis)
    if x.size == 0:
        return GPUArray._empty(x.shape, x.dtype)
    src, dims, perm = _plan(x, axes)
    out = _run(mode, src, dims, src.shape)
    if perm is None:
        return out
    return out.transpose(_indexing.inverse_permutation(perm))


def _softmax(x: GPUArray, axis: Any = -1) -> GPUArray:
    """exp(x) / sum(exp(x)) along ``axis`` (an int, a tuple of ints or None for all),
    computed as exp(x - max) / sum(exp(x - max)). A slice of -inf gives NaN."""
    return _along("softmax", x, axis)


def _log_softmax(x: GPUArray, axis: Any = -1) -> GPUArray:
    """log(softmax(x)) along ``axis``, computed as (x - max) - log(sum(exp(x - max)))."""
    return _along("log_softmax", x, axis)


# registry ops: plugins (pygpukit-nn, pygpukit-triton) may register faster ones
softmax = builtin("softmax", _softmax, nkey=1)
log_softmax = builtin("log_softmax", _log_softmax, nkey=1)


@on_stream
def logsumexp(x: GPUArray, axis: Any = None, keepdims: bool = False) -> GPUArray:
    """log(sum(exp(x))) over ``axis`` (None: everything), without overflow: max +
    log(sum(exp(x - max))). An empty slice gives -inf."""
    fast = None if keepdims else _last_axis_fast("logsumexp", x, axis)
    if fast is not None:
        return fast
    x, axes = _prepare("logsumexp", x, axis)
    kept_shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if math.prod(kept_shape) == 0:
        out = GPUArray._empty(kept_shape, x.dtype)
    elif math.prod(x.shape[i] for i in axes) == 0:
        out = full(kept_shape, -math.inf, x.dtype)
    else:
        src, dims, _ = _plan(x, axes)
        out = _run("logsumexp", src, dims, kept_shape)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out
