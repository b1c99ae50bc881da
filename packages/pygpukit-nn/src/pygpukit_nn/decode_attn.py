"""Decode attention: 1 to 8 new query tokens per sequence against a KV cache
(``KVCache`` or ``PagedKVCache``, kv_cache.py), GQA / MQA / MHA.

``decode_attention(q, cache, layer)`` takes q (B, Tq, Hq, D) whose Tq tokens
are already appended to the layer (they are each sequence's last Tq tokens:
causal among themselves, aligned bottom-right). Query t of a sequence of
length L sits at position L - Tq + t and attends to keys j <= L - Tq + t,
with ``window`` w only to the last w of them (j > position - w); query head
h uses KV head h // (Hq / Hkv). The softmax is in float32 and the output, in
q's dtype, is rounded once; a query with no visible key gives zeros.

The CUDA kernels (kernels/decode_attn.cu) read each K/V byte once for all the
query heads of its KV head, streamed through a ring of cp.async stages in
shared memory: head_dim a multiple of 16 up to 128 on tensor cores
(``decode_attn_tc``, 16 query rows a block; an fp8 cache converted to fp16 in
shared memory), head_dim 256 on CUDA cores (``decode_attn``). Both split long sequences over
blocks (split-K: the splits fill the SMs' block slots in one wave,
each block's slice cut on the device from the sequence's length) and
merges the slices' partial softmaxes in float32, in a fixed order: results
do not depend on timing. Its launch is planned once per call signature.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .kv_cache import _Cache
from .kv_layout import (
    CTYPES,
    F8,
    F32,
    HEAD_DIMS,
    Layout,
    cache_arrays_ok,
    cache_rows,
    check_cache,
    dequantize,
    lengths_host,
    sig,
    token_strides,
)

MAX_TOKENS = 8  # query tokens per sequence the op takes
ROWS_MAX = 4  # query rows (tokens x query heads of a KV head) per block; more go to several blocks
# The kernel's tuning knobs (module constants a sweep may set; plans made before keep theirs):
WARPS = 4  # warps per block
STAGES = 4  # steps of K / V per lane in the shared-memory ring: STAGES - 1 in flight while one is used
STAGE_BYTES = 64  # K and V bytes per lane per step: 2 keys of bf16 / fp16, 4 of fp8
# blocks resident per SM (the launch bounds: <= 65536 / (BLOCKS_PER_SM * WARPS * 32) registers a thread);
# on an H100, 2 ran as fast as 3 or 4 (1-8k keys), faster on paged caches
BLOCKS_PER_SM = 2
MIN_SPLIT_STEPS = 4  # a split reads at least this many block steps of keys
# keys too few for this many splits of MIN_SPLIT_STEPS run unsplit: the merge
# (an atomic, a round trip through L2) costs more than the splits save (an
# H100 at 144 keys, two splits: Qwen2-0.5B's decode step 744 -> 675 us,
# Llama-1.1B's 1045 -> 980 us)
MIN_SPLITS = 4
MAX_SPLITS = 128  # splits of a sequence at most (beyond a wave of blocks, more only add partials to merge)
# The tensor-core kernel's knobs (decode_attn_tc; the CUDA-core kernel's are above), by the
# keys a call reads (H100 sweep, `..._nn-decode-tc-sweep.json`): fewer than TC_MID_KEYS (a
# model's decode steps over short prompts, up to 256 keys unsplit; splits of two steps), up
# to TC_LONG_KEYS (splits of one step: 1k keys, 32 / 8 heads, 6.7 us against 8.5 with two
# steps or 8 warps), and more (8 warps a block, one block an SM: 32k keys at 2.43 TB/s where
# 4 warps, two blocks an SM, read them at 2.30). Warps a block (each on its own 16-key
# tiles), 16-key K / V tiles per warp in the ring (one of them in use), blocks an SM:
TC_WARPS, TC_STAGES, TC_BLOCKS_PER_SM = 4, 3, 2
TC_LONG_WARPS, TC_LONG_STAGES, TC_LONG_BLOCKS_PER_SM = 8, 2, 1
TC_MID_KEYS, TC_LONG_KEYS = 1024, 4096
TC_ROWS = 16  # query rows per block: the mma's M
TC_MIN_SPLIT_STEPS = 2  # a split reads at least this many block steps (16 keys a warp each); 1 from TC_MID_KEYS to TC_LONG_KEYS
# keys of its slice a contiguous cache's block asks L2 for before it waits for the kernel before it (SM 90); an H100
# sweep of 0 / 64 / 128 / 256 / 512 (`..._nn-decode-lean-merge-prefetch-sweep.json`): 128 is within 1% of the best at
# 1k, 8k and 32k keys and 5% faster than 256 at 4k, where 256 keys are a whole slice and its burst delays the wait
TC_PREFETCH = 128
_HALF = (np.dtype(gp.bfloat16), np.dtype(gp.float16))
_FLOATS = (*_HALF, np.dtype(np.float32), np.dtype(np.float64))
_LOG2E = 1.4426950408889634

OP_DOC = """decode_attention(q, k_cache, v_cache, lengths, block_table, k_scale, v_scale, max_len, scale, window):
attention of q (B, Tq, Hq, D), Tq 1..8, over one layer's cache arrays (see
kv_cache.check_cache); max_len bounds the lengths (None: read from the
device), scale defaults to 1 / sqrt(D), window (None: all) keeps the last
``window`` keys of each query. Returns (B, Tq, Hq, D) in q's dtype."""


