"""pygpukit-nn's decode attention at the issue's shape: one query token, batch
1, 32 query heads over 8 KV heads (GQA), head_dim 128, bfloat16, contexts
1024, 4096, 8192 and 32768; GB/s over the K and V bytes read (2 * Hkv * ctx
* D * 2) and microseconds per call, against torch SDPA (enable_gqa) on the
same contiguous cache in the same run. Also pygpukit's paged cache (blocks of
16 tokens, scattered through the pool) and fp8 cache (GB/s over its bytes).
The floor is the KV bytes over the copy rate (the bandwidth suite): at 8192,
33.5 MB, ~11.5 us at 2.9 TB/s. ``kv_read_floor_graph`` measures what any
kernel gets at these sizes in the same chain: a dependent kernel that only
streams the same bytes (16-byte loads, two blocks of 512 threads a SM),
replayed from a graph as the decode calls are: the launch, the wait for the
kernel before and the first DRAM latency are in it, the attention is not.
Calls rotate over as many layers as keep 4x the H100's 50 MB L2 busy, so
every call reads its cache from HBM, as a model's layers do. NumPy
(float32) on the CPU backend, at 1024 only."""

from __future__ import annotations

from collections.abc import Callable
from itertools import cycle

import numpy as np

import pygpukit as gp
from pygpukit import ext
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from ..decode_attn import decode_attention
from ..kv_cache import KVCache, PagedKVCache

HQ, HKV, D = 32, 8, 128
ROTATE_BYTES = 200 << 20  # bytes of cache the calls cycle over
GRAPH_CALLS = 32  # calls a graph replay holds at least

_READ_SRC = r"""
#include "pgk/pdl.cuh"
// Streams n16 16-byte words, a contiguous share a block; four loads a thread in flight.
extern "C" __global__ void __launch_bounds__(512) kv_read(const uint4* __restrict__ p, long long n16, unsigned* __restrict__ sink) {
  pgk::wait_prior_grids();
  pgk::allow_next_grids();
  const long long per = (n16 + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(lo + per, n16);
  unsigned acc = 0;
  long long i = lo + threadIdx.x;
  for (; i + 3 * 512 < hi; i += 4 * 512) {
    const uint4 a = __ldcs(p + i), b = __ldcs(p + i + 512), c = __ldcs(p + i + 1024), d = __ldcs(p + i + 1536);
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < hi; i += 512) acc ^= __ldcs(p + i).x;
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;  // (never, in practice) keeps the loads
}
"""


