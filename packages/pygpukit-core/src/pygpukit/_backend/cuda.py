"""The CUDA backend: built-in NVRTC kernels launched on the current stream.

Kernel choice per call: operands of one shape and one dense memory order
(C-contiguous, or all transposed alike) take the vectorized ``*_contig``
kernels (16-byte accesses when every pointer is aligned); a scalar operand
rides in a unary kernel's parameters; anything else (broadcasting, strides)
takes the ``*_strided`` kernels, over dimensions merged where every operand
allows. Nothing here synchronizes.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import numpy as np

from .. import _dtypes, kernels
from ..array import GPUArray
from ..streams import _local, current_stream_handle
from ..ufuncs import kernel_dtype as ufunc_kernel_dtype

THREADS = 256
UNROLL = 4  # elementwise.cu kUnroll
REDUCE_THREADS = 512
MAX_DIMS = 8
_C = _dtypes.C_TYPES

# Name expressions of the instantiations; instantiations() below lists a
# representative set of them for the compile check in CI.
UNARY_CONTIG = "pgk::unary_contig<{op}, {a}, {c}, {o}, {vec}>"
UNARY_STRIDED = "pgk::unary_strided<{op}, {a}, {c}, {o}>"
BINARY_CONTIG = "pgk::binary_contig<{op}, {a}, {b}, {c}, {o}, {vec}>"
BINARY_STRIDED = "pgk::binary_strided<{op}, {a}, {b}, {c}, {o}>"
TERNARY_STRIDED = "pgk::ternary_strided<{op}, {a}, {b}, {d}, {c}, {o}>"
CAST_CONTIG = "pgk::cast_contig<{a}, {o}, {vec}>"
CAST_STRIDED = "pgk::cast_strided<{a}, {o}>"
FILL = "pgk::fill<{o}, {vec}>"
ARANGE = "pgk::arange<{o}, {c}>"
ALL_PARTIAL = "pgk::all_partial<{op}, {a}, {acc}, {vec}>"
ALL_FINAL = "pgk::all_final<{op}, {acc}, {o}>"
REDUCE_ROWS = "pgk::reduce_rows<{op}, {a}, {acc}, {o}, {vec}>"
REDUCE_COLS = "pgk::reduce_cols<{op}, {a}, {acc}, {o}>"
ARG_ROWS = "pgk::arg_reduce_rows<{max}, {a}, {c}, {vec}>"
GATHER = "pgk::gather<{t}, {i}, {along}>"
SCATTER = "pgk::scatter<{t}, {i}>"
MATMUL = "pgk::matmul_tiled<{a}, {b}, {o}, {acc}>"
SCAN_ROWS = "pgk::scan_rows<{op}, {a}, {acc}, {o}>"
_SCAN_OPS = {"cumsum": "pgk::ScanSum", "cumprod": "pgk::ScanProd"}
_REDUCE_OPS = {"sum": "pgk::Sum", "prod": "pgk::Prod", "max": "pgk::Max", "min": "pgk::Min", "all": "pgk::All", "any": "pgk::Any"}

_PACK_BINARY = struct.Struct("@PPPq")
_PACK_CAST = struct.Struct("@PPq")
_PACK_FILL = struct.Struct("@P8sq")
_PACK_ARANGE = {"f": struct.Struct("@Pfffq"), "d": struct.Struct("@Pdddq"), "q": struct.Struct("@Pqqqq")}


def compute_dtype(dt: np.dtype) -> np.dtype:
    """Kernels do arithmetic in this dtype (pgk::compute_t)."""
    return _dtypes.float32 if _dtypes.is_float(dt) and dt.itemsize < 4 else dt


def arange_terms(dt: np.dtype, start: float | int, step: float | int) -> tuple[np.generic, np.generic, np.generic]:
    """(start, delta, second) of NumPy's arange fill for dtype ``dt``, in the
    dtype the fill computes in: out[i] = start + i * delta for i != 1."""
    calc = _dtypes.int64 if dt.kind in "biu" else (_dtypes.float64 if dt == _dtypes.float64 else _dtypes.float32)
    first = np.asarray(start).astype(dt).astype(calc)
    second = np.asarray(start + step).astype(dt).astype(calc)
    with np.errstate(over="ignore"):
        delta = second - first  # type: ignore[operator]
    return first[()], delta[()], second[()]  # type: ignore[return-value]


def access_bytes(compute: np.dtype) -> int:
    """Bytes per vector access of a ufunc kernel computing in ``compute``: 8 for
    the 8/16-bit floats, whose per-element conversions make 16-byte accesses
    compute-bound (H100, 2^26 bfloat16: divide 2343 GB/s at 16 bytes, 2934 at 8;
    add and less gain 2-7%; float32 is the same either way), else 16."""
    return 8 if compute.itemsize < 4 and _dtypes.is_float(compute) else 16


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


def _same_dense(out: Any, arrays: list[Any]) -> bool:
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


def _layout_fields(out: Any, arrays: list[Any]) -> list[int]:
    """pgk::Layout<K> for ``arrays`` (out last) broadcast to out's shape, with
    the dimensions that are contiguous for every operand merged."""
    shape = out.shape
    strides = [broadcast_strides(a, shape) for a in arrays]
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in arrays]
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
        merged = [[0] for _ in arrays]
    if len(dims) > MAX_DIMS:
        raise ValueError(f"pygpukit kernels support at most {MAX_DIMS} non-mergeable dimensions, got {len(dims)}")
    pad = [0] * (MAX_DIMS - len(dims))
    fields = [len(dims), *dims, *pad]
    for m in merged:
        fields += [*m, *pad]
    return fields


def _pack_layout(fields: list[int]) -> bytes:
    """A Layout after 8-byte aligned parameters."""
    return struct.pack(f"@{len(fields)}q", *fields)


@cache
def _params_struct(prefix: str, dt: np.dtype, then_layout: bool) -> struct.Struct:
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


def _param_values(params: tuple[Any, ...], dt: np.dtype) -> list[Any]:
    """The three pgk::Params<dt> values (unused ones 0) as struct fields: complex ones split in two."""
    values = [*params, *([0] * (3 - len(params)))]
    if dt.kind != "c":
        return values
    return [part for v in values for part in (complex(v).real, complex(v).imag)]


def _grid_for(n: int, per_block: int) -> int:
    return max(1, -(-n // per_block))


class CudaOps:
    name = "cuda"

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.sm = rt.sm
        self.launch = rt.native.launch
        self.launch_u64 = rt.native.launch_u64
        self.sms = rt.props["multiprocessor_count"]
        self.pool = rt.pool
        self._fn_cache: dict[tuple, int] = {}
        self._contig_binary: dict[tuple, tuple[np.dtype, int, int, int]] = {}
        self._unary: dict[tuple, tuple[int, int, struct.Struct]] = {}

    def _fn(self, file: str, expr: str) -> int:
        return kernels.function(file, expr, self.sm)

    def _strided_grid(self, n: int) -> int:
        return min(_grid_for(n, THREADS), self.sms * 32)

    # -- transfers -----------------------------------------------------------
    def from_host(self, dst: Any, src: np.ndarray) -> None:
        graph = _local.capture
        if graph is not None:  # replays read the copy's source again: give it one that lives as long as the graph
            src = graph._pin(src)
        self.rt.native.memcpy_htod(dst.data_ptr, src, current_stream_handle())

    def to_host(self, out: np.ndarray, src: Any) -> None:
        self.rt.native.memcpy_dtoh(out, src.data_ptr, current_stream_handle())

    # -- elementwise -----------------------------------------------------------
    def binary_fast(self, uf: Any, a: Any, b: Any, stream: int) -> Any:
        """``uf(a, b)`` for contiguous operands of one shape at 16-byte aligned
        addresses (every pool block is): one dict lookup for result dtype,
        kernel and geometry, and a launch whose parameters need no packing.
        None when the operands do not qualify (the caller takes the general path)."""
        if not (a._contig and b._contig and a._shape == b._shape) or (a._ptr | b._ptr) & 15:
            return None
        entry = self._contig_binary.get((uf, a._dtype, b._dtype))
        if entry is None:
            entry = self._contig_binary_entry(uf, a._dtype, b._dtype)
        out_dt, fn, per_block, itemsize = entry
        n = a._size
        block = self.pool.alloc(n * itemsize, stream)
        out = object.__new__(GPUArray)  # new_contiguous, inlined: this is the hottest path
        out._shape = a._shape
        out._dtype = out_dt
        out._size = n
        out._strides = None
        out._contig = True
        out._block = block
        ptr = out._ptr = block.ptr
        if n:
            self.launch_u64(fn, (n + per_block - 1) // per_block, THREADS, stream, a._ptr, b._ptr, ptr, n)
        return out

    def _contig_binary_entry(self, uf: Any, da: np.dtype, db: np.dtype) -> tuple[np.dtype, int, int, int]:
        compute, out_dt = uf.loop(da, db)
        vec = max(1, access_bytes(compute) // max(da.itemsize, db.itemsize, out_dt.itemsize))
        expr = BINARY_CONTIG.format(op=uf.functor, a=_C[da], b=_C[db], c=_C[compute], o=_C[out_dt], vec=vec)
        entry = (out_dt, self._fn("elementwise", expr), THREADS * UNROLL * vec, out_dt.itemsize)
        self._contig_binary[(uf, da, db)] = entry
        return entry

    def elementwise(self, uf: Any, operands: list[Any], compute: np.dtype, out: Any, params: tuple[Any, ...]) -> None:
        """out = uf(*operands) computing in ``compute``; operands are arrays (any
        strides, broadcasting to out) or scalars already converted to the kernel
        compute dtype. One array: a unary kernel (a scalar operand of a binary
        function rides in the functor's parameters); two or three: binary or ternary."""
        arrays = [o for o in operands if type(o) is GPUArray]
        functor = uf.functor
        if len(arrays) < uf.nin:  # a binary function with one scalar operand
            left = type(operands[0]) is not GPUArray
            functor = f"pgk::Scalar{'Left' if left else 'Right'}<{functor}>"
            params = (operands[0 if left else 1],)
        stream = current_stream_handle()
        n = out._size
        c = _C[compute]
        dense = _same_dense(out, arrays)
        if len(arrays) == 1:
            (a,) = arrays
            kd = ufunc_kernel_dtype(compute)
            values = _param_values(params, kd)
            if dense:
                vec = vec_width(a, out, nbytes=access_bytes(compute))
                key = (functor, a._dtype, compute, out._dtype, vec)
                entry = self._unary.get(key)
                if entry is None:
                    expr = UNARY_CONTIG.format(op=functor, a=_C[a._dtype], c=c, o=_C[out._dtype], vec=vec)
                    entry = self._unary[key] = (self._fn("elementwise", expr), THREADS * UNROLL * vec, _params_struct("@PPq", kd, False))
                fn, per_block, packer = entry
                args = packer.pack(a._ptr, out._ptr, n, *values)
                self.launch(fn, (n + per_block - 1) // per_block, 1, 1, THREADS, 1, 1, 0, stream, args)
                return
            expr = UNARY_STRIDED.format(op=functor, a=_C[a._dtype], c=c, o=_C[out._dtype])
            fields = _layout_fields(out, [a, out])
            args = _params_struct("@PPq", kd, True).pack(a._ptr, out._ptr, n, *values) + _pack_layout(fields)
        elif len(arrays) == 2:
            a, b = arrays
            if dense:
                vec = vec_width(a, b, out, nbytes=access_bytes(compute))
                expr = BINARY_CONTIG.format(op=functor, a=_C[a._dtype], b=_C[b._dtype], c=c, o=_C[out._dtype], vec=vec)
                args = _PACK_BINARY.pack(a._ptr, b._ptr, out._ptr, n)
                self.launch(self._fn("elementwise", expr), _grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
                return
            expr = BINARY_STRIDED.format(op=functor, a=_C[a._dtype], b=_C[b._dtype], c=c, o=_C[out._dtype])
            args = _PACK_BINARY.pack(a._ptr, b._ptr, out._ptr, n) + _pack_layout(_layout_fields(out, [a, b, out]))
        else:
            a, b, d = arrays
            expr = TERNARY_STRIDED.format(op=functor, a=_C[a._dtype], b=_C[b._dtype], d=_C[d._dtype], c=c, o=_C[out._dtype])
            args = struct.pack("@PPPPq", a._ptr, b._ptr, d._ptr, out._ptr, n) + _pack_layout(_layout_fields(out, [a, b, d, out]))
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def cast(self, src: Any, out: Any) -> None:
        """out[...] = src converted to out's dtype; src broadcasts to out's shape,
        either may be strided."""
        n = out.size
        if n == 0:
            return
        stream = current_stream_handle()
        if _same_dense(out, [src]):
            if src.dtype == out.dtype:
                self.rt.native.memcpy_dtod(out.data_ptr, src.data_ptr, out.nbytes, stream)
                return
            vec = vec_width(src, out)
            expr = CAST_CONTIG.format(a=_C[src.dtype], o=_C[out.dtype], vec=vec)
            args = _PACK_CAST.pack(src.data_ptr, out.data_ptr, n)
            self.launch(self._fn("elementwise", expr), _grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
            return
        expr = CAST_STRIDED.format(a=_C[src.dtype], o=_C[out.dtype])
        args = _PACK_CAST.pack(src.data_ptr, out.data_ptr, n) + _pack_layout(_layout_fields(out, [src, out]))
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def fill(self, out: Any, value: Any) -> None:
        n = out.size
        if n == 0:
            return
        raw = _dtypes.scalar_bytes(value, out.dtype)
        stream = current_stream_handle()
        if raw.count(raw[0]) == len(raw):  # every byte equal (zeros, -1, ...): memset
            self.rt.native.memset_d8(out.data_ptr, raw[0], out.nbytes, stream)
            return
        vec = vec_width(out)
        expr = FILL.format(o=_C[out.dtype], vec=vec)
        if len(raw) <= 8:
            args = _PACK_FILL.pack(out.data_ptr, raw.ljust(8, b"\0"), n)
        else:  # complex128: the value is 16-byte aligned
            args = struct.pack("@P8x16sq", out.data_ptr, raw, n)
        self.launch(self._fn("elementwise", expr), _grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)

    def arange(self, out: Any, start: float | int, step: float | int) -> None:
        n = out.size
        if n == 0:
            return
        first, delta, second = arange_terms(out.dtype, start, step)
        code = first.dtype.char if first.dtype.char in "fd" else "q"
        expr = ARANGE.format(o=_C[out.dtype], c={"f": "float", "d": "double", "q": "long long"}[code])
        args = _PACK_ARANGE[code].pack(out.data_ptr, first.item(), delta.item(), second.item(), n)
        self.launch(self._fn("elementwise", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, current_stream_handle(), args)

    # -- reductions -----------------------------------------------------------
    def reduce(self, op: str, kind: str, src: Any, dims: tuple[int, ...], out_dt: np.dtype, acc_dt: np.dtype, init: Any) -> Any:
        """Reduce contiguous ``src`` as planned by pygpukit.reductions: "all"
        (dims = (n,)), "rows" ((M, K)) or "cols" ((outer, K, N)); returns a 1-D
        (or 0-d for "all") array of ``out_dt``."""
        stream = current_stream_handle()
        fop, ti, ta, to = _REDUCE_OPS[op], _C[src.dtype], _C[acc_dt], _C[out_dt]
        if kind == "all":
            (n,) = dims
            vec = vec_width(src)
            blocks = max(1, min(self.sms * 4, -(-(n // vec) // REDUCE_THREADS)))
            partials = self.pool.alloc(blocks * acc_dt.itemsize, stream)
            out = GPUArray._empty((), out_dt, stream)
            f1 = self._fn("reduce", ALL_PARTIAL.format(op=fop, a=ti, acc=ta, vec=vec))
            f2 = self._fn("reduce", ALL_FINAL.format(op=fop, acc=ta, o=to))
            self.launch(
                f1,
                blocks,
                1,
                1,
                REDUCE_THREADS,
                1,
                1,
                0,
                stream,
                _append_value(struct.pack("@PPq", src.data_ptr, partials.ptr, n), acc_dt, init),
            )
            self.launch(
                f2,
                1,
                1,
                1,
                REDUCE_THREADS,
                1,
                1,
                0,
                stream,
                _append_value(struct.pack("@PPq", partials.ptr, out.data_ptr, blocks), acc_dt, init),
            )
            # partials returns to the pool on this stream: later work on it is ordered after these kernels.
            return out
        if kind == "rows":
            m, k = dims
            out = GPUArray._empty((m,), out_dt, stream)
            vec = 16 // src.itemsize
            while vec > 1 and (k % vec or src.data_ptr % (vec * src.itemsize)):
                vec //= 2
            fn = self._fn("reduce", REDUCE_ROWS.format(op=fop, a=ti, acc=ta, o=to, vec=vec))
            grid = min(m, 65535 * 16)
            self.launch(
                fn,
                grid,
                1,
                1,
                REDUCE_THREADS,
                1,
                1,
                0,
                stream,
                _append_value(struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k), acc_dt, init),
            )
            return out
        outer, k, n = dims
        out = GPUArray._empty((outer * n,), out_dt, stream)
        fn = self._fn("reduce", REDUCE_COLS.format(op=fop, a=ti, acc=ta, o=to))
        args = _append_value(struct.pack("@PPqqq", src.data_ptr, out.data_ptr, outer, k, n), acc_dt, init)
        self.launch(fn, min(_grid_for(outer * n, 32), self.sms * 64), 1, 1, 32, 16, 1, 0, stream, args)
        return out

    def matmul(self, a: Any, b: Any, out_dt: np.dtype, acc_dt: np.dtype, batch: int, m: int, n: int, k: int) -> Any:
        """(batch, m, k) @ (batch, k, n), both contiguous; the reference tiled kernel."""
        stream = current_stream_handle()
        out = GPUArray._empty((batch * m * n,), out_dt, stream)
        if out.size == 0:
            return out
        if k == 0:
            self.fill(out, 0)
            return out
        expr = MATMUL.format(a=_C[a.dtype], b=_C[b.dtype], o=_C[out_dt], acc=_C[acc_dt])
        args = struct.pack("@PPPqqq", a.data_ptr, b.data_ptr, out.data_ptr, m, n, k)
        self.launch(self._fn("linalg", expr), -(-n // 16), -(-m // 16), batch, 16, 16, 1, 0, stream, args)
        return out

    def scan(self, op: str, src: Any, dims: tuple[int, int], out_dt: np.dtype, acc_dt: np.dtype) -> Any:
        """Inclusive cumsum/cumprod of each contiguous row of ``src`` viewed as (M, K)."""
        stream = current_stream_handle()
        m, k = dims
        out = GPUArray._empty((m * k,), out_dt, stream)
        if out.size:
            expr = SCAN_ROWS.format(op=_SCAN_OPS[op], a=_C[src.dtype], acc=_C[acc_dt], o=_C[out_dt])
            args = _append_value(struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k), acc_dt, 0 if op == "cumsum" else 1)
            self.launch(self._fn("scan", expr), min(m, 65535 * 16), 1, 1, 256, 1, 1, 0, stream, args)
        return out

    def gather(self, src: Any, idx: Any, out_shape: tuple[int, ...], axis_len: int, n_idx: int, inner: int, along: bool) -> Any:
        """out[o, j, i] = src[o, idx[j], i] (``along``: idx[o, j, i]); src and idx contiguous."""
        stream = current_stream_handle()
        out = GPUArray._empty(out_shape, src.dtype, stream)
        n = out.size
        if n:
            expr = GATHER.format(t=_C[src.dtype], i=_C[idx.dtype], along="true" if along else "false")
            args = struct.pack("@PPPqqqq", src.data_ptr, idx.data_ptr, out.data_ptr, n, n_idx, axis_len, inner)
            self.launch(self._fn("indexing", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)
        return out

    def scatter(self, src: Any, idx: Any, dst: Any, axis_len: int, n_idx: int, inner: int) -> None:
        """dst[o, idx[j], i] = src[o, j, i]; src, idx and dst contiguous, indices in bounds."""
        stream = current_stream_handle()
        n = src.size
        if n:
            expr = SCATTER.format(t=_C[src.dtype], i=_C[idx.dtype])
            args = struct.pack("@PPPqqqq", src.data_ptr, idx.data_ptr, dst.data_ptr, n, n_idx, axis_len, inner)
            self.launch(self._fn("indexing", expr), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)

    def nonzero(self, csum: Any, shape: tuple[int, ...], count: int) -> Any:
        """(ndim, count) int64 indices of the true elements, from the inclusive cumulative
        count ``csum`` of a C-order mask of ``shape``."""
        stream = current_stream_handle()
        out = GPUArray._empty((len(shape), count), _dtypes.int64, stream)
        n = csum.size
        if n and count:
            dims = [*shape, *([1] * (8 - len(shape)))]
            args = struct.pack("@PPqq9q", csum.data_ptr, out.data_ptr, n, count, len(shape), *dims)
            self.launch(self._fn("indexing", "pgk::compact_nonzero"), self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)
        return out

    def arg_reduce(self, is_max: bool, src: Any, dims: tuple[int, int]) -> Any:
        """Index of the first max (min) of each contiguous row of ``src`` viewed as (M, K)."""
        stream = current_stream_handle()
        m, k = dims
        out = GPUArray._empty((m,), _dtypes.int64, stream)
        from ..reductions import compare_dtype

        tc = _C[compare_dtype(src.dtype)]
        vec = 16 // src.dtype.itemsize
        if k % vec or src.data_ptr % 16:
            vec = 1
        fn = self._fn("reduce", ARG_ROWS.format(max="true" if is_max else "false", a=_C[src.dtype], c=tc, vec=vec))
        self.launch(fn, min(m, 65535 * 16), 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k))
        return out

    # -- random ---------------------------------------------------------------
    def random_fill(self, out: Any, dist: Any, key: int, offset: int, a: Any, b: Any) -> None:
        """Fill contiguous ``out`` (a pool block: 16-byte aligned) from the Philox blocks
        offset, offset + 1, ... under ``key``; ``dist`` (pygpukit.random.Dist) turns
        each block into ``dist.per_block`` values. Grid-stride, about two waves."""
        n = out._size
        args = dist.pack(out._ptr, n, key, offset, a, b)
        grid = min(_grid_for(-(-n // dist.per_block), THREADS), self.sms * 16)
        self.launch(self._fn("random", dist.expr(out._dtype)), grid, 1, 1, THREADS, 1, 1, 0, current_stream_handle(), args)

    # -- softmax ----------------------------------------------------------------
    def softmax(self, mode: str, src: Any, dims: tuple[int, int, int], comp_dt: np.dtype) -> Any:
        """softmax / log_softmax / logsumexp (``mode``) along K of contiguous float ``src``
        viewed as (outer, K, N), computed in ``comp_dt``: a flat array of src's dtype,
        outer*K*N elements (outer*N for logsumexp). Plans in pygpukit.softmax; the
        common case (rows that fit in registers) is planned once per shape."""
        plans: dict[tuple, Any] | None = self.__dict__.get("_softmax_rows")  # row-kernel launches by call signature
        if plans is None or len(plans) > 1024:
            plans = {}
            self._softmax_rows = plans
        key = (mode, src._dtype, dims, src._ptr & 15 == 0)
        rows = plans.get(key, False)
        if rows is False:
            rows = plans[key] = self._softmax_rows_launch(mode, src._dtype, dims, comp_dt, key[3])
        if rows is None:
            return self._softmax_general(mode, src, dims, comp_dt)
        fn, grid, tpr, rpb = rows
        m, k, _ = dims
        stream = current_stream_handle()
        out = GPUArray._empty((m if mode == "logsumexp" else m * k,), src._dtype, stream)
        self.launch(fn, grid, 1, 1, tpr, rpb, 1, 0, stream, struct.pack("@PPqq", src._ptr, out._ptr, m, k))
        return out

    def _softmax_rows_launch(self, mode: str, dt: np.dtype, dims: tuple[int, int, int], comp_dt: np.dtype, aligned: bool) -> Any:
        """(function, grid, threads per row, rows per block) of softmax_rows, or None when
        the rows are too long for registers or too few to fill the GPU."""
        from ..softmax import BLOCK_THREADS, MODES, ROWS, row_plan

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

    def _softmax_general(self, mode: str, src: Any, dims: tuple[int, int, int], comp_dt: np.dtype) -> Any:
        """Columns (softmax_cols, or rows of a transposed copy) and long rows (split kernels)."""
        from ..softmax import COL_SLICES, COLS, COMBINE, FINISH, MODES, PARTIAL, SPLIT_THREADS, split_chunks

        stream = current_stream_handle()
        outer, k, n = dims
        t, tc, md = _C[src.dtype], _C[comp_dt], MODES[mode]
        lse = mode == "logsumexp"
        out = GPUArray._empty((outer * n if lse else outer * k * n,), src.dtype, stream)
        if out.size == 0:
            return out
        if n > 1:
            if outer * n >= 16 * self.sms or k <= 64:
                args = struct.pack("@PPqqq", src.data_ptr, out.data_ptr, outer, k, n)
                grid = min(_grid_for(outer * n, 32), self.sms * 32)
                self.launch(self._fn("softmax", COLS.format(t=t, tc=tc, mode=md)), grid, 1, 1, 32, COL_SLICES, 1, 0, stream, args)
                return out
            # too few columns to fill the GPU with one thread per column: make them rows
            rows = src.reshape(outer, k, n).transpose(0, 2, 1).copy()
            res = self.softmax(mode, rows, (outer * n, k, 1), comp_dt)
            return res if lse else res.reshape(outer, n, k).transpose(0, 2, 1).copy().reshape(-1)
        m = outer
        vec = 16 // src.itemsize
        if k % vec or src.data_ptr % 16:
            vec = 1
        nvec = k // vec
        c = split_chunks(m, nvec, self.sms)
        cv = -(-nvec // c)
        c = -(-nvec // cv)  # no empty chunks
        part = GPUArray._empty((m * c * 2,), comp_dt, stream)
        args = struct.pack("@PPqqq", src.data_ptr, part.data_ptr, k, c, cv)
        self.launch(self._fn("softmax", PARTIAL.format(t=t, tc=tc, vec=vec)), m * c, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, args)
        combine = self._fn("softmax", COMBINE.format(tc=tc, t=t, mode=2 if lse else 0))
        if lse:
            self.launch(combine, m, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, struct.pack("@PPPq", part.data_ptr, out.data_ptr, 0, c))
            return out
        stats = GPUArray._empty((m * 2,), comp_dt, stream)
        self.launch(combine, m, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, struct.pack("@PPPq", part.data_ptr, 0, stats.data_ptr, c))
        fn = self._fn("softmax", FINISH.format(t=t, tc=tc, mode=md, vec=vec))
        args = struct.pack("@PPPqqq", src.data_ptr, out.data_ptr, stats.data_ptr, k, c, cv)
        self.launch(fn, m * c, 1, 1, SPLIT_THREADS, 1, 1, 0, stream, args)
        return out

    # -- sorting ----------------------------------------------------------------
    # Launch plans for kernels/sort.cu; pygpukit.sorting holds the key types, configurations and tile sizes.
    def sort_rows(self, src: Any, rows: int, n: int, descending: bool, indices: bool) -> Any:
        """Each row of contiguous ``src`` viewed as (rows, n) sorted, stable: the values,
        or (``indices``) the int64 positions that sort it (order keys)."""
        from .. import sorting

        stream = current_stream_handle()
        out = GPUArray._empty((rows * n,), _dtypes.int64 if indices else src.dtype, stream)
        if out.size == 0:
            return out
        if n >= 1 << 31:
            raise ValueError(f"sort: rows of {n} elements are too long for the CUDA backend (at most 2^31 - 1)")
        key = sorting.key_info(src.dtype)
        code = sorting.UINT_CODE[key.uint.itemsize]
        flip = sorting.flip_bits(src.dtype, descending)
        idx = "true" if indices else "false"
        cfg = sorting.small_config(n, key.uint.itemsize)
        if cfg is not None:
            threads, items, rpt = cfg
            fn = self._fn("sort", sorting.SORT_BLOCK.format(key=key.trait, idx=idx, threads=threads, items=items))
            vals, ids = (0, out._ptr) if indices else (out._ptr, 0)
            args = struct.pack(f"@PPPqq{code}i", src._ptr, vals, ids, rows, n, flip, rpt)
            self.launch(fn, min(-(-rows // rpt), 65535 * 16), 1, 1, threads, 1, 1, 0, stream, args)
            return out
        tile = sorting.radix_tile(key.uint.itemsize)
        g, per = sorting.row_grid(rows, n, tile, self.sms * 8)
        passes = key.uint.itemsize
        counts = self.pool.alloc(rows * 256 * g * 4, stream)
        row_tot = self.pool.alloc(passes * rows * 256 * 4, stream)
        self.rt.native.memset_d8(row_tot.ptr, 0, passes * rows * 256 * 4, stream)
        two = 2 if passes > 2 else 1
        keys = [self.pool.alloc(rows * n * key.uint.itemsize, stream) for _ in range(two if passes > 1 else 0)]
        ids32 = [self.pool.alloc(rows * n * 4, stream) for _ in range(two if indices and passes > 1 else 0)]
        up = self._fn("sort", sorting.RADIX_UPSWEEP.format(key=key.trait, order=idx))
        scan = self._fn("sort", sorting.RADIX_SCAN)
        down = self._fn("sort", sorting.RADIX_DOWNSWEEP.format(key=key.trait, idx=idx))
        dpb = sorting.scan_digits_per_block(g)
        kin, iin = src._ptr, 0
        for p in range(passes):
            first, last = p == 0, p == passes - 1
            kout = (0 if indices else out._ptr) if last else keys[p % two].ptr
            iout = ids32[p % two].ptr if indices and not last else 0
            tot = row_tot.ptr + p * rows * 256 * 4
            args = struct.pack(f"@PPPqiqi{code}", kin, counts.ptr, tot, n, g, per * tile, 8 * p, flip)
            self.launch(up, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            self.launch(scan, rows * (256 // dpb), 1, 1, 256, 1, 1, 0, stream, struct.pack("@PPii", counts.ptr, tot, g, dpb))
            i64 = out._ptr if indices else 0
            args = struct.pack(f"@6Pqiii{code}ii", kin, kout, iin, iout, i64, counts.ptr, n, g, per, 8 * p, flip, first, last)
            self.launch(down, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            kin, iin = kout, iout
        return out

    def topk_select(self, src: Any, rows: int, n: int, k: int, largest: bool) -> Any:
        """Positions (int64, rows x k, increasing) of the first k elements of each row of
        ``src`` (rows, n) in the stable order sort (descending when ``largest``): radix select."""
        from .. import sorting

        stream = current_stream_handle()
        out = GPUArray._empty((rows * k,), _dtypes.int64, stream)
        key = sorting.key_info(src.dtype)
        code = sorting.UINT_CODE[key.uint.itemsize]
        flip = sorting.flip_bits(src.dtype, largest)
        g, per = sorting.row_grid(rows, n, sorting.SELECT_TILE, self.sms * 8)
        chunk = per * sorting.SELECT_TILE
        state = self.pool.alloc(rows * 16, stream)
        hist = self.pool.alloc(rows * 256 * 4, stream)
        cnt = self.pool.alloc(rows * 2 * g * 4, stream)
        self.rt.native.memset_d8(hist.ptr, 0, rows * 256 * 4, stream)
        fhist = self._fn("sort", sorting.SELECT_HIST.format(key=key.trait))
        pick = self._fn("sort", sorting.SELECT_PICK)
        bits = 8 * key.uint.itemsize
        for shift in range(bits - 8, -1, -8):
            first = shift == bits - 8
            args = struct.pack(f"@PPPqiqi{code}i", src._ptr, hist.ptr, state.ptr, n, g, chunk, shift, flip, first)
            self.launch(fhist, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            self.launch(pick, rows, 1, 1, 256, 1, 1, 0, stream, struct.pack("@PPiii", hist.ptr, state.ptr, shift, k, first))
        count = self._fn("sort", sorting.SELECT_COUNT.format(key=key.trait))
        args = struct.pack(f"@PPPqiq{code}", src._ptr, state.ptr, cnt.ptr, n, g, chunk, flip)
        self.launch(count, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
        self.launch(self._fn("sort", sorting.SELECT_OFFSETS), rows, 1, 1, 256, 1, 1, 0, stream, struct.pack("@Pi", cnt.ptr, g))
        write = self._fn("sort", sorting.SELECT_WRITE.format(key=key.trait))
        args = struct.pack(f"@PPPPqiqi{code}", src._ptr, state.ptr, cnt.ptr, out._ptr, n, g, chunk, k, flip)
        self.launch(write, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
        return out

    def searchsorted(self, a: Any, v: Any, right: bool) -> Any:
        """For each element of contiguous ``v``, its insertion position in the sorted 1-D
        contiguous ``a`` of the same dtype (binary search, one thread per element)."""
        from .. import sorting

        stream = current_stream_handle()
        out = GPUArray._empty((v.size,), _dtypes.int64, stream)
        key = sorting.key_info(a.dtype)
        fn = self._fn("sort", sorting.SEARCHSORTED.format(key=key.trait))
        code = sorting.UINT_CODE[key.uint.itemsize]
        args = struct.pack(f"@PqPqPi{code}", a._ptr, a.size, v._ptr, v.size, out._ptr, right, sorting.flip_bits(a.dtype, False))
        self.launch(fn, self._strided_grid(v.size), 1, 1, THREADS, 1, 1, 0, stream, args)
        return out

    def unique_flags(self, s: Any) -> Any:
        """bool flags: element i of sorted ``s`` differs from element i - 1 (order keys)."""
        from .. import sorting

        stream = current_stream_handle()
        out = GPUArray._empty((s.size,), _dtypes.bool_, stream)
        fn = self._fn("sort", sorting.UNIQUE_FLAGS.format(key=sorting.key_info(s.dtype).trait))
        self.launch(fn, self._strided_grid(s.size), 1, 1, THREADS, 1, 1, 0, stream, struct.pack("@PPq", s._ptr, out._ptr, s.size))
        return out


def _append_value(head: bytes, dt: np.dtype, value: Any) -> bytes:
    """Kernel parameters ``head`` followed by ``value`` as dtype ``dt``, padded to
    its alignment (its size: complex128 is 16-byte aligned, as in C++)."""
    return head + bytes(-len(head) % dt.itemsize) + _dtypes.scalar_bytes(value, dt)


def instantiations() -> dict[str, list[str]]:
    """Per kernel file, name expressions covering every kernel template with
    every dtype (same-dtype operands; casts between every pair)."""
    dts = list(_C)
    vec = {dt: 16 // dt.itemsize for dt in dts}
    elementwise = _elementwise_instantiations(dts)
    for dt in dts:
        c = _C[dt]
        elementwise.append(FILL.format(o=c, vec=vec[dt]))
        elementwise += [ARANGE.format(o=c, c=ct) for ct in ("float", "double", "long long")]
        for other in dts:
            v = 16 // max(dt.itemsize, other.itemsize)
            elementwise.append(CAST_CONTIG.format(a=c, o=_C[other], vec=v))
            elementwise.append(CAST_STRIDED.format(a=c, o=_C[other]))
    from ..reductions import _plan, compare_dtype

    real = [dt for dt in dts if not _dtypes.is_complex(dt)]
    reduce: list[str] = []
    for dt in dts:
        for op, fop in _REDUCE_OPS.items():
            if _dtypes.is_complex(dt) and op not in ("sum", "prod"):  # the others go through real kernels
                continue
            out_dt, acc, _ = _plan(op, dt, None)
            args = {"op": fop, "a": _C[dt], "acc": _C[acc], "o": _C[out_dt]}
            reduce.append(ALL_PARTIAL.format(vec=vec[dt], **args))
            reduce.append(ALL_FINAL.format(**args))
            reduce += [REDUCE_ROWS.format(vec=v, **args) for v in sorted({1, vec[dt]})]
            reduce.append(REDUCE_COLS.format(**args))
        if _dtypes.is_complex(dt):
            continue
        tc = _C[compare_dtype(dt)]
        reduce += [ARG_ROWS.format(max=m, a=_C[dt], c=tc, vec=v) for m in ("true", "false") for v in (1, vec[dt])]
    indexing = [
        GATHER.format(t=_C[dt], i=_C[it], along=al) for dt in dts for it in (_dtypes.int32, _dtypes.int64) for al in ("true", "false")
    ]
    indexing += [GATHER.format(t=_C[_dtypes.float32], i=_C[it], along="false") for it in dts if it.kind in "iu"]
    indexing += [SCATTER.format(t=_C[dt], i=_C[it]) for dt in dts for it in (_dtypes.int32, _dtypes.int64)]
    indexing += [SCATTER.format(t=_C[_dtypes.float32], i=_C[it]) for it in dts if it.kind in "iu"]
    indexing.append("pgk::compact_nonzero")
    linalg = [MATMUL.format(a=_C[dt], b=_C[dt], o=_C[dt], acc=_C[_dtypes.accumulator(dt)]) for dt in real]
    linalg += [
        MATMUL.format(a=_C[x], b=_C[y], o=_C[_dtypes.float32], acc="float")
        for x, y in ((_dtypes.float16, _dtypes.float32), (_dtypes.bfloat16, _dtypes.float16))
    ]
    scan = [
        SCAN_ROWS.format(op=fop, a=_C[dt], acc=_C[_dtypes.accumulator(_dtypes.sum_dtype(dt))], o=_C[_dtypes.sum_dtype(dt)])
        for dt in dts
        for fop in _SCAN_OPS.values()
    ]
    return {
        "scan": sorted(set(scan)),
        "elementwise": sorted(set(elementwise)),
        "reduce": sorted(set(reduce)),
        "indexing": sorted(set(indexing)),
        "linalg": sorted(set(linalg)),
        "random": random_instantiations(),
        "softmax": softmax_instantiations(),
        "sort": sort_instantiations(),
    }


def _elementwise_instantiations(dts: list[np.dtype]) -> list[str]:
    """Every ufunc's contiguous kernel with every dtype it accepts (the
    functors branch on the type), and the strided and scalar forms, which
    share that code, for float32 and int64 only."""
    from .. import ufuncs

    out: list[str] = []
    for uf in vars(ufuncs).values():
        if not isinstance(uf, ufuncs.Ufunc):
            continue
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
                    scalar = dict(names, op=f"pgk::Scalar{side}<{uf.functor}>")
                    out += [UNARY_CONTIG.format(vec=vec, **scalar), UNARY_STRIDED.format(**scalar)]
            else:
                out.append(TERNARY_STRIDED.format(**dict(names, a=_C[_dtypes.bool_])))
    return out


def random_instantiations() -> list[str]:
    """kernels/random.cu: every (distribution, output dtype) that pygpukit.random launches."""
    from .. import random

    return random.instantiations()


def softmax_instantiations() -> list[str]:
    """kernels/softmax.cu: a representative set of what pygpukit.softmax launches."""
    from ..softmax import instantiations  # the module (pygpukit.softmax, the attribute, is the function)

    return instantiations()


def sort_instantiations() -> list[str]:
    """kernels/sort.cu: every kernel pygpukit.sorting launches, for every key type."""
    from ..sorting import sort_instantiations

    return sort_instantiations()