def decode_attention(q: gp.GPUArray, cache: _Cache, layer: int = 0, scale: float | None = None, window: int | None = None) -> gp.GPUArray:
    """Attention of q (batch, Tq, num_heads, head_dim), 1 <= Tq <= 8 new tokens
    already appended to ``cache`` (a KVCache or PagedKVCache) at ``layer``,
    over each sequence's cached keys and values. num_heads must be a multiple
    of the cache's num_kv_heads (GQA); ``scale`` defaults to 1 / sqrt(head_dim);
    ``window`` keeps only the last ``window`` keys of each query (sliding-window
    attention). Returns (batch, Tq, num_heads, head_dim) in q's dtype."""
    if not isinstance(cache, _Cache):
        raise TypeError(f"decode_attention: cache must be a KVCache or PagedKVCache, got {type(cache).__name__}")
    i = cache._layer(layer)
    return ext.op("decode_attention")(q, *cache._args[i], cache.plan_bound(i), scale, window)


# -- checks --------------------------------------------------------------------------


def _check_decode(q: Any, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, max_len: Any,
                  scale: Any, window: Any) -> tuple[Layout, int, int, float, int]:  # fmt: skip
    """Returns (layout, Tq, Hq, scale, window (0: none))."""
    op = "decode_attention"
    if not isinstance(q, gp.GPUArray):
        raise TypeError(f"{op}: q must be a GPUArray, got {type(q).__name__}")
    if q.dtype not in _FLOATS:
        raise TypeError(f"{op}: q must be float16, bfloat16, float32 or float64, got {q.dtype}")
    if q.ndim != 4 or not 1 <= q.shape[1] <= MAX_TOKENS:
        raise ValueError(f"{op}: q must be (batch, tokens, heads, head_dim) with 1 to {MAX_TOKENS} tokens, got shape {q.shape}")
    lay = check_cache(op, k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    b, tq, hq, d = q.shape
    if d != lay.head_dim:
        raise ValueError(f"{op}: q has head_dim {d}, the cache {lay.head_dim}")
    if hq % lay.heads:
        raise ValueError(f"{op}: the {hq} query heads are not a multiple of the cache's {lay.heads} KV heads")
    if b != lay.batch:
        raise ValueError(f"{op}: q has batch {b}, the cache {lay.batch}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 0):
        raise ValueError(f"{op}: max_len must be None or a non-negative int, got {max_len!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not (0 < scale < math.inf):
        raise ValueError(f"{op}: scale must be a positive finite number or None, got {scale!r}")
    if window is None:
        window = 0
    elif isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"{op}: window must be None or a positive int, got {window!r}")
    return lay, tq, hq, float(scale), int(window)


# -- reference (any backend) -------------------------------------------------------------


def reference_decode_attention(q: Any, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any,
                               max_len: Any = None, scale: Any = None, window: Any = None) -> gp.GPUArray:  # fmt: skip
    """Each sequence's rows gathered (dequantized), scores, a float32 (float64
    for float64 q) softmax under the causal / window mask, times V."""
    lay, tq, hq, sc, win = _check_decode(q, k_cache, v_cache, lengths, block_table, k_scale, v_scale, max_len, scale, window)
    cdt = ext.compute_dtype(q.dtype)
    heads, d = lay.heads, lay.head_dim
    g = hq // heads
    out = gp.zeros(q.shape, cdt)
    for b, n in enumerate(lengths_host(lengths, lay).tolist()):
        if n <= 0:
            continue
        kr, vr = cache_rows(k_cache, v_cache, block_table, b, n, lay)
        k, v = dequantize(kr, k_scale, cdt), dequantize(vr, v_scale, cdt)  # (Hkv, n, D)
        qb = q[b].astype(cdt).reshape(tq, heads, g, d).transpose(1, 0, 2, 3).reshape(heads, tq * g, d)  # rows (t, g)
        s = gp.matmul(qb, k.transpose(0, 2, 1)) * sc
        pos = (n - tq + np.arange(tq)).repeat(g)[:, None]
        j = np.arange(n)[None, :]
        mask = gp.from_numpy((j <= pos) & ((j > pos - win) if win else True))
        p = gp.where(mask, gp.softmax(gp.where(mask, s, -np.inf), axis=-1), 0.0)  # a row with no visible key: zeros
        out[b] = gp.matmul(p, v).reshape(heads, tq, g, d).transpose(1, 0, 2, 3).reshape(tq, hq, d)
    return out.astype(q.dtype)


# -- CUDA kernel ---------------------------------------------------------------------------


def _jit(name: str, dependent: bool) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "decode_attn"),
        name,
        signature="const void* q, long long qb, long long qt, long long qh, void* out, const void* kc, const void* vc, const int* lengths, const int* table, "
        "const float* k_scale, const float* v_scale, float* part, int* counters, int Hq, int Hkv, int Tq, int chunks, int splits, "
        "int cap, int block_shift, int table_width, int window, float qk_scale",
        name="decode_attn.cu",
        dependent_launch=dependent,
    )