def _layers(kv_bytes: int) -> int:
    return max(1, -(-ROTATE_BYTES // kv_bytes))


def _numpy_decode(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q (Hq, D), k and v (Hkv, ctx, D), float32."""
    qg = q.reshape(HKV, HQ // HKV, D)
    s = np.einsum("hgd,hnd->hgn", qg, k) / np.sqrt(D)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.einsum("hgn,hnd->hgd", p / p.sum(axis=-1, keepdims=True), v).reshape(HQ, D)


def _cases(name: str, mod, ctx: int, rng) -> dict[str, tuple[Callable[[], object], int, int]]:
    """case -> (call, KV bytes read per call, decode steps per call)."""
    k = rng.standard_normal((1, ctx, HKV, D), dtype=np.float32)
    v = rng.standard_normal((1, ctx, HKV, D), dtype=np.float32)
    q = rng.standard_normal((1, 1, HQ, D), dtype=np.float32)
    bf16_bytes = 2 * HKV * ctx * D * 2
    if name == "pygpukit":
        gk, gv = gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16))
        gq = gp.from_numpy(q.astype(gp.bfloat16))
        n, nf = _layers(bf16_bytes), _layers(bf16_bytes // 2)
        flat = KVCache(1, ctx, HKV, D, gp.bfloat16, num_layers=n)
        paged = PagedKVCache(ctx // 16, 16, HKV, D, gp.bfloat16, batch=1, max_seq=ctx, num_layers=n)
        fp8 = KVCache(1, ctx, HKV, D, gp.bfloat16, num_layers=nf, kv_dtype="fp8_e4m3")
        for i in range(n):
            flat.append(gk, gv, layer=i)
            paged.append(gk, gv, layer=i)
        for i in range(nf):
            fp8.append(gk, gv, layer=i)
        # the sequence's blocks in a random order, as a long-running server's free list leaves them
        # (the same blocks, so the cache stays whole; only the order of its keys changes)
        paged.block_table[0] = gp.from_numpy(rng.permutation(ctx // 16).astype(np.int32))
        flat_layers, paged_layers, fp8_layers = cycle(range(n)), cycle(range(n)), cycle(range(nf))
        cases = {
            "decode_bf16": (lambda: decode_attention(gq, flat, next(flat_layers)), bf16_bytes, 1),
            "decode_paged16_bf16": (lambda: decode_attention(gq, paged, next(paged_layers)), bf16_bytes, 1),
            "decode_fp8": (lambda: decode_attention(gq, fp8, next(fp8_layers)), bf16_bytes // 2, 1),
        }
        if gp.backend() == "cuda":  # the reference reads lengths back: no graph on the CPU backend
            # The same calls replayed from a CUDA graph, cycling over the layers, at least
            # GRAPH_CALLS of them (a model's decode step holds a call per layer among its
            # other kernels, so a replay's own launch is spread over many): the device time
            # of a call without the host's per-call cost; per call = per replay / calls.
            calls = max(n, GRAPH_CALLS)
            with gp.graph() as g:
                for i in range(calls):
                    decode_attention(gq, flat, i % n)
            cases["decode_bf16_graph"] = (g.replay, bf16_bytes * calls, calls)
            read = gp.jit(_READ_SRC, "kv_read", dependent_launch=True)
            bufs = [gp.zeros((bf16_bytes // 4,), gp.uint32) for _ in range(n)]
            blocks = 2 * ext.device().multiprocessor_count
            sink = gp.zeros((blocks,), gp.uint32)
            with gp.graph() as g:
                for i in range(calls):
                    read((blocks,), (512,), bufs[i % n], bf16_bytes // 16, sink)
            cases["kv_read_floor_graph"] = (g.replay, bf16_bytes * calls, calls)
        return cases
    if name == "torch":
        sdpa = mod.nn.functional.scaled_dot_product_attention
        n = _layers(bf16_bytes)
        tk = mod.from_numpy(k).cuda().to(mod.bfloat16).transpose(1, 2).contiguous()  # (1, Hkv, ctx, D)
        tv = mod.from_numpy(v).cuda().to(mod.bfloat16).transpose(1, 2).contiguous()
        tq = mod.from_numpy(q).cuda().to(mod.bfloat16).transpose(1, 2)  # (1, Hq, 1, D)
        layers = [(tk.clone(), tv.clone()) for _ in range(n)]
        try:
            sdpa(tq, tk, tv, enable_gqa=True)
            gqa = True
        except TypeError:  # an older torch: K and V repeated to the query heads outside the timing
            layers = [(a.repeat_interleave(HQ // HKV, 1), b.repeat_interleave(HQ // HKV, 1)) for a, b in layers]
            gqa = False
        it = cycle(layers)

        def call():
            a, b = next(it)
            return sdpa(tq, a, b, enable_gqa=True) if gqa else sdpa(tq, a, b)

        return {"decode_bf16": (call, bf16_bytes, 1)}
    if name == "numpy":
        k32, v32 = k[0].transpose(1, 0, 2).copy(), v[0].transpose(1, 0, 2).copy()
        return {"decode_f32": (lambda: _numpy_decode(q[0, 0], k32, v32), 2 * bf16_bytes, 1)}
    return {}


def bench_nn_decode(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    contexts = ((1024, 8192) if quick else (1024, 4096, 8192, 32768)) if gpu else (1024,)
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    for name, timer, mod in impls():
        for ctx in contexts:
            for case, (fn, moved, steps) in _cases(name, mod, ctx, np.random.default_rng(11)).items():
                ms = median_time_ms(fn, timer, warm, reps)
                bench = f"{case}_gqa32x8_d128_ctx{ctx}"
                rec.add(bench, name, "GB/s", moved / ms / 1e6, True)
                rec.add(bench, name, "us", ms * 1e3 / steps, False)
            free(name, mod)
