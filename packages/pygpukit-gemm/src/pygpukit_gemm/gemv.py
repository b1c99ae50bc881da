"""Decode GEMV (``kernels/gemv.cu``, NVRTC) for up to MAX_ROWS rows of
activations: ``linear`` with bfloat16 / float16 weights, and ``qlinear`` with
int8, int4 or fp8 weights and group scales (quant.py). The weight is read
once, 16 bytes per load, so the time is the weight's bytes over the memory
bandwidth. With bfloat16 / float16 activations the weights run on tensor
cores (``variant``: plain weights with K a multiple of 128, quantized ones in
groups of a multiple of 128), otherwise on the FFMA kernel, whose warps per
block and columns per warp per format ran fastest on an H100 (``TILES``).

Two products fuse the op before them into the tensor-core GEMV: pygpukit-nn's
ops ``add_rms_norm_linear`` and ``swiglu_linear`` (defined there with their
reference; this plugin registers these kernels for them by op name). Each
block builds the few rows of activations in shared memory, so a decode step
saves the norm's or the activation's kernel and its round trip through memory."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext
from pygpukit.linalg import linear_shapes

MAX_ROWS = 8  # rows of activations the kernel takes
# format -> (warps per block, output columns per warp) for 1 row, 2 rows and more:
# the fastest on an H100 at Llama-3-8B's MLP shapes (4096 <-> 14336), bf16
# activations (int8 at 2 rows: (4, 2) took 26 / 28 us where (16, 2) took 33 / 42).
TILES = {
    "plain": ((8, 1), (8, 1), (4, 4)),
    "int8": ((16, 2), (4, 2), (4, 4)),
    "int4": ((4, 4), (4, 4), (4, 4)),
    "fp8": ((8, 2), (8, 2), (4, 4)),
}
# The tensor-core variants (MMA: half activations; int8, int4 and fp8 weights
# in groups of 128k, or plain weights with K a multiple of 128): tiles of 16
# columns (the mma tile's rows), warps taking turns over the steps of K (128
# values). Quantized: warps a block as many as bring the grid to
# MMA_WARPS_PER_SM a SM, 4 to 16; a warp's steps in flight: MMA_DEEP where the
# grid has fewer blocks than SMs (there a warp's own latency is the time),
# else MMA_STEADY[format] where a warp has more than one step and the block
# at most 8 warps (int4 at 4096 -> 14336, 4 warps: two steps, 5-10% faster
# than one; at 14336 -> 4096, 16 warps: one, 4% faster than two; int8 / fp8:
# one, two was 13-20% slower). plain (4x int4's bytes a step): one warp a step up to 16 warps, two
# steps a warp past that, so that the whole of a short K is in flight at once.
# All ran fastest on an H100 at Llama-3-8B's, Llama-1.1B's and Qwen2-0.5B's
# shapes; int8 and fp8 (2x int4's bytes a step) within 3% of their best tile
# at 4096 <-> 14336, 896 <-> 4864, 1, 2 and 8 rows
# (benchmarks/results/2026-11-26_H100-80GB-HBM3_gemv-int8-fp8-mma-sweep.json,
# ..._gemv-int4-depth-sweep.json).
# int4 with 4 to 8 rows and at least 16 steps of K: two tiles a warp (32
# columns a block), whose mma share the step's activations (4 rows of them
# are as many bytes as a tile's int4 weights); warps a block toward
# MMA_WARPS_PER_SM_2 a SM, and a warp's steps in flight: MMA_DEEP where the
# grid fills at most half the SMs, its whole share of K where that is at
# most 3 steps, else 2 (up to 8 warps) or 1 (16 warps). On an H100 at 8 rows,
# 4096 -> 14336 / 14336 -> 4096: 14.0 / 14.5 us against 15.2 / 14.9 us with
# one tile; the best (warps, depth) of 9 at Llama-3-8B's and Llama-1.1B's
# shapes, 2048 -> 5632 3.5 us against 5.3. At 1 and 2 rows two tiles were no
# faster (0-4% slower), nor at Qwen2-0.5B's 896 -> 4864 (7 steps of K)
# (benchmarks/results/2026-11-26_H100-80GB-HBM3_gemv-int4-two-tiles-sweep.json,
# ..._gemv-int4-two-tiles-check.json).
MMA_WARPS_PER_SM = 24
MMA_WARPS_PER_SM_2 = 10
MMA_DEEP = 3
MMA_STEADY = {"int4_mma": 2, "int8_mma": 1, "fp8_mma": 1}
SMALL = 2  # rows the FFMA kernel takes ahead of cuBLASLt (decode_linear: K not a multiple of 128)
_FORMATS = {"int8": "pgk::Int8", "int4": "pgk::Int4", "fp8": "pgk::Fp8"}
# variant -> gemv.cu's operands
MMA = {
    "int4_mma": "pgk::Int4Operands<{}>",
    "int8_mma": "pgk::Int8Operands<{}>",
    "fp8_mma": "pgk::Fp8Operands<{}>",
    "plain_mma": "pgk::PlainOperands",
}
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
HALF = (np.dtype(gp.bfloat16), np.dtype(gp.float16))


def tile_of(fmt: str, rows: int, n: int = 0, k: int = 0, sms: int = 132) -> tuple[int, ...]:
    """(warps per block, columns per warp) for ``rows`` rows of ``fmt``; for
    the MMA variants, (warps per block, steps in flight, 16-column tiles a
    warp) for an (n, k) weight on ``sms`` SMs."""
    if fmt == "plain_mma":
        steps = max(1, k // 128)
        warps = min(16, 1 << (steps - 1).bit_length())
        return warps, 2 if steps > warps else 1, 1
    if fmt in MMA:  # quantized
        tiles = 2 if fmt == "int4_mma" and rows >= 4 and k >= 16 * 128 else 1
        blocks, steps = max(1, -(-n // (16 * tiles))), max(1, k // 128)
        want = -(-(MMA_WARPS_PER_SM if tiles == 1 else MMA_WARPS_PER_SM_2) * sms // blocks)
        warps = min(16, max(4, 1 << (want - 1).bit_length()), steps)
        if tiles == 1:
            return warps, MMA_DEEP if blocks < sms else (MMA_STEADY[fmt] if warps < steps and warps <= 8 else 1), 1
        if 2 * blocks <= sms:
            return warps, MMA_DEEP, 2
        share = -(-steps // warps)
        return warps, share if share <= 3 else (2 if warps <= 8 else 1), 2
    return TILES[fmt][min(rows, 3) - 1]


def variant(fmt: str, dtype: Any, group: int, k: int = 0) -> str:
    """The kernel for ``fmt`` weights (groups of ``group``, ``k`` inputs) and
    ``dtype`` activations: with half activations, int8 / int4 / fp8 in groups
    of a multiple of 128 and plain weights with k a multiple of 128 run on
    tensor cores; float32 activations and smaller groups on the FFMA kernel."""
    if np.dtype(dtype) in HALF:
        if fmt in ("int8", "int4", "fp8") and group > 0 and group % 128 == 0:
            return fmt + "_mma"
        if fmt == "plain" and k > 0 and k % 128 == 0:
            return "plain_mma"
    return fmt


def grid_of(fmt: str, tile: tuple[int, ...], n: int) -> int:
    """Blocks for ``n`` output columns."""
    return -(-n // (16 * tile[2] if fmt in MMA else tile[0] * tile[1]))


def _source() -> str:
    return ext.kernel_source(__name__, "gemv")


@cache
def kernel(rows: int, fmt: str, ctype: str, tile: tuple[int, ...] | None = None) -> ext.Kernel:
    """The kernel for ``rows`` rows of ``ctype`` activations and ``fmt`` weights (a ``variant``)."""
    if fmt in MMA:
        warps, depth, tiles = tile or tile_of(fmt, rows)
        expr = f"pgk::gemv_mma<{rows}, {warps}, {depth}, {ctype}, {MMA[fmt].format(ctype)}, {tiles}>"
    else:
        warps, cols = tile or tile_of(fmt, rows)
        weight = f"pgk::Plain<{ctype}>" if fmt == "plain" else _FORMATS[fmt]
        expr = f"pgk::gemv<{rows}, {weight}, {warps}, {cols}, {ctype}>"
    return ext.Kernel(
        _source(),
        expr,
        signature="const void* x, const void* q, const void* scales, const void* bias, void* y, int N, int K, int G",
        name="gemv.cu",
        dependent_launch=True,
    )


@cache
def _dequantize_kernel(fmt: str, ctype: str) -> ext.Kernel:
    return ext.Kernel(_source(), f"pgk::dequantize<{_FORMATS[fmt]}, {ctype}>",
                      signature="const void* q, const void* scales, void* out, long long chunks, int K, int G", name="gemv.cu")  # fmt: skip


def dequantizes(q: Any, scales: Any, dtype: Any) -> bool:
    """Whether ``dequantize`` takes these arrays: on a CUDA GPU, contiguous and 16-byte aligned, out to bf16 / fp16 / float32."""
    return (
        gp.backend() == "cuda" and np.dtype(dtype) in _CTYPES and q.is_contiguous and scales.is_contiguous
        and q.data_ptr % 16 == 0 and q.nbytes % 16 == 0
    )  # fmt: skip


def dequantize(q: gp.GPUArray, scales: gp.GPUArray, fmt: str, n: int, k: int, group: int, dtype: Any) -> gp.GPUArray:
    """The (n, k) weight that ``q`` and ``scales`` in format ``fmt`` stand for, in ``dtype``, in one kernel (see ``dequantizes``)."""
    out = gp.empty((n, k), dtype)
    chunks = q.nbytes // 16
    if chunks:
        grid = min(-(-chunks // 256), 16 * ext.device().multiprocessor_count)
        _dequantize_kernel(fmt, _CTYPES[np.dtype(dtype)])(grid, 256, q, scales, out, chunks, k, group)
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    """A call signature's GEMV: its launch and the output's shape."""

    launch: ext.Launch
    out_shape: tuple[int, ...]


# (x's layout, the weight's format, stored shape and group size, the bias's layout)
_PlanKey = tuple[Any, str, tuple[int, ...], int, Any]
_plans: ext.PlanCache[_PlanKey, _Plan] = ext.PlanCache("pygpukit_gemm.gemv.plans")


def run(x: gp.GPUArray, q: gp.GPUArray, scales: gp.GPUArray | None, fmt: str, n: int, k: int, group: int, bias: Any) -> gp.GPUArray:
    """y = x @ W.T (+ bias) for x (..., k) with at most MAX_ROWS rows and the
    (n, k) weight W stored as ``q`` (and ``scales``) in format ``fmt``. A
    repeated call signature goes straight to the launch: the host must stay
    ahead of a ~15-50 us kernel."""
    key = (ext.layout_key(x), fmt, q.shape, group, ext.layout_key(bias))
    plan = _plans.get(key)
    if plan is None:
        return _first(key, x, q, scales, fmt, n, k, group, bias)
    y = ext.empty(plan.out_shape, x.dtype)
    plan.launch(x, q, scales, bias, y, n, k, group)
    return y


def _first(key: _PlanKey, x: gp.GPUArray, q: gp.GPUArray, scales: Any, fmt: str, n: int, k: int, group: int, bias: Any) -> gp.GPUArray:
    lead = x.shape[:-1]
    rows = x.size // k
    x2 = x.reshape(rows, k)
    b = None if bias is None else bias.astype(x.dtype, copy=False)
    direct = x2.is_contiguous and x2.data_ptr == x.data_ptr and x2.data_ptr % 16 == 0 and (b is None or (b is bias and b.is_contiguous))
    if not direct:
        x2 = x2.copy()
        if b is not None and not b.is_contiguous:
            b = b.copy()
    y = gp.empty((rows, n), x.dtype)
    if rows:
        kind = variant(fmt, x.dtype, group, k)
        tile = tile_of(kind, rows, n, k, ext.device().multiprocessor_count)
        launch = kernel(rows, kind, _CTYPES[np.dtype(x.dtype)], tile).launcher(grid_of(kind, tile, n), tile[0] * 32)
        launch(x2, q, scales, b, y, n, k, group)
        if direct:
            _plans.put(key, _Plan(launch, (*lead, n)))
    return y.reshape(*lead, n)


def decode_linear(x: Any, w: Any, bias: Any = None) -> bool:
    """Predicate of ``linear``: one half dtype, a weight the kernel reads as it
    is (contiguous rows, 16-byte aligned), and rows the GEMV serves faster than
    cuBLASLt (an H100, decode shapes): up to MAX_ROWS on tensor cores (K a
    multiple of 128), up to SMALL on the FFMA kernel."""
    k = x.shape[-1] if x.ndim else 0
    return (
        x.dtype == w.dtype
        and x.dtype in HALF
        and x.size <= (MAX_ROWS if k % 128 == 0 else SMALL) * k
        and w.ndim == 2
        and w.is_contiguous
        and w.data_ptr % 16 == 0
        and k % 8 == 0
        and k > 0
    )


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias`` for decode (see ``decode_linear``)."""
    n = linear_shapes(x, w, bias)
    return run(x, w, None, "plain", n, x.shape[-1], 0, bias)


