"""Grouped GEMM for mixture-of-experts layers: every expert e applies its own
Linear weight w[e] (out_features N, in_features K) to its own tokens.

``gp.ops.grouped_linear(x, w, offs, bias=None)``, the contiguous layout: x
(T, K) holds the tokens sorted by expert, ``offs`` (E,) int32 the cumulative
row ends (expert e owns rows [offs[e-1], offs[e]), as ``torch._grouped_mm``'s
``offs``); returns (T, N). Rows past offs[E-1] belong to no expert and are
zeros. ``offs`` must be non-decreasing and at most T: the reference checks
this (it reads offs on the host); the kernel does not (that would
synchronize) and reads the offsets clamped into that range.

``gp.ops.grouped_linear_masked(x, w, masked_m, bias=None)``, the masked
layout (decode, DeepGEMM's): x (E, max_m, K), expert e's valid rows are
[0, masked_m[e]); returns (E, max_m, N) with the other rows zero.

w is (E, N, K), bias (E, N) or None. The tensor-core kernel (bfloat16,
float16, SM 80+) computes the whole group in one launch; the reference (any
float dtype, every backend) runs ``gp.linear`` per expert.

fp8, with row-wise scales as ``torch._scaled_grouped_mm``:
``gp.ops.grouped_scaled_linear(x, x_scale, w, w_scale, offs, bias=None,
out_dtype=gp.bfloat16)`` and ``gp.ops.grouped_scaled_linear_masked(x,
x_scale, w, w_scale, masked_m, bias=None, out_dtype=gp.bfloat16)`` compute
``(x * x_scale[..., None]) @ (w[e] * w_scale[e][:, None]).T + bias[e]`` in
float32 and round once to ``out_dtype`` (bfloat16, float16 or float32). x and
w are float8 (e4m3fn or e5m2); x_scale (float32) holds one scale per row of
x (shape x.shape[:-1]), w_scale (float32, (E, N)) one per output channel of
each expert: ``quantize_fp8(x, granularity="row")`` gives the first (its
scale reshaped to x.shape[:-1]), and of ``w.reshape(E * N, K)`` the second.
The kernel (the same tile loop on e4m3: wgmma on SM 90, mma.sync on SM 89)
takes e4m3 operands with K a multiple of 16 and a bfloat16 or float16
output; the reference
(every backend) dequantizes to float32 and runs the float32 reference above.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import gemm_tc

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _check(x: Any, w: Any, counts: Any, bias: Any, op: str, x_ndim: int) -> tuple[int, int, int]:
    """Validate the operands of the float products; returns (E, N, K)."""
    e, n, k = _check_shapes(x, w, counts, bias, op, x_ndim)
    if (x.dtype.kind != "f" and x.dtype != np.dtype(gp.bfloat16)) or x.dtype != w.dtype:
        raise TypeError(f"{op}: x and w must be float arrays of one dtype, got {x.dtype} and {w.dtype}")
    return e, n, k


def _check_shapes(x: Any, w: Any, counts: Any, bias: Any, op: str, x_ndim: int) -> tuple[int, int, int]:
    """Validate the operands' types and shapes; returns (E, N, K)."""
    for name, v in (("x", x), ("w", w), ((op == "grouped_linear" and "offs") or "masked_m", counts)):
        if not isinstance(v, gp.GPUArray):
            raise TypeError(f"{op}: {name} must be a GPUArray, got {type(v).__name__}")
    if w.ndim != 3:
        raise ValueError(f"{op}: w must be 3-D (experts, out_features, in_features), got shape {w.shape}")
    e, n, k = w.shape
    if x.ndim != x_ndim or x.shape[-1] != k or (x_ndim == 3 and x.shape[0] != e):
        want = "(tokens, in_features)" if x_ndim == 2 else "(experts, max_m, in_features)"
        raise ValueError(f"{op}: x must be {want} with in_features {k} and {e} experts, got shape {x.shape}")
    if counts.shape != (e,) or counts.dtype not in _INDEX_DTYPES:
        raise ValueError(f"{op}: the row counts must be an int32 (or int64) array of shape ({e},), got {counts.shape} {counts.dtype}")
    if bias is not None and (not isinstance(bias, gp.GPUArray) or bias.shape != (e, n)):
        raise ValueError(f"{op}: bias must be a GPUArray of shape ({e}, {n}) or None")
    return e, n, k


