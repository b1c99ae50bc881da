"""The CPU simulation backend: NumPy over host memory handed out by the Rust pool.

Results are computed with NumPy (and ml_dtypes for bfloat16/float8) with the
same promotion, casting and accumulation rules as the CUDA kernels. The
methods are the CUDA backend's, output arrays and stream included (the
stream is bookkeeping only: work here is synchronous).
"""

from __future__ import annotations

import ctypes
import warnings
from typing import Any

import numpy as np

from .. import _dtypes
from .fill import arange_terms
from .sort import host_searchsorted, host_sort_rows, host_topk_select, host_unique_flags

_SCALARS = (int, float, complex)  # a scalar operand, already in the kernel's compute dtype


def view(arr: Any) -> np.ndarray:
    """A NumPy array over the memory of ``arr`` (valid while ``arr`` is alive).
    Strides may be negative or zero: the buffer spans the lowest to the highest byte touched."""
    if arr.size == 0:
        return np.ndarray(arr.shape, dtype=arr.dtype, buffer=bytearray(0))
    lo = hi = 0
    for dim, st in zip(arr.shape, arr.strides):
        ext = (dim - 1) * st
        if ext < 0:
            lo += ext
        else:
            hi += ext
    buf = (ctypes.c_char * (hi - lo + arr.itemsize)).from_address(arr.data_ptr + lo)
    return np.ndarray(arr.shape, dtype=arr.dtype, buffer=buf, offset=-lo, strides=arr.strides)


