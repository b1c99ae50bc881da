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
gives a contiguous view; otherwise of a transposed copy. Rows that fit in
registers are read once and written once (kernels/softmax.cu).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray
from .reductions import _axes
from .registry import builtin
from .streams import on_stream

MODES = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}

# Name expressions of kernels/softmax.cu.
ROWS = "pgk::softmax_rows<{t}, {tc}, {mode}, {vec}, {nv}>"
PARTIAL = "pgk::softmax_partial<{t}, {tc}, {vec}>"
COMBINE = "pgk::softmax_combine<{tc}, {t}, {mode}>"  # mode 2 (logsumexp) or 0 (a row's pair for finish)
FINISH = "pgk::softmax_finish<{t}, {tc}, {mode}, {vec}>"
COLS = "pgk::softmax_cols<{t}, {tc}, {mode}>"

ROW_THREADS_MAX = 512  # threads per row of softmax_rows (its __launch_bounds__)
BLOCK_THREADS = 256  # block size of softmax_rows when a row takes fewer threads
SPLIT_THREADS = 256  # kSplitThreads
SPLIT_VECS = SPLIT_THREADS * 16  # vectors per block of a long row (16 per thread)
COL_SLICES = 8  # kColSlices


def compute_dtype(dt: np.dtype) -> np.dtype:
    """float64 for float64, float32 for the other floats (integers are converted to float64 first)."""
    return _dtypes.float64 if dt == _dtypes.float64 else _dtypes.float32


_COMPUTE = {dt: compute_dtype(dt) for dt in _dtypes.SUPPORTED if _dtypes.is_float(dt)}


def max_items(comp_dt: np.dtype) -> int:
    """Values one thread of softmax_rows keeps in registers (32 floats or 16 doubles: 32 registers)."""
    return 32 if comp_dt.itemsize == 4 else 16


def row_plan(k: int, vec: int, comp_dt: np.dtype) -> tuple[int, int] | None:
    """(threads per row, vectors per thread) of softmax_rows for rows of ``k`` elements,
    or None when a row does not fit in registers. The fewest threads that hold
    the row (more rows per block for short rows: a warp or less per row)."""
    nvec = -(-k // vec)
    tpr = 1
    while tpr <= ROW_THREADS_MAX:
        nv = 1 << max(0, -(-nvec // tpr) - 1).bit_length()
        if nv * vec <= max_items(comp_dt):
            return tpr, nv
        tpr *= 2
    return None


def split_chunks(m: int, nvec: int, sms: int) -> int:
    """Chunks per long row: about SPLIT_VECS vectors each, more (down to 2 vectors
    per thread) when there are too few rows to give every SM two blocks."""
    c = -(-nvec // SPLIT_VECS)
    if m * c < 2 * sms:
        c = max(c, min(-(-2 * sms // m), -(-nvec // (2 * SPLIT_THREADS))))
    return max(c, 1)


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
    if type(x) is not GPUArray or type(axis) is not int or not x._contig or not x._size or x._dtype not in _COMPUTE:
        return None
    nd = len(x._shape)
    if not nd or axis not in (-1, nd - 1):
        return None
    k = x._shape[-1]
    out = _runtime.get().ops.softmax(mode, x, (x._size // k, k, 1), _COMPUTE[x._dtype])
    return GPUArray._new(x._shape[:-1] if mode == "logsumexp" else x._shape, out._dtype, out._block, out._ptr)


def _along(mode: str, x: Any, axis: Any) -> GPUArray:
    fast = _last_axis_fast(mode, x, axis)
    if fast is not None:
        return fast
    x, axes = _prepare(mode, x, axis)
    if x.size == 0:
        return GPUArray._empty(x.shape, x.dtype)
    src, dims, perm = _plan(x, axes)
    out = _runtime.get().ops.softmax(mode, src, dims, compute_dtype(x.dtype)).reshape(src.shape)
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
        from .creation import full

        out = full(kept_shape, -math.inf, x.dtype)
    else:
        src, dims, _ = _plan(x, axes)
        out = _runtime.get().ops.softmax("logsumexp", src, dims, compute_dtype(x.dtype)).reshape(kept_shape)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


def instantiations() -> list[str]:
    """kernels/softmax.cu for the compile check: every kernel with every float dtype
    and mode; softmax_rows with every vectors-per-thread count the planner picks
    for vector loads of bfloat16 and float32, the extremes otherwise."""
    out: list[str] = []
    for dt in (_dtypes.float16, _dtypes.bfloat16, _dtypes.float32, _dtypes.float64, _dtypes.float8_e4m3fn, _dtypes.float8_e5m2):
        cdt = compute_dtype(dt)
        t, tc = _dtypes.C_TYPES[dt], _dtypes.C_TYPES[cdt]
        full_vec = 16 // dt.itemsize
        for vec in sorted({1, full_vec}):
            nvs = [1 << i for i in range((max_items(cdt) // vec).bit_length())]
            if vec == 1 or dt not in (_dtypes.bfloat16, _dtypes.float32):
                nvs = sorted({nvs[0], nvs[-1]})
            out += [ROWS.format(t=t, tc=tc, mode=mode, vec=vec, nv=nv) for mode in MODES.values() for nv in nvs]
            out.append(PARTIAL.format(t=t, tc=tc, vec=vec))
            out += [FINISH.format(t=t, tc=tc, mode=mode, vec=vec) for mode in (0, 1)]
        out += [COMBINE.format(t=t, tc=tc, mode=mode) for mode in (0, 2)]
        out += [COLS.format(t=t, tc=tc, mode=mode) for mode in MODES.values()]
    return out