# -- fused prologues ------------------------------------------------------------------------------

MAX_FUSED_BYTES = 96 * 1024  # the rows of activations a block builds in shared memory (opted in past 48 KB)
# Rows a fused kernel takes: every block reads all of them, so the L2 traffic
# grows with rows x blocks; at batch 8 an H100 decoded 29-44% slower fused
# (Qwen2-0.5B / Llama-1.1B shapes) and 9-20% faster at batch 1.
MAX_FUSED_ROWS = 2
FUSED_SIGNATURES = {
    "add_rms": "const void* a, const void* r, const void* g, void* h, float eps, const void* q, const void* bias, void* y, int N, int K",
    "swiglu": "const void* gu, long long ld, const void* q, const void* bias, void* y, int N, int K",
}


@cache
def fused_kernel(kind: str, rows: int, ctype: str, tile: tuple[int, ...]) -> ext.Kernel:
    """The tensor-core GEMV of plain weights with the ``kind`` prologue ("add_rms" or "swiglu") for ``rows`` rows."""
    return ext.Kernel(_source(), f"pgk::gemv_mma_{kind}<{rows}, {tile[0]}, {tile[1]}, {ctype}>", signature=FUSED_SIGNATURES[kind],
                      name="gemv.cu", dependent_launch=True)  # fmt: skip


