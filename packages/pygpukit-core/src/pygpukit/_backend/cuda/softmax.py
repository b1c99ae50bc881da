"""kernels/softmax.cu: softmax, log_softmax and logsumexp of contiguous float
arrays viewed as (outer, K, N) by pygpukit.softmax.

Rows (N == 1) that fit in registers are read once and written once
(softmax_rows, planned once per call signature); long rows are split over
blocks (partial, combine, finish); columns take softmax_cols, or, when there
are too few of them to fill the GPU, are transposed into rows and back.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ... import _dtypes
from .elementwise import ElementwiseOps
from .launch import C as _C
from .launch import grid_for

MODES = {"softmax": 0, "log_softmax": 1, "logsumexp": 2}
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


class SoftmaxOps(ElementwiseOps):
    def __init__(self, rt: Any) -> None:
        super().__init__(rt)
        self._softmax_rows: dict[tuple, Any] = {}  # softmax_rows launches (or None) by call signature

    def softmax(self, mode: str, src: Any, dims: tuple[int, int, int], comp_dt: np.dtype, out: Any, stream: int) -> None:
        """``mode`` (softmax, log_softmax or logsumexp) along K of contiguous float ``src``
        viewed as (outer, K, N), computed in ``comp_dt``, into contiguous ``out`` of
        src's dtype (outer*K*N elements, outer*N for logsumexp)."""
        self._softmax(mode, src._ptr, src._dtype, dims, comp_dt, out._ptr, stream)

    def _softmax(self, mode: str, src: int, dt: np.dtype, dims: tuple[int, int, int], comp_dt: np.dtype, out: int, stream: int) -> None:
        plans = self._softmax_rows
        if len(plans) > 1024:
            plans.clear()
        key = (mode, dt, dims, src & 15 == 0)
        rows = plans.get(key, False)
        if rows is False:
            rows = plans[key] = self._rows_launch(mode, dt, dims, comp_dt, key[3])
        if rows is None:
            self._general(mode, src, dt, dims, comp_dt, out, stream)
            return
        fn, grid, tpr, rpb = rows
        m, k, _ = dims
        self.launch(fn, grid, 1, 1, tpr, rpb, 1, 0, stream, struct.pack("@PPqq", src, out, m, k))

    def _rows_launch(self, mode: str, dt: np.dtype, dims: tuple[int, int, int], comp_dt: np.dtype, aligned: bool) -> Any:
        """(function, grid, threads per row, rows per block) of softmax_rows, or None when
        the rows are too long for registers or too few to fill the GPU."""
        m, k, n = dims
        if n != 1 or m == 0 or k == 0:
            return None
        vec = 16 // dt.itemsize if aligned and k % (16 // dt.itemsize) == 0 else 1
        plan = row_plan(k, vec, comp_dt)
        if plan is None:
            return None
        tpr, nv = plan
        rpb = max(1, BLOCK_THREADS // tpr)
        blocks = -(-m // rpb)
        if blocks < self.sms // 2 and m * k >= 1 << 20:  # the split kernels spread the work wider
            return None
        fn = self._fn("softmax", ROWS.format(t=_C[dt], tc=_C[comp_dt], mode=MODES[mode], vec=vec, nv=nv))
        return fn, blocks, tpr, rpb

    def _general(self, mode: str, src: int, dt: np.dtype, dims: tuple[int, int, int], comp_dt: np.dtype, out: int, stream: int) -> None:
        """Columns (softmax_cols, or rows of a transposed copy) and long rows (split kernels)."""
        outer, k, n = dims
        t, tc, md = _C[dt], _C[comp_dt], MODES[mode]
        lse = mode == "logsumexp"
        if (outer * n if lse else outer * k * n) == 0:
            return
        if n > 1:
            if outer * n >= 16 * self.sms or k <= 64:
                args = struct.pack("@PPqqq", src, out, outer, k, n)
                grid = min(grid_for(outer * n, 32), self.sms * 32)
                self.launch(self._fn("softmax", COLS.format(t=t, tc=tc, mode=md)), grid, 1, 1, 32, COL_SLICES, 1, 0, stream, args)
                return
            # too few columns to fill the GPU with one thread per column: make them rows
            rows = self.pool.alloc(outer * n * k * dt.itemsize, stream)
            self.copy_strided(src, rows.ptr, dt, (outer, n, k), [k * n, 1, n], stream)
            if lse:
                self._softmax(mode, rows.ptr, dt, (outer * n, k, 1), comp_dt, out, stream)
                return
            res = self.pool.alloc(outer * n * k * dt.itemsize, stream)
            self._softmax(mode, rows.ptr, dt, (outer * n, k, 1), comp_dt, res.ptr, stream)
            self.copy_strided(res.ptr, out, dt, (outer, k, n), [n * k, 1, k], stream)
            return
        m = outer
        vec = 16 // dt.itemsize
        if k % vec or src % 16:
            vec = 1
        nvec = k // vec
        c = split_chunks(m, nvec, self.sms)
        cv = -(-nvec // c)
        c = -(-nvec // cv)  # no empty chunks
        part = self.pool.alloc(m * c * 2 * comp_dt.itemsize, stream)
        args = struct.pack("@PPqqq", src, part.ptr, k, c, cv)
        self.launch(self._fn("softmax", PARTIAL.format(t=t, tc=tc, vec=vec)), m * c, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, args)
        combine = self._fn("softmax", COMBINE.format(tc=tc, t=t, mode=2 if lse else 0))
        if lse:
            self.launch(combine, m, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, struct.pack("@PPPq", part.ptr, out, 0, c))
            return
        stats = self.pool.alloc(m * 2 * comp_dt.itemsize, stream)
        self.launch(combine, m, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, struct.pack("@PPPq", part.ptr, 0, stats.ptr, c))
        fn = self._fn("softmax", FINISH.format(t=t, tc=tc, mode=md, vec=vec))
        args = struct.pack("@PPPqqq", src, out, stats.ptr, k, c, cv)
        self.launch(fn, m * c, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, args)


def instantiations() -> list[str]:
    """kernels/softmax.cu for the compile check: every kernel with every float dtype
    and mode; softmax_rows with every vectors-per-thread count the planner picks
    for vector loads of bfloat16 and float32, the extremes otherwise."""
    out: list[str] = []
    for dt in (_dtypes.float16, _dtypes.bfloat16, _dtypes.float32, _dtypes.float64, _dtypes.float8_e4m3fn, _dtypes.float8_e5m2):
        cdt = _dtypes.compute_dtype(dt)
        t, tc = _C[dt], _C[cdt]
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
