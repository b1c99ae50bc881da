"""The plugin's own tensor-core GEMM (``kernels/gemm_tc.cu``, NVRTC): bfloat16
and float16 products on SM 80+ with FP32 accumulation and a fused epilogue
(bias, activation, residual), for ``matmul``, ``linear``, ``fused_linear`` and
the mixture-of-experts grouped products.

On SM 90 the kernel is the warpgroup one (wgmma, compiled for sm_90a;
warp-specialized and persistent, its producer on TMA where the driver
encodes tensor maps: ``tma.py``), which reads B stored (N, K) (a (K, N) B is
copied so first); elsewhere the mma.sync one. Heuristics: a tile config is chosen per (M, N, batch, SM count) by the
estimated time of its waves, as DeepGEMM does: ``waves * blocks per SM * BM *
BN / throughput``, where a config's relative throughput per SM was measured on
an H100 (bigger tiles reuse each loaded byte more). ``PYGPUKIT_GEMM_CONFIG``
(e.g. ``128x256x32``, BM x BN x BK) forces a config, for benchmarking.

Operands: A must be row-major (unit stride along K), B either (K, N) row-major
or (N, K) row-major (a Linear weight, or a transposed view); leading
dimensions multiples of 8 elements and 16-byte aligned pointers, so every
global read is one 16-byte cp.async. Anything else is copied first, and K is
zero-padded to a multiple of 8 when it is not one.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext
from pygpukit.linalg import linear_shapes, matmul_shapes

from . import epilogue, tma
from .cublaslt import OP_N, operand_layout

DTYPES = (np.dtype(gp.bfloat16), np.dtype(gp.float16))
CTYPE = {DTYPES[0]: "pgk::bfloat16", DTYPES[1]: "pgk::half"}
# activation name -> functor of pgk/math.cuh
ACTIVATIONS = {None: "pgk::Positive", "relu": "pgk::Relu", "gelu": "pgk::Gelu", "gelu_tanh": "pgk::GeluTanh", "silu": "pgk::Silu"}


@dataclass(frozen=True)
class Config:
    bm: int
    bn: int
    bk: int
    wm: int  # warps along M
    wn: int  # warps along N
    stages: int
    per_sm: int  # resident blocks per SM (registers and shared memory bound it)
    throughput: float  # relative per-SM rate at full occupancy, measured
    wgmma: bool = False  # the SM 90 kernel (WsTile: BM 128, BK 64, B stored (N, K), persistent)

    @property
    def threads(self) -> int:
        return 384 if self.wgmma else self.wm * self.wn * 32  # wgmma: two consumer warpgroups and a producer

    @property
    def smem(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk * 2 + (16 * self.stages if self.wgmma else 0)  # + mbarriers

    @property
    def name(self) -> str:
        return f"{'wgmma' if self.wgmma else ''}{self.bm}x{self.bn}x{self.bk}"


CONFIGS = (  # throughput: measured at 8192^3 bf16 on an H100, relative to the first
    Config(128, 256, 32, 2, 4, 4, 1, 1.0),
    Config(64, 128, 64, 2, 2, 4, 2, 0.95),
    Config(64, 64, 64, 2, 2, 4, 3, 0.72),
)
WGMMA_CONFIGS = (  # SM 90 only; two consumer warpgroups of 64 rows
    Config(128, 256, 64, 2, 4, 4, 1, 1.0, True),
    Config(128, 128, 64, 2, 4, 6, 1, 0.84, True),
)
WGMMA_MIN_M = 64  # fewer rows: the 64-row mma.sync tiles waste less


def choose(m: int, n: int, batch: int, sms: int, wgmma: bool = False) -> Config:
    """The config with the least estimated time for an (m, n) output, ``batch``
    times: among the warpgroup kernels when ``wgmma`` (SM 90), else the mma.sync ones."""
    configs = WGMMA_CONFIGS if wgmma else CONFIGS
    forced = os.environ.get("PYGPUKIT_GEMM_CONFIG")
    if forced:
        allowed = CONFIGS + WGMMA_CONFIGS if wgmma else CONFIGS
        for c in allowed:
            if c.name == forced:
                return c
        raise ValueError(f"PYGPUKIT_GEMM_CONFIG={forced!r} is not one of {', '.join(c.name for c in allowed)} on this GPU")

    def cost(c: Config) -> float:
        tiles = -(-m // c.bm) * -(-n // c.bn) * batch
        resident = min(c.per_sm, -(-tiles // sms))  # blocks an SM actually holds
        waves = -(-tiles // (sms * resident))
        return waves * resident * c.bm * c.bn / c.throughput

    return min(configs, key=cost)


def config_for(m: int, n: int, batch: int, grouped: bool = False) -> Config:
    """``choose`` on this GPU: the warpgroup kernels on SM 90 past WGMMA_MIN_M
    rows, and for grouped products (m: rows an expert) at any size: there a
    tile with no rows in its second 64 runs on one warpgroup, and the weights'
    reads dominate (8 experts, 4096 -> 14336, 64 rows an expert on an H100:
    bf16 170 TFLOP/s against 160 on mma.sync, fp8 270 against 195)."""
    dev = ext.device()
    return choose(m, n, batch, dev.multiprocessor_count, dev.sm == 90 and (grouped or m > WGMMA_MIN_M))


def tile_expr(cfg: Config, b_nk: bool, ctype: str, tma: bool = False) -> str:
    """The main loop of ``cfg`` as a template argument of the entry points
    (``WsTile`` for the warpgroup configs, ``Tile`` for the mma.sync ones)."""
    if cfg.wgmma:
        return f"pgk::WsTile<{cfg.bn}, {cfg.stages}, {ctype}, {str(tma).lower()}>"
    return f"pgk::Tile<{cfg.bm}, {cfg.bn}, {cfg.bk}, {cfg.wm}, {cfg.wn}, {cfg.stages}, {str(b_nk).lower()}, {ctype}>"


def _jit(entry: str, cfg: Config, args: str) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "gemm_tc"),
        f"pgk::{entry}<{args}>",
        signature=SIGNATURES[entry],
        name="gemm_tc.cu",
        arch_suffix="a" if cfg.wgmma else "",
    )


@cache
def kernel(entry: str, cfg: Config, b_nk: bool, ctype: str, act: str, bias: bool, res: bool, tma: bool = False) -> ext.Kernel:
    """The 16-bit kernel ``entry`` ("gemm", "grouped" or "masked") on cfg's main
    loop (``tma``: WsTile's TMA producer, for "gemm" and "grouped")."""
    return _jit(entry, cfg, f"{tile_expr(cfg, b_nk, ctype, tma)}, {act}, {str(bias).lower()}, {str(res).lower()}")


@cache
def fp8_kernel(entry: str, cfg: Config, out_ctype: str, bias: bool, tma: bool = False) -> ext.Kernel:
    """The fp8 kernel ``entry`` ("gemm_fp8", "grouped_fp8" or "masked_fp8", SM 89+; on
    the warpgroup main loop for a wgmma config, SM 90; ``tma``: its TMA producer)."""
    return _jit(entry, cfg, f"{tile_expr(cfg, True, 'pgk::e4m3x2', tma)}, {out_ctype}, {str(bias).lower()}")


def tma_maps(cfg: Config, a: tuple[int, int, int], b: tuple[int, int, int], k: int) -> gp.GPUArray | None:
    """The tensor maps of A and B for WsTile's TMA producer, or None where it
    does not run (not a warpgroup config, or no maps from this driver). a and
    b: (pointer, rows, bytes between rows) of the operands stacked as 2-D
    arrays of k 16-bit elements a row (fp8: k carriers)."""
    if not (cfg.wgmma and tma.available()):
        return None
    return tma.maps((a[0], k, a[1], a[2], cfg.bm), (b[0], k, b[1], b[2], cfg.bn))


# The entry points' parameters (kernels/gemm_tc.cu), by which their launches are packed.
SIGNATURES = {
    "gemm": "const void* A, const void* B, void* D, const void* bias, const void* R, int batch, int M, int N, int K, long long lda, "
    "long long ldb, long long ldd, long long ldr, long long strideA, long long strideB, long long strideD, long long strideR, "
    "const void* maps",
    "grouped": "const void* A, const void* B, void* D, const void* bias, const void* R, const void* offs, int E, int M, "
    "int N, int K, long long lda, long long ldb, long long ldd, long long ldr, long long strideB, long long strideBias, const void* maps",
    "masked": "const void* A, const void* B, void* D, const void* bias, const void* R, const void* masked_m, int E, int max_m, "
    "int N, int K, long long lda, long long ldb, long long ldd, long long ldr, long long strideA, long long strideB, "
    "long long strideD, long long strideR, long long strideBias",
    "gemm_fp8": "const void* A, const void* B, void* D, const void* bias, const void* sa, const void* sb, int M, int N, int K, "
    "long long lda, long long ldb, long long ldd, const void* maps",
    "grouped_fp8": "const void* A, const void* B, void* D, const void* bias, const void* sa, const void* sb, const void* offs, "
    "int E, int M, int N, int K, long long lda, long long ldb, long long ldd, long long strideB, const void* maps",
    "masked_fp8": "const void* A, const void* B, void* D, const void* bias, const void* sa, const void* sb, const void* masked_m, "
    "int E, int max_m, int N, int K, long long lda, long long ldb, long long ldd, long long strideA, long long strideB",
}

# Launches by kernel and blocks (a kernel's config fixes its threads and shared memory).
_launches: ext.PlanCache[tuple[ext.Kernel, int], ext.Launch] = ext.PlanCache("pygpukit_gemm.gemm_tc.launches")


def launch(kern: ext.Kernel, cfg: Config, tiles: int, *args: Any) -> None:
    """Launch ``kern`` (of config ``cfg``) over ``tiles`` output tiles: a block a
    tile, or for the persistent warpgroup kernel at most a block an SM, each
    walking its share. ``args`` in the order of its entry point's SIGNATURES."""
    blocks = min(tiles, ext.device().multiprocessor_count) if cfg.wgmma else tiles
    key = (kern, blocks)
    run = _launches.get(key) or _launches.put(key, kern.launcher(blocks, cfg.threads, cfg.smem))
    run(*args)


# -- operands -------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """A (*batch, r, c) operand as the kernel reads it: base array, leading
    dimension and batch stride in elements; for B whether it is stored (N, K)."""

    array: gp.GPUArray
    ld: int
    batch_stride: int
    nk: bool = False


def _direct(x: gp.GPUArray) -> tuple[int, int, int] | None:
    """(op, ld, batch stride) when the kernel can read x as it is."""
    lay = operand_layout(x.shape, x.strides, x.itemsize)
    if lay is None or lay.ld % 8 or x.data_ptr % 16:
        return None
    return lay.op, lay.ld, lay.batch_stride


def _pad_k(x: gp.GPUArray, axis: int, k8: int) -> gp.GPUArray:
    """A contiguous copy of x with its K axis zero-padded to k8."""
    shape = list(x.shape)
    shape[axis] = k8
    out = gp.zeros(tuple(shape), x.dtype)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, x.shape[axis])
    out[tuple(index)] = x
    return out


def operand_a(a: gp.GPUArray) -> Operand:
    """A (*batch, M, K): row-major with unit stride along K, else copied."""
    k = a.shape[-1]
    if k % 8:
        a = _pad_k(a, -1, k + 8 - k % 8)
    got = _direct(a)
    if got is None or got[0] != OP_N:
        a = a.copy()
        got = _direct(a)
        assert got is not None
    return Operand(a, got[1], got[2])


def operand_b(b: gp.GPUArray, nk_only: bool = False) -> Operand:
    """B (*batch, K, N): read as (K, N) rows (unless ``nk_only``) or as (N, K)
    rows (the transposed view of a Linear weight), else copied into (N, K) rows."""
    k, n = b.shape[-2:]
    got = None if k % 8 else _direct(b)
    if got is not None and (got[0] != OP_N or (n % 8 == 0 and not nk_only)):  # (K, N) rows: whole 16-byte chunks of N
        return Operand(b, got[1], got[2], nk=got[0] != OP_N)
    if got is not None:  # (K, N) rows, wanted as (N, K): a tiled transpose
        return _transposed(b, got[1], got[2])
    bt = b.swapaxes(-1, -2)
    bt = _pad_k(bt, -1, k + 8 - k % 8) if k % 8 else bt.copy()
    _, ld, stride = _direct(bt) or (0, 0, 0)
    return Operand(bt.swapaxes(-1, -2), ld, stride, nk=True)


def _transposed(b: gp.GPUArray, ld: int, batch_stride: int) -> Operand:
    """B (*batch, K, N) with (K, N) rows of stride ``ld``, copied into contiguous
    (N, K) rows by the transpose kernel (once for a broadcast batch)."""
    k, n = b.shape[-2:]
    nb = math.prod(b.shape[:-2]) if batch_stride else 1
    out = gp.empty((nb, n, k), b.dtype)
    _transpose_kernel(CTYPE[np.dtype(b.dtype)])((-(-n // 64), -(-k // 64), nb), 256, b.data_ptr, out, k, n, ld, batch_stride)
    return Operand(out.reshape(nb, n, k).swapaxes(-1, -2), k, n * k if batch_stride else 0, nk=True)


@cache
def _transpose_kernel(ctype: str) -> ext.Kernel:
    return ext.Kernel(
        ext.kernel_source(__name__, "gemm_tc"),
        f"pgk::transpose_2d<{ctype}>",
        signature="const void* src, void* dst, int rows, int cols, long long lds, long long zs",
        name="gemm_tc.cu",
    )


# -- products -------------------------------------------------------------------


def _check_dtypes(*xs: Any) -> np.dtype:
    dt = xs[0].dtype
    if dt not in DTYPES or any(x.dtype != dt for x in xs):
        raise TypeError(f"the tensor-core GEMM takes bfloat16 or float16 operands of one dtype, got {[str(x.dtype) for x in xs]}")
    return dt


def epilogue_vector(v: gp.GPUArray | None, dt: np.dtype) -> gp.GPUArray | None:
    """A bias (or a scale vector) as the epilogue reads it: contiguous, in ``dt``."""
    if v is None:
        return None
    v = v.astype(dt, copy=False)
    return v if v.is_contiguous else v.copy()


def gemm(
    a: gp.GPUArray,
    b: gp.GPUArray,
    batch: tuple[int, ...],
    m: int,
    n: int,
    k: int,
    bias: gp.GPUArray | None = None,
    activation: str | None = None,
    residual: gp.GPUArray | None = None,
    config: Config | None = None,
) -> gp.GPUArray:
    """act((*batch, m, k) @ (*batch, k, n) + bias) + residual into a new
    contiguous (*batch, m, n) array; bias (n,), residual (*batch, m, n)."""
    dt = _check_dtypes(a, b)
    out = gp.empty((*batch, m, n), dt)
    nb = math.prod(batch)
    if out.size == 0:
        return out
    if k == 0:  # an empty sum: the epilogue of zeros
        acc = gp.zeros((*batch, m, n), gp.float32) + (0 if bias is None else bias.astype(gp.float32))
        out[...] = epilogue.finish(acc, activation, residual)
        return out
    cfg = config or config_for(m, n, nb)
    A, B = operand_a(a), operand_b(b, nk_only=cfg.wgmma)
    kp = A.array.shape[-1]
    bias_ = epilogue_vector(bias, dt)
    res = None
    if residual is not None:
        res = residual.astype(dt, copy=False).reshape(nb, m, n)
        if res.strides[-1] != res.itemsize or res.data_ptr % 2:
            res = res.copy()
    # The TMA producer for one product (batches would read as stacked rows, job rows z * m + m0; not yet run on a GPU)
    maps = tma_maps(cfg, (A.array.data_ptr, m, A.ld * 2), (B.array.data_ptr, n, B.ld * 2), kp) if nb == 1 else None
    kern = kernel("gemm", cfg, B.nk, CTYPE[dt], ACTIVATIONS[activation], bias_ is not None, res is not None, maps is not None)
    ldr, stride_r = (0, 0) if res is None else (res.strides[-2] // res.itemsize, res.strides[0] // res.itemsize if nb > 1 else 0)
    launch(
        kern, cfg, -(-m // cfg.bm) * -(-n // cfg.bn) * nb,
        A.array, B.array, out, bias_, res, nb, m, n, kp, A.ld, B.ld, n, ldr, A.batch_stride, B.batch_stride, m * n, stride_r, maps,
    )  # fmt: skip
    return out


def same_dtype(a: Any, b: Any, *args: Any, **kwargs: Any) -> bool:
    """Predicate: both operands of one dtype (mixed ones promote, elsewhere)."""
    return a.dtype == b.dtype


def matmul(a: Any, b: Any) -> gp.GPUArray:
    """``a @ b`` with NumPy's rules on the tensor-core kernel (bf16/fp16)."""
    s = matmul_shapes(a, b)
    return s.finish(gemm(s.a, s.b, s.batch, s.m, s.n, s.k))


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias``, the bias added in the kernel's epilogue."""
    n = linear_shapes(x, w, bias)
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])  # not -1: K may be 0
    return gemm(x2, w.T, (), x2.shape[0], n, x.shape[-1], bias).reshape(*x.shape[:-1], n)


def fused_linear(x: Any, w: Any, bias: Any = None, *, activation: str | None = None, residual: Any = None) -> gp.GPUArray:
    """``act(x @ w.T + bias) + residual`` in one kernel (the checks and
    semantics of ``gp.ops.fused_linear``, epilogue.py)."""
    act = epilogue.check(x, w, bias, activation, residual)
    n = w.shape[0]
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(math.prod(lead), k)
    res = None if residual is None else residual.reshape(x2.shape[0], n)
    return gemm(x2, w.T, (), x2.shape[0], n, k, bias, act, res).reshape(*lead, n)