# Launches by (kind, rows, dtype, n, k); the rows of activations a block builds fix its shared memory.
_fused_launches: ext.PlanCache[tuple[str, int, np.dtype, int, int], ext.Launch] = ext.PlanCache("pygpukit_gemm.gemv.fused")


def _launch_fused(kind: str, rows: int, dtype: np.dtype, n: int, k: int, *args: Any) -> None:
    key = (kind, rows, dtype, n, k)
    launch = _fused_launches.get(key)
    if launch is None:
        tile = tile_of("plain_mma", rows, n, k)
        kern = fused_kernel(kind, rows, _CTYPES[dtype], tile)
        launch = _fused_launches.put(key, kern.launcher(grid_of("plain_mma", tile, n), tile[0] * 32, rows * k * dtype.itemsize))
    launch(*args)


def _aligned(a: Any, x: Any, shape: tuple[int, ...]) -> bool:
    return isinstance(a, gp.GPUArray) and a.dtype == x.dtype and a.shape == shape and a.is_contiguous and a.data_ptr % 16 == 0


def fused_rows(x: Any, k: int) -> bool:
    """Whether x (..., k) is rows the fused kernels take: a half dtype,
    contiguous, 16-byte aligned, at most MAX_FUSED_ROWS rows that fit
    MAX_FUSED_BYTES, k a multiple of 128 (the tensor-core GEMV's steps)."""
    return (
        isinstance(x, gp.GPUArray)
        and x.dtype in HALF
        and x.ndim >= 1
        and x.is_contiguous
        and x.data_ptr % 16 == 0
        and k > 0
        and k % 128 == 0
        and 0 < x.size // x.shape[-1] <= MAX_FUSED_ROWS
        and (x.size // x.shape[-1]) * k * x.itemsize <= MAX_FUSED_BYTES
    )


def _projection_ok(w: Any, bias: Any, x: Any, k: int) -> bool:
    if not (isinstance(w, gp.GPUArray) and w.ndim == 2 and _aligned(w, x, (w.shape[0], k))):
        return False
    return bias is None or (isinstance(bias, gp.GPUArray) and bias.dtype == x.dtype and bias.shape == (w.shape[0],) and bias.is_contiguous)


def takes_add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: Any, w: Any, bias: Any = None) -> bool:
    """Predicate of ``add_rms_norm_linear``: see ``fused_rows``; the residual like x,
    the norm weight (k,) or None and the projection's weight in x's dtype."""
    k = x.shape[-1] if isinstance(x, gp.GPUArray) and x.ndim else 0
    return (
        fused_rows(x, k)
        and (residual is None or _aligned(residual, x, x.shape))
        and (weight is None or _aligned(weight, x, (k,)))
        and type(eps) in (int, float)
        and eps >= 0
        and _projection_ok(w, bias, x, k)
    )