def reference(x: Any, w: Any, offs: Any, bias: Any = None) -> gp.GPUArray:
    """``gp.linear`` per expert (offs read on the host and checked)."""
    e, n, _ = _check(x, w, offs, bias, "grouped_linear", 2)
    ends = offs.to_numpy().astype(np.int64)
    if np.any(np.diff(ends) < 0) or (e and (ends[0] < 0 or ends[-1] > x.shape[0])):
        raise ValueError(f"grouped_linear: offs must be non-decreasing and within [0, {x.shape[0]}], got {ends.tolist()}")
    out = gp.zeros((x.shape[0], n), x.dtype)
    start = 0
    for i, end in enumerate(ends.tolist()):
        if end > start:
            out[start:end] = gp.linear(x[start:end], w[i], None if bias is None else bias[i])
        start = end
    return out


def reference_masked(x: Any, w: Any, masked_m: Any, bias: Any = None) -> gp.GPUArray:
    """``gp.linear`` over each expert's valid rows (masked_m read on the host)."""
    e, n, _ = _check(x, w, masked_m, bias, "grouped_linear_masked", 3)
    out = gp.zeros((e, x.shape[1], n), x.dtype)
    for i, rows in enumerate(np.clip(masked_m.to_numpy(), 0, x.shape[1]).tolist()):
        if rows:
            out[i, :rows] = gp.linear(x[i, :rows], w[i], None if bias is None else bias[i])
    return out


def kernel_dtypes(x: Any, w: Any, *args: Any, **kwargs: Any) -> bool:
    """Predicate: operands the tensor-core kernel takes (bf16/fp16, one dtype)."""
    return x.dtype == w.dtype and x.dtype in gemm_tc.DTYPES


def _counts(c: gp.GPUArray) -> gp.GPUArray:
    c = c.astype(gp.int32, copy=False)
    return c if c.is_contiguous else c.copy()


