"""The CUDA backend: built-in NVRTC kernels launched on the current stream.

Kernel choice per call: contiguous same-shape operands take the vectorized
``*_contig`` kernels (16-byte accesses when every pointer is aligned), a
Python scalar takes ``binary_scalar``, anything else (broadcasting, strides)
takes the ``*_strided`` kernels. Nothing here synchronizes.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .. import _dtypes, kernels
from ..array import GPUArray, binary_result_dtype, new_contiguous
from ..streams import current_stream_handle

THREADS = 256
UNROLL = 4  # elementwise.cu kUnroll
REDUCE_THREADS = 512
MAX_DIMS = 8
_OPS = {"add": "pgk::Add", "sub": "pgk::Sub", "mul": "pgk::Mul", "div": "pgk::Div"}
_C = _dtypes.C_TYPES

# Name expressions of the instantiations; instantiations() below lists a
# representative set of them for the compile check in CI.
BINARY_CONTIG = "pgk::binary_contig<{op}, {a}, {b}, {o}, {vec}>"
BINARY_SCALAR = "pgk::binary_scalar<{op}, {a}, {o}, {vec}, {left}>"
BINARY_STRIDED = "pgk::binary_strided<{op}, {a}, {b}, {o}>"
CAST_CONTIG = "pgk::cast_contig<{a}, {o}, {vec}>"
CAST_STRIDED = "pgk::cast_strided<{a}, {o}>"
FILL = "pgk::fill<{o}, {vec}>"
ARANGE = "pgk::arange<{o}, {c}>"
ALL_PARTIAL = "pgk::all_partial<{op}, {a}, {acc}, {vec}>"
ALL_FINAL = "pgk::all_final<{op}, {acc}, {o}>"
REDUCE_ROWS = "pgk::reduce_rows<{op}, {a}, {acc}, {o}, {vec}>"
REDUCE_COLS = "pgk::reduce_cols<{op}, {a}, {acc}, {o}>"
ARG_ROWS = "pgk::arg_reduce_rows<{max}, {a}, {c}>"
GATHER = "pgk::gather<{t}, {i}, {along}>"
MATMUL = "pgk::matmul_tiled<{a}, {b}, {o}, {acc}>"
SCAN_ROWS = "pgk::scan_rows<{op}, {a}, {acc}, {o}>"
_SCAN_OPS = {"cumsum": "pgk::ScanSum", "cumprod": "pgk::ScanProd"}
_REDUCE_OPS = {"sum": "pgk::Sum", "prod": "pgk::Prod", "max": "pgk::Max", "min": "pgk::Min", "all": "pgk::All", "any": "pgk::Any"}

_PACK_BINARY = struct.Struct("@PPPq")
_PACK_SCALAR = {code: struct.Struct(f"@P{code}Pq") for code in "?bBhHiIqQfd"}
_PACK_STRIDED = struct.Struct(f"@PPPq{1 + 4 * MAX_DIMS}q")
_PACK_CAST = struct.Struct("@PPq")
_PACK_CAST_STRIDED = struct.Struct(f"@PPq{1 + 4 * MAX_DIMS}q")
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


def vec_width(*arrays: Any) -> int:
    """Elements per vector access: 16 bytes of the widest operand, if every pointer allows it."""
    width = 16 // max(a._dtype.itemsize for a in arrays)
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


def _strides_struct(shape: tuple[int, ...], *strides: list[int]) -> list[int]:
    if len(shape) > MAX_DIMS:
        raise ValueError(f"pygpukit kernels support at most {MAX_DIMS} dimensions, got {len(shape)}")
    pad = [0] * (MAX_DIMS - len(shape))
    fields = [len(shape), *shape, *pad]
    for st in strides:
        fields += [*st, *pad]
    return fields


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
        self._scalar: dict[tuple, tuple[int, int, struct.Struct, bool]] = {}

    def _fn(self, file: str, expr: str) -> int:
        return kernels.function(file, expr, self.sm)

    def _strided_grid(self, n: int) -> int:
        return min(_grid_for(n, THREADS), self.sms * 32)

    # -- transfers -----------------------------------------------------------
    def from_host(self, dst: Any, src: np.ndarray) -> None:
        self.rt.native.memcpy_htod(dst.data_ptr, src, current_stream_handle())

    def to_host(self, out: np.ndarray, src: Any) -> None:
        self.rt.native.memcpy_dtoh(out, src.data_ptr, current_stream_handle())

    # -- elementwise -----------------------------------------------------------
    def binary(self, op: str, a: Any, b: Any, stream: int) -> Any:
        """The result of ``a <op> b`` as a new array. Fast path first: contiguous
        operands of one shape at 16-byte aligned addresses (every pool block is):
        one dict lookup for result dtype, kernel and geometry, and a launch whose
        parameters need no packing."""
        if a._contig and b._contig and a._shape == b._shape and not (a._ptr | b._ptr) & 15:
            entry = self._contig_binary.get((op, a._dtype, b._dtype))
            if entry is None:
                entry = self._contig_binary_entry(op, a._dtype, b._dtype)
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
        out_dt = binary_result_dtype(op, a._dtype, b._dtype)
        shape = a._shape if a._shape == b._shape else np.broadcast_shapes(a._shape, b._shape)
        out = GPUArray._empty(shape, out_dt, stream)
        n = out._size
        if n == 0:
            return out
        if a._contig and b._contig and a._shape == b._shape:  # misaligned views
            vec = vec_width(a, b, out)
            expr = BINARY_CONTIG.format(op=_OPS[op], a=_C[a._dtype], b=_C[b._dtype], o=_C[out_dt], vec=vec)
            args = _PACK_BINARY.pack(a._ptr, b._ptr, out._ptr, n)
            self.launch(self._fn("elementwise", expr), _grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
            return out
        key2 = ("strided", op, a._dtype, b._dtype, out_dt)
        fn = self._fn_cache.get(key2)  # type: ignore[assignment]
        if fn is None:
            expr = BINARY_STRIDED.format(op=_OPS[op], a=_C[a._dtype], b=_C[b._dtype], o=_C[out_dt])
            fn = self._fn_cache[key2] = self._fn("elementwise", expr)
        fields = _strides_struct(
            out.shape,
            broadcast_strides(a, out.shape),
            broadcast_strides(b, out.shape),
            broadcast_strides(out, out.shape),
        )
        args = _PACK_STRIDED.pack(a._ptr, b._ptr, out._ptr, n, *fields)
        self.launch(fn, self._strided_grid(n), 1, 1, THREADS, 1, 1, 0, stream, args)
        return out

    def _contig_binary_entry(self, op: str, da: np.dtype, db: np.dtype) -> tuple[np.dtype, int, int, int]:
        out_dt = binary_result_dtype(op, da, db)
        vec = 16 // max(da.itemsize, db.itemsize, out_dt.itemsize)
        expr = BINARY_CONTIG.format(op=_OPS[op], a=_C[da], b=_C[db], o=_C[out_dt], vec=vec)
        entry = (out_dt, self._fn("elementwise", expr), THREADS * UNROLL * vec, out_dt.itemsize)
        self._contig_binary[(op, da, db)] = entry
        return entry

    def binary_scalar(self, op: str, a: Any, s: Any, out_dt: np.dtype, scalar_left: bool, stream: int) -> Any:
        if not a._contig:
            a = a.copy()
        n = a._size
        out = new_contiguous(a._shape, out_dt, n, self.pool.alloc(n * out_dt.itemsize, stream))
        if n == 0:
            return out
        key = (op, a._dtype, out_dt, scalar_left, a._ptr & 15 == 0)
        entry = self._scalar.get(key)
        if entry is None:
            vec = vec_width(a, out)
            left = "true" if scalar_left else "false"
            expr = BINARY_SCALAR.format(op=_OPS[op], a=_C[a._dtype], o=_C[out_dt], vec=vec, left=left)
            cdt = compute_dtype(out_dt)
            code = cdt.char if cdt.char in _PACK_SCALAR else {"l": "q", "L": "Q"}[cdt.char]
            entry = self._scalar[key] = (self._fn("elementwise", expr), THREADS * UNROLL * vec, _PACK_SCALAR[code], cdt != out_dt)
        fn, per_block, packer, narrow = entry
        if narrow:  # round to the 8/16-bit result dtype first, as NumPy does, then widen
            s = np.asarray(s).astype(out_dt).astype(np.float32).item()
        args = packer.pack(a._ptr, s, out._ptr, n)
        self.launch(fn, (n + per_block - 1) // per_block, 1, 1, THREADS, 1, 1, 0, stream, args)
        return out

    def cast(self, src: Any, out: Any) -> None:
        """out[...] = src converted to out's dtype; src broadcasts to out's shape,
        either may be strided."""
        n = out.size
        if n == 0:
            return
        stream = current_stream_handle()
        if src.is_contiguous and out.is_contiguous and src.shape == out.shape:
            if src.dtype == out.dtype:
                self.rt.native.memcpy_dtod(out.data_ptr, src.data_ptr, out.nbytes, stream)
                return
            vec = vec_width(src, out)
            expr = CAST_CONTIG.format(a=_C[src.dtype], o=_C[out.dtype], vec=vec)
            args = _PACK_CAST.pack(src.data_ptr, out.data_ptr, n)
            self.launch(self._fn("elementwise", expr), _grid_for(n, THREADS * UNROLL * vec), 1, 1, THREADS, 1, 1, 0, stream, args)
            return
        expr = CAST_STRIDED.format(a=_C[src.dtype], o=_C[out.dtype])
        fields = _strides_struct(out.shape, broadcast_strides(src, out.shape), [0] * out.ndim, broadcast_strides(out, out.shape))
        args = _PACK_CAST_STRIDED.pack(src.data_ptr, out.data_ptr, n, *fields)
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
        args = _PACK_FILL.pack(out.data_ptr, raw.ljust(8, b"\0"), n)
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
        pack_init = _pack_value(acc_dt, init)
        if kind == "all":
            (n,) = dims
            vec = vec_width(src)
            blocks = max(1, min(self.sms * 4, -(-(n // vec) // REDUCE_THREADS)))
            partials = self.pool.alloc(blocks * acc_dt.itemsize, stream)
            out = GPUArray._empty((), out_dt, stream)
            f1 = self._fn("reduce", ALL_PARTIAL.format(op=fop, a=ti, acc=ta, vec=vec))
            f2 = self._fn("reduce", ALL_FINAL.format(op=fop, acc=ta, o=to))
            self.launch(f1, blocks, 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPq", src.data_ptr, partials.ptr, n) + pack_init)
            self.launch(f2, 1, 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPq", partials.ptr, out.data_ptr, blocks) + pack_init)
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
            self.launch(fn, grid, 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k) + pack_init)
            return out
        outer, k, n = dims
        out = GPUArray._empty((outer * n,), out_dt, stream)
        fn = self._fn("reduce", REDUCE_COLS.format(op=fop, a=ti, acc=ta, o=to))
        args = struct.pack("@PPqqq", src.data_ptr, out.data_ptr, outer, k, n) + pack_init
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
            args = struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k) + _pack_value(acc_dt, 0 if op == "cumsum" else 1)
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
        fn = self._fn("reduce", ARG_ROWS.format(max="true" if is_max else "false", a=_C[src.dtype], c=tc))
        self.launch(fn, min(m, 65535 * 16), 1, 1, REDUCE_THREADS, 1, 1, 0, stream, struct.pack("@PPqq", src.data_ptr, out.data_ptr, m, k))
        return out


def _pack_value(dt: np.dtype, value: Any) -> bytes:
    """The last kernel parameter, of dtype ``dt``, after 8-byte parameters (so aligned for any dtype)."""
    return _dtypes.scalar_bytes(value, dt)


def instantiations() -> dict[str, list[str]]:
    """Per kernel file, name expressions covering every kernel template with
    every dtype (same-dtype operands; casts between every pair)."""
    dts = list(_C)
    vec = {dt: 16 // dt.itemsize for dt in dts}
    elementwise: list[str] = []
    for dt in dts:
        c = _C[dt]
        for op in _OPS.values():
            elementwise.append(BINARY_CONTIG.format(op=op, a=c, b=c, o=c, vec=vec[dt]))
            elementwise.append(BINARY_STRIDED.format(op=op, a=c, b=c, o=c))
            for left in ("true", "false"):
                elementwise.append(BINARY_SCALAR.format(op=op, a=c, o=c, vec=vec[dt], left=left))
        elementwise.append(FILL.format(o=c, vec=vec[dt]))
        elementwise += [ARANGE.format(o=c, c=ct) for ct in ("float", "double", "long long")]
        for other in dts:
            v = 16 // max(dt.itemsize, other.itemsize)
            elementwise.append(CAST_CONTIG.format(a=c, o=_C[other], vec=v))
            elementwise.append(CAST_STRIDED.format(a=c, o=_C[other]))
    from ..reductions import _plan, compare_dtype

    reduce: list[str] = []
    for dt in dts:
        for op, fop in _REDUCE_OPS.items():
            out_dt, acc, _ = _plan(op, dt, None)
            args = {"op": fop, "a": _C[dt], "acc": _C[acc], "o": _C[out_dt]}
            reduce.append(ALL_PARTIAL.format(vec=vec[dt], **args))
            reduce.append(ALL_FINAL.format(**args))
            reduce += [REDUCE_ROWS.format(vec=v, **args) for v in sorted({1, vec[dt]})]
            reduce.append(REDUCE_COLS.format(**args))
        tc = _C[compare_dtype(dt)]
        reduce += [ARG_ROWS.format(max=m, a=_C[dt], c=tc) for m in ("true", "false")]
    indexing = [
        GATHER.format(t=_C[dt], i=_C[it], along=al) for dt in dts for it in (_dtypes.int32, _dtypes.int64) for al in ("true", "false")
    ]
    indexing += [GATHER.format(t=_C[_dtypes.float32], i=_C[it], along="false") for it in dts if it.kind in "iu"]
    indexing.append("pgk::compact_nonzero")
    linalg = [MATMUL.format(a=_C[dt], b=_C[dt], o=_C[dt], acc=_C[_dtypes.accumulator(dt)]) for dt in dts]
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
    }