def add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: float, w: Any, bias: Any = None) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``(rms_norm(h, weight, eps) @ w.T + bias, h)`` with ``h = x + residual`` (x when
    residual is None), in one kernel for decode rows (``takes_add_rms_norm_linear``)."""
    k, n = x.shape[-1], w.shape[0]
    y = ext.empty((*x.shape[:-1], n), x.dtype)
    h = x if residual is None else ext.empty(x.shape, x.dtype)
    _launch_fused("add_rms", x.size // k, x.dtype, n, k, x, residual, weight, h, float(eps), w, bias, y, n, k)
    return y, h


def takes_swiglu_linear(gu: Any, w: Any, bias: Any = None) -> bool:
    """Predicate of ``swiglu_linear``: gu (..., 2k) of fused [gate, up] rows (see
    ``fused_rows`` for k), the weight (n, k) in gu's dtype."""
    if not isinstance(gu, gp.GPUArray) or gu.ndim == 0 or gu.shape[-1] % 2:
        return False
    k = gu.shape[-1] // 2
    return fused_rows(gu, k) and _projection_ok(w, bias, gu, k)


def swiglu_linear(gu: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``swiglu(gu) @ w.T + bias`` in one kernel for decode rows (``takes_swiglu_linear``)."""
    k, n = gu.shape[-1] // 2, w.shape[0]
    y = ext.empty((*gu.shape[:-1], n), gu.dtype)
    _launch_fused("swiglu", gu.size // gu.shape[-1], gu.dtype, n, k, gu, 2 * k, w, bias, y, n, k)
    return y
