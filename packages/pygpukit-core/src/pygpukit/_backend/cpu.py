"""The CPU simulation backend: NumPy over host memory handed out by the Rust pool.

Results are computed with NumPy (and ml_dtypes for bfloat16/float8) with the
same promotion, casting and accumulation rules as the CUDA kernels.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

_UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}


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

    def from_host(self, dst: Any, src: np.ndarray) -> None:
        view(dst)[...] = src

    def to_host(self, out: np.ndarray, src: Any) -> None:
        out[...] = view(src)

    def cast(self, src: Any, out: Any) -> None:
        with np.errstate(all="ignore"):
            np.copyto(view(out), view(src), casting="unsafe")

    def fill(self, out: Any, value: Any) -> None:
        view(out)[...] = np.asarray(value).astype(out.dtype)

    def arange(self, out: Any, start: float | int, step: float | int) -> None:
        from .cuda import arange_terms

        first, delta, second = arange_terms(out.dtype, start, step)
        vals = first + np.arange(out.size).astype(first.dtype) * delta
        if out.size > 1:
            vals[1] = second
        with np.errstate(all="ignore"):
            view(out)[...] = vals.astype(out.dtype)

    # Inputs are converted to the result dtype first, as the kernels do (they
    # compute in that dtype, or float32 for the 8/16-bit floats, and round once).
    # Floating-point warnings are silenced: a GPU cannot raise them either.
    def binary(self, op: str, a: Any, b: Any, stream: int) -> Any:
        from ..array import GPUArray, binary_result_dtype

        out_dt = binary_result_dtype(op, a.dtype, b.dtype)
        shape = a.shape if a.shape == b.shape else np.broadcast_shapes(a.shape, b.shape)
        out = GPUArray._empty(shape, out_dt, stream)
        if out.size:
            with np.errstate(all="ignore"):
                _UFUNCS[op](view(a).astype(out_dt, copy=False), view(b).astype(out_dt, copy=False), out=view(out))
        return out

    def binary_scalar(self, op: str, a: Any, s: Any, dt: np.dtype, scalar_left: bool, stream: int) -> Any:
        from ..array import GPUArray

        out = GPUArray._empty(a.shape, dt, stream)
        x = view(a).astype(dt, copy=False)
        sv = np.asarray(s).astype(dt)
        with np.errstate(all="ignore"):
            if scalar_left:
                _UFUNCS[op](sv, x, out=view(out))
            else:
                _UFUNCS[op](x, sv, out=view(out))
        return out

    def reduce(self, op: str, kind: str, src: Any, dims: tuple[int, ...], out_dt: np.dtype, acc_dt: np.dtype, init: Any) -> Any:
        """The CPU twin of CudaOps.reduce: same layouts, accumulators and NaN rules."""
        from ..array import GPUArray

        shape: tuple[int, ...] = {"all": (), "rows": dims[:1]}.get(kind, (dims[0] * dims[-1],))
        x = view(src).reshape(dims if kind != "all" else (1, -1))
        with np.errstate(all="ignore"):
            if op in ("all", "any"):
                r = getattr(np, op)(x.astype(bool), axis=1)
            else:  # sum / prod in the accumulator dtype; max / min propagate NaN in NumPy too
                r = getattr(np, op)(x.astype(acc_dt), axis=1)
            out = GPUArray._empty(shape, out_dt)
            view(out)[...] = np.asarray(r).reshape(shape).astype(out_dt)
        return out

    def matmul(self, a: Any, b: Any, out_dt: np.dtype, acc_dt: np.dtype, batch: int, m: int, n: int, k: int) -> Any:
        """The CPU twin of the reference kernel: products accumulated in ``acc_dt``."""
        from ..array import GPUArray

        x = view(a).reshape(batch, m, k).astype(acc_dt)
        y = view(b).reshape(batch, k, n).astype(acc_dt)
        out = GPUArray._empty((batch * m * n,), out_dt)
        with np.errstate(all="ignore"):
            view(out)[...] = np.matmul(x, y).reshape(-1).astype(out_dt)
        return out

    def scan(self, op: str, src: Any, dims: tuple[int, int], out_dt: np.dtype, acc_dt: np.dtype) -> Any:
        from ..array import GPUArray

        x = view(src).reshape(dims).astype(acc_dt)
        out = GPUArray._empty((dims[0] * dims[1],), out_dt)
        with np.errstate(all="ignore"):
            view(out)[...] = getattr(np, op)(x, axis=1).reshape(-1).astype(out_dt)
        return out

    def gather(self, src: Any, idx: Any, out_shape: tuple[int, ...], axis_len: int, n_idx: int, inner: int, along: bool) -> Any:
        from ..array import GPUArray

        a = view(src).reshape(-1, axis_len, inner)
        i = view(idx).astype(np.int64)
        if along:
            r = np.take_along_axis(a, i.reshape(a.shape[0], -1, inner), axis=1)
        else:
            r = np.take(a, i.reshape(-1), axis=1)
        out = GPUArray._empty(out_shape, src.dtype)
        view(out)[...] = r.reshape(out_shape)
        return out

    def nonzero(self, csum: Any, shape: tuple[int, ...], count: int) -> Any:
        from ..array import GPUArray

        c = view(csum)
        prev = np.concatenate([[0], c[:-1]]) if c.size else c
        flat = np.flatnonzero(c != prev)
        out = GPUArray._empty((len(shape), count), np.dtype(np.int64))
        if count:
            view(out)[...] = np.stack(np.unravel_index(flat, shape))
        return out

    def arg_reduce(self, is_max: bool, src: Any, dims: tuple[int, int]) -> Any:
        from ..array import GPUArray

        x = view(src).reshape(dims)
        if x.dtype.kind not in "biuf":  # bfloat16 / float8: compare in float32
            x = x.astype(np.float32)
        out = GPUArray._empty((dims[0],), np.dtype(np.int64))
        view(out)[...] = np.argmax(x, axis=1) if is_max else np.argmin(x, axis=1)
        return out