@functools.cache
def _kernel(t: str, kt: str, d: int, rows: int, paged: bool, warps: int, keys: int, stages: int, blocks: int) -> ext.Kernel:
    """The CUDA-core kernel. Over an fp8 cache it is not a dependent launch: the next kernel's blocks, started
    early beside it, slowed it by half at 8k-32k keys on an H100 (32k: 44 -> 66 us)."""
    name = f"pgk::decode_attn<{t}, {kt}, {d}, {rows}, {'true' if paged else 'false'}, {warps}, {keys}, {stages}, {blocks}>"
    return _jit(name, dependent=kt != CTYPES[F8])


@functools.cache
def _tc_kernel(t: str, kt: str, d: int, paged: bool, warps: int, stages: int, blocks: int, prefetch: int) -> ext.Kernel:
    """The tensor-core kernel (a cache of q's dtype or fp8); a dependent launch with any cache (fp8: 5-10% faster at
    1k-32k keys, `..._nn-decode-fp8-tensor-cores.json`)."""
    return _jit(f"pgk::decode_attn_tc<{t}, {kt}, {d}, {'true' if paged else 'false'}, {warps}, {stages}, {blocks}, {prefetch}>", True)


def tensor_cores(head_dim: int) -> bool:
    """Whether decode runs on the tensor-core kernel: head_dim a multiple of 16 up to 128 (any cache dtype)."""
    return head_dim % 16 == 0 and head_dim <= 128


class Knobs(NamedTuple):
    """The launch knobs of the kernel that serves a cache: rows per block at most, warps per block, ring stages,
    blocks per SM, keys a block reads per step (STEP in decode_attn.cu) and a split's steps at least."""

    rows_max: int
    warps: int
    stages: int
    blocks: int
    step: int
    min_steps: int


