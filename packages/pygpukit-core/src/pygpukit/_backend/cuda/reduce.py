"""kernels/reduce.cu and kernels/scan.cu: reductions, arg-reductions and scans
of contiguous arrays, laid out by pygpukit.reductions as "all" (everything),
"rows" ((M, K), the innermost run) or "cols" ((outer, K, N))."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ... import _dtypes
from .launch import Base, append_value, grid_for, vec_width
from .launch import C as _C

REDUCE_THREADS = 512
ALL_PARTIAL = "pgk::all_partial<{op}, {a}, {acc}, {vec}>"
ALL_FINAL = "pgk::all_final<{op}, {acc}, {o}>"
REDUCE_ROWS = "pgk::reduce_rows<{op}, {a}, {acc}, {o}, {vec}>"
REDUCE_COLS = "pgk::reduce_cols<{op}, {a}, {acc}, {o}>"
ARG_ROWS = "pgk::arg_reduce_rows<{max}, {a}, {c}, {vec}>"
SCAN_ROWS = "pgk::scan_rows<{op}, {a}, {acc}, {o}>"
REDUCE_OPS = {"sum": "pgk::Sum", "prod": "pgk::Prod", "max": "pgk::Max", "min": "pgk::Min", "all": "pgk::All", "any": "pgk::Any"}
SCAN_OPS = {"cumsum": "pgk::ScanSum", "cumprod": "pgk::ScanProd"}


class ReduceOps(Base):
    def reduce(self, op: str, kind: str, src: Any, dims: tuple[int, ...], acc_dt: np.dtype, init: Any, out: Any, stream: int) -> None:
        """Reduce contiguous ``src`` into contiguous ``out`` (of dims[0] elements for
        "rows", outer * N for "cols", one for "all"), accumulating in ``acc_dt``
        from ``init``."""
        fop, ti, ta, to = REDUCE_OPS[op], _C[src._dtype], _C[acc_dt], _C[out._dtype]
        if kind == "all":
            (n,) = dims
            vec = vec_width(src)
            blocks = max(1, min(self.sms * 4, -(-(n // vec) // REDUCE_THREADS)))
            # partials returns to the pool on this stream: later work on it is ordered after these kernels
            partials = self.pool.alloc(blocks * acc_dt.itemsize, stream)
            f1 = self._fn("reduce", ALL_PARTIAL.format(op=fop, a=ti, acc=ta, vec=vec))
            f2 = self._fn("reduce", ALL_FINAL.format(op=fop, acc=ta, o=to))
            args = append_value(struct.pack("@PPq", src._ptr, partials.ptr, n), acc_dt, init)
            self.launch(f1, blocks, 1, 1, REDUCE_THREADS, 1, 1, 0, stream, args)
            args = append_value(struct.pack("@PPq", partials.ptr, out._ptr, blocks), acc_dt, init)
            self.launch(f2, 1, 1, 1, REDUCE_THREADS, 1, 1, 0, stream, args)
            return
        if kind == "rows":
            m, k = dims
            vec = 16 // src.itemsize
            while vec > 1 and (k % vec or src._ptr % (vec * src.itemsize)):
                vec //= 2
            fn = self._fn("reduce", REDUCE_ROWS.format(op=fop, a=ti, acc=ta, o=to, vec=vec))
            args = append_value(struct.pack("@PPqq", src._ptr, out._ptr, m, k), acc_dt, init)
            self.launch(fn, min(m, 65535 * 16), 1, 1, REDUCE_THREADS, 1, 1, 0, stream, args)
            return
        outer, k, n = dims
        fn = self._fn("reduce", REDUCE_COLS.format(op=fop, a=ti, acc=ta, o=to))
        args = append_value(struct.pack("@PPqqq", src._ptr, out._ptr, outer, k, n), acc_dt, init)
        self.launch(fn, min(grid_for(outer * n, 32), self.sms * 64), 1, 1, 32, 16, 1, 0, stream, args)

    def arg_reduce(self, is_max: bool, src: Any, dims: tuple[int, int], out: Any, stream: int) -> None:
        """int64 ``out`` (M,) = the index of the first max (min) of each contiguous row of ``src`` viewed as (M, K)."""
        m, k = dims
        tc = _C[_dtypes.compare_dtype(src._dtype)]
        vec = 16 // src.itemsize
        if k % vec or src._ptr % 16:
            vec = 1
        fn = self._fn("reduce", ARG_ROWS.format(max="true" if is_max else "false", a=_C[src._dtype], c=tc, vec=vec))
        self.launch(fn, min(m, 65535 * 16), 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPqq", src._ptr, out._ptr, m, k))

    def scan(self, op: str, src: Any, dims: tuple[int, int], acc_dt: np.dtype, out: Any, stream: int) -> None:
        """Inclusive cumsum/cumprod of each contiguous row of ``src`` viewed as (M, K) into contiguous ``out``."""
        m, k = dims
        if out._size:
            expr = SCAN_ROWS.format(op=SCAN_OPS[op], a=_C[src._dtype], acc=_C[acc_dt], o=_C[out._dtype])
            args = append_value(struct.pack("@PPqq", src._ptr, out._ptr, m, k), acc_dt, 0 if op == "cumsum" else 1)
            self.launch(self._fn("scan", expr), min(m, 65535 * 16), 1, 1, 256, 1, 1, 0, stream, args)


def instantiations() -> dict[str, list[str]]:
    """kernels/reduce.cu and scan.cu for the compile check: every reduction of every
    dtype with its default result and accumulator dtypes; every arg-reduction and scan."""
    reduce: list[str] = []
    for dt in _C:
        vec = 16 // dt.itemsize
        for op, fop in REDUCE_OPS.items():
            if _dtypes.is_complex(dt) and op not in ("sum", "prod"):  # the others go through real kernels
                continue
            out_dt, acc = _dtypes.reduction_dtypes(op, dt)
            args = {"op": fop, "a": _C[dt], "acc": _C[acc], "o": _C[out_dt]}
            reduce.append(ALL_PARTIAL.format(vec=vec, **args))
            reduce.append(ALL_FINAL.format(**args))
            reduce += [REDUCE_ROWS.format(vec=v, **args) for v in sorted({1, vec})]
            reduce.append(REDUCE_COLS.format(**args))
        if not _dtypes.is_complex(dt):
            tc = _C[_dtypes.compare_dtype(dt)]
            reduce += [ARG_ROWS.format(max=m, a=_C[dt], c=tc, vec=v) for m in ("true", "false") for v in (1, vec)]
    scan = [
        SCAN_ROWS.format(op=fop, a=_C[dt], acc=_C[_dtypes.accumulator(_dtypes.sum_dtype(dt))], o=_C[_dtypes.sum_dtype(dt)])
        for dt in _C
        for fop in SCAN_OPS.values()
    ]
    return {"reduce": sorted(set(reduce)), "scan": sorted(set(scan))}
