"""KV caches for decoding: ``KVCache`` (contiguous per layer) and
``PagedKVCache`` (a pool of fixed-size blocks and a block table), with the
ops that write and read them: ``kv_append`` (new tokens at each sequence's
length, advancing it) and ``kv_gather`` (a cache as contiguous
(B, Hkv, S, D) arrays).

Layouts, per layer: K and V of a contiguous cache are (B, Hkv, max_seq, D),
so the keys of one (sequence, KV head) lie in one run of memory that decode
reads front to back; a paged cache holds (num_blocks, Hkv, block_size, D)
blocks, token j of sequence b in block ``block_table[b, j // block_size]``
at row ``j % block_size``. Sequence lengths are int32 (B,) on the device (the
kernels read them, so a captured CUDA graph stays right as sequences grow)
and mirrored on the host, which checks capacity and allocates blocks
without a synchronization. Each layer has its own lengths: ``append(k, v,
layer)`` writes at that layer's lengths and advances them; the layers of a
paged cache share one block table.

An fp8 cache (``kv_dtype="fp8_e4m3"``) stores float8_e4m3fn values
``e4m3(clamp(x / scale, -448, 448))`` with a float32 scale per (layer, KV
head), for K and V apart: given by the user, or computed at the layer's
first append as ``2 * amax / 448`` over the appended tokens of that head (the
factor 2 is headroom for later tokens, costing nothing but the bottom of the
subnormal range). Values are dequantized as ``fp8 * scale``; e4m3 keeps 3
mantissa bits, a relative error of at most 2^-4 per element.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import _dtypes, _runtime
from pygpukit.streams import current_stream_handle

from . import _dispatch, _kernels
from .positional import _device_positions, apply_rope

HEAD_DIMS = (64, 80, 96, 128, 256)  # head sizes the decode kernel is built for
FP8 = "fp8_e4m3"
FP8_MAX = 448.0  # the largest finite e4m3fn value
FP8_HEADROOM = 2.0  # computed scales leave room for values up to twice the first append's

_F8 = np.dtype(gp.float8_e4m3fn)
_I32 = np.dtype(np.int32)
_F32 = np.dtype(np.float32)
_STORE = (np.dtype(gp.bfloat16), np.dtype(gp.float16), _F32)  # cache dtypes besides fp8
_FLOATS = (*_STORE, np.dtype(np.float64))
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", _F32: "float", _F8: "pgk::float8_e4m3"}
APPEND_TILE_ITEMS = 4096  # 8-element items per sequence up to which one block appends (and advances the length itself)


# -- shared checks -------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """What the kernels need to know about one layer of a cache."""

    batch: int
    heads: int
    head_dim: int
    capacity: int  # tokens a sequence can hold
    cap: int  # contiguous: rows per (sequence, head); paged: 0
    block_shift: int  # paged: log2(block_size); contiguous: 0
    table_width: int  # paged: blocks per sequence in the table; contiguous: 0
    paged: bool
    fp8: bool


def _array(op: str, name: str, a: Any) -> None:
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {type(a).__name__}")


def check_cache(op: str, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any) -> Layout:
    """Checks of one layer's cache arrays as the ops take them: k_cache and
    v_cache (B, Hkv, cap, D), or (num_blocks, Hkv, block_size, D) blocks with
    block_table (B, blocks per sequence) int32; lengths (B,) int32; k_scale and
    v_scale (Hkv,) float32 for an fp8 cache, else None."""
    _array(op, "k_cache", k_cache)
    _array(op, "v_cache", v_cache)
    if k_cache.dtype not in (*_STORE, _F8):
        raise TypeError(f"{op}: the cache must be bfloat16, float16, float32 or float8_e4m3fn, got {k_cache.dtype}")
    if k_cache.ndim != 4 or v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype:
        raise ValueError(f"{op}: k_cache and v_cache must be 4-d of one shape and dtype, got {k_cache.shape} {k_cache.dtype} and "
                         f"{v_cache.shape} {v_cache.dtype}")  # fmt: skip
    rows, heads, depth, d = k_cache.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"{op}: head_dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {d}")
    paged = block_table is not None
    if paged:
        _array(op, "block_table", block_table)
        if block_table.dtype != _I32 or block_table.ndim != 2:
            raise ValueError(f"{op}: block_table must be (batch, blocks) int32, got {block_table.shape} {block_table.dtype}")
        if depth & (depth - 1):
            raise ValueError(f"{op}: the block size (k_cache.shape[2]) must be a power of two, got {depth}")
        batch = block_table.shape[0]
    else:
        batch = rows
    _array(op, "lengths", lengths)
    if lengths.dtype != _I32 or lengths.shape != (batch,):
        raise ValueError(f"{op}: lengths must be ({batch},) int32, got {lengths.shape} {lengths.dtype}")
    fp8 = k_cache.dtype == _F8
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not fp8:
            if s is not None:
                raise ValueError(f"{op}: {name} applies to an fp8 cache only; this one is {k_cache.dtype}")
            continue
        if s is None:
            raise ValueError(f"{op}: an fp8 cache needs {name} ({heads},) float32")
        _array(op, name, s)
        if s.dtype != _F32 or s.shape != (heads,):
            raise ValueError(f"{op}: {name} must be ({heads},) float32, got {s.shape} {s.dtype}")
    if paged:
        width = block_table.shape[1]
        return Layout(batch, heads, d, width * depth, 0, depth.bit_length() - 1, width, True, fp8)
    return Layout(batch, heads, d, depth, depth, 0, 0, False, fp8)


def _check_tokens(op: str, k: Any, v: Any, counts: Any, lay: Layout) -> int:
    """New tokens k, v (B, T, Hkv, D) for a cache of layout ``lay``; returns T."""
    for name, a in (("k", k), ("v", v)):
        _array(op, name, a)
        if a.dtype not in _FLOATS:
            raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")
    if k.ndim != 4 or v.shape != k.shape:
        raise ValueError(f"{op}: k and v must be (batch, tokens, kv_heads, head_dim) of one shape, got {k.shape} and {v.shape}")
    b, t, h, d = k.shape
    if h != lay.heads:
        raise ValueError(f"{op}: k has {h} KV heads, the cache {lay.heads}")
    if d != lay.head_dim:
        raise ValueError(f"{op}: k has head_dim {d}, the cache {lay.head_dim}")
    if b != lay.batch:
        raise ValueError(f"{op}: k has batch {b}, the cache {lay.batch}")
    if counts is not None:
        _array(op, "counts", counts)
        if counts.dtype != _I32 or counts.shape != (b,):
            raise ValueError(f"{op}: counts must be ({b},) int32, got {counts.shape} {counts.dtype}")
    return t


def cache_rows(k_cache: Any, v_cache: Any, block_table: Any, b: int, n: int, lay: Layout) -> tuple[gp.GPUArray, gp.GPUArray]:
    """The first n rows (Hkv, n, D) of sequence b's K and V, as stored (views of
    a contiguous cache; a paged one's blocks taken in table order)."""
    if not lay.paged:
        return k_cache[b, :, :n], v_cache[b, :, :n]
    bs = 1 << lay.block_shift
    nb = -(-n // bs)
    pages = block_table[b, :nb]
    k = gp.take(k_cache, pages, axis=0).transpose(1, 0, 2, 3).reshape(lay.heads, nb * bs, lay.head_dim)
    v = gp.take(v_cache, pages, axis=0).transpose(1, 0, 2, 3).reshape(lay.heads, nb * bs, lay.head_dim)
    return k[:, :n], v[:, :n]


def dequantize(rows: gp.GPUArray, scale: Any, dtype: Any) -> gp.GPUArray:
    """Cache rows (Hkv, n, D) as ``dtype``, times the per-head scale of an fp8 cache."""
    out = rows.astype(dtype)
    return out if scale is None else out * scale.astype(dtype).reshape(-1, 1, 1)


def _lengths_host(lengths: gp.GPUArray, lay: Layout) -> np.ndarray:
    """The device lengths, read (a synchronization: reference path only), capacity-clamped as the kernels do."""
    return np.minimum(lengths.to_numpy().astype(np.int64), lay.capacity)


# -- ops: public wrappers ------------------------------------------------------------


def kv_append(
    k: gp.GPUArray,
    v: gp.GPUArray,
    k_cache: gp.GPUArray,
    v_cache: gp.GPUArray,
    lengths: gp.GPUArray,
    counts: gp.GPUArray | None = None,
    block_table: gp.GPUArray | None = None,
    k_scale: gp.GPUArray | None = None,
    v_scale: gp.GPUArray | None = None,
) -> None:
    """Write new tokens k, v (B, T, Hkv, D) into one layer's cache at positions
    ``lengths[b] .. lengths[b] + counts[b] - 1`` (counts (B,) int32, default T
    for every sequence: sequence b takes its first counts[b] tokens) and add the
    counts to ``lengths``, on the device. Capacity is the caller's to check
    (KVCache does, on its host mirror); positions past it are dropped."""
    return _dispatch.op("kv_append")(k, v, k_cache, v_cache, lengths, counts, block_table, k_scale, v_scale)


def kv_append_rope(
    q: gp.GPUArray,
    k: gp.GPUArray,
    v: gp.GPUArray,
    cos_sin: gp.GPUArray,
    positions: gp.GPUArray,
    layout: str,
    rotary_dim: int,
    k_cache: gp.GPUArray,
    v_cache: gp.GPUArray,
    lengths: gp.GPUArray,
    counts: gp.GPUArray | None = None,
    block_table: gp.GPUArray | None = None,
) -> None:
    """RoPE and kv_append in one step, for decode: q (B, T, Hq, D) is rotated in
    place and k rotated on its way into the cache (k itself is left as it is;
    rotated, it would be ``apply_rope(q, k, ...)``'s k), then ``kv_append`` of
    it and v. cos_sin, positions (on the device), layout and rotary_dim as
    ``apply_rope`` takes them. A cache of k's dtype (not fp8)."""
    return _dispatch.op("kv_append_rope")(q, k, v, cos_sin, positions, layout, rotary_dim, k_cache, v_cache, lengths, counts, block_table)


def reference_kv_append_rope(q: Any, k: Any, v: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any, k_cache: Any,
                             v_cache: Any, lengths: Any, counts: Any = None, block_table: Any = None) -> None:  # fmt: skip
    """apply_rope on q and a copy of k, then kv_append (any backend)."""
    if not isinstance(k, gp.GPUArray):
        raise TypeError(f"kv_append_rope: k must be a GPUArray, got {type(k).__name__}")
    kr = k.copy()
    apply_rope(q, kr, cos_sin, positions, layout, rotary_dim)
    kv_append(kr, v, k_cache, v_cache, lengths, counts, block_table)


def kv_gather(
    k_cache: gp.GPUArray,
    v_cache: gp.GPUArray,
    lengths: gp.GPUArray,
    block_table: gp.GPUArray | None,
    k_scale: gp.GPUArray | None,
    v_scale: gp.GPUArray | None,
    length: int,
    dtype: Any = None,
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """One layer's cache as contiguous K, V (B, Hkv, length, D) of ``dtype``
    (default: the cache's; an fp8 cache needs one, its values dequantized):
    each sequence's rows below its length, zeros past it."""
    return _dispatch.op("kv_gather")(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)


def _check_gather(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any):
    lay = check_cache("kv_gather", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"kv_gather: length must be a non-negative int, got {length!r}")
    if dtype is None:
        if lay.fp8:
            raise ValueError("kv_gather: an fp8 cache needs the dtype to dequantize to")
        out = k_cache.dtype
    else:
        out = _dtypes.as_dtype(dtype)
        if out not in _FLOATS:
            raise TypeError(f"kv_gather: dtype must be float16, bfloat16, float32 or float64, got {out}")
    return lay, int(length), out


# -- references (any backend) ----------------------------------------------------------


def reference_kv_append(
    k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any, v_scale: Any
):
    lay = check_cache("kv_append", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    t = _check_tokens("kv_append", k, v, counts, lay)
    start = lengths.to_numpy().astype(np.int64)
    cnt = np.full(lay.batch, t, np.int64) if counts is None else np.clip(counts.to_numpy().astype(np.int64), 0, t)
    bs = 1 << lay.block_shift
    for b in range(lay.batch):
        n = int(min(cnt[b], lay.capacity - start[b])) if start[b] >= 0 else 0
        if n <= 0:
            continue
        for src, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
            rows = src[b, :n].transpose(1, 0, 2)  # (Hkv, n, D)
            if lay.fp8:  # as the kernel: float32 x / scale, saturated, rounded to e4m3
                rows = gp.clip(rows.astype(gp.float32) / scale.reshape(-1, 1, 1), -FP8_MAX, FP8_MAX)
            rows = rows.astype(cache.dtype)
            p0 = int(start[b])
            if not lay.paged:
                cache[b, :, p0 : p0 + n] = rows
                continue
            table = block_table[b].to_numpy()
            j = 0
            while j < n:  # one block at a time
                p = p0 + j
                take = min(n - j, bs - p % bs)
                cache[int(table[p // bs]), :, p % bs : p % bs + take] = rows[:, j : j + take]
                j += take
    lengths[...] = gp.from_numpy((start + cnt).astype(np.int32))


def reference_kv_gather(
    k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None
):
    lay, s, out_dt = _check_gather(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)
    ko = gp.zeros((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    vo = gp.zeros((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    lens = _lengths_host(lengths, lay)
    cdt = gp.float64 if out_dt == np.float64 else gp.float32
    for b in range(lay.batch):
        n = int(min(max(lens[b], 0), s))
        if n:
            kr, vr = cache_rows(k_cache, v_cache, block_table, b, n, lay)
            ko[b, :, :n] = dequantize(kr, k_scale, cdt)
            vo[b, :, :n] = dequantize(vr, v_scale, cdt)
    return ko, vo


# -- CUDA kernels ------------------------------------------------------------------------


@functools.cache
def _append_kernel(ti: str, kt: str, paged: bool, advance: bool) -> Any:
    return gp.jit(
        _kernels.source("kv_cache"),
        f"pgk::kv_append<{ti}, {kt}, {'true' if paged else 'false'}, {'true' if advance else 'false'}>",
        signature="const void* k, const void* v, long long kb, long long kt, long long kh, long long vb, long long vt, long long vh, "
        "void* kc, void* vc, int* lengths, const int* counts, const int* table, const float* k_scale, const float* v_scale, "
        "int T, int Hkv, int D, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
        dependent_launch=True,
    )


@functools.cache
def _advance_kernel() -> Any:
    return gp.jit(
        _kernels.source("kv_cache"),
        "pgk::kv_advance",
        signature="int* lengths, const int* counts, int T, int B",
        name="kv_cache.cu",
        dependent_launch=True,
    )


@functools.cache
def _gather_kernel(kt: str, to: str, paged: bool) -> Any:
    return gp.jit(
        _kernels.source("kv_cache"),
        f"pgk::kv_gather<{kt}, {to}, {'true' if paged else 'false'}>",
        signature="const void* kc, const void* vc, void* ko, void* vo, const int* lengths, const int* table, const float* k_scale, "
        "const float* v_scale, int B, int Hkv, int D, int S, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
    )


_APPEND = struct.Struct("@PP6q7P6i")


def _token_strides(a: gp.GPUArray) -> tuple[int, int, int] | None:
    """Element strides (batch, token, head) of a (B, T, Hkv, D) array the kernel
    reads 16 bytes at a time as it is, or None (then it takes a copy). An axis of
    length 1 gets stride 0: its stride is arbitrary and never used."""
    item = a.dtype.itemsize
    s = [0 if n == 1 else x for x, n in zip(a.strides, a.shape)]
    if s[3] != item or a.data_ptr % 16 or any(x % 16 or x < 0 for x in s[:3]):
        return None
    return s[0] // item, s[1] // item, s[2] // item


# Launches planned per call signature -> (function, tiles, threads, advance function or None, T, layout,
# k's and v's element strides (None: copy first)).
_append_plans: dict[tuple, tuple] = {}


def _plan_append(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any, v_scale: Any):
    lay = check_cache("kv_append", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    t = _check_tokens("kv_append", k, v, counts, lay)
    items = t * lay.heads * (lay.head_dim // 8)
    tiles = max(1, -(-items // APPEND_TILE_ITEMS))
    threads = 256 if items > 128 else 128
    rt = _runtime.get()
    kern = _append_kernel(_CTYPES[k.dtype], _CTYPES[k_cache.dtype], lay.paged, tiles == 1)
    adv = None if tiles == 1 else _advance_kernel()._function(rt)
    dep = kern.dependent(rt)  # kv_advance's too: both wait for what came before
    return kern._function(rt), dep, tiles, threads, adv, t, lay, _token_strides(k), _token_strides(v)


def _sig(a: Any) -> Any:
    return None if a is None else (a._shape, a._dtype)


def kernel_kv_append(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any, v_scale: Any):
    # the predicate checked the caches' contiguity and alignment; k and v's layout is part of the key
    key = (k._shape, k._dtype, k._strides, k._ptr & 15, v._shape, v._dtype, v._strides, v._ptr & 15, k_cache._shape, k_cache._dtype,
           v_cache._shape, v_cache._dtype, lengths._shape, lengths._dtype, _sig(counts), _sig(block_table), _sig(k_scale), _sig(v_scale))  # fmt: skip
    plan = _append_plans.get(key)
    if plan is None:
        plan = _append_plans[key] = _plan_append(k, v, k_cache, v_cache, lengths, counts, block_table, k_scale, v_scale)
    fn, dep, tiles, threads, adv, t, lay, ks, vs = plan
    if ks is None:
        k = k.copy()
        ks = _token_strides(k)
    if vs is None:
        v = v.copy()
        vs = _token_strides(v)
    stream = current_stream_handle()
    native = _runtime.get().native
    cp = 0 if counts is None else counts._ptr
    params = _APPEND.pack(
        k._ptr, v._ptr, *ks, *vs, k_cache._ptr, v_cache._ptr, lengths._ptr, cp, 0 if block_table is None else block_table._ptr,
        0 if k_scale is None else k_scale._ptr, 0 if v_scale is None else v_scale._ptr,
        t, lay.heads, lay.head_dim, lay.cap, lay.block_shift, lay.table_width,
    )  # fmt: skip
    native.launch(fn, tiles, lay.batch, 1, threads, 1, 1, 0, stream, params, dep)
    if adv is not None:
        native.launch(adv, -(-lay.batch // 256), 1, 1, 256, 1, 1, 0, stream, struct.pack("@PPii", lengths._ptr, cp, t, lay.batch), dep)


@functools.cache
def _append_rope_kernel(ti: str, paged: bool, gptj: bool) -> Any:
    return gp.jit(
        _kernels.source("kv_cache"),
        f"pgk::kv_append_rope<{ti}, {'true' if paged else 'false'}, {'true' if gptj else 'false'}>",
        signature="void* q, const void* k, const void* v, long long qb, long long qt, long long qh, long long kb, long long kt, "
        "long long kh, long long vb, long long vt, long long vh, const float* cs, const void* pos, long long pb, long long ps, "
        "int pos64, int half, int max_pos, void* kc, void* vc, int* lengths, const int* counts, const int* table, int T, int Hq, "
        "int Hkv, int D, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
        dependent_launch=True,
    )


_APPEND_ROPE = struct.Struct("@3P9q2P2q3i5P7i")
ROPE_APPEND_TOKENS = 8  # decode's tokens at most: one block a sequence
# call signature -> (function, dependent, threads, q / k / v / position strides, int parameters) or None (not the kernel's)
_append_rope_plans: dict[tuple, tuple | None] = {}


def _rope_append_key(args: tuple) -> tuple:
    return tuple((a._shape, a._strides, a._dtype, a._ptr & 15) if isinstance(a, gp.GPUArray) else a for a in args)


def _plan_append_rope(q: Any, k: Any, v: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any, k_cache: Any, v_cache: Any,
                      lengths: Any, counts: Any, block_table: Any) -> tuple | None:  # fmt: skip
    """The launch when the kernel takes these operands as they are, else None."""
    if not (all(isinstance(a, gp.GPUArray) for a in (q, k, v, cos_sin, positions)) and _append_applies(
            k, v, k_cache, v_cache, lengths, counts, block_table)):  # fmt: skip
        return None
    try:
        lay = check_cache("kv_append_rope", k_cache, v_cache, lengths, block_table, None, None)
        t = _check_tokens("kv_append_rope", k, v, counts, lay)
    except (TypeError, ValueError):
        return None
    half = rotary_dim // 2 if type(rotary_dim) is int else 0
    qst, kst, vst = _token_strides(q) if q.ndim == 4 else None, _token_strides(k), _token_strides(v)
    ok = (
        layout in ("neox", "gptj") and q.dtype == k.dtype == k_cache.dtype and q.ndim == 4 and q.shape[:2] == k.shape[:2]
        and q.shape[3] == lay.head_dim and 0 < half and half % 8 == 0 and 2 * half <= lay.head_dim and t <= ROPE_APPEND_TOKENS
        and None not in (qst, kst, vst) and cos_sin.dtype == _F32 and cos_sin.ndim == 3 and cos_sin.shape[1:] == (2, half)
        and cos_sin._contig and positions.dtype in (np.dtype(np.int32), np.dtype(np.int64))
        and positions.shape in ((t,), (lay.batch, t)) and all(st % positions.itemsize == 0 for st in positions.strides)
    )  # fmt: skip
    if not ok:
        return None
    pis = positions.itemsize
    pst = [0 if n == 1 else st // pis for st, n in zip(positions.strides, positions.shape)]
    pb, ps = (0, pst[0]) if positions.ndim == 1 else pst
    rt = _runtime.get()
    kern = _append_rope_kernel(_CTYPES[k.dtype], lay.paged, layout == "gptj")
    items = t * (q.shape[2] * (2 * half if layout == "gptj" else half) // 8 + 2 * lay.heads * (lay.head_dim // 8))
    ints = (t, q.shape[2], lay.heads, lay.head_dim, lay.cap, lay.block_shift, lay.table_width)
    return (kern._function(rt), kern.dependent(rt), 256 if items > 128 else 128, (*qst, *kst, *vst), (pb, ps, int(pis == 8), half,
            cos_sin.shape[0]), ints, lay.batch)  # fmt: skip


def _append_rope_plan(args: tuple) -> tuple | None:
    key = _rope_append_key(args)
    if key not in _append_rope_plans:
        if len(_append_rope_plans) >= 4096:
            _append_rope_plans.clear()
        _append_rope_plans[key] = _plan_append_rope(*args)
    return _append_rope_plans[key]


def _append_rope_applies(*args: Any) -> bool:
    """kv_append_rope's kernel: decode tokens (see _plan_append_rope) of a half or float32 dtype, the cache in it."""
    try:
        return _append_rope_plan(args) is not None
    except (AttributeError, TypeError):
        return False


def kernel_kv_append_rope(q: Any, k: Any, v: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any, k_cache: Any,
                          v_cache: Any, lengths: Any, counts: Any = None, block_table: Any = None) -> None:  # fmt: skip
    args = (q, k, v, cos_sin, positions, layout, rotary_dim, k_cache, v_cache, lengths, counts, block_table)
    plan = _append_rope_plan(args)
    if plan is None:  # only when called directly, past the predicate
        return reference_kv_append_rope(*args)
    fn, dep, threads, strides, rope_ints, ints, batch = plan
    params = _APPEND_ROPE.pack(
        q._ptr, k._ptr, v._ptr, *strides, cos_sin._ptr, positions._ptr, *rope_ints[:2], *rope_ints[2:], k_cache._ptr, v_cache._ptr,
        lengths._ptr, 0 if counts is None else counts._ptr, 0 if block_table is None else block_table._ptr, *ints,
    )  # fmt: skip
    _runtime.get().native.launch(fn, 1, batch, 1, threads, 1, 1, 0, current_stream_handle(), params, dep)


def kernel_kv_gather(
    k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None
):
    lay, s, out_dt = _check_gather(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)
    ko = gp.empty((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    vo = gp.empty((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    items = ko.size // 8
    if items:
        kern = _gather_kernel(_CTYPES[k_cache.dtype], _CTYPES[out_dt], lay.paged)
        grid = min(-(-items // 256), 32 * _runtime.get().props["multiprocessor_count"])
        kern(grid, 256, k_cache, v_cache, ko, vo, lengths, block_table, k_scale, v_scale, lay.batch, lay.heads, lay.head_dim, s,
             lay.cap, lay.block_shift, lay.table_width)  # fmt: skip
    return ko, vo


def _cache_arrays_ok(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any) -> bool:
    """The kernels read the caches, lengths and table as contiguous arrays, 16-byte aligned."""
    return (
        isinstance(k_cache, gp.GPUArray) and isinstance(v_cache, gp.GPUArray) and isinstance(lengths, gp.GPUArray)
        and k_cache._contig and v_cache._contig and lengths._contig and k_cache._ptr % 16 == 0 and v_cache._ptr % 16 == 0
        and (block_table is None or (isinstance(block_table, gp.GPUArray) and block_table._contig))
    )  # fmt: skip


def _append_applies(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, *rest: Any) -> bool:
    """kv_append's kernel: bf16 / fp16 / float32 tokens into a cache of their dtype or fp8."""
    return (
        isinstance(v, gp.GPUArray) and _cache_arrays_ok(k_cache, v_cache, lengths, block_table)
        and k.dtype in _STORE and v.dtype == k.dtype and k_cache.dtype in (k.dtype, _F8)
        and (counts is None or (isinstance(counts, gp.GPUArray) and counts._contig))
    )  # fmt: skip


def _gather_applies(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None):
    """kv_gather's kernel: any cache dtype, out to bf16 / fp16 / float32."""
    try:
        out = k_cache.dtype if dtype is None else _dtypes.as_dtype(dtype)
    except (TypeError, ValueError):
        return False
    return _cache_arrays_ok(k_cache, v_cache, lengths, block_table) and out in _STORE


# -- the cache objects ----------------------------------------------------------------------


def _positive(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)


class _Cache(abc.ABC):
    """What both caches share: per-layer device lengths with a host mirror,
    fp8 scales, append / gather / reset."""

    max_seq: int  # tokens a sequence can hold (set by the subclass)

    def __init__(self, owner: str, batch: Any, num_kv_heads: Any, head_dim: Any, dtype: Any, num_layers: Any, kv_dtype: Any,
                 k_scale: Any, v_scale: Any) -> None:  # fmt: skip
        self._owner = owner
        self.batch = _positive(owner, "batch", batch)
        self.num_kv_heads = _positive(owner, "num_kv_heads", num_kv_heads)
        self.num_layers = _positive(owner, "num_layers", num_layers)
        if isinstance(head_dim, bool) or head_dim not in HEAD_DIMS:
            raise ValueError(f"{owner}: head_dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {head_dim!r}")
        self.head_dim = int(head_dim)
        self.dtype = _dtypes.as_dtype(dtype)
        if self.dtype not in _STORE:
            raise TypeError(f"{owner}: dtype must be bfloat16, float16 or float32, got {self.dtype}")
        self.kv_dtype = self._kv_dtype(kv_dtype)
        self.fp8 = self.kv_dtype == _F8
        layers, heads = self.num_layers, self.num_kv_heads
        self._lengths = gp.zeros((layers, self.batch), gp.int32)
        self._host = np.zeros((layers, self.batch), np.int64)
        self._top = [0] * layers  # the longest sequence of each layer (decode's launch plan needs it every call)
        # Decode plans its launch (split-K over the keys) for the capacity instead of the longest sequence:
        # every step then makes the same launch, as a CUDA graph needs, and a graph replay and an eager step
        # split the keys alike, so they agree bit for bit. The kernels cut each sequence's work from its
        # device length either way; the cost is blocks that find no keys.
        self.plan_capacity = False
        self._checked: set = set()  # (shape, dtype) of k and v that passed the append checks
        # a ragged append's counts on the device, in one buffer uploaded only when they change: a prefill's
        # layers share one copy, and a captured prefill reads the buffer on every replay (stage_counts)
        self._counts_dev = gp.zeros((self.batch,), gp.int32)
        self._counts_held: np.ndarray | None = None
        self._k_scale = self._v_scale = None
        self._scaled = np.zeros(layers, bool)  # whether each layer's fp8 scales are set
        if self.fp8:
            ks, vs = self._scale_arg("k_scale", k_scale), self._scale_arg("v_scale", v_scale)
            if (ks is None) != (vs is None):
                raise ValueError(f"{owner}: give both k_scale and v_scale, or neither (computed at each layer's first append)")
            ones = np.ones((layers, heads), np.float32)
            self._k_scale = gp.from_numpy(ones if ks is None else ks)
            self._v_scale = gp.from_numpy(ones if vs is None else vs)
            self._scaled[:] = ks is not None
        elif k_scale is not None or v_scale is not None:
            raise ValueError(f"{owner}: k_scale and v_scale apply to an fp8 cache (kv_dtype={FP8!r}) only")

    def _kv_dtype(self, kv_dtype: Any) -> np.dtype:
        if kv_dtype is None:
            return self.dtype
        if isinstance(kv_dtype, str) and kv_dtype == FP8:
            return _F8
        try:
            dt = _dtypes.as_dtype(kv_dtype)
        except (TypeError, ValueError):
            dt = None
        if dt not in (self.dtype, _F8):
            raise ValueError(f"{self._owner}: kv_dtype must be None (the dtype) or {FP8!r}, got {kv_dtype!r}")
        return dt

    def _scale_arg(self, name: str, s: Any) -> np.ndarray | None:
        if s is None:
            return None
        a = np.asarray(s.to_numpy() if isinstance(s, gp.GPUArray) else s, dtype=np.float64)
        try:
            a = np.broadcast_to(a, (self.num_layers, self.num_kv_heads))
        except ValueError:
            raise ValueError(f"{self._owner}: {name} must broadcast to (num_layers, num_kv_heads) = "
                             f"({self.num_layers}, {self.num_kv_heads}), got shape {a.shape}") from None  # fmt: skip
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"{self._owner}: {name} must be positive and finite")
        return np.ascontiguousarray(a, dtype=np.float32)

    def _finish(self) -> None:
        """After the subclass made its storage: each layer's op arguments, made once
        (views are not free, and append and decode take them every step)."""
        self._args = []
        for i in range(self.num_layers):
            k, v, table = self._storage(i)
            ks = None if self._k_scale is None else self._k_scale[i]
            vs = None if self._v_scale is None else self._v_scale[i]
            self._args.append((k, v, self._lengths[i], table, ks, vs))
        self._lay = check_cache(self._owner, *self._args[0])

    @abc.abstractmethod
    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray | None]:
        """(k_cache, v_cache, block_table or None) of one layer."""

    @abc.abstractmethod
    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        """Make room for ``need`` tokens per sequence (at most ``top``), or raise ValueError and change nothing."""

    @abc.abstractmethod
    def _release(self, seq: int | None) -> None:
        """Give back what sequence ``seq`` (or every one) holds."""

    # -- what the ops take --------------------------------------------------------------

    def _layer(self, layer: Any) -> int:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.num_layers:
            raise ValueError(f"{self._owner}: layer must be an int in [0, {self.num_layers}), got {layer!r}")
        return int(layer)

    def _seq(self, seq: Any) -> int:
        if isinstance(seq, bool) or not isinstance(seq, (int, np.integer)) or not 0 <= seq < self.batch:
            raise ValueError(f"{self._owner}: seq must be an int in [0, {self.batch}), got {seq!r}")
        return int(seq)

    def op_args(self, layer: int = 0) -> tuple[Any, ...]:
        """(k_cache, v_cache, lengths, block_table, k_scale, v_scale) of one
        layer, as the ops (kv_append, kv_gather, decode_attention) take them."""
        return self._args[self._layer(layer)]

    def lengths(self, layer: int = 0) -> gp.GPUArray:
        """The layer's sequence lengths, (batch,) int32 on the device (a view)."""
        return self._lengths[self._layer(layer)]

    def seq_lengths(self, layer: int = 0) -> np.ndarray:
        """The layer's sequence lengths from the host mirror (no synchronization)."""
        return self._host[self._layer(layer)].copy()

    def plan_bound(self, layer: int = 0) -> int:
        """The longest sequence decode plans its launch for: the capacity when
        ``plan_capacity`` is set, else the layer's longest sequence."""
        return self.max_seq if self.plan_capacity else self._top[self._layer(layer)]

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Wrap a CUDA graph capture of steps that append to this cache: decode is
        planned for the capacity meanwhile (``plan_capacity``), and afterwards
        the lengths (device and host) are what they were before (a capture on
        the CPU backend runs the block once). A paged cache must hold its blocks
        ahead (``reserve``): a replay takes none. After each replay, ``advance``
        the host mirror by what the graph appended."""
        saved = (self._lengths.copy(), self._host.copy(), list(self._top), self.plan_capacity)
        self.plan_capacity = True
        try:
            yield
        finally:
            self._lengths[...] = saved[0]
            self._host[:], self._top, self.plan_capacity = saved[1], saved[2], saved[3]

    def advance(self, tokens: Any = 1) -> None:
        """Record on the host that every sequence of every layer gained ``tokens``
        on the device (a graph replay appended them): one int for all, or one
        per sequence (a captured ragged prefill's counts); checks the capacity."""
        t = np.asarray(tokens)
        if t.dtype.kind not in "iu" or t.shape not in ((), (self.batch,)) or (t < 0).any():
            raise ValueError(f"{self._owner}.advance: tokens must be an int >= 0 or {self.batch} of them, got {tokens!r}")
        need = self._host + t.astype(np.int64)
        if int(need.max()) > self.max_seq:
            raise ValueError(f"{self._owner}.advance: a sequence would pass max_seq={self.max_seq}")
        self._host[:] = need
        self._top = need.max(axis=1).tolist()

    def max_length(self, layer: int = 0) -> int:
        """The longest sequence of the layer, from the host mirror."""
        return self._top[self._layer(layer)]

    def scales(self, layer: int = 0) -> tuple[gp.GPUArray | None, gp.GPUArray | None]:
        """(k_scale, v_scale), each (num_kv_heads,) float32, of an fp8 cache's layer, else (None, None)."""
        return self._args[self._layer(layer)][4:]

    # -- writing ------------------------------------------------------------------------

    def _counts(self, counts: Any, t: int, what: str = "append") -> np.ndarray | None:
        if counts is None:
            return None
        c = np.asarray(counts.to_numpy() if isinstance(counts, gp.GPUArray) else counts)
        if c.shape != (self.batch,) or c.dtype.kind not in "iu" or (c.size and (c.min() < 0 or c.max() > t)):
            raise ValueError(f"{self._owner}.{what}: counts must be {self.batch} ints in [0, {t}], got {counts!r}")
        return c.astype(np.int64)

    def stage_counts(self, counts: Any) -> None:
        """Put a ragged append's ``counts`` (batch ints >= 0) in the cache's device
        buffer now, where appends with these counts read them: call it before
        capturing such appends in a CUDA graph (the capture then copies nothing
        from the host) and again with each replay's counts before the replay."""
        if counts is None:
            raise ValueError(f"{self._owner}.stage_counts: counts must be {self.batch} ints in [0, {self.max_seq}], got None")
        self._device_counts(self._counts(counts, self.max_seq, "stage_counts"))

    def _device_counts(self, c: np.ndarray) -> gp.GPUArray:
        if self._counts_held is None or not np.array_equal(c, self._counts_held):
            self._counts_dev[...] = c.astype(np.int32)
            self._counts_held = c.copy()
        return self._counts_dev

    def append(self, k: gp.GPUArray, v: gp.GPUArray, layer: int = 0, counts: Any = None) -> None:
        """Append new tokens k, v (batch, T, num_kv_heads, head_dim) to a layer at
        each sequence's length; ``counts`` (batch ints, default T each) takes
        only the first counts[b] tokens of sequence b (a ragged batch). Raises
        ValueError before writing anything if a sequence would pass its
        capacity (or a paged cache runs out of blocks)."""
        self._append(k, v, layer, counts, None)

    def append_rotated(self, q: gp.GPUArray, k: gp.GPUArray, v: gp.GPUArray, rope: Any, positions: Any, layer: int = 0,
                       counts: Any = None) -> None:  # fmt: skip
        """``rope(q, k, positions)`` then ``append(k, v, layer, counts)``, except
        that k itself may be left unrotated (only the cache's copy is): for
        decode, where one kernel (``kv_append_rope``) rotates q in place and
        writes the rotated k and v into the cache. ``rope`` is a
        ``RotaryEmbedding``. An fp8 cache rotates first (its scales come from
        the rotated k)."""
        if self.fp8:
            rope(q, k, positions)
            self._append(k, v, layer, counts, None)
        else:
            self._append(k, v, layer, counts, (q, rope, positions))

    def _append(self, k: Any, v: Any, layer: Any, counts: Any, rotate: tuple | None) -> None:
        i = self._layer(layer)
        try:
            sig = (k._shape, k._dtype, v._shape, v._dtype)
        except AttributeError:
            sig = None
        if sig not in self._checked:  # before any block is taken
            _check_tokens(f"{self._owner}.append", k, v, None, self._lay)
            self._checked.add(sig)
        t = k._shape[1]
        c = self._counts(counts, t)
        need = self._host[i] + (t if c is None else c)
        top = int(need.max())
        self._grow(need, top, "append")
        if self.fp8 and not self._scaled[i] and t and (c is None or c.any()):
            self._set_scales(i, k, v, c)
        args = self._args[i]
        dc = None if c is None else self._device_counts(c)
        if rotate is None:
            _dispatch.op("kv_append")(k, v, args[0], args[1], args[2], dc, *args[3:])
        else:
            q, rope, positions = rotate
            pos = _device_positions(positions, rope.cos_sin)
            _dispatch.op("kv_append_rope")(q, k, v, rope.cos_sin, pos, rope.layout, rope.rotary_dim, args[0], args[1], args[2], dc, args[3])
        self._host[i] = need
        self._top[i] = top

    def _set_scales(self, i: int, k: Any, v: Any, counts: np.ndarray | None) -> None:
        """Layer i's fp8 scales from its first append: FP8_HEADROOM * amax / FP8_MAX per KV head (1 where all zero)."""
        mask = None
        if counts is not None:
            rows = (np.arange(k.shape[1])[None, :] < counts[:, None]).astype(np.float32)
            mask = gp.from_numpy(rows.reshape(self.batch, k.shape[1], 1, 1))
        for src, dst in ((k, self._k_scale), (v, self._v_scale)):
            a = gp.abs(src.astype(gp.float32))
            if mask is not None:
                a = a * mask
            amax = gp.max(a, axis=(0, 1, 3))
            dst[i] = gp.where(amax > 0, amax * (FP8_HEADROOM / FP8_MAX), 1.0).astype(gp.float32)
        self._scaled[i] = True

    # -- reading ------------------------------------------------------------------------

    def gather(self, layer: int = 0) -> tuple[gp.GPUArray, gp.GPUArray]:
        """The layer's K and V as new contiguous (batch, num_kv_heads, S, head_dim)
        arrays of ``dtype`` (fp8 dequantized), S the longest sequence; rows past
        a sequence's length are zeros."""
        i = self._layer(layer)
        return kv_gather(*self._args[i], self._top[i], self.dtype)

    def keys_values(self, seq: int, layer: int = 0) -> tuple[gp.GPUArray, gp.GPUArray]:
        """Sequence ``seq``'s K and V, (1, num_kv_heads, length, head_dim) of
        ``dtype``: views into a contiguous cache of that dtype, else copies."""
        i, b = self._layer(layer), self._seq(seq)
        n = int(self._host[i, b])
        k, v, lengths, table, ks, vs = self._args[i]
        if table is None and not self.fp8:
            return k[b : b + 1, :, :n], v[b : b + 1, :, :n]
        if table is None:
            k, v = k[b : b + 1], v[b : b + 1]
        else:
            table = table[b : b + 1]
        return kv_gather(k, v, lengths[b : b + 1], table, ks, vs, n, self.dtype)

    def reset(self, seq: int | None = None) -> None:
        """Empty sequence ``seq`` (every sequence when None) in every layer. fp8 scales stay."""
        if seq is None:
            self._host[:] = 0
            self._lengths[...] = 0
        else:
            b = self._seq(seq)
            self._host[:, b] = 0
            self._lengths[:, b] = 0
        self._top = self._host.max(axis=1).tolist()
        self._release(seq)


class KVCache(_Cache):
    """A contiguous KV cache: per layer, K and V of (batch, num_kv_heads,
    max_seq, head_dim), so decode reads each head's keys as one run of memory.

    ``dtype`` is the compute dtype (bfloat16, float16, float32) and the storage
    dtype unless ``kv_dtype="fp8_e4m3"`` (then ``k_scale`` / ``v_scale``, each a
    float or broadcastable to (num_layers, num_kv_heads), or None: computed at
    each layer's first append; see the module doc)."""

    def __init__(
        self,
        batch: int,
        max_seq: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: Any = gp.bfloat16,
        *,
        num_layers: int = 1,
        kv_dtype: Any = None,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        super().__init__("KVCache", batch, num_kv_heads, head_dim, dtype, num_layers, kv_dtype, k_scale, v_scale)
        self.max_seq = _positive("KVCache", "max_seq", max_seq)
        shape = (self.num_layers, self.batch, self.num_kv_heads, self.max_seq, self.head_dim)
        self.k = gp.empty(shape, self.kv_dtype)
        self.v = gp.empty(shape, self.kv_dtype)
        self._finish()

    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, None]:
        return self.k[layer], self.v[layer], None

    def _release(self, seq: int | None) -> None:
        pass  # a contiguous cache holds its memory for good

    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        if top > self.max_seq:
            b = int(np.argmax(need))
            raise ValueError(f"KVCache.{what}: sequence {b} would hold {int(need[b])} tokens, past max_seq={self.max_seq}; "
                             "nothing was written")  # fmt: skip

    def __repr__(self) -> str:
        return (f"KVCache(batch={self.batch}, max_seq={self.max_seq}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"dtype={self.dtype}, kv_dtype={self.kv_dtype}, num_layers={self.num_layers})")  # fmt: skip


class PagedKVCache(_Cache):
    """A paged KV cache: per layer a pool of ``num_blocks`` blocks of K and V,
    (num_blocks, num_kv_heads, block_size, head_dim), and one block table
    (batch, ceil(max_seq / block_size)) int32 shared by the layers. Blocks come
    from a host free list as sequences grow (append) and go back on reset;
    ``reserve`` takes them ahead (a CUDA graph must not allocate). block_size
    is a power of two. dtype, kv_dtype and scales as in KVCache."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: Any = gp.bfloat16,
        *,
        batch: int,
        max_seq: int,
        num_layers: int = 1,
        kv_dtype: Any = None,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        super().__init__("PagedKVCache", batch, num_kv_heads, head_dim, dtype, num_layers, kv_dtype, k_scale, v_scale)
        self.num_blocks = _positive("PagedKVCache", "num_blocks", num_blocks)
        self.block_size = _positive("PagedKVCache", "block_size", block_size)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"PagedKVCache: block_size must be a power of two, got {block_size}")
        width = -(-_positive("PagedKVCache", "max_seq", max_seq) // self.block_size)
        self.max_seq = width * self.block_size
        shape = (self.num_layers, self.num_blocks, self.num_kv_heads, self.block_size, self.head_dim)
        self.k = gp.empty(shape, self.kv_dtype)
        self.v = gp.empty(shape, self.kv_dtype)
        self.block_table = gp.zeros((self.batch, width), gp.int32)
        self._table = np.zeros((self.batch, width), np.int32)
        self._owned = np.zeros(self.batch, np.int64)  # blocks held by each sequence (the first entries of its table row)
        self._held = np.zeros(self.batch, np.int64)  # tokens those blocks hold
        self._free = list(range(self.num_blocks - 1, -1, -1))  # a stack: pop() hands out 0, 1, 2, ... first
        self._finish()

    @property
    def free_blocks(self) -> int:
        """Blocks not held by any sequence."""
        return len(self._free)

    def blocks(self, seq: int) -> list[int]:
        """The blocks sequence ``seq`` holds, in table order."""
        b = self._seq(seq)
        return self._table[b, : self._owned[b]].tolist()

    def reserve(self, seq: int, tokens: int) -> None:
        """Hold enough blocks for sequence ``seq`` to reach ``tokens`` tokens."""
        need = self._held.copy()
        b = self._seq(seq)
        need[b] = max(int(need[b]), _positive("PagedKVCache.reserve", "tokens", tokens))
        self._grow(need, int(need.max()), "reserve")

    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
        return self.k[layer], self.v[layer], self.block_table

    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        if (need <= self._held).all():
            return
        blocks = -(-need // self.block_size)
        width = self._table.shape[1]
        over = np.nonzero(blocks > width)[0]
        if over.size:
            b = int(over[0])
            raise ValueError(f"PagedKVCache.{what}: sequence {b} would hold {int(need[b])} tokens, past max_seq={self.max_seq}; "
                             "nothing was written")  # fmt: skip
        extra = np.maximum(blocks - self._owned, 0)
        total = int(extra.sum())
        if total > len(self._free):
            raise ValueError(f"PagedKVCache.{what}: needs {total} more blocks, {len(self._free)} of {self.num_blocks} are free; "
                             "nothing was written")  # fmt: skip
        for b in np.nonzero(extra)[0].tolist():
            n0, n = int(self._owned[b]), int(extra[b])
            self._table[b, n0 : n0 + n] = [self._free.pop() for _ in range(n)]
            self._owned[b] = n0 + n
            self.block_table[b, n0 : n0 + n] = gp.from_numpy(self._table[b, n0 : n0 + n])
        self._held = self._owned * self.block_size

    def _release(self, seq: int | None) -> None:
        for b in range(self.batch) if seq is None else (seq,):
            self._free.extend(reversed(self._table[b, : self._owned[b]].tolist()))
            self._owned[b] = 0
        self._held = self._owned * self.block_size

    def __repr__(self) -> str:
        return (f"PagedKVCache(num_blocks={self.num_blocks}, block_size={self.block_size}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, dtype={self.dtype}, kv_dtype={self.kv_dtype}, batch={self.batch}, max_seq={self.max_seq}, "
                f"num_layers={self.num_layers}, free_blocks={self.free_blocks})")  # fmt: skip


def register(registry: Any) -> None:
    registry.define("kv_append", nkey=1, doc=kv_append.__doc__ or "")
    registry.define("kv_append_rope", nkey=1, doc=kv_append_rope.__doc__ or "")
    registry.define("kv_gather", nkey=1, doc=kv_gather.__doc__ or "")
    for backend in ("cuda", "cpu"):
        registry.register("kv_append", reference_kv_append, backend=backend, name="reference")
        registry.register("kv_append_rope", reference_kv_append_rope, backend=backend, name="reference")
        registry.register("kv_gather", reference_kv_gather, backend=backend, name="reference")
    registry.register("kv_append", kernel_kv_append, backend="cuda", dtypes=["float32", "float16", "bfloat16"], min_sm=80, priority=10,
                      predicate=_append_applies, name="kernel")  # fmt: skip
    registry.register("kv_append_rope", kernel_kv_append_rope, backend="cuda", dtypes=["float32", "float16", "bfloat16"], min_sm=80,
                      priority=10, predicate=_append_rope_applies, name="kernel")  # fmt: skip
    registry.register("kv_gather", kernel_kv_gather, backend="cuda", dtypes=["float32", "float16", "bfloat16", "float8_e4m3fn"],
                      min_sm=80, priority=10, predicate=_gather_applies, name="kernel")  # fmt: skip
