"""What every CUDA op family shares: block sizes, vector widths, the Layout and
Params parameter formats of kernels/include/pgk, and the base class that holds
the runtime's launch entry points and finds compiled functions."""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import numpy as np

from ... import _dtypes, kernels

THREADS = 256
UNROLL = 4  # elementwise.cu kUnroll
MAX_DIMS = 8
C = _dtypes.C_TYPES


def grid_for(n: int, per_block: int) -> int:
    return max(1, -(-n // per_block))


def vec_width(*arrays: Any, nbytes: int = 16) -> int:
    """Elements per vector access: ``nbytes`` of the widest operand, if every pointer allows it."""
    width = max(1, nbytes // max(a._dtype.itemsize for a in arrays))
    ptrs = 0
    for a in arrays:
        ptrs |= a._ptr
    if ptrs & 15 == 0:  # pool blocks are 512-byte aligned: the usual case
        return width
    while width > 1 and any(a._ptr % (a._dtype.itemsize * width) for a in arrays):
        width //= 2
    return width


def broadcast_strides(arr: Any, shape: tuple[int, ...]) -> list[int]:
    """Element strides of ``arr`` broadcast to ``shape`` (0 along broadcast dimensions)."""
    pad = len(shape) - arr.ndim
    out = [0] * pad
    for dim, st in zip(arr.shape, arr.strides):
        out.append(0 if dim == 1 else st // arr.itemsize)
    return out


def same_dense(out: Any, arrays: list[Any]) -> bool:
    """Whether every array has out's shape and element order and out fills its
    memory without gaps: then a flat contiguous kernel serves (also for
    transposed arrays, whose results take the same order)."""
    if out._contig:
        return all(a._contig and a._shape == out._shape for a in arrays)
    if not _dense(out):
        return False
    st = [s // out.itemsize for s in out.strides]
    return all(a._shape == out._shape and [s // a.itemsize for s in a.strides] == st for a in arrays)


def _dense(a: Any) -> bool:
    dims = sorted((st, d) for st, d in zip(a.strides, a.shape) if d != 1)
    expect = a.itemsize
    for st, d in dims:
        if st != expect:
            return False
        expect *= d
    return True


def array_layout(out: Any, arrays: list[Any]) -> bytes:
    """pgk::Layout<K> of ``arrays`` (out last) broadcast to out's shape."""
    return layout(out.shape, [broadcast_strides(a, out.shape) for a in arrays])


def layout(shape: tuple[int, ...], strides: list[list[int]]) -> bytes:
    """pgk::Layout<K> of K operands of ``shape`` with these element strides (output
    last), the dimensions that are contiguous for every operand merged; packed
    after 8-byte aligned parameters."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for i, d in enumerate(shape):
        if d == 1:
            continue
        if dims and all(m[-1] == st[i] * d for m, st in zip(merged, strides)):
            dims[-1] *= d
            for m, st in zip(merged, strides):
                m[-1] = st[i]
        else:
            dims.append(d)
            for m, st in zip(merged, strides):
                m.append(st[i])
    if not dims:  # a single element
        dims = [1]
        merged = [[0] for _ in strides]
    if len(dims) > MAX_DIMS:
        raise ValueError(f"pygpukit kernels support at most {MAX_DIMS} non-mergeable dimensions, got {len(dims)}")
    pad = [0] * (MAX_DIMS - len(dims))
    fields = [len(dims), *dims, *pad]
    for m in merged:
        fields += [*m, *pad]
    return struct.pack(f"@{len(fields)}q", *fields)


@cache
def params_struct(prefix: str, dt: np.dtype, then_layout: bool) -> struct.Struct:
    """``prefix`` followed by pgk::Params<dt> (three values); padded to 8 bytes
    when a Layout follows. The driver rejects a parameter buffer longer than
    the kernel's parameters (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES), so a kernel
    that ends with the Params gets no padding."""
    if dt.kind == "c":  # complex<R> {re, im}, aligned to its size
        part = "f" if dt.itemsize == 8 else "d"
        pad = -struct.calcsize(prefix) % dt.itemsize
        return struct.Struct(f"{prefix}{pad}x6{part}{'0q' if then_layout else ''}")
    code = dt.char if dt.char in "?bBhHiIqQfd" else {"l": "q", "L": "Q"}[dt.char]
    return struct.Struct(f"{prefix}3{code}{'0q' if then_layout else ''}")


def param_values(params: tuple[Any, ...], dt: np.dtype) -> list[Any]:
    """The three pgk::Params<dt> values (unused ones 0) as struct fields: complex ones split in two."""
    values = [*params, *(0,) * (3 - len(params))]
    if dt.kind != "c":
        return values
    return [part for v in values for part in (complex(v).real, complex(v).imag)]


def append_value(head: bytes, dt: np.dtype, value: Any) -> bytes:
    """Kernel parameters ``head`` followed by ``value`` as dtype ``dt``, padded to
    its alignment (its size: complex128 is 16-byte aligned, as in C++)."""
    return head + bytes(-len(head) % dt.itemsize) + _dtypes.scalar_bytes(value, dt)


class Base:
    """The runtime's launch entry points and device figures, for every family's mixin.
    Ops take their output arrays and the stream from the caller: the front end
    decides both (GPUArray._empty, streams.current_stream_handle)."""

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.native = rt.native
        self.sm = rt.sm
        self.launch = rt.native.launch
        self.launch_u64 = rt.native.launch_u64
        self.sms = rt.props["multiprocessor_count"]
        self.pool = rt.pool  # graphs.py swaps it (and the runtime's) while a capture is under way

    def _fn(self, file: str, expr: str) -> int:
        return kernels.function(file, expr, self.sm)

    def _strided_grid(self, n: int) -> int:
        return min(grid_for(n, THREADS), self.sms * 32)
