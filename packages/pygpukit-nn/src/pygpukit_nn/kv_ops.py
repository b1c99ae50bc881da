"""The ops that write and read one layer of a KV cache, as the registry
defines them: ``kv_append`` (new tokens at each sequence's length, advancing
it), ``kv_append_rope`` (RoPE and the append in one step, for decode) and
``kv_gather`` (a cache as contiguous (B, Hkv, S, D) arrays), with their
references (any backend). The CUDA kernels are in kv_kernels.py."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .kv_layout import FLOATS, FP8_MAX, cache_rows, check_cache, check_tokens, dequantize, lengths_host
from .positional import apply_rope


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
    return ext.op("kv_append")(k, v, k_cache, v_cache, lengths, counts, block_table, k_scale, v_scale)


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
    return ext.op("kv_append_rope")(q, k, v, cos_sin, positions, layout, rotary_dim, k_cache, v_cache, lengths, counts, block_table)


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
    return ext.op("kv_gather")(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)


def check_gather(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any):
    """kv_gather's arguments checked: (layout, length, output dtype)."""
    lay = check_cache("kv_gather", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"kv_gather: length must be a non-negative int, got {length!r}")
    if dtype is None:
        if lay.fp8:
            raise ValueError("kv_gather: an fp8 cache needs the dtype to dequantize to")
        out = k_cache.dtype
    else:
        out = gp.result_type(dtype)
        if out not in FLOATS:
            raise TypeError(f"kv_gather: dtype must be float16, bfloat16, float32 or float64, got {out}")
    return lay, int(length), out


# -- references (any backend) ----------------------------------------------------------


def reference_kv_append(
    k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any, v_scale: Any
):
    lay = check_cache("kv_append", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    t = check_tokens("kv_append", k, v, counts, lay)
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


def reference_kv_append_rope(q: Any, k: Any, v: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any, k_cache: Any,
                             v_cache: Any, lengths: Any, counts: Any = None, block_table: Any = None) -> None:  # fmt: skip
    """apply_rope on q and a copy of k, then kv_append (any backend)."""
    if not isinstance(k, gp.GPUArray):
        raise TypeError(f"kv_append_rope: k must be a GPUArray, got {type(k).__name__}")
    kr = k.copy()
    apply_rope(q, kr, cos_sin, positions, layout, rotary_dim)
    kv_append(kr, v, k_cache, v_cache, lengths, counts, block_table)


def reference_kv_gather(
    k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None
):
    lay, s, out_dt = check_gather(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)
    ko = gp.zeros((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    vo = gp.zeros((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    lens = lengths_host(lengths, lay)
    cdt = ext.compute_dtype(out_dt)
    for b in range(lay.batch):
        n = int(min(max(lens[b], 0), s))
        if n:
            kr, vr = cache_rows(k_cache, v_cache, block_table, b, n, lay)
            ko[b, :, :n] = dequantize(kr, k_scale, cdt)
            vo[b, :, :n] = dequantize(vr, v_scale, cdt)
    return ko, vo
