"""What one layer of a KV cache is to the ops that take its arrays (kv_append,
kv_append_rope, kv_gather, decode_attention): the checks of the arrays and
the ``Layout`` they describe, the dtypes the kernels are built for, and the
reading of a sequence's rows back (the references). See kv_cache.py for the
layouts themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp

HEAD_DIMS = (64, 80, 96, 128, 256)  # head sizes the decode kernel is built for
FP8 = "fp8_e4m3"
FP8_MAX = 448.0  # the largest finite e4m3fn value
FP8_HEADROOM = 2.0  # computed scales leave room for values up to twice the first append's

F8 = np.dtype(gp.float8_e4m3fn)
I32 = np.dtype(np.int32)
F32 = np.dtype(np.float32)
STORE = (np.dtype(gp.bfloat16), np.dtype(gp.float16), F32)  # cache dtypes besides fp8
FLOATS = (*STORE, np.dtype(np.float64))
CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", F32: "float", F8: "pgk::float8_e4m3"}


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
    if k_cache.dtype not in (*STORE, F8):
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
        if block_table.dtype != I32 or block_table.ndim != 2:
            raise ValueError(f"{op}: block_table must be (batch, blocks) int32, got {block_table.shape} {block_table.dtype}")
        if depth & (depth - 1):
            raise ValueError(f"{op}: the block size (k_cache.shape[2]) must be a power of two, got {depth}")
        batch = block_table.shape[0]
    else:
        batch = rows
    _array(op, "lengths", lengths)
    if lengths.dtype != I32 or lengths.shape != (batch,):
        raise ValueError(f"{op}: lengths must be ({batch},) int32, got {lengths.shape} {lengths.dtype}")
    fp8 = k_cache.dtype == F8
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not fp8:
            if s is not None:
                raise ValueError(f"{op}: {name} applies to an fp8 cache only; this one is {k_cache.dtype}")
            continue
        if s is None:
            raise ValueError(f"{op}: an fp8 cache needs {name} ({heads},) float32")
        _array(op, name, s)
        if s.dtype != F32 or s.shape != (heads,):
            raise ValueError(f"{op}: {name} must be ({heads},) float32, got {s.shape} {s.dtype}")
    if paged:
        width = block_table.shape[1]
        return Layout(batch, heads, d, width * depth, 0, depth.bit_length() - 1, width, True, fp8)
    return Layout(batch, heads, d, depth, depth, 0, 0, False, fp8)


def check_tokens(op: str, k: Any, v: Any, counts: Any, lay: Layout) -> int:
    """New tokens k, v (B, T, Hkv, D) for a cache of layout ``lay``; returns T."""
    for name, a in (("k", k), ("v", v)):
        _array(op, name, a)
        if a.dtype not in FLOATS:
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
        if counts.dtype != I32 or counts.shape != (b,):
            raise ValueError(f"{op}: counts must be ({b},) int32, got {counts.shape} {counts.dtype}")
    return t


def cache_arrays_ok(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any) -> bool:
    """The kernels read the caches, lengths and table as contiguous arrays, 16-byte aligned."""
    return (
        isinstance(k_cache, gp.GPUArray) and isinstance(v_cache, gp.GPUArray) and isinstance(lengths, gp.GPUArray)
        and k_cache.is_contiguous and v_cache.is_contiguous and lengths.is_contiguous and k_cache.data_ptr % 16 == 0
        and v_cache.data_ptr % 16 == 0 and (block_table is None or (isinstance(block_table, gp.GPUArray) and block_table.is_contiguous))
    )  # fmt: skip


def sig(a: Any) -> Any:
    """(shape, dtype) of an optional array, None for None: a plan key's part for an array read as it is."""
    return None if a is None else (a.shape, a.dtype)


def token_strides(a: gp.GPUArray) -> tuple[int, int, int] | None:
    """Element strides (batch, token, head) of a (B, T, H, D) array the kernels
    read 16 bytes at a time as it is, or None (then they take a copy). An axis
    of length 1 gets stride 0: its stride is arbitrary and never used."""
    item = a.dtype.itemsize
    s = [0 if n == 1 else x for x, n in zip(a.strides, a.shape)]
    if s[3] != item or a.data_ptr % 16 or any(x % 16 or x < 0 for x in s[:3]):
        return None
    return s[0] // item, s[1] // item, s[2] // item


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


def lengths_host(lengths: gp.GPUArray, lay: Layout) -> np.ndarray:
    """The device lengths, read (a synchronization: reference path only), capacity-clamped as the kernels do."""
    return np.minimum(lengths.to_numpy().astype(np.int64), lay.capacity)