class CpuOps:
    name = "cpu"

    def __init__(self, rt: Any) -> None:
        self.rt = rt

    def from_host(self, dst: Any, src: np.ndarray, stream: int) -> None:
        view(dst)[...] = src

    def to_host(self, out: np.ndarray, src: Any, stream: int) -> None:
        out[...] = view(src)

    def cast(self, src: Any, out: Any, stream: int) -> None:
        # complex -> real warns in GPUArray.astype, for both backends
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            np.copyto(view(out), view(src), casting="unsafe")

    def fill(self, out: Any, value: Any, stream: int) -> None:
        view(out)[...] = np.asarray(value).astype(out.dtype)

    def arange(self, out: Any, start: float | int, step: float | int, stream: int) -> None:
        first, delta, second = arange_terms(out.dtype, start, step)
        vals = first + np.arange(out.size).astype(first.dtype) * delta
        if out.size > 1:
            vals[1] = second
        with np.errstate(all="ignore"):
            view(out)[...] = vals.astype(out.dtype)

    # Operands are converted to the compute dtype first, as the kernels do
    # (float32 for the 8/16-bit floats), and the result is rounded once.
    # Floating-point warnings are silenced: a GPU cannot raise them either.
    def elementwise(self, uf: Any, operands: list[Any], compute: np.dtype, out: Any, params: tuple[Any, ...], stream: int) -> None:
        kd = _dtypes.compute_dtype(compute)
        xs = [np.asarray(o, dtype=kd) if isinstance(o, _SCALARS) else view(o).astype(kd) for o in operands]
        with np.errstate(all="ignore"):
            r = uf.cpu(*xs, *params)
            np.copyto(view(out), np.asarray(r), casting="unsafe")

    # The CUDA backend's contiguous fast path: here a "kernel" is what elementwise needs.
    def binary_kernel(self, uf: Any, compute: np.dtype, da: np.dtype, db: np.dtype, do: np.dtype) -> tuple[Any, np.dtype]:
        return uf, compute

    def binary_contig(self, kernel: tuple[Any, np.dtype], a: Any, b: Any, out: Any, stream: int) -> None:
        self.elementwise(kernel[0], [a, b], kernel[1], out, (), stream)

    def unary_kernel(self, uf: Any, side: str | None, compute: np.dtype, da: np.dtype, do: np.dtype) -> tuple[Any, str | None, np.dtype]:
        return uf, side, compute

    def unary_contig(self, kernel: tuple[Any, str | None, np.dtype], a: Any, out: Any, params: tuple[Any, ...], stream: int) -> None:
        uf, side, compute = kernel
        if side is None:
            self.elementwise(uf, [a], compute, out, params, stream)
        else:
            self.elementwise(uf, [params[0], a] if side == "Left" else [a, params[0]], compute, out, (), stream)

    def reduce(self, op: str, kind: str, src: Any, dims: tuple[int, ...], acc_dt: np.dtype, init: Any, out: Any, stream: int) -> None:
        """The CPU twin of CudaOps.reduce: same layouts, accumulators and NaN rules."""
        x = view(src).reshape(dims if kind != "all" else (1, -1))
        with np.errstate(all="ignore"):
            if op in ("all", "any"):
                r = getattr(np, op)(x.astype(bool), axis=1)
            else:  # sum / prod in the accumulator dtype; max / min propagate NaN in NumPy too
                r = getattr(np, op)(x.astype(acc_dt), axis=1)
            view(out)[...] = np.asarray(r).reshape(out.shape).astype(out.dtype)

    def matmul(self, a: Any, b: Any, acc_dt: np.dtype, batch: int, m: int, n: int, k: int, out: Any, stream: int) -> None:
        """The CPU twin of the reference kernel: products accumulated in ``acc_dt``."""
        x = view(a).reshape(batch, m, k).astype(acc_dt)
        y = view(b).reshape(batch, k, n).astype(acc_dt)
        with np.errstate(all="ignore"):
            view(out)[...] = np.matmul(x, y).reshape(out.shape).astype(out.dtype)

    def scan(self, op: str, src: Any, dims: tuple[int, int], acc_dt: np.dtype, out: Any, stream: int) -> None:
        x = view(src).reshape(dims).astype(acc_dt)
        with np.errstate(all="ignore"):
            view(out)[...] = getattr(np, op)(x, axis=1).reshape(out.shape).astype(out.dtype)

    def gather(self, src: Any, idx: Any, axis_len: int, n_idx: int, inner: int, along: bool, out: Any, stream: int) -> None:
        a = view(src).reshape(-1, axis_len, inner)
        i = view(idx).astype(np.int64)
        if along:
            r = np.take_along_axis(a, i.reshape(a.shape[0], -1, inner), axis=1)
        else:
            r = np.take(a, i.reshape(-1), axis=1)
        view(out)[...] = r.reshape(out.shape)

    def scatter(self, src: Any, idx: Any, dst: Any, axis_len: int, n_idx: int, inner: int, stream: int) -> None:
        d = view(dst).reshape(-1, axis_len, inner)
        d[:, view(idx).astype(np.int64).reshape(-1), :] = view(src).reshape(d.shape[0], n_idx, inner)

    def nonzero(self, csum: Any, shape: tuple[int, ...], out: Any, stream: int) -> None:
        c = view(csum)
        prev = np.concatenate([[0], c[:-1]]) if c.size else c
        flat = np.flatnonzero(c != prev)
        if out.size:
            view(out)[...] = np.stack(np.unravel_index(flat, shape))

    def arg_reduce(self, is_max: bool, src: Any, dims: tuple[int, int], out: Any, stream: int) -> None:
        x = view(src).reshape(dims)
        if x.dtype.kind not in "biuf":  # bfloat16 / float8: compare in float32
            x = x.astype(np.float32)
        view(out)[...] = (np.argmax(x, axis=1) if is_max else np.argmin(x, axis=1)).reshape(out.shape)

    # -- random ---------------------------------------------------------------
    def random_fill(self, out: Any, dist: Any, key: int, offset: int, a: Any, b: Any, stream: int) -> None:
        """The CPU twin of CudaOps.random_fill: the same Philox blocks and conversions in NumPy."""
        vals = dist.values(key, offset, out.size, a, b)
        with np.errstate(all="ignore"):  # uint64 -> signed integers wraps, as the kernel's cast
            view(out)[...] = vals.astype(out.dtype).reshape(out.shape)

    # -- softmax ----------------------------------------------------------------
    def softmax(self, mode: str, src: Any, dims: tuple[int, int, int], comp_dt: np.dtype, out: Any, stream: int) -> None:
        """The CPU twin of CudaOps.softmax: the same (max, sum of exp) formulation and special values."""
        outer, k, n = dims
        # K last and contiguous: NumPy then sums pairwise, as accurate as the kernels' trees
        x = np.ascontiguousarray(view(src).reshape(dims).transpose(0, 2, 1)).astype(comp_dt)
        with np.errstate(all="ignore"):
            m = np.max(x, axis=2, keepdims=True) if k else np.full((outer, n, 1), -np.inf, comp_dt)
            fin = np.isfinite(m)
            e = np.exp(x - np.where(fin, m, 0))
            s = np.sum(e, axis=2, keepdims=True)
            if mode == "logsumexp":
                r = np.where(fin, m + np.log(s), m)
            elif mode == "softmax":
                r = np.where(fin, e / s, np.nan)
            else:  # log_softmax; with m = +inf: -inf, NaN at the +inf itself
                r = np.where(fin, (x - m) - np.log(s), np.where((m == np.inf) & (x != m), -np.inf, np.nan))
            view(out)[...] = r.transpose(0, 2, 1).reshape(out.shape).astype(out.dtype)

    # -- sorting ----------------------------------------------------------------
    # The same keys as the kernels (pygpukit/_backend/sort.py) under NumPy's stable sort.
    def sort_rows(self, src: Any, rows: int, n: int, descending: bool, indices: bool, out: Any, stream: int) -> None:
        view(out)[...] = host_sort_rows(view(src).reshape(rows, n), descending, indices).reshape(out.shape)

    def topk_select(self, src: Any, rows: int, n: int, k: int, largest: bool, out: Any, stream: int) -> None:
        view(out)[...] = host_topk_select(view(src).reshape(rows, n), k, largest).reshape(out.shape)

    def searchsorted(self, a: Any, v: Any, right: bool, out: Any, stream: int) -> None:
        view(out)[...] = host_searchsorted(view(a), view(v), right).reshape(out.shape)

    def unique_flags(self, s: Any, out: Any, stream: int) -> None:
        view(out)[...] = host_unique_flags(view(s)).reshape(out.shape)
