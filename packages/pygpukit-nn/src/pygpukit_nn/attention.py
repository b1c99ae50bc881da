"""Scaled dot-product attention (op ``sdpa``): ``softmax(scale * q k^T + mask) v``
for prefill, with causal, sliding-window and key-padding masks folded in, and
grouped-query heads (GQA / MQA).

Layouts: q (B, Hq, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv) as
torch's ``scaled_dot_product_attention`` (``layout="bhsd"``), or (B, S, H, D)
(``layout="bshd"``, the output of a projection reshaped per head); any
strided views, no copy needed. Query head h reads KV head h // (Hq / Hkv).

Masks combine (a key is visible only if every mask allows it):
  - ``causal``: aligned to the bottom right, query i sees keys j <= i + Sk - Sq
    (a prefill after a cached prefix; torch's ``is_causal`` when Sq == Sk);
  - ``window=(left, right)``: query i (at position i + Sk - Sq) sees keys
    within ``left`` before and ``right`` after it, -1 or None for no limit on
    that side (flash-attn's ``window_size``; Mistral's w-token window is
    (w - 1, 0));
  - ``kv_lens`` (B,): sequence b has keys [0, kv_lens[b]) (right padding;
    values clamped to [0, Sk]); padding keys and values are never read, so
    they may hold anything;
  - ``mask``: boolean (True = attend) or additive float, broadcastable to
    (B, Hq, Sq, Sk).
A query that sees no key gets zeros (torch gives NaN).

The CUDA kernel (kernels/flash_attn.cu, FlashAttention-2 style on tensor
cores; on SM 90 kernels/flash_attn_wgmma.cu, FlashAttention-3 style on
warpgroup MMA, warp-specialized, for head_dim in WGMMA_DIMS) serves bfloat16 / float16 with
head_dim in HEAD_DIMS, a positive scale and no ``mask`` argument; everything else (float32, float64, other
head dims, explicit masks) goes to the reference: an exact softmax in float32
(float64 for float64), a block of queries at a time so memory stays bounded.
The kernel's softmax is online in float32 (base 2, ex2.approx) and P is
rounded to the input dtype before P V, as in flash-attn; each run is
deterministic (no atomics, fixed reduction order).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .checks import AttentionArgs, check_attention

HALF = (np.dtype(gp.bfloat16), np.dtype(gp.float16))
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half"}
HEAD_DIMS = (32, 64, 80, 96, 128)  # head dims the kernel is instantiated for
REF_SCORES = 1 << 24  # scores (B * Hq * queries * Sk) per block of the reference
_LOG2E = 1.4426950408889634

OP_DOC = """sdpa(q, k, v, mask, causal, scale, window, kv_lens, layout): attention
softmax(scale * q k^T + mask) v of q (B, Hq, Sq, D) over k (B, Hkv, Sk, D) and
v (B, Hkv, Sk, Dv) (or (B, S, H, D) each for layout "bshd"); see
pygpukit_nn.attention.scaled_dot_product_attention."""


# -- public API ----------------------------------------------------------------------


def scaled_dot_product_attention(
    q: gp.GPUArray,
    k: gp.GPUArray,
    v: gp.GPUArray,
    mask: gp.GPUArray | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    kv_lens: gp.GPUArray | None = None,
    layout: str = "bhsd",
) -> gp.GPUArray:
    """Attention ``softmax(scale * q @ k^T + mask) @ v``.

    q is (B, Hq, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv), Hq a multiple
    of Hkv (GQA; Hkv = 1 is MQA); with ``layout="bshd"`` each is (B, S, H, D)
    instead. Returns (B, Hq, Sq, Dv) (``"bshd"``: (B, Sq, Hq, Dv)) in q's dtype.

    ``mask``: boolean (True = attend) or additive float, broadcastable to
    (B, Hq, Sq, Sk). ``causal``: query i sees keys j <= i + Sk - Sq (aligned to
    the bottom right). ``scale``: default 1 / sqrt(D). ``window=(left, right)``:
    query i sees keys j with i + Sk - Sq - left <= j <= i + Sk - Sq + right, -1
    or None meaning no limit on that side. ``kv_lens`` (B,) integers: sequence
    b has only its first kv_lens[b] keys (clamped to [0, Sk]). A query that
    sees no key gets zeros.
    """
    return ext.op("sdpa")(q, k, v, mask, causal, scale, window, kv_lens, layout)


# -- reference (any backend, any float dtype) -----------------------------------------


def _bshd_out(out: gp.GPUArray, a: AttentionArgs) -> gp.GPUArray:
    return gp.ascontiguousarray(out.swapaxes(1, 2)) if a.bshd else out


def reference(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None, window: Any = None,
              kv_lens: Any = None, layout: Any = "bhsd") -> gp.GPUArray:  # fmt: skip
    """Exact attention: scores and softmax in float32 (float64 for float64),
    a block of queries at a time (about REF_SCORES scores each)."""
    a = check_attention(q, k, v, mask, causal, scale, window, kv_lens, layout)
    q, k, v = a.q, a.k, a.v
    b, hq, sq, d = q.shape
    hkv, sk, dv = k.shape[1], k.shape[2], v.shape[3]
    g = hq // hkv
    out = gp.zeros((b, hq, sq, dv), q.dtype)
    if out.size == 0 or sk == 0:
        return _bshd_out(out, a)
    cdt = ext.compute_dtype(q.dtype)
    kt = gp.ascontiguousarray(k.astype(cdt).swapaxes(-1, -2))  # (B, Hkv, D, Sk)
    vv = v.astype(cdt)
    cols = gp.arange(sk).reshape(1, sk)
    key_ok = None
    if a.kv_lens is not None:
        key_ok = cols.reshape(1, 1, 1, sk) < a.kv_lens.astype(gp.int64).reshape(b, 1, 1, 1)
        vv = gp.where(key_ok.reshape(b, 1, sk, 1), vv, 0)  # padding values may be NaN: 0 * NaN must not leak
    off = sk - sq
    step = max(1, min(sq, REF_SCORES // (b * hq * sk)))
    for s0 in range(0, sq, step):
        s1 = min(sq, s0 + step)
        c = s1 - s0
        qc = q[:, :, s0:s1].astype(cdt).reshape(b, hkv, g * c, d)  # head h = kv head h // g, row (h % g, query)
        s = (gp.matmul(qc, kt) * a.scale).reshape(b, hq, c, sk)
        rows = gp.arange(s0 + off, s1 + off).reshape(c, 1)  # each query's position among the keys
        vis = key_ok
        if a.right is not None:
            vis = _and(vis, cols <= rows + a.right)
        if a.left is not None:
            vis = _and(vis, cols >= rows - a.left)
        if a.mask is not None:
            mc = a.mask[:, :, s0:s1] if a.mask.shape[2] != 1 else a.mask
            if mc.dtype == np.bool_:
                vis = _and(vis, mc)
            else:
                s = s + mc.astype(cdt)
        if vis is not None:
            s = gp.where(vis, s, -np.inf)
        m = gp.max(s, axis=-1, keepdims=True)
        e = gp.exp(s - gp.where(gp.isfinite(m), m, 0))  # a row with no visible key: m = -inf, e = 0
        total = gp.sum(e, axis=-1, keepdims=True)
        p = e / gp.where(total > 0, total, 1)
        o = gp.matmul(p.reshape(b, hkv, g * c, sk), vv).reshape(b, hq, c, dv)
        out[:, :, s0:s1] = o.astype(q.dtype)
    return _bshd_out(out, a)


def _and(a: gp.GPUArray | None, b: gp.GPUArray) -> gp.GPUArray:
    return b if a is None else a & b


# -- CUDA kernel -----------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """A tile config of flash_fwd: ``mt`` 16-row tiles per warp, ``warps`` warps
    (BM = 16 * mt * warps query rows per block), ``bn`` keys per K/V tile; with
    ``wgmma``, of flash_fwd_wgmma (SM 90): warpgroups of 4 warps, 64 rows each;
    with ``ws`` too, of flash_fwd_ws: one producer warpgroup (no rows) and a
    ring of K/V stages (``ring``)."""

    mt: int
    warps: int
    bn: int
    throughput: float  # relative rate per resident block (estimated; see CONFIGS)
    wgmma: bool = False
    ws: bool = False

    @property
    def bm(self) -> int:
        return 16 * self.mt * (self.warps - 4 if self.ws else self.warps)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def name(self) -> str:
        return f"{'wgmma_ws' if self.ws else 'wgmma' if self.wgmma else ''}{self.bm}x{self.bn}"

    @property
    def regs(self) -> int:
        """Registers per thread at launch: flash_fwd_ws is compiled to 168 (384
        threads, one block per SM; setmaxnreg moves them to the consumers)."""
        return 168 if self.ws else MAX_REGS

    def ring(self, d: int) -> int:
        """K/V stages of flash_fwd_ws: 3 at head_dim 128 (what fits), 4 below."""
        return 3 if d > 64 else 4

    def smem(self, d: int) -> int:
        """Bytes of shared memory: Q, two K and two V tiles, of rows padded to
        d + 8 (swizzled instead, unpadded, for wgmma); flash_fwd_ws: Q, ``ring``
        K and V tiles and two 8-byte mbarriers per stage."""
        if self.ws:
            return (self.bm + 2 * self.ring(d) * self.bn) * d * 2 + 16 * self.ring(d)
        return (self.bm + 4 * self.bn) * (d if self.wgmma else d + 8) * 2


# 128 query rows per block (each warp reads K and V once for 32 rows: half
# the shared-memory traffic per FLOP of 16 rows per warp), and 64 rows for
# few blocks, where finer tiles balance a causal grid better. The 0.8 is an
# estimate from that traffic, to be replaced by a measurement.
CONFIGS = (Config(2, 4, 64, 1.0), Config(1, 4, 64, 0.8))
# SM 90: two warpgroups (128 rows), 128-key tiles, one block per SM (~250
# registers per thread). 2.8 per block = 1.4x the two 128x64 blocks of an SM
# (the estimate: ~450 vs ~320 TFLOP/s), to be replaced by a measurement.
# flash_fwd_ws (warp-specialized, intra-warpgroup overlap and ping-pong of
# the two consumers): 3.6 = an estimated ~1.3x flash_fwd_wgmma (~520 vs ~400
# TFLOP/s), so it is preferred wherever both fit; to be replaced by a measurement.
WGMMA_CONFIGS = (Config(1, 12, 128, 3.6, wgmma=True, ws=True), Config(1, 8, 128, 2.8, wgmma=True))
WGMMA_DIMS = (64, 128)  # head dims flash_fwd_wgmma is instantiated for
REGS_PER_SM = 65536
MAX_REGS = 256  # the kernels use up to 255 registers per thread


def blocks_per_sm(cfg: Config, d: int, smem_optin: int) -> int:
    """Resident blocks per SM: bounded by registers and shared memory (the
    per-SM pool is the per-block opt-in limit plus 1 KiB, with 1 KiB reserved per block)."""
    return min(REGS_PER_SM // (cfg.regs * cfg.threads), (smem_optin + 1024) // (cfg.smem(d) + 1024))


def key_tiles(cfg: Config, sq: int, sk: int, left: int, right: int) -> list[int]:
    """Key tiles each query tile of the grid visits (the kernel's [lo, hi) rule, every key present)."""
    off, out = sk - sq, []
    for m0 in range(0, sq, cfg.bm):
        lo = max(m0 + off - left, 0)
        hi = min(min(m0 + cfg.bm, sq) - 1 + off + right + 1, sk)
        out.append(-(-hi // cfg.bn) - lo // cfg.bn if hi > lo else 0)
    return out


@functools.lru_cache(maxsize=4096)
def choose(d: int, bh: int, sq: int, sk: int, left: int, right: int, sms: int, smem_optin: int,
           sm90: bool = False) -> Config | None:  # fmt: skip
    """The config with the least estimated time: max(longest block, total work
    / resident blocks), in units of BM x BN tiles over the config's throughput
    (blocks are issued longest first, so the longest ones do not trail); None
    when none fits the shared memory. The wgmma configs compete on SM 90
    (``sm90``) for head_dim in WGMMA_DIMS. ``PYGPUKIT_ATTN_CONFIG`` (e.g.
    ``64x64``, ``wgmma128x128``, ``wgmma_ws128x128``) forces one."""
    pool = CONFIGS + (WGMMA_CONFIGS if sm90 and d in WGMMA_DIMS else ())
    fits = [c for c in pool if c.smem(d) <= smem_optin]
    forced = os.environ.get("PYGPUKIT_ATTN_CONFIG")
    if not fits:
        return None
    if forced:
        for c in fits:
            if c.name == forced:
                return c
        raise ValueError(f"PYGPUKIT_ATTN_CONFIG={forced!r} is not one of {', '.join(c.name for c in fits)} for head_dim {d} here")

    def cost(c: Config) -> float:
        tiles = key_tiles(c, sq, sk, left, right)
        unit = c.bm * c.bn / c.throughput
        return max(max(tiles), bh * sum(tiles) / (sms * blocks_per_sm(c, d, smem_optin))) * unit

    return min(fits, key=cost)


_SIGNATURE = (
    "const void* Q, const void* K, const void* V, void* O, const void* kv_lens, int Hq, int group, int Sq, int Sk, "
    "long long qb, long long qh, int qs, long long kb, long long kh, int ks, long long vb, long long vh, int vs, "
    "long long ob, long long oh, int os, float scale_log2, int left, int right"
)


@functools.cache
def _kernel(d: int, cfg: Config, ctype: str) -> Any:
    if cfg.ws:  # sm_90a: runs on SM 90 only
        return ext.Kernel(
            ext.kernel_source(__name__, "flash_attn_wgmma"),
            f"pgk::attn::flash_fwd_ws<{d}, {cfg.bn}, {cfg.ring(d)}, {ctype}>",
            signature=_SIGNATURE,
            name="flash_attn_wgmma.cu",
            arch_suffix="a",
        )
    if cfg.wgmma:  # sm_90a too
        return ext.Kernel(
            ext.kernel_source(__name__, "flash_attn_wgmma"),
            f"pgk::attn::flash_fwd_wgmma<{d}, {cfg.warps // 4}, {cfg.bn}, {ctype}>",
            signature=_SIGNATURE,
            name="flash_attn_wgmma.cu",
            arch_suffix="a",
        )
    return ext.Kernel(
        ext.kernel_source(__name__, "flash_attn"),
        f"pgk::attn::flash_fwd<{d}, {cfg.mt}, {cfg.warps}, {cfg.bn}, {ctype}>",
        signature=_SIGNATURE,
        name="flash_attn.cu",
    )


def _strides(x: gp.GPUArray) -> tuple[int, ...]:
    """Element strides of x, 0 along axes of length 1 (never stepped)."""
    return tuple(s // x.itemsize if n > 1 else 0 for s, n in zip(x.strides, x.shape))


def _operand(x: gp.GPUArray) -> gp.GPUArray:
    """x (B, H, S, D) as the kernel reads it: unit stride along D, 16-byte
    aligned rows (base and strides multiples of 8 elements), a seq stride
    whose multiples within a tile fit an int; else a contiguous copy."""
    st = _strides(x)
    if x.data_ptr % 16 == 0 and x.strides[3] == x.itemsize and all(s % 8 == 0 for s in st[:3]) and abs(st[2]) < 2**24:
        return x
    return gp.ascontiguousarray(x)


@dataclass(frozen=True, slots=True)
class _Plan:
    """A planned flash_fwd launch, its output's shape and the kernel's scalar arguments."""

    launch: ext.Launch
    out_shape: tuple[int, ...]
    scalars: tuple[int | float, ...]


# Launches planned by call signature. Only calls that needed no copy are
# planned, so a hit launches straight away.
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.attention")


def _launch(plan: _Plan, q: Any, k: Any, v: Any, kv_lens: Any) -> gp.GPUArray:
    out = ext.empty(plan.out_shape, q.dtype)
    plan.launch(q, k, v, out, kv_lens, *plan.scalars)
    return out


def _plan_key(q: Any, k: Any, v: Any, causal: Any, scale: Any, window: Any, kv_lens: Any, layout: Any) -> tuple:
    """What a plan depends on; kv_lens's address does not matter (align 1)."""
    return (ext.layout_key(q), ext.layout_key(k), ext.layout_key(v), causal, scale, None if window is None else tuple(window),
            ext.layout_key(kv_lens, 1), layout)  # fmt: skip


def kernel(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None, window: Any = None,
           kv_lens: Any = None, layout: Any = "bhsd") -> gp.GPUArray:  # fmt: skip
    """The flash_fwd kernel (see ``kernel_applies`` for when it serves)."""
    try:
        key = _plan_key(q, k, v, causal, scale, window, kv_lens, layout)
        plan = _plans.get(key)
    except (AttributeError, TypeError):  # not arrays, or an unhashable argument: checked below
        key = plan = None
    if plan is not None:
        return _launch(plan, q, k, v, kv_lens)
    if not kernel_applies(q, k, v, mask, causal, scale, window, kv_lens, layout):  # called directly, or routed here
        return reference(q, k, v, mask, causal, scale, window, kv_lens, layout)
    a = check_attention(q, k, v, mask, causal, scale, window, kv_lens, layout)
    b, hq, sq, d = a.q.shape
    hkv, sk = a.k.shape[1], a.k.shape[2]
    out_shape = (b, sq, hq, d) if a.bshd else (b, hq, sq, d)
    if b * hq * sq == 0 or sk == 0:
        return gp.zeros(out_shape, q.dtype)
    dev = ext.device()
    unbounded = sq + sk  # beyond any query-key distance; keeps the kernel's sums in int range
    left = unbounded if a.left is None else min(a.left, unbounded)
    right = unbounded if a.right is None else min(a.right, unbounded)
    smem_optin = dev.properties["max_shared_memory_per_block_optin"]
    cfg = choose(d, b * hq, sq, sk, left, right, dev.multiprocessor_count, smem_optin, dev.sm == 90)
    if cfg is None or -(-sq // cfg.bm) > 65535 or 2 * unbounded + cfg.bm >= 2**31:  # the grid's y limit, int positions
        return reference(q, k, v, mask, causal, scale, window, kv_lens, layout)
    tiles = -(-sq // cfg.bm)
    qv, kv, vv = (_operand(x) for x in (a.q, a.k, a.v))
    lens = a.kv_lens
    if lens is not None and (lens.dtype != np.int32 or not lens.is_contiguous):
        lens = gp.ascontiguousarray(gp.clip(lens, 0, sk).astype(gp.int32))
    ob, os_, oh = (sq * hq * d, hq * d, d) if a.bshd else (hq * sq * d, d, sq * d)
    (qb, qh, qs), (kb, kh, ks), (vb, vh, vs) = (_strides(x)[:3] for x in (qv, kv, vv))
    scalars = (hq, hq // hkv, sq, sk, qb, qh, qs, kb, kh, ks, vb, vh, vs, ob, oh, os_, a.scale * _LOG2E, left, right)
    launch = _kernel(d, cfg, _CTYPES[q.dtype]).launcher((b * hq, tiles), cfg.threads, cfg.smem(d))
    plan = _Plan(launch, out_shape, scalars)
    if key is not None and qv is a.q and kv is a.k and vv is a.v and lens is a.kv_lens:
        _plans.put(key, plan)
    return _launch(plan, qv, kv, vv, lens)


def kernel_applies(q: Any, k: Any, v: Any, mask: Any = None, causal: Any = False, scale: Any = None, window: Any = None,
                   kv_lens: Any = None, layout: Any = "bhsd") -> bool:  # fmt: skip
    """Predicate of the kernel: bfloat16 / float16 q, k, v of one dtype, one
    head_dim in HEAD_DIMS, no explicit mask, a positive scale (or None)."""
    return (
        mask is None
        and all(isinstance(x, gp.GPUArray) and x.ndim == 4 for x in (q, k, v))
        and q.dtype in HALF
        and k.dtype == q.dtype
        and v.dtype == q.dtype
        and q.shape[-1] in HEAD_DIMS
        and k.shape[-1] == q.shape[-1]
        and v.shape[-1] == q.shape[-1]
        and (scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool) and 0 < scale < math.inf))
    )


def register(registry: Any) -> None:
    ext.register_family(
        registry, "sdpa", nkey=3, doc=OP_DOC, reference=reference, cuda=kernel, dtypes=["float16", "bfloat16"], min_sm=80,
        predicate=kernel_applies,
    )  # fmt: skip