def knobs(head_dim: int, fp8: bool, keys: int) -> Knobs:
    """The knobs for a cache of ``head_dim`` (fp8 or not) read over ``keys`` keys."""
    if tensor_cores(head_dim):
        if keys >= TC_LONG_KEYS:
            return Knobs(TC_ROWS, TC_LONG_WARPS, TC_LONG_STAGES, TC_LONG_BLOCKS_PER_SM, TC_LONG_WARPS * 16, TC_MIN_SPLIT_STEPS)
        steps = 1 if keys >= TC_MID_KEYS else TC_MIN_SPLIT_STEPS
        return Knobs(TC_ROWS, TC_WARPS, TC_STAGES, TC_BLOCKS_PER_SM, TC_WARPS * 16, steps)
    lanes = 8 if head_dim // 8 <= 8 else (16 if head_dim // 8 <= 16 else 32)
    return Knobs(ROWS_MAX, WARPS, STAGES, BLOCKS_PER_SM, WARPS * (32 // lanes) * _keys_per_step(fp8), MIN_SPLIT_STEPS)


def _keys_per_step(fp8: bool) -> int:
    """Keys a lane group of the CUDA-core kernel reads per step (KPL in decode_attn.cu): STAGE_BYTES of K and V,
    16 bytes of a key per lane (8 fp8)."""
    return max(1, STAGE_BYTES // (16 if fp8 else 32))


def _smem(head_dim: int, fp8: bool, kn: Knobs, rows: int) -> int:
    """Dynamic shared memory bytes: the K / V ring, reused by the warps' merge (DecodeWarpParts in decode_attn.cu:
    each warp's rows' accumulators, padded by 4 floats, and their m and l)."""
    if tensor_cores(head_dim):  # per warp [stages][K, V][16 keys][head_dim + 8] (padded rows); fp8: [head_dim] bytes, + staging
        padded = 2 * 16 * (head_dim + 8) * 2
        ring = kn.warps * (kn.stages * 2 * 16 * head_dim + padded if fp8 else kn.stages * padded)
    else:
        ring = kn.stages * _keys_per_step(fp8) * 2 * (8 if fp8 else 16) * kn.warps * 32
    return max(ring, 4 * kn.warps * rows * (head_dim + 6))


def launch_shape(batch: int, heads: int, q_heads: int, tokens: int, keys: int, kn: Knobs, sms: int) -> tuple[int, int, int]:
    """(chunks, rows per block, splits): the G * Tq query rows of a KV head in
    chunks of at most ``kn.rows_max``, and as many splits of the ``keys`` (the
    longest visible range) as fill the SMs ``kn.blocks`` times in one wave (a
    block more would wait for a second one), each at least ``kn.min_steps``
    steps of ``kn.step`` keys long; none where the keys make fewer than
    MIN_SPLITS such splits."""
    r = q_heads // heads * tokens
    chunks = -(-r // kn.rows_max)
    rows = -(-r // chunks)
    want = kn.blocks * sms // (batch * heads * chunks)
    most = -(-keys // (kn.min_steps * kn.step))
    return chunks, rows, max(1, min(want, most, MAX_SPLITS)) if most >= MIN_SPLITS else 1


@dataclass(frozen=True, slots=True)
class _Plan:
    launch: ext.Launch  # grid (splits * chunks, KV heads, batch)
    splits: int
    part: int  # floats of the splits' partial results (0: unsplit)
    counters: int  # split counters the launch uses
    q_strides: tuple[int, int, int] | None  # q's element strides (None: the kernel reads a copy of q)
    ints: tuple[int, ...]  # Hq, Hkv, Tq, chunks, splits, cap, block_shift, table_width, window
    qk_scale: float


# Launches planned by call signature (the keys' power of two among it: the splits follow it).
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.decode_attn")
# Split counters per stream (zero between launches: the last block of each group resets its own).
_counters: dict[int, gp.GPUArray] = {}


def _plan(q: Any, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, max_len: Any, scale: Any,
          window: Any, keys: int) -> _Plan:  # fmt: skip
    lay, tq, hq, sc, win = _check_decode(q, k_cache, v_cache, lengths, block_table, k_scale, v_scale, max_len, scale, window)
    kn = knobs(lay.head_dim, lay.fp8, keys)
    chunks, rows, splits = launch_shape(lay.batch, lay.heads, hq, tq, keys, kn, ext.device().multiprocessor_count)
    if tensor_cores(lay.head_dim):  # its blocks hold 16 rows (a chunk's padding rows masked)
        rows = TC_ROWS
        pf = 0 if lay.paged else TC_PREFETCH
        kern = _tc_kernel(CTYPES[q.dtype], CTYPES[k_cache.dtype], lay.head_dim, lay.paged, kn.warps, kn.stages, kn.blocks, pf)
    else:
        kt = CTYPES[k_cache.dtype]
        kern = _kernel(CTYPES[q.dtype], kt, lay.head_dim, rows, lay.paged, kn.warps, _keys_per_step(lay.fp8), kn.stages, kn.blocks)
    launch = kern.launcher((splits * chunks, lay.heads, lay.batch), kn.warps * 32, _smem(lay.head_dim, lay.fp8, kn, rows))
    part = 0 if splits == 1 else lay.batch * tq * hq * splits * (lay.head_dim + 2)
    ints = (hq, lay.heads, tq, chunks, splits, lay.cap, lay.block_shift, lay.table_width, win)
    return _Plan(launch, splits, part, lay.batch * lay.heads * chunks, token_strides(q), ints, sc * _LOG2E)


def kernel_decode_attention(q: Any, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any,
                            max_len: Any = None, scale: Any = None, window: Any = None) -> gp.GPUArray:  # fmt: skip
    if max_len is None:
        n = int(lengths.to_numpy().max(initial=0))  # a synchronization: the cache objects pass their host mirror's
    elif isinstance(max_len, (int, np.integer)) and not isinstance(max_len, bool) and max_len >= 0:
        n = int(max_len)
    else:
        _check_decode(q, k_cache, v_cache, lengths, block_table, k_scale, v_scale, max_len, scale, window)  # raises
    if window is not None and not isinstance(window, bool) and isinstance(window, (int, np.integer)) and window > 0:
        n = min(n, window + q.shape[1] - 1)
    keys = 1 << max(n - 1, 0).bit_length()  # plans by the power of two above: splits stay put as sequences grow
    # the predicate checked the cache arrays' contiguity and alignment each call; q's layout is part of the key
    key = (ext.layout_key(q), k_cache.shape, k_cache.dtype, v_cache.shape, v_cache.dtype, lengths.shape, lengths.dtype, sig(block_table),
           sig(k_scale), sig(v_scale), scale, window, keys)  # fmt: skip
    plan = _plans.get(key) or _plans.put(key, _plan(q, k_cache, v_cache, lengths, block_table, k_scale, v_scale, max_len, scale, window,
                                                    keys))  # fmt: skip
    qst = plan.q_strides
    if qst is None:  # a layout the kernel does not read as it is
        q = q.copy()
        qst = token_strides(q)
    out = ext.empty(q.shape, q.dtype)
    part = counters = None
    if plan.splits > 1:
        stream = ext.current_stream()
        part = ext.empty((plan.part,), F32, stream)
        counters = _counters.get(stream)
        if counters is None or counters.size < plan.counters:
            counters = _counters[stream] = gp.zeros((max(plan.counters, 1024),), gp.int32)
    plan.launch(q, *qst, out, k_cache, v_cache, lengths, block_table, k_scale, v_scale, part, counters, *plan.ints, plan.qk_scale)
    return out


def _decode_applies(q: Any, k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, *rest: Any) -> bool:
    """The kernel: bf16 / fp16 q over a cache of its dtype or fp8, contiguous cache arrays, a head_dim it is built for."""
    return (
        q.dtype in _HALF and cache_arrays_ok(k_cache, v_cache, lengths, block_table) and k_cache.dtype in (q.dtype, F8)
        and q.ndim == 4 and q.shape[-1] in HEAD_DIMS
    )  # fmt: skip


def register(registry: Any) -> None:
    ext.register_family(registry, "decode_attention", nkey=1, doc=OP_DOC, reference=reference_decode_attention,
                        cuda=kernel_decode_attention, dtypes=["float16", "bfloat16"], min_sm=80, priority=10,
                        predicate=_decode_applies)  # fmt: skip
