"""Mixture of experts: router top-k, the permutation of tokens into expert
order and back, and a whole MoE MLP on pygpukit-gemm's grouped GEMM.

- ``router_topk(logits, k)``: logits (..., E) -> (weights (..., k) float32,
  expert ids (..., k) int32), the k largest first. The choice is made on the
  logits (softmax and sigmoid are monotonic; choosing on rounded
  probabilities could reorder near-ties): on equal values the lower expert
  id wins, NaN counts as the largest value, -0.0 equals +0.0 (``gp.topk``'s
  order). ``scoring="softmax"``: the softmax over all E logits (Mixtral,
  Qwen-MoE); ``"sigmoid"``: each logit's sigmoid (DeepSeek-V3 style, without
  its group limit or bias). ``renormalize=True`` divides the k weights by
  their sum (Mixtral; Qwen-MoE's ``norm_topk_prob``). Math in float32
  (float64 for float64 logits, whose weights are float64).
- ``permute(x, expert_ids, num_experts)``: x (T, D), ids (T, k) -> (x_sorted
  (T*k, D), offs (E,) int32, index_map (T*k,) int32). Rows are grouped by
  expert, and within an expert keep the order of the assignments (token, then
  slot): deterministic. ``offs[e]`` is the end of expert e's rows, the
  layout of ``gp.ops.grouped_linear``; ``index_map[r] = token * k + slot`` of
  row r. An id outside [0, E) (-1 for a dropped assignment, or an expert that
  lives on another GPU) is placed after every expert's rows, where
  ``grouped_linear`` writes zeros, so it adds nothing to ``unpermute``.
- ``unpermute(y_sorted, index_map, weights)``: (T, D) in y's dtype, each row
  the sum over its k slots, in slot order, of weight * row, in float32: no
  atomics, deterministic.
- ``moe_forward``: route -> permute -> grouped gate_up -> swiglu (or geglu) ->
  grouped down -> unpermute.

The CUDA kernels (kernels/moe.cu) never synchronize with the host: a warp
per token for the router (E <= 1024, k <= 32), and a counting sort for the
permutation (per-tile histograms, one scan, stable ranks, a row gather).
unpermute's kernel does not check the index map (that would synchronize); it
clamps the row indices, so a bad map gives wrong rows, never an access out of
bounds. The references (every backend, any float dtype) use core's topk,
argsort and take; unpermute's reads the index map back to check it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _kernels
from .activations import geglu, swiglu
from .checks import INT32_MAX, check_float, integer

INDEX = (np.dtype(gp.int32), np.dtype(gp.int64))
_F32 = np.dtype(gp.float32)
_I32 = np.dtype(gp.int32)
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
_ITYPES = {np.dtype(gp.int32): "int", np.dtype(gp.int64): "long long"}
SCORINGS = ("softmax", "sigmoid")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
MAX_EXPERTS = 1024  # router: 32 logits per lane; permute: (8 + 1) * (E + 1) ints of shared memory
MAX_K = 32  # router: lane j keeps choice j
ROUTER_WARPS = 8  # kRouterWarps
PERM_THREADS = 256  # kPermThreads (a round of the rank kernel)
PERM_WARPS = PERM_THREADS // 32
COPY_THREADS, COPY_UNROLL = 128, 4  # kCopyThreads, kCopyUnroll
SCAN_THREADS = 1024
MAX_TILES = 512


# -- public API ----------------------------------------------------------------------


def router_topk(logits: gp.GPUArray, k: int, *, renormalize: bool = True, scoring: str = "softmax") -> tuple[gp.GPUArray, gp.GPUArray]:
    """The top ``k`` experts of each token's router ``logits`` (..., E): returns
    (weights (..., k) float32, expert ids (..., k) int32), best first; see the
    module docstring for ties, NaN, ``scoring`` and ``renormalize``."""
    return ext.op("moe_route")(logits, k, renormalize, scoring)


def permute(x: gp.GPUArray, expert_ids: gp.GPUArray, num_experts: int) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
    """Token rows x (T, D) in expert order for ``expert_ids`` (T, k): returns
    (x_sorted (T*k, D), offs (E,) int32 cumulative row ends, index_map (T*k,)
    int32 with ``index_map[r] = token * k + slot``); stable within an expert."""
    return ext.op("moe_permute")(x, expert_ids, num_experts)


def unpermute(y_sorted: gp.GPUArray, index_map: gp.GPUArray, weights: gp.GPUArray) -> gp.GPUArray:
    """The inverse of ``permute`` with the combine: (T, D) rows
    ``sum_s weights[t, s] * y_sorted[row of (t, s)]``, in float32, slot order."""
    return ext.op("moe_unpermute")(y_sorted, index_map, weights)


def moe_forward(
    x: gp.GPUArray,
    router_w: gp.GPUArray,
    w_gate_up: gp.GPUArray,
    w_down: gp.GPUArray,
    k: int,
    *,
    w_up: gp.GPUArray | None = None,
    renormalize: bool = True,
    scoring: str = "softmax",
    activation: str = "silu",
) -> gp.GPUArray:
    """A mixture-of-experts MLP (Mixtral, Qwen-MoE) on x (..., D):
    ``sum_k w_k * down_e(act(gate_e(x)) * up_e(x))`` over each token's top-k experts.

    ``router_w`` (E, D) is the router's Linear weight. ``w_gate_up`` (E, 2I, D)
    holds each expert's gate rows then its up rows (Mixtral's w1 then w3:
    ``gp.concatenate([w1, w3], axis=1)`` once at load); or pass the gate (E, I, D)
    as ``w_gate_up`` and ``w_up`` (E, I, D) (two grouped GEMMs, no copy).
    ``w_down`` (E, D, I). ``activation``: "silu" (SwiGLU), "gelu" or "gelu_tanh"
    (GeGLU). x and the expert weights share one dtype; the result has x's shape
    and dtype. Needs pygpukit-gemm (``gp.ops.grouped_linear``)."""
    if "grouped_linear" not in gp.ops.names():
        raise RuntimeError("moe_forward: needs gp.ops.grouped_linear from the pygpukit-gemm package, which is not installed")
    d, e = _check_forward(x, router_w, w_gate_up, w_down, k, w_up, activation)
    grouped = gp.ops.grouped_linear
    xs = x.reshape(-1, d)
    weights, ids = router_topk(gp.linear(xs, router_w), k, renormalize=renormalize, scoring=scoring)
    x_sorted, offs, index_map = permute(xs, ids, e)
    if w_up is None:
        gate, up = grouped(x_sorted, w_gate_up, offs), None
    else:
        gate, up = grouped(x_sorted, w_gate_up, offs), grouped(x_sorted, w_up, offs)
    h = swiglu(gate, up) if activation == "silu" else geglu(gate, up, "none" if activation == "gelu" else "tanh")
    return unpermute(grouped(h, w_down, offs), index_map, weights).reshape(x.shape)


# -- checks --------------------------------------------------------------------------


def _check_array(op: str, name: str, a: Any, kinds: tuple[np.dtype, ...], what: str) -> None:
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {type(a).__name__}")
    if a.dtype not in kinds:
        raise TypeError(f"{op}: {name} must be {what}, got {a.dtype}")


def _check_index(op: str, name: str, a: Any) -> None:
    _check_array(op, name, a, INDEX, "int32 or int64")


def _check_route(logits: Any, k: Any, renormalize: Any, scoring: Any) -> tuple[int, int]:
    """Returns (E, k)."""
    check_float("router_topk", "logits", logits)
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"router_topk: logits must be (..., E) with E >= 1 experts, got shape {logits.shape}")
    e = logits.shape[-1]
    k = integer("router_topk", "k", k, 1, e)
    if not isinstance(renormalize, (bool, np.bool_)):
        raise TypeError(f"router_topk: renormalize must be a bool, got {type(renormalize).__name__}")
    if scoring not in SCORINGS:
        raise ValueError(f"router_topk: scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    return e, k


def _check_permute(x: Any, expert_ids: Any, num_experts: Any) -> tuple[int, int, int]:
    """Returns (T, k, E)."""
    check_float("permute", "x", x)
    _check_index("permute", "expert_ids", expert_ids)
    if x.ndim != 2:
        raise ValueError(f"permute: x must be (tokens, hidden), got shape {x.shape}")
    if expert_ids.ndim != 2 or expert_ids.shape[0] != x.shape[0]:
        raise ValueError(f"permute: expert_ids must be (tokens, k) with x's {x.shape[0]} tokens, got shape {expert_ids.shape}")
    e = integer("permute", "num_experts", num_experts, 1, INT32_MAX - 1)
    if expert_ids.size > INT32_MAX:
        raise ValueError(f"permute: at most {INT32_MAX} assignments (int32 index map), got {expert_ids.size}")
    return x.shape[0], expert_ids.shape[1], e


def _check_unpermute(y: Any, index_map: Any, weights: Any) -> tuple[int, int, int]:
    """Returns (T, k, D)."""
    check_float("unpermute", "y_sorted", y)
    _check_index("unpermute", "index_map", index_map)
    check_float("unpermute", "weights", weights)
    if y.ndim != 2:
        raise ValueError(f"unpermute: y_sorted must be (tokens * k, hidden), got shape {y.shape}")
    if weights.ndim != 2 or weights.size != y.shape[0]:
        raise ValueError(f"unpermute: weights must be (tokens, k) with tokens * k = {y.shape[0]} (y_sorted's rows), got {weights.shape}")
    if index_map.shape != (y.shape[0],):
        raise ValueError(f"unpermute: index_map must have shape ({y.shape[0]},) (a row of y_sorted each), got {index_map.shape}")
    return weights.shape[0], weights.shape[1], y.shape[1]


def _check_forward(x: Any, router_w: Any, w_gate_up: Any, w_down: Any, k: Any, w_up: Any, activation: Any) -> tuple[int, int]:
    """Returns (D, E)."""
    op = "moe_forward"
    named = {"x": x, "router_w": router_w, "w_gate_up": w_gate_up, "w_down": w_down, "w_up": w_up}
    for name, a in named.items():
        if a is not None or name != "w_up":
            check_float(op, name, a)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must be (..., hidden), got a 0-d array")
    d = x.shape[-1]
    if router_w.ndim != 2 or router_w.shape[1] != d or router_w.shape[0] == 0:
        raise ValueError(f"{op}: router_w must be (experts, {d}), got shape {router_w.shape}")
    e = router_w.shape[0]
    if w_gate_up.ndim != 3 or w_gate_up.shape[0] != e or w_gate_up.shape[2] != d:
        raise ValueError(f"{op}: w_gate_up must be ({e}, 2 * intermediate, {d}) (or the gate, with w_up), got shape {w_gate_up.shape}")
    if w_up is None:
        if w_gate_up.shape[1] % 2:
            raise ValueError(f"{op}: w_gate_up holds [gate, up] rows, so its axis 1 must be even, got {w_gate_up.shape[1]}")
        inter = w_gate_up.shape[1] // 2
    else:
        inter = w_gate_up.shape[1]
        if w_up.shape != w_gate_up.shape:
            raise ValueError(f"{op}: w_up must match the gate's shape {w_gate_up.shape}, got {w_up.shape}")
    if w_down.shape != (e, d, inter):
        raise ValueError(f"{op}: w_down must have shape ({e}, {d}, {inter}), got {w_down.shape}")
    for name, a in (("w_gate_up", w_gate_up), ("w_down", w_down), ("w_up", w_up)):
        if a is not None and a.dtype != x.dtype:
            raise TypeError(f"{op}: {name} must have x's dtype {x.dtype}, got {a.dtype}")
    integer(op, "k", k, 1, e)
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: activation must be 'silu', 'gelu' or 'gelu_tanh', got {activation!r}")
    return d, e


# -- references (any backend, any float dtype) -----------------------------------------


def reference_route(logits: Any, k: Any, renormalize: Any = True, scoring: Any = "softmax") -> tuple[gp.GPUArray, gp.GPUArray]:
    _, k = _check_route(logits, k, renormalize, scoring)
    cdt = ext.compute_dtype(logits.dtype)
    lg = logits.astype(cdt)
    vals, idx = gp.topk(lg, k, axis=-1)  # value order, ties by index, NaN largest
    if scoring == "softmax":
        w = gp.take_along_axis(gp.softmax(lg, axis=-1), idx, -1)
    else:
        w = gp.sigmoid(vals)
    if renormalize:
        w = w / gp.sum(w, axis=-1, keepdims=True)
    return w, idx.astype(gp.int32)


def reference_permute(x: Any, expert_ids: Any, num_experts: Any) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
    t, k, e = _check_permute(x, expert_ids, num_experts)
    n = t * k
    if n == 0:
        return gp.empty((0, x.shape[1]), x.dtype), gp.zeros((e,), gp.int32), gp.empty((0,), gp.int32)
    ids = expert_ids.reshape(-1).astype(gp.int64)
    bucket = gp.where((ids >= 0) & (ids < e), ids, gp.asarray(e, dtype=gp.int64))
    order = gp.argsort(bucket)  # stable: within a bucket, assignment order
    offs = gp.searchsorted(gp.take(bucket, order), gp.arange(e, dtype=gp.int64), side="right")
    return gp.take(x, order // k, axis=0), offs.astype(gp.int32), order.astype(gp.int32)


def reference_unpermute(y: Any, index_map: Any, weights: Any) -> gp.GPUArray:
    t, k, d = _check_unpermute(y, index_map, weights)
    n = t * k
    host = index_map.to_numpy()
    if not np.array_equal(np.sort(host), np.arange(n)):
        raise ValueError(f"unpermute: index_map must be a permutation of 0..{n - 1} (as permute returns)")
    cdt = ext.compute_dtype(y.dtype)
    if n == 0 or d == 0:
        return gp.zeros((t, d), y.dtype)
    rows = gp.take(y, gp.argsort(index_map), axis=0).astype(cdt).reshape(t, k, d)
    w = weights.astype(cdt)
    out = rows[:, 0] * w[:, 0:1]
    for s in range(1, k):
        out = out + rows[:, s] * w[:, s : s + 1]
    return out.astype(y.dtype)


# -- CUDA kernels ----------------------------------------------------------------------


def _jit(expr: str, signature: str) -> ext.Kernel:
    return ext.Kernel(ext.kernel_source(__name__, "moe"), expr, signature=signature, name="moe.cu")


@functools.cache
def _router_kernel(ct: str, epl: int, scoring: int, renorm: bool) -> ext.Kernel:
    return _jit(
        f"pgk::router_topk<{ct}, {epl}, {scoring}, {'true' if renorm else 'false'}>",
        "const void* logits, long long ls, long long tokens, int E, int k, void* w, void* ids",
    )


@functools.cache
def _count_kernel(it: str) -> ext.Kernel:
    return _jit(f"pgk::moe_count<{it}>", "const void* ids, long long n, int E, long long tile_len, void* counts")


@functools.cache
def _scan_kernel() -> ext.Kernel:
    return _jit("pgk::moe_scan", "void* counts, int tiles, int E, void* offs")


@functools.cache
def _rank_kernel(it: str) -> ext.Kernel:
    return _jit(f"pgk::moe_rank<{it}>", "const void* ids, long long n, int E, long long tile_len, const void* first, void* index_map")


@functools.cache
def _gather_kernel(ct: str, vec: int) -> ext.Kernel:
    return _jit(f"pgk::moe_gather<{ct}, {vec}>", "const void* x, long long xs, const void* index_map, int k, int D, void* out")


@functools.cache
def _invert_kernel() -> ext.Kernel:
    return _jit("pgk::moe_invert", "const void* index_map, long long n, void* pos")


@functools.cache
def _combine_kernel(ct: str, vec: int) -> ext.Kernel:
    return _jit(
        f"pgk::moe_combine<{ct}, {vec}>",
        "const void* y, long long ys, const void* pos, const void* w, int k, long long n, int D, void* out",
    )


def _vec(dt: np.dtype, d: int, stride: int, ptr: int) -> int:
    """The widest vector (<= 16 bytes) that rows of ``d`` elements at ``ptr`` with row stride ``stride`` allow."""
    vec = 16 // dt.itemsize
    while vec > 1 and not (d % vec == 0 and stride % vec == 0 and ptr % (vec * dt.itemsize) == 0):
        vec //= 2
    return vec


def _epl(e: int) -> int:
    """Logits per lane: the power of two that covers E (so few instantiations)."""
    epl = 1
    while 32 * epl < e:
        epl *= 2
    return epl


@dataclass(frozen=True, slots=True)
class _RoutePlan:
    launch: ext.Launch | None  # None: no rows
    copy: bool  # whether the rows need a contiguous copy
    ints: tuple[int, int, int, int]  # row stride, rows, E, k


_route_plans: ext.PlanCache[tuple, _RoutePlan] = ext.PlanCache("pygpukit_nn.moe.route")


def _plan_route(logits: Any, e: int, k: int, renormalize: bool, scoring: str) -> _RoutePlan:
    lv, ls = _kernels.rows_of(logits)
    rows = logits.size // e
    launch = None
    if rows:
        kern = _router_kernel(_CTYPES[logits.dtype], _epl(e), SCORINGS.index(scoring), renormalize)
        launch = kern.launcher(-(-rows // ROUTER_WARPS), ROUTER_WARPS * 32)
    return _RoutePlan(launch, lv is not logits, (ls, rows, e, k))


def kernel_route(logits: Any, k: Any, renormalize: Any = True, scoring: Any = "softmax") -> tuple[gp.GPUArray, gp.GPUArray]:
    e, k = _check_route(logits, k, renormalize, scoring)
    key = (ext.layout_key(logits), k, bool(renormalize), scoring)
    plan = _route_plans.get(key) or _route_plans.put(key, _plan_route(logits, e, k, bool(renormalize), scoring))
    out_shape = logits.shape[:-1] + (k,)
    w = ext.empty(out_shape, _F32)
    ids = ext.empty(out_shape, _I32)
    if plan.launch is not None:
        plan.launch(logits.copy() if plan.copy else logits, *plan.ints, w, ids)
    return w, ids


def _tiles(n: int, nb: int) -> tuple[int, int]:
    """(tiles, assignments per tile): whole rounds of the rank kernel, at most
    MAX_TILES tiles and about 32K (tile, bucket) counts for the scan."""
    want = max(1, min(-(-n // PERM_THREADS), MAX_TILES, 32768 // nb))
    per_tile = -(-n // want)
    tile_len = -(-per_tile // PERM_THREADS) * PERM_THREADS
    return -(-n // tile_len), tile_len


@dataclass(frozen=True, slots=True)
class _PermutePlan:
    count: ext.Launch  # per-tile histograms
    scan: ext.Launch  # their scan: each (tile, expert)'s first row, and offs
    rank: ext.Launch  # stable ranks: the index map
    gather: ext.Launch | None  # the rows in expert order (None: no columns)
    tiles: int
    tile_len: int


_permute_plans: ext.PlanCache[tuple, _PermutePlan] = ext.PlanCache("pygpukit_nn.moe.permute")


def _plan_permute(n: int, d: int, e: int, x: Any, xv: Any, xs: int, ids: Any) -> _PermutePlan:
    nb = e + 1
    tiles, tile_len = _tiles(n, nb)
    it = _ITYPES[ids.dtype]
    count = _count_kernel(it).launcher(tiles, PERM_THREADS, 4 * nb)
    scan = _scan_kernel().launcher(1, SCAN_THREADS)
    rank = _rank_kernel(it).launcher(tiles, PERM_THREADS, 4 * (PERM_WARPS + 1) * nb)
    gather = None
    if d:
        vec = _vec(x.dtype, d, xs, xv.data_ptr)
        cblocks = -(-(d // vec) // (COPY_THREADS * COPY_UNROLL))
        gather = _gather_kernel(_CTYPES[x.dtype], vec).launcher((n, cblocks), COPY_THREADS)
    return _PermutePlan(count, scan, rank, gather, tiles, tile_len)


def kernel_permute(x: Any, expert_ids: Any, num_experts: Any) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
    t, k, e = _check_permute(x, expert_ids, num_experts)
    n, d = t * k, x.shape[1]
    if n == 0:
        return gp.empty((0, d), x.dtype), gp.zeros((e,), gp.int32), gp.empty((0,), gp.int32)
    xv, xs = _kernels.rows_of(x)
    ids = expert_ids if expert_ids.is_contiguous else expert_ids.copy()
    key = (n, k, e, d, x.dtype, ids.dtype, xs, xv.data_ptr & 15)
    plan = _permute_plans.get(key) or _permute_plans.put(key, _plan_permute(n, d, e, x, xv, xs, ids))
    stream = ext.current_stream()
    counts = ext.empty((plan.tiles * (e + 1),), _I32, stream)
    offs = ext.empty((e,), _I32, stream)
    index_map = ext.empty((n,), _I32, stream)
    out = ext.empty((n, d), x.dtype, stream)
    plan.count(ids, n, e, plan.tile_len, counts)
    plan.scan(counts, plan.tiles, e, offs)
    plan.rank(ids, n, e, plan.tile_len, counts, index_map)
    if plan.gather is not None:
        plan.gather(xv, xs, index_map, k, d, out)
    return out, offs, index_map


@dataclass(frozen=True, slots=True)
class _UnpermutePlan:
    invert: ext.Launch  # the index map's inverse: each assignment's row
    combine: ext.Launch  # each token's weighted sum over its slots


_unpermute_plans: ext.PlanCache[tuple, _UnpermutePlan] = ext.PlanCache("pygpukit_nn.moe.unpermute")


def _plan_unpermute(n: int, t: int, d: int, y: Any, yv: Any, ys: int) -> _UnpermutePlan:
    vec = _vec(y.dtype, d, ys, yv.data_ptr)
    cblocks = -(-(d // vec) // (COPY_THREADS * COPY_UNROLL))
    invert = _invert_kernel().launcher(-(-n // 256), 256)
    return _UnpermutePlan(invert, _combine_kernel(_CTYPES[y.dtype], vec).launcher((t, cblocks), COPY_THREADS))


def kernel_unpermute(y: Any, index_map: Any, weights: Any) -> gp.GPUArray:
    t, k, d = _check_unpermute(y, index_map, weights)
    n = t * k
    if n == 0 or d == 0:  # k == 0 is an empty sum
        return gp.zeros((t, d), y.dtype)
    yv, ys = _kernels.rows_of(y)
    key = (n, k, d, y.dtype, ys, yv.data_ptr & 15)
    plan = _unpermute_plans.get(key) or _unpermute_plans.put(key, _plan_unpermute(n, t, d, y, yv, ys))
    stream = ext.current_stream()
    out = ext.empty((t, d), y.dtype, stream)
    im = index_map.astype(gp.int32, copy=False)
    im = im if im.is_contiguous else im.copy()
    w = weights.astype(gp.float32, copy=False)
    w = w if w.is_contiguous else w.copy()
    pos = ext.empty((n,), _I32, stream)
    plan.invert(im, n, pos)
    plan.combine(yv, ys, pos, w, k, n, d, out)
    return out


def _route_takes(logits: Any, k: Any, *rest: Any) -> bool:
    """E <= MAX_EXPERTS and k <= MAX_K (else the reference)."""
    return logits.ndim > 0 and 0 < logits.shape[-1] <= MAX_EXPERTS and isinstance(k, (int, np.integer)) and 0 < k <= MAX_K


def _permute_takes(x: Any, expert_ids: Any, num_experts: Any, *rest: Any) -> bool:
    return isinstance(num_experts, (int, np.integer)) and 0 < num_experts <= MAX_EXPERTS


def register(registry: Any) -> None:
    for op, public, ref, kern, takes in (
        ("moe_route", router_topk, reference_route, kernel_route, _route_takes),
        ("moe_permute", permute, reference_permute, kernel_permute, _permute_takes),
        ("moe_unpermute", unpermute, reference_unpermute, kernel_unpermute, None),
    ):
        ext.register_family(registry, op, nkey=1, doc=public.__doc__ or "", reference=ref, cuda=kern,
                            dtypes=["float32", "float16", "bfloat16"], min_sm=80, priority=10, predicate=takes)  # fmt: skip