def grouped_linear(x: Any, w: Any, offs: Any, bias: Any = None) -> gp.GPUArray:
    """The contiguous layout in one tensor-core launch (see the module docstring)."""
    e, n, k = _check(x, w, offs, bias, "grouped_linear", 2)
    if k == 0:  # empty sums: the bias alone (the reference, which reads offs on the host)
        return reference(x, w, offs, bias)
    t = x.shape[0]
    out = gp.empty((t, n), x.dtype)
    if out.size == 0 or e == 0:
        out[...] = 0
        return out
    cfg = gemm_tc.config_for(max(1, t // e), n, e, grouped=True)
    A, B = gemm_tc.operand_a(x), gemm_tc.operand_b(w.swapaxes(1, 2), nk_only=cfg.wgmma)
    b_ = gemm_tc.epilogue_vector(bias, x.dtype)
    maps = None
    if B.batch_stride == n * B.ld:  # the experts' weights as one stack of rows
        maps = gemm_tc.tma_maps(cfg, (A.array.data_ptr, t, A.ld * 2), (B.array.data_ptr, e * n, B.ld * 2), A.array.shape[-1])
    kernel = gemm_tc.kernel(
        "grouped", cfg, B.nk, gemm_tc.CTYPE[x.dtype], gemm_tc.ACTIVATIONS[None], b_ is not None, False, maps is not None
    )
    row_tiles = -(-t // cfg.bm) + e  # every expert may end in a partial tile
    gemm_tc.launch(
        kernel, cfg, row_tiles * -(-n // cfg.bn),
        A.array, B.array, out, b_, None, _counts(offs), e, t, n, A.array.shape[-1], A.ld, B.ld, n, 0, B.batch_stride, n, maps,
    )  # fmt: skip
    return out


def grouped_linear_masked(x: Any, w: Any, masked_m: Any, bias: Any = None) -> gp.GPUArray:
    """The masked layout in one tensor-core launch (see the module docstring)."""
    e, n, k = _check(x, w, masked_m, bias, "grouped_linear_masked", 3)
    if k == 0:  # empty sums: the bias alone
        return reference_masked(x, w, masked_m, bias)
    max_m = x.shape[1]
    out = gp.empty((e, max_m, n), x.dtype)
    if out.size == 0:
        return out
    cfg = gemm_tc.config_for(max_m, n, e, grouped=True)
    A, B = gemm_tc.operand_a(x), gemm_tc.operand_b(w.swapaxes(1, 2), nk_only=cfg.wgmma)
    b_ = gemm_tc.epilogue_vector(bias, x.dtype)
    kernel = gemm_tc.kernel("masked", cfg, B.nk, gemm_tc.CTYPE[x.dtype], gemm_tc.ACTIVATIONS[None], b_ is not None, False)
    gemm_tc.launch(
        kernel, cfg, -(-max_m // cfg.bm) * -(-n // cfg.bn) * e,
        A.array, B.array, out, b_, None, _counts(masked_m), e, max_m, n, A.array.shape[-1], A.ld, B.ld, n, 0, A.batch_stride,
        B.batch_stride, max_m * n, 0, n,
    )  # fmt: skip
    return out


# -- fp8 ---------------------------------------------------------------------------------------

FP8 = (np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2))
OUT_DTYPES = (np.dtype(gp.bfloat16), np.dtype(gp.float16), np.dtype(np.float32))


def _check_scaled(x: Any, x_scale: Any, w: Any, w_scale: Any, counts: Any, bias: Any, out_dtype: Any, op: str,
                  x_ndim: int) -> tuple[int, int, int, np.dtype]:  # fmt: skip
    """Validate the fp8 products' operands; returns (E, N, K, output dtype)."""
    e, n, k = _check_shapes(x, w, counts, bias, op, x_ndim)
    if x.dtype not in FP8 or w.dtype not in FP8:
        raise TypeError(f"{op}: x and w must be float8_e4m3fn or float8_e5m2, got {x.dtype} and {w.dtype}")
    for name, v, shape in (("x_scale", x_scale, x.shape[:-1]), ("w_scale", w_scale, (e, n))):
        if not isinstance(v, gp.GPUArray) or v.dtype != np.float32 or v.shape != shape:
            got = f"{v.dtype} {v.shape}" if isinstance(v, gp.GPUArray) else type(v).__name__
            raise ValueError(f"{op}: {name} must be a float32 GPUArray of shape {shape}, got {got}")
    try:
        out = np.dtype(out_dtype)
    except TypeError:
        out = None
    if out not in OUT_DTYPES:
        raise TypeError(f"{op}: out_dtype must be bfloat16, float16 or float32, got {out_dtype!r}")
    return e, n, k, out


def _dequantized(x: Any, x_scale: Any, w: Any, w_scale: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
    return x.astype(gp.float32) * x_scale[..., None], w.astype(gp.float32) * w_scale[..., None]


def reference_scaled(x: Any, x_scale: Any, w: Any, w_scale: Any, offs: Any, bias: Any = None, out_dtype: Any = gp.bfloat16) -> gp.GPUArray:
    """Dequantize to float32, the float32 reference, one rounding to out_dtype."""
    *_, out = _check_scaled(x, x_scale, w, w_scale, offs, bias, out_dtype, "grouped_scaled_linear", 2)
    xf, wf = _dequantized(x, x_scale, w, w_scale)
    return reference(xf, wf, offs, None if bias is None else bias.astype(gp.float32)).astype(out)


def reference_scaled_masked(x: Any, x_scale: Any, w: Any, w_scale: Any, masked_m: Any, bias: Any = None,
                            out_dtype: Any = gp.bfloat16) -> gp.GPUArray:  # fmt: skip
    """Dequantize to float32, the float32 masked reference, one rounding to out_dtype."""
    *_, out = _check_scaled(x, x_scale, w, w_scale, masked_m, bias, out_dtype, "grouped_scaled_linear_masked", 3)
    xf, wf = _dequantized(x, x_scale, w, w_scale)
    return reference_masked(xf, wf, masked_m, None if bias is None else bias.astype(gp.float32)).astype(out)


def _packed(v: Any) -> bool:
    return isinstance(v, gp.GPUArray) and v.is_contiguous and v.data_ptr % 16 == 0


def kernel_takes_scaled(x: Any, x_scale: Any, w: Any, w_scale: Any, counts: Any, bias: Any = None, out_dtype: Any = gp.bfloat16) -> bool:
    """Predicate of the fp8 kernel: e4m3 x and w, contiguous and 16-byte aligned,
    K a positive multiple of 16, float32 scales, a bfloat16 or float16 output
    (anything else, wrong arguments included, goes to the reference)."""
    try:
        out = np.dtype(out_dtype)
    except TypeError:
        return False
    e4m3 = np.dtype(gp.float8_e4m3fn)
    return (
        out in gemm_tc.CTYPE
        and _packed(x) and _packed(w) and x.dtype == e4m3 and w.dtype == e4m3
        and w.ndim == 3 and x.ndim >= 2 and x.shape[-1] == w.shape[2] and w.shape[2] % 16 == 0 and w.shape[2] > 0
        and all(isinstance(v, gp.GPUArray) and v.dtype == np.float32 for v in (x_scale, w_scale))
        and (bias is None or isinstance(bias, gp.GPUArray))
    )  # fmt: skip


def _scaled_operands(x_scale: Any, w_scale: Any, bias: Any, out: np.dtype) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray | None]:
    """Contiguous scales and bias (in the output dtype); the caller holds them until the launch."""
    xs, ws = (v if v.is_contiguous else v.copy() for v in (x_scale, w_scale))
    return xs, ws, gemm_tc.epilogue_vector(bias, out)


def grouped_scaled_linear(x: Any, x_scale: Any, w: Any, w_scale: Any, offs: Any, bias: Any = None,
                          out_dtype: Any = gp.bfloat16) -> gp.GPUArray:  # fmt: skip
    """The fp8 contiguous layout in one tensor-core launch (see the module docstring)."""
    e, n, k, out_dt = _check_scaled(x, x_scale, w, w_scale, offs, bias, out_dtype, "grouped_scaled_linear", 2)
    t = x.shape[0]
    out = gp.empty((t, n), out_dt)
    if out.size == 0 or e == 0:
        out[...] = 0
        return out
    xs, ws, b = _scaled_operands(x_scale, w_scale, bias, out_dt)
    cfg = gemm_tc.config_for(max(1, t // e), n, e, grouped=True)
    maps = gemm_tc.tma_maps(cfg, (x.data_ptr, t, k), (w.data_ptr, e * n, k), k // 2)
    kernel = gemm_tc.fp8_kernel("grouped_fp8", cfg, gemm_tc.CTYPE[out_dt], bias is not None, maps is not None)
    row_tiles = -(-t // cfg.bm) + e  # every expert may end in a partial tile
    gemm_tc.launch(
        kernel, cfg, row_tiles * -(-n // cfg.bn),
        x, w, out, b, xs, ws, _counts(offs), e, t, n, k // 2, k // 2, k // 2, n, n * k // 2, maps,
    )  # fmt: skip
    return out


def grouped_scaled_linear_masked(x: Any, x_scale: Any, w: Any, w_scale: Any, masked_m: Any, bias: Any = None,
                                 out_dtype: Any = gp.bfloat16) -> gp.GPUArray:  # fmt: skip
    """The fp8 masked layout in one tensor-core launch (see the module docstring)."""
    e, n, k, out_dt = _check_scaled(x, x_scale, w, w_scale, masked_m, bias, out_dtype, "grouped_scaled_linear_masked", 3)
    max_m = x.shape[1]
    out = gp.empty((e, max_m, n), out_dt)
    if out.size == 0:
        return out
    xs, ws, b = _scaled_operands(x_scale, w_scale, bias, out_dt)
    cfg = gemm_tc.config_for(max_m, n, e, grouped=True)
    kernel = gemm_tc.fp8_kernel("masked_fp8", cfg, gemm_tc.CTYPE[out_dt], bias is not None)
    gemm_tc.launch(
        kernel, cfg, -(-max_m // cfg.bm) * -(-n // cfg.bn) * e,
        x, w, out, b, xs, ws, _counts(masked_m), e, max_m, n, k // 2, k // 2, k // 2, n, max_m * k // 2, n * k // 2,
    )  # fmt: skip
    return out
