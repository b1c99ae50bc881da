"""kernels/indexing.cu and kernels/linalg.cu: gather, scatter, the compaction of
nonzero, and the reference (tiled, exact) matmul."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ... import _dtypes
from .launch import THREADS, Base
from .launch import C as _C

GATHER = "pgk::gather<{t}, {i}, {along}>"
SCATTER = "pgk::scatter<{t}, {i}>"
COMPACT_NONZERO = "pgk::compact_nonzero"
MATMUL = "pgk::matmul_tiled<{a}, {b}, {o}, {acc}>"


class IndexingOps(Base):
    def gather(self, src: Any, idx: Any, axis_len: int, n_idx: int, inner: int, along: bool, out: Any, stream: int) -> None:
        """out[o, j, i] = src[o, idx[j], i] (``along``: idx[o, j, i]); src, idx and out contiguous."""
        n = out._size
        if n:
            expr = GATHER.format(t=_C[src._dtype], i=_C[idx._dtype], along="true" if along else "false")
            args = struct.pack("@PPPqqqq", src._ptr, idx._ptr, out._ptr, n, n_idx, axis_len, inner)
            self.launch(self._fn("indexing", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def scatter(self, src: Any, idx: Any, dst: Any, axis_len: int, n_idx: int, inner: int, stream: int) -> None:
        """dst[o, idx[j], i] = src[o, j, i]; src, idx and dst contiguous, indices in bounds."""
        n = src._size
        if n:
            expr = SCATTER.format(t=_C[src._dtype], i=_C[idx._dtype])
            args = struct.pack("@PPPqqqq", src._ptr, idx._ptr, dst._ptr, n, n_idx, axis_len, inner)
            self.launch(self._fn("indexing", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def nonzero(self, csum: Any, shape: tuple[int, ...], out: Any, stream: int) -> None:
        """int64 ``out`` (ndim, count) = the indices of the true elements, from the inclusive
        cumulative count ``csum`` of a C-order mask of ``shape``."""
        n = csum._size
        if n and out._size:
            dims = [*shape, *([1] * (8 - len(shape)))]
            args = struct.pack("@PPqq9q", csum._ptr, out._ptr, n, out._shape[1], len(shape), *dims)
            self.launch(self._fn("indexing", COMPACT_NONZERO), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def matmul(self, a: Any, b: Any, acc_dt: np.dtype, batch: int, m: int, n: int, k: int, out: Any, stream: int) -> None:
        """``out`` (batch, m, n) = (batch, m, k) @ (batch, k, n), all contiguous."""
        if out._size == 0:
            return
        if k == 0:
            self.native.memset_d8(out._ptr, 0, out.nbytes, stream)
            return
        expr = MATMUL.format(a=_C[a._dtype], b=_C[b._dtype], o=_C[out._dtype], acc=_C[acc_dt])
        args = struct.pack("@PPPqqq", a._ptr, b._ptr, out._ptr, m, n, k)
        self.launch(self._fn("linalg", expr), -(-n // 16), -(-m // 16), batch, 16, 16, 1, 0, stream, args)


def instantiations() -> dict[str, list[str]]:
    """kernels/indexing.cu and linalg.cu for the compile check."""
    dts = list(_C)
    indices = (_dtypes.int32, _dtypes.int64)
    indexing = [GATHER.format(t=_C[dt], i=_C[it], along=al) for dt in dts for it in indices for al in ("true", "false")]
    indexing += [GATHER.format(t=_C[_dtypes.float32], i=_C[it], along="false") for it in dts if it.kind in "iu"]
    indexing += [SCATTER.format(t=_C[dt], i=_C[it]) for dt in dts for it in indices]
    indexing += [SCATTER.format(t=_C[_dtypes.float32], i=_C[it]) for it in dts if it.kind in "iu"]
    indexing.append(COMPACT_NONZERO)
    real = [dt for dt in dts if not _dtypes.is_complex(dt)]
    linalg = [MATMUL.format(a=_C[dt], b=_C[dt], o=_C[dt], acc=_C[_dtypes.accumulator(dt)]) for dt in real]
    linalg += [
        MATMUL.format(a=_C[x], b=_C[y], o=_C[_dtypes.float32], acc="float")
        for x, y in ((_dtypes.float16, _dtypes.float32), (_dtypes.bfloat16, _dtypes.float16))
    ]
    return {"indexing": sorted(set(indexing)), "linalg": sorted(set(linalg))}
