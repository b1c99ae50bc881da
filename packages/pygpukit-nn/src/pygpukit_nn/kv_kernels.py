"""The CUDA kernels of the KV-cache ops (kernels/kv_cache.cu): kv_append (and
kv_advance after an append of several tiles a sequence), kv_append_rope and
kv_gather, each launch planned once per call signature, with the predicates
that say which calls they take."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .kv_layout import CTYPES, F8, F32, STORE, Layout, cache_arrays_ok, check_cache, check_tokens, sig, token_strides
from .kv_ops import check_gather, reference_kv_append_rope

APPEND_TILE_ITEMS = 4096  # 8-element items per sequence up to which one block appends (and advances the length itself)
ROPE_APPEND_TOKENS = 8  # decode's tokens at most: one block a sequence


def _b(flag: bool) -> str:
    return "true" if flag else "false"


@functools.cache
def _append_kernel(ti: str, kt: str, paged: bool, advance: bool) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "kv_cache"),
        f"pgk::kv_append<{ti}, {kt}, {_b(paged)}, {_b(advance)}>",
        signature="const void* k, const void* v, long long kb, long long kt, long long kh, long long vb, long long vt, long long vh, "
        "void* kc, void* vc, int* lengths, const int* counts, const int* table, const float* k_scale, const float* v_scale, "
        "int T, int Hkv, int D, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
        dependent_launch=True,
    )


@functools.cache
def _advance_kernel() -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "kv_cache"),
        "pgk::kv_advance",
        signature="int* lengths, const int* counts, int T, int B",
        name="kv_cache.cu",
        dependent_launch=True,
    )


@functools.cache
def _append_rope_kernel(ti: str, paged: bool, gptj: bool) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "kv_cache"),
        f"pgk::kv_append_rope<{ti}, {_b(paged)}, {_b(gptj)}>",
        signature="void* q, const void* k, const void* v, long long qb, long long qt, long long qh, long long kb, long long kt, "
        "long long kh, long long vb, long long vt, long long vh, const float* cs, const void* pos, long long pb, long long ps, "
        "int pos64, int half, int max_pos, void* kc, void* vc, int* lengths, const int* counts, const int* table, int T, int Hq, "
        "int Hkv, int D, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
        dependent_launch=True,
    )


@functools.cache
def _gather_kernel(kt: str, to: str, paged: bool) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "kv_cache"),
        f"pgk::kv_gather<{kt}, {to}, {_b(paged)}>",
        signature="const void* kc, const void* vc, void* ko, void* vo, const int* lengths, const int* table, const float* k_scale, "
        "const float* v_scale, int B, int Hkv, int D, int S, int cap, int block_shift, int table_width",
        name="kv_cache.cu",
    )


# -- kv_append -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AppendPlan:
    append: ext.Launch  # grid (tiles, B)
    advance: ext.Launch | None  # the lengths' advance when a sequence takes several tiles (else the append block's)
    advance_ints: tuple[int, int]  # T, B
    k_strides: tuple[int, int, int] | None  # element strides (batch, token, head); None: the kernel reads a copy
    v_strides: tuple[int, int, int] | None
    ints: tuple[int, ...]  # T, Hkv, D, cap, block_shift, table_width


_append_plans: ext.PlanCache[tuple, _AppendPlan] = ext.PlanCache("pygpukit_nn.kv_kernels.append")


def _plan_append(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any,
                 v_scale: Any) -> _AppendPlan:  # fmt: skip
    lay = check_cache("kv_append", k_cache, v_cache, lengths, block_table, k_scale, v_scale)
    t = check_tokens("kv_append", k, v, counts, lay)
    items = t * lay.heads * (lay.head_dim // 8)
    tiles = max(1, -(-items // APPEND_TILE_ITEMS))
    threads = 256 if items > 128 else 128
    append = _append_kernel(CTYPES[k.dtype], CTYPES[k_cache.dtype], lay.paged, tiles == 1).launcher((tiles, lay.batch), threads)
    # kv_advance is a dependent launch too: both wait for what came before
    advance = None if tiles == 1 else _advance_kernel().launcher(-(-lay.batch // 256), 256)
    ints = (t, lay.heads, lay.head_dim, lay.cap, lay.block_shift, lay.table_width)
    return _AppendPlan(append, advance, (t, lay.batch), token_strides(k), token_strides(v), ints)


def kernel_kv_append(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, k_scale: Any, v_scale: Any):
    # the predicate checked the caches' contiguity and alignment; k and v's layout is part of the key
    key = (ext.layout_key(k), ext.layout_key(v), k_cache.shape, k_cache.dtype, v_cache.shape, v_cache.dtype, lengths.shape,
           lengths.dtype, sig(counts), sig(block_table), sig(k_scale), sig(v_scale))  # fmt: skip
    plan = _append_plans.get(key) or _append_plans.put(key, _plan_append(k, v, k_cache, v_cache, lengths, counts, block_table, k_scale,
                                                                         v_scale))  # fmt: skip
    ks, vs = plan.k_strides, plan.v_strides
    if ks is None:
        k = k.copy()
        ks = token_strides(k)
    if vs is None:
        v = v.copy()
        vs = token_strides(v)
    plan.append(k, v, *ks, *vs, k_cache, v_cache, lengths, counts, block_table, k_scale, v_scale, *plan.ints)
    if plan.advance is not None:
        plan.advance(lengths, counts, *plan.advance_ints)


def append_applies(k: Any, v: Any, k_cache: Any, v_cache: Any, lengths: Any, counts: Any, block_table: Any, *rest: Any) -> bool:
    """kv_append's kernel: bf16 / fp16 / float32 tokens into a cache of their dtype or fp8."""
    return (
        isinstance(v, gp.GPUArray) and cache_arrays_ok(k_cache, v_cache, lengths, block_table)
        and k.dtype in STORE and v.dtype == k.dtype and k_cache.dtype in (k.dtype, F8)
        and (counts is None or (isinstance(counts, gp.GPUArray) and counts.is_contiguous))
    )  # fmt: skip


