"""kernels/elementwise.cu: ufunc functors, casts and fills.

Kernel choice per call: operands of one shape and one dense memory order
(C-contiguous, or all transposed alike) take the vectorized ``*_contig``
kernels (16-byte accesses when every pointer is aligned); a scalar operand
rides in a unary kernel's parameters; anything else (broadcasting, strides)
takes the ``*_strided`` kernels, over dimensions merged where every operand
allows. ``binary_contig`` and ``unary_contig`` are the hot path: the caller has
checked that every operand is C-contiguous, of one shape and 16-byte aligned,
and keeps the kernel that ``binary_kernel`` / ``unary_kernel`` gave it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from ... import _dtypes
from ..fill import arange_terms
from .launch import (
    THREADS,
    UNROLL,
    Base,
    array_layout,
    grid_for,
    layout,
    param_values,
    params_struct,
    same_dense,
    vec_width,
)
from .launch import C as _C

# Name expressions of the instantiations.
UNARY_CONTIG = "pgk::unary_contig<{op}, {a}, {c}, {o}, {vec}>"
UNARY_STRIDED = "pgk::unary_strided<{op}, {a}, {c}, {o}>"
BINARY_CONTIG = "pgk::binary_contig<{op}, {a}, {b}, {c}, {o}, {vec}>"
BINARY_STRIDED = "pgk::binary_strided<{op}, {a}, {b}, {c}, {o}>"
TERNARY_STRIDED = "pgk::ternary_strided<{op}, {a}, {b}, {d}, {c}, {o}>"
CAST_CONTIG = "pgk::cast_contig<{a}, {o}, {vec}>"
CAST_STRIDED = "pgk::cast_strided<{a}, {o}>"
FILL = "pgk::fill<{o}, {vec}>"
ARANGE = "pgk::arange<{o}, {c}>"

_PACK_BINARY = struct.Struct("@PPPq")
_PACK_CAST = struct.Struct("@PPq")
_PACK_FILL = struct.Struct("@P8sq")
_PACK_ARANGE = {"f": struct.Struct("@Pfffq"), "d": struct.Struct("@Pdddq"), "q": struct.Struct("@Pqqqq")}
_SCALARS = (int, float, complex)  # a scalar operand, already in the kernel's compute dtype


def access_bytes(compute: np.dtype) -> int:
    """Bytes per vector access of a ufunc kernel computing in ``compute``: 8 for
    the 8/16-bit floats, whose per-element conversions make 16-byte accesses
    compute-bound (H100, 2^26 bfloat16: divide 2343 GB/s at 16 bytes, 2934 at 8;
    add and less gain 2-7%; float32 is the same either way), else 16."""
    return 8 if compute.itemsize < 4 and _dtypes.is_float(compute) else 16


def _functor(uf: Any, side: str | None) -> str:
    """The functor of ``uf``; with a scalar operand on ``side`` ("Left" or "Right"),
    the binary functor that takes it from the kernel's parameters."""
    return uf.functor if side is None else f"pgk::Scalar{side}<{uf.functor}>"


