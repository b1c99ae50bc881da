"""``gp.ops.scaled_mm``: products of float8 matrices with float32 scales, as
``torch._scaled_mm``: out = (scale_a * a) @ (scale_b * b) (+ bias) in
``out_dtype`` (bfloat16, float16 or float32), accumulated in float32.

a is (M, K), b is (K, N) (``b = w.T`` for a Linear weight w of shape (N, K)).
The shapes of the scales say how they apply:

- per tensor: scale_a and scale_b hold one value each;
- row-wise: scale_a (M, 1) scales the rows of a, scale_b (1, N) the columns of
  b (the rows of w);
- block-scaled, DeepGEMM's recipe: scale_a (M, ceil(K/128)) with scale_a[i, j]
  for a[i, 128j:128j+128] (1x128 blocks along K), and scale_b (ceil(K/128),
  ceil(N/128)) with scale_b[j, l] for b[128j:128j+128, 128l:128l+128]
  (128x128 blocks). For b = w.T that is the transpose of w's block scales:
  ``quantize_fp8(w, granularity="block").scale.T``.

On the GPU, the plugin's own e4m3 kernel (gemm_tc.py's tile loop with
mma.sync.m16n8k32.e4m3 and a scaling epilogue, SM 89+) runs per-tensor and
row-wise products of two e4m3 operands with k a multiple of 16 into bfloat16
or float16, below cuBLASLt where both apply. cuBLASLt's fp8 tensor cores run per-tensor products on SM 89+ and
row-wise and block-scaled ones on SM 90 exactly (cuBLASLt 12.9+), where k and n
are multiples of 16 (and m a multiple of 4 for block scales) and the operands
are not both e5m2. cuBLASLt reads a row-major and b column-major; other
layouts are copied into those. It reads block scales of a M-major and those
of b K-major with a stride of ceil(K/128) rounded up to 4: scale_a.T and
scale_b.T contiguous (and ceil(K/128) a multiple of 4) are read as they are,
other layouts copied per call. Everything else (other shapes, older GPUs,
the CPU backend) takes the reference implementation: dequantize to float32,
multiply (exact FP32), scale, round once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import cublaslt, gemm_tc
from .fp8 import expand_scale

FP8 = (np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2))
OUT_DTYPES = (np.dtype(gp.bfloat16), np.dtype(gp.float16), np.dtype(gp.float32))
BLOCK = 128  # the K extent of a scale block, and the N extent of b's
# cuBLASLt's modes of (scale_a, scale_b) per scaling
LT_MODES = {
    "tensor": (cublaslt.SCALE_SCALAR_32F, cublaslt.SCALE_SCALAR_32F),
    "row": (cublaslt.SCALE_OUTER_VEC_32F, cublaslt.SCALE_OUTER_VEC_32F),
    "block": (cublaslt.SCALE_VEC128_32F, cublaslt.SCALE_BLK128X128_32F),
}


def scale_mode(a: Any, b: Any, scale_a: Any, scale_b: Any) -> str | None:
    """The scaling the shapes of the scales say ("tensor", "row" or "block"), or
    None when the arguments fit none (then ``check`` says what is wrong). Where
    two readings fit (one-element scales; K <= 128 and N = 1), they mean the same product."""
    if not all(isinstance(x, gp.GPUArray) for x in (a, b, scale_a, scale_b)) or a.ndim != 2 or b.ndim != 2:
        return None
    if scale_a.dtype != np.float32 or scale_b.dtype != np.float32:
        return None
    (m, k), n = a.shape, b.shape[1]
    if scale_a.size == 1 and scale_b.size == 1:
        return "tensor"
    if scale_a.shape == (m, 1) and scale_b.shape == (1, n):
        return "row"
    kb = -(-k // BLOCK)
    if scale_a.shape == (m, kb) and scale_b.shape == (kb, -(-n // BLOCK)):
        return "block"
    return None


def check(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any, bias: Any) -> np.dtype:
    """Validate the operands of scaled_mm; returns the output dtype."""
    for name, x in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(x, gp.GPUArray):
            raise TypeError(f"scaled_mm: {name} must be a GPUArray, got {type(x).__name__}")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"scaled_mm: a and b must be 2-D, got shapes {a.shape} and {b.shape}")
    if a.dtype not in FP8 or b.dtype not in FP8:
        raise TypeError(f"scaled_mm: a and b must be float8_e4m3fn or float8_e5m2, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm: a is {a.shape} and b is {b.shape}: the inner dimensions differ")
    if scale_a.dtype != np.float32 or scale_b.dtype != np.float32:
        raise TypeError(f"scaled_mm: scale_a and scale_b must be float32, got {scale_a.dtype} and {scale_b.dtype}")
    if scale_mode(a, b, scale_a, scale_b) is None:
        (m, k), n = a.shape, b.shape[1]
        kb, nb = -(-k // BLOCK), -(-n // BLOCK)
        raise ValueError(
            f"scaled_mm: scale_a of shape {scale_a.shape} and scale_b of shape {scale_b.shape} fit no scaling of a {a.shape} "
            f"and b {b.shape}: per tensor (one value each), row-wise (({m}, 1) and (1, {n})) or "
            f"block-scaled (({m}, {kb}) and ({kb}, {nb}), 1x128 blocks of a and 128x128 blocks of b)"
        )
    out = np.dtype(out_dtype)
    if out not in OUT_DTYPES:
        raise TypeError(f"scaled_mm: out_dtype must be bfloat16, float16 or float32, got {out}")
    if bias is not None and (not isinstance(bias, gp.GPUArray) or bias.shape != (b.shape[1],)):
        raise ValueError(f"scaled_mm: bias must be a GPUArray of shape ({b.shape[1]},)")
    return out


def reference(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = gp.bfloat16, bias: Any = None) -> gp.GPUArray:
    """Dequantize to float32, multiply (exact FP32), add the bias, round once."""
    out = check(a, b, scale_a, scale_b, out_dtype, bias)
    a32, b32 = a.astype(gp.float32), b.astype(gp.float32)
    if scale_mode(a, b, scale_a, scale_b) == "block":
        y = gp.matmul(a32 * expand_scale(scale_a, a.shape, (1, BLOCK)), b32 * expand_scale(scale_b, b.shape, (BLOCK, BLOCK)))
    else:  # scales of whole rows of a and columns of b come out of the sums
        y = gp.matmul(a32, b32) * scale_a.reshape(-1, 1) * scale_b.reshape(1, -1)
    if bias is not None:
        y = y + bias.astype(gp.float32)
    return y.astype(out)


def _unit_row(x: gp.GPUArray) -> bool:  # row-major readable: unit stride along the last axis
    return x.shape[1] == 1 or x.strides[1] == x.itemsize


def _unit_col(x: gp.GPUArray) -> bool:  # column-major readable
    return x.shape[0] == 1 or x.strides[0] == x.itemsize


def _tensor_core_shapes(a: Any, b: Any) -> bool:
    return a.shape[1] % 16 == 0 and b.shape[1] % 16 == 0 and not (a.dtype == FP8[1] and b.dtype == FP8[1])


def fits_tensor_cores(a: Any, b: Any, scale_a: Any = None, scale_b: Any = None, *args: Any, **kwargs: Any) -> bool:
    """What cuBLASLt's per-tensor fp8 path takes: k and n multiples of 16, not e5m2 with e5m2."""
    return scale_mode(a, b, scale_a, scale_b) == "tensor" and _tensor_core_shapes(a, b)