# -- kv_append_rope --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _AppendRopePlan:
    launch: ext.Launch  # grid (1, B)
    strides: tuple[int, ...]  # q's, k's and v's element strides (batch, token, head)
    rope: tuple[int, ...]  # the positions' element strides (batch, token), pos64, half, max_pos
    ints: tuple[int, ...]  # T, Hq, Hkv, D, cap, block_shift, table_width


# call signature -> the plan, or None where the kernel does not take these operands
_append_rope_plans: ext.PlanCache[tuple, _AppendRopePlan | None] = ext.PlanCache("pygpukit_nn.kv_kernels.append_rope")


def _plan_append_rope(q: Any, k: Any, v: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any, k_cache: Any, v_cache: Any,
                      lengths: Any, counts: Any, block_table: Any) -> _AppendRopePlan | None:  # fmt: skip
    """The launch when the kernel takes these operands as they are, else None."""
    if not (all(isinstance(a, gp.GPUArray) for a in (q, k, v, cos_sin, positions)) and append_applies(
            k, v, k_cache, v_cache, lengths, counts, block_table)):  # fmt: skip
        return None
    try:
        lay = check_cache("kv_append_rope", k_cache, v_cache, lengths, block_table, None, None)
        t = check_tokens("kv_append_rope", k, v, counts, lay)
    except (TypeError, ValueError):
        return None
    half = rotary_dim // 2 if type(rotary_dim) is int else 0
    qst, kst, vst = token_strides(q) if q.ndim == 4 else None, token_strides(k), token_strides(v)
    ok = (
        layout in ("neox", "gptj") and q.dtype == k.dtype == k_cache.dtype and q.ndim == 4 and q.shape[:2] == k.shape[:2]
        and q.shape[3] == lay.head_dim and 0 < half and half % 8 == 0 and 2 * half <= lay.head_dim and t <= ROPE_APPEND_TOKENS
        and None not in (qst, kst, vst) and cos_sin.dtype == F32 and cos_sin.ndim == 3 and cos_sin.shape[1:] == (2, half)
        and cos_sin.is_contiguous and positions.dtype in (np.dtype(np.int32), np.dtype(np.int64))
        and positions.shape in ((t,), (lay.batch, t)) and all(st % positions.itemsize == 0 for st in positions.strides)
    )  # fmt: skip
    if not ok:
        return None
    pis = positions.itemsize
    pst = [0 if n == 1 else st // pis for st, n in zip(positions.strides, positions.shape)]
    pb, ps = (0, pst[0]) if positions.ndim == 1 else pst
    items = t * (q.shape[2] * (2 * half if layout == "gptj" else half) // 8 + 2 * lay.heads * (lay.head_dim // 8))
    launch = _append_rope_kernel(CTYPES[k.dtype], lay.paged, layout == "gptj").launcher((1, lay.batch), 256 if items > 128 else 128)
    ints = (t, q.shape[2], lay.heads, lay.head_dim, lay.cap, lay.block_shift, lay.table_width)
    return _AppendRopePlan(launch, (*qst, *kst, *vst), (pb, ps, int(pis == 8), half, cos_sin.shape[0]), ints)


def _append_rope_plan(args: tuple) -> _AppendRopePlan | None:
    key = tuple(ext.layout_key(a) if isinstance(a, gp.GPUArray) else a for a in args)
    plan = _append_rope_plans.get(key)
    if plan is None and key not in _append_rope_plans:
        plan = _append_rope_plans.put(key, _plan_append_rope(*args))
    return plan


def append_rope_applies(*args: Any) -> bool:
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
    plan.launch(q, k, v, *plan.strides, cos_sin, positions, *plan.rope, k_cache, v_cache, lengths, counts, block_table, *plan.ints)


# -- kv_gather -------------------------------------------------------------------------

# (cache dtype, output dtype, paged, grid) -> the launch; the grid follows the output's size
_gather_launches: ext.PlanCache[tuple, ext.Launch] = ext.PlanCache("pygpukit_nn.kv_kernels.gather")


def kernel_kv_gather(
    k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None
):
    lay, s, out_dt = check_gather(k_cache, v_cache, lengths, block_table, k_scale, v_scale, length, dtype)
    ko = ext.empty((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    vo = ext.empty((lay.batch, lay.heads, s, lay.head_dim), out_dt)
    items = ko.size // 8
    if items:
        grid = min(-(-items // 256), 32 * ext.device().multiprocessor_count)
        key = (k_cache.dtype, out_dt, lay.paged, grid)
        launch = _gather_launches.get(key) or _gather_launches.put(key, _plan_gather(k_cache.dtype, out_dt, lay, grid))
        launch(k_cache, v_cache, ko, vo, lengths, block_table, k_scale, v_scale, lay.batch, lay.heads, lay.head_dim, s, lay.cap,
               lay.block_shift, lay.table_width)  # fmt: skip
    return ko, vo


def _plan_gather(kt: np.dtype, out_dt: np.dtype, lay: Layout, grid: int) -> ext.Launch:
    return _gather_kernel(CTYPES[kt], CTYPES[out_dt], lay.paged).launcher(grid, 256)


def gather_applies(k_cache: Any, v_cache: Any, lengths: Any, block_table: Any, k_scale: Any, v_scale: Any, length: Any, dtype: Any = None):
    """kv_gather's kernel: any cache dtype, out to bf16 / fp16 / float32."""
    try:
        out = k_cache.dtype if dtype is None else gp.result_type(dtype)
    except (TypeError, ValueError):
        return False
    return cache_arrays_ok(k_cache, v_cache, lengths, block_table) and out in STORE