class ElementwiseOps(Base):
    def __init__(self, rt: Any) -> None:
        super().__init__(rt)
        self._unary: dict[tuple, tuple[int, int, struct.Struct, np.dtype]] = {}  # dense unary kernels of any alignment

    def binary_kernel(self, uf: Any, compute: np.dtype, da: np.dtype, db: np.dtype, do: np.dtype) -> tuple[int, int]:
        """(function, elements per block) of ``binary_contig`` for these dtypes."""
        vec = max(1, access_bytes(compute) // max(da.itemsize, db.itemsize, do.itemsize))
        expr = BINARY_CONTIG.format(op=uf.functor, a=_C[da], b=_C[db], c=_C[compute], o=_C[do], vec=vec)
        return self._fn("elementwise", expr), THREADS * UNROLL * vec

    def binary_contig(self, kernel: tuple[int, int], a: Any, b: Any, out: Any, stream: int) -> None:
        """out = uf(a, b) by ``binary_kernel``'s kernel, every array C-contiguous, of one
        shape, at 16-byte aligned addresses (pool blocks are): a launch whose
        parameters need no packing."""
        fn, per_block = kernel
        n = out._size
        if n:
            self.launch_u64(fn, (n + per_block - 1) // per_block, THREADS, stream, a._ptr, b._ptr, out._ptr, n)

    def unary_kernel(
        self, uf: Any, side: str | None, compute: np.dtype, da: np.dtype, do: np.dtype
    ) -> tuple[int, int, struct.Struct, np.dtype, tuple[int, ...] | None]:
        """(function, elements per block, parameter packer, parameter dtype, the zero fields
        after the given parameters, None for complex ones) of ``unary_contig``: ``uf`` of
        one array, or with ``side``, of an array and a scalar (its one parameter) on that side."""
        vec = max(1, access_bytes(compute) // max(da.itemsize, do.itemsize))
        fn, per_block, packer, kd = self._unary_entry(_functor(uf, side), da, compute, do, vec)
        return fn, per_block, packer, kd, None if kd.kind == "c" else (0,) * (3 if side is None else 2)

    def unary_contig(
        self,
        kernel: tuple[int, int, struct.Struct, np.dtype, tuple[int, ...] | None],
        a: Any,
        out: Any,
        params: tuple[Any, ...],
        stream: int,
    ) -> None:
        """out = uf(a) by ``unary_kernel``'s kernel, with the scalar operand ``params[0]``
        when it has a side; a and out as for ``binary_contig``."""
        fn, per_block, packer, kd, zeros = kernel
        n = out._size
        if n:
            values = (*params, *zeros) if zeros is not None else param_values(params, kd)  # complex: split in parts
            args = packer.pack(a._ptr, out._ptr, n, *values)
            self.launch(fn, (n + per_block - 1) // per_block, 1, 1, THREADS, 1, 1, 0, stream, args)

    def _unary_entry(
        self, functor: str, da: np.dtype, compute: np.dtype, do: np.dtype, vec: int
    ) -> tuple[int, int, struct.Struct, np.dtype]:
        kd = _dtypes.compute_dtype(compute)
        expr = UNARY_CONTIG.format(op=functor, a=_C[da], c=_C[compute], o=_C[do], vec=vec)
        return self._fn("elementwise", expr), THREADS * UNROLL * vec, params_struct("@PPq", kd, False), kd

    def elementwise(self, uf: Any, operands: list[Any], compute: np.dtype, out: Any, params: tuple[Any, ...], stream: int) -> None:
        """out = uf(*operands) computing in ``compute``; operands are arrays (any
        strides, broadcasting to out) or scalars already converted to the kernel
        compute dtype. One array: a unary kernel (a scalar operand of a binary
        function rides in the functor's parameters); two or three: binary or ternary."""
        arrays = [o for o in operands if not isinstance(o, _SCALARS)]
        side = None
        if len(arrays) < uf.nin:  # a binary function with one scalar operand
            left = isinstance(operands[0], _SCALARS)
            side = "Left" if left else "Right"
            params = (operands[0 if left else 1],)
        n = out._size
        c = _C[compute]
        dense = same_dense(out, arrays)
        if len(arrays) == 1:
            (a,) = arrays
            if dense:
                key = (uf, side, a._dtype, compute, out._dtype, vec_width(a, out, nbytes=access_bytes(compute)))
                entry = self._unary.get(key)
                if entry is None:
                    entry = self._unary[key] = self._unary_entry(_functor(uf, side), a._dtype, compute, out._dtype, key[-1])
                fn, per_block, packer, kd = entry
                args = packer.pack(a._ptr, out._ptr, n, *param_values(params, kd))
                self.launch(fn, (n + per_block - 1) // per_block, 1, 1, THREADS, 1, 1, 0, stream, args)
                return
            kd = _dtypes.compute_dtype(compute)
            expr = UNARY_STRIDED.format(op=_functor(uf, side), a=_C[a._dtype], c=c, o=_C[out._dtype])
            args = params_struct("@PPq", kd, True).pack(a._ptr, out._ptr, n, *param_values(params, kd)) + array_layout(out, [a, out])
        elif len(arrays) == 2:
            a, b = arrays
            if dense:
                vec = vec_width(a, b, out, nbytes=access_bytes(compute))
                expr = BINARY_CONTIG.format(op=uf.functor, a=_C[a._dtype], b=_C[b._dtype], c=c, o=_C[out._dtype], vec=vec)
                args = _PACK_BINARY.pack(a._ptr, b._ptr, out._ptr, n)
                self.launch(self._fn("elementwise", expr), grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
                return
            expr = BINARY_STRIDED.format(op=uf.functor, a=_C[a._dtype], b=_C[b._dtype], c=c, o=_C[out._dtype])
            args = _PACK_BINARY.pack(a._ptr, b._ptr, out._ptr, n) + array_layout(out, [a, b, out])
        else:
            a, b, d = arrays
            expr = TERNARY_STRIDED.format(op=uf.functor, a=_C[a._dtype], b=_C[b._dtype], d=_C[d._dtype], c=c, o=_C[out._dtype])
            args = struct.pack("@PPPPq", a._ptr, b._ptr, d._ptr, out._ptr, n) + array_layout(out, [a, b, d, out])
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def cast(self, src: Any, out: Any, stream: int) -> None:
        """out[...] = src converted to out's dtype; src broadcasts to out's shape,
        either may be strided."""
        n = out._size
        if n == 0:
            return
        if same_dense(out, [src]):
            if src._dtype == out._dtype:
                self.native.memcpy_dtod(out._ptr, src._ptr, out.nbytes, stream)
                return
            vec = vec_width(src, out)
            expr = CAST_CONTIG.format(a=_C[src._dtype], o=_C[out._dtype], vec=vec)
            args = _PACK_CAST.pack(src._ptr, out._ptr, n)
            self.launch(self._fn("elementwise", expr), grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
            return
        expr = CAST_STRIDED.format(a=_C[src._dtype], o=_C[out._dtype])
        args = _PACK_CAST.pack(src._ptr, out._ptr, n) + array_layout(out, [src, out])
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def copy_strided(self, src: int, dst: int, dt: np.dtype, shape: tuple[int, ...], strides: list[int], stream: int) -> None:
        """C-contiguous ``dst`` of ``shape`` = the elements of ``src`` at these element
        strides: a permuted copy between pool blocks, with no arrays around them."""
        n = math.prod(shape)
        dense = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            dense[i] = dense[i + 1] * shape[i + 1]
        args = _PACK_CAST.pack(src, dst, n) + layout(shape, [strides, dense])
        expr = CAST_STRIDED.format(a=_C[dt], o=_C[dt])
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def fill(self, out: Any, value: Any, stream: int) -> None:
        n = out._size
        if n == 0:
            return
        raw = _dtypes.scalar_bytes(value, out._dtype)
        if raw.count(raw[0]) == len(raw):  # every byte equal (zeros, -1, ...): memset
            self.native.memset_d8(out._ptr, raw[0], out.nbytes, stream)
            return
        vec = vec_width(out)
        expr = FILL.format(o=_C[out._dtype], vec=vec)
        if len(raw) <= 8:
            args = _PACK_FILL.pack(out._ptr, raw.ljust(8, b"\0"), n)
        else:  # complex128: the value is 16-byte aligned
            args = struct.pack("@P8x16sq", out._ptr, raw, n)
        self.launch(self._fn("elementwise", expr), grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)

    def arange(self, out: Any, start: float | int, step: float | int, stream: int) -> None:
        n = out._size
        if n == 0:
            return
        first, delta, second = arange_terms(out._dtype, start, step)
        code = first.dtype.char if first.dtype.char in "fd" else "q"
        expr = ARANGE.format(o=_C[out._dtype], c={"f": "float", "d": "double", "q": "long long"}[code])
        args = _PACK_ARANGE[code].pack(out._ptr, first.item(), delta.item(), second.item(), n)
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)


def instantiations(ufuncs: Iterable[Any]) -> list[str]:
    """kernels/elementwise.cu for the compile check: every ufunc's contiguous kernel
    with every dtype it accepts (the functors branch on the type), and the
    strided and scalar forms, which share that code, for float32 and int64 only;
    fills, aranges and casts between every pair of dtypes. ``ufuncs``: the
    front end's (each with ``functor``, ``nin`` and ``loop``)."""
    dts = list(_C)
    out: list[str] = []
    for uf in ufuncs:
        for dt in dts:
            try:
                compute, res = uf.loop(*([dt] * uf.nin))
            except TypeError:
                continue
            names = {"op": uf.functor, "a": _C[dt], "b": _C[dt], "d": _C[dt], "c": _C[compute], "o": _C[res]}
            vec = max(1, access_bytes(compute) // max(dt.itemsize, res.itemsize))
            if uf.nin == 1:
                out.append(UNARY_CONTIG.format(vec=vec, **names))
            elif uf.nin == 2:
                out.append(BINARY_CONTIG.format(vec=vec, **names))
            if dt not in (_dtypes.float32, _dtypes.int64):
                continue
            if uf.nin == 1:
                out.append(UNARY_STRIDED.format(**names))
            elif uf.nin == 2:
                out.append(BINARY_STRIDED.format(**names))
                for side in ("Left", "Right"):
                    scalar = dict(names, op=_functor(uf, side))
                    out += [UNARY_CONTIG.format(vec=vec, **scalar), UNARY_STRIDED.format(**scalar)]
            else:
                out.append(TERNARY_STRIDED.format(**dict(names, a=_C[_dtypes.bool_])))
    for dt in dts:
        c = _C[dt]
        out.append(FILL.format(o=c, vec=16 // dt.itemsize))
        out += [ARANGE.format(o=c, c=ct) for ct in ("float", "double", "long long")]
        for other in dts:
            out.append(CAST_CONTIG.format(a=c, o=_C[other], vec=16 // max(dt.itemsize, other.itemsize)))
            out.append(CAST_STRIDED.format(a=c, o=_C[other]))
    return sorted(set(out))