def _aligned(x: gp.GPUArray) -> gp.GPUArray:  # one contiguous run from a 16-byte boundary, as cuBLASLt reads scales
    return x if x.is_contiguous and x.data_ptr % 16 == 0 else x.copy()


def _lt_scales(mode: str, scale_a: gp.GPUArray, scale_b: gp.GPUArray) -> tuple[gp.GPUArray, gp.GPUArray]:
    """The scales in the layouts cuBLASLt reads for ``mode``."""
    if mode == "tensor":
        return scale_a, scale_b
    if mode == "row":
        return _aligned(scale_a), _aligned(scale_b)
    sa = _aligned(scale_a.T)  # M-major: the M scales of each K block side by side
    kb, nb = scale_b.shape
    if kb % 4 == 0:  # K-major: the K scales of each N block side by side
        return sa, _aligned(scale_b.T)
    # the stride between N blocks is rounded up to 4; the padding must exist after the last one too
    sb = gp.zeros((nb, -(-kb // 4) * 4), gp.float32)
    sb[:, :kb] = scale_b.T
    return sa, sb


def scaled_mm(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = gp.bfloat16, bias: Any = None) -> gp.GPUArray:
    """The cuBLASLt fp8 product (see the module docstring)."""
    out = check(a, b, scale_a, scale_b, out_dtype, bias)
    mode = scale_mode(a, b, scale_a, scale_b)
    assert mode is not None  # check raised otherwise
    if not _unit_row(a):
        a = a.copy()
    if not _unit_col(b):
        b = b.T.copy().T  # column-major
    if bias is not None:
        bias = bias.astype(out, copy=False)
        bias = bias if bias.is_contiguous else bias.copy()
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    call = cublaslt.prepare(a, b, (), m, n, k, (m, n), bias is not None, out, scaled=True, scale_modes=LT_MODES[mode])
    if call is None:  # an empty product
        return reference(a, b, scale_a, scale_b, out, bias)
    sa, sb = _lt_scales(mode, scale_a, scale_b)
    return call(a.data_ptr, b.data_ptr, 0 if bias is None else bias.data_ptr, sa.data_ptr, sb.data_ptr)


# -- the own kernel ---------------------------------------------------------------------------


def fits_own_kernel(a: Any, b: Any, scale_a: Any = None, scale_b: Any = None, out_dtype: Any = gp.bfloat16, bias: Any = None) -> bool:
    """What the own e4m3 kernel takes: per-tensor or row-wise scales, both
    operands e4m3, k a positive multiple of 16, a bfloat16 or float16 output."""
    try:
        out = np.dtype(out_dtype)
    except TypeError:
        return False
    return (
        scale_mode(a, b, scale_a, scale_b) in ("tensor", "row")
        and a.dtype == FP8[0] and b.dtype == FP8[0]
        and a.shape[1] % 16 == 0 and min(a.shape[0], a.shape[1], b.shape[1]) > 0
        and out in gemm_tc.CTYPE
        and (bias is None or isinstance(bias, gp.GPUArray))
    )  # fmt: skip


def _vector(scale: gp.GPUArray, length: int) -> gp.GPUArray:
    """A contiguous float32 (length,) of a row-wise scale, or of a per-tensor one repeated."""
    if scale.size == length:
        v = scale.reshape(length)
        return v if v.is_contiguous else v.copy()
    return gp.ones((length,), gp.float32) * scale.reshape(1)


def scaled_mm_mma(a: Any, b: Any, scale_a: Any, scale_b: Any, out_dtype: Any = gp.bfloat16, bias: Any = None) -> gp.GPUArray:
    """The own e4m3 product (``fits_own_kernel``): a read as row-major, b as
    column-major (copied into those layouts otherwise), one launch."""
    out = check(a, b, scale_a, scale_b, out_dtype, bias)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a = a if a.is_contiguous and a.data_ptr % 16 == 0 else a.copy()
    bt = b.T if b.T.is_contiguous and b.data_ptr % 16 == 0 else b.T.copy()  # (n, k) rows
    sa, sb = _vector(scale_a, m), _vector(scale_b, n)
    bias_ = gemm_tc.epilogue_vector(bias, out)
    y = gp.empty((m, n), out)
    cfg = gemm_tc.config_for(m, n, 1)
    maps = gemm_tc.tma_maps(cfg, (a.data_ptr, m, k), (bt.data_ptr, n, k), k // 2)
    kernel = gemm_tc.fp8_kernel("gemm_fp8", cfg, gemm_tc.CTYPE[out], bias_ is not None, maps is not None)
    gemm_tc.launch(kernel, cfg, -(-m // cfg.bm) * -(-n // cfg.bn), a, bt, y, bias_, sa, sb, m, n, k // 2, k // 2, k // 2, n, maps)
    return y
