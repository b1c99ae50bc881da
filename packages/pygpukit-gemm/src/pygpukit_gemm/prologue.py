"""Products with the op before them fused in, for decode: the norm or the
activation that feeds a linear layer, and the layer, as one op.

- ``gp.ops.add_rms_norm_linear(x, residual, weight, eps, w, bias=None)``
  returns ``(rms_norm(h, weight, eps) @ w.T + bias, h)`` with
  ``h = x + residual`` rounded to x's dtype (``h = x`` when residual is None):
  a pre-norm block's input projection, with the residual stream it updates.
  ``rms_norm(h) = h * rsqrt(mean(h**2) + eps) * weight`` (weight None: no
  scale), in float32 (float64 for float64), rounded once to x's dtype.
- ``gp.ops.swiglu_linear(gate_up, w, bias=None)`` returns
  ``(silu(gate) * up) @ w.T + bias`` for gate_up (..., 2k) holding [gate, up]
  and w (n, k): a gated MLP's down projection over its fused gate/up rows;
  ``silu(gate) * up`` in float32, rounded once to gate_up's dtype.

Both compute exactly what pygpukit-nn's ``add_rms_norm`` / ``rms_norm`` and
``swiglu`` followed by ``gp.linear`` compute (the rounded intermediate is the
product's input), so a model can take either path. The reference (every
backend) is those steps with core's ops; the CUDA implementation (the
tensor-core decode GEMV with a prologue, gemv.py) takes 1 or 2 rows of
float16 / bfloat16 with k a multiple of 128 whose activations fit 96 KB of
shared memory, and weights in x's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from .epilogue import check_operand


def _check_projection(op: str, x: Any, k: int, w: Any, bias: Any) -> None:
    check_operand(op, "w", w)
    check_operand(op, "bias", bias, optional=True)
    if w.ndim != 2 or w.shape[1] != k:
        raise ValueError(f"{op}: w must be (out_features, {k}), got shape {w.shape}")
    if bias is not None and bias.shape != (w.shape[0],):
        raise ValueError(f"{op}: bias must be ({w.shape[0]},), got shape {bias.shape}")
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis")


def check_add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: Any, w: Any, bias: Any = None) -> None:
    """TypeError / ValueError naming the argument that is wrong."""
    op = "add_rms_norm_linear"
    check_operand(op, "x", x)
    check_operand(op, "residual", residual, optional=True)
    check_operand(op, "weight", weight, optional=True)
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"{op}: residual must match x {x.shape} {x.dtype}, got {residual.shape} {residual.dtype}")
    k = x.shape[-1] if x.ndim else 0
    if weight is not None and weight.shape != (k,):
        raise ValueError(f"{op}: weight must be ({k},), got shape {weight.shape}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a number >= 0, got {eps!r}")
    _check_projection(op, x, k, w, bias)


def check_swiglu_linear(gate_up: Any, w: Any, bias: Any = None) -> None:
    """TypeError / ValueError naming the argument that is wrong."""
    op = "swiglu_linear"
    check_operand(op, "gate_up", gate_up)
    if gate_up.ndim == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"{op}: gate_up must be (..., 2 * k) holding [gate, up], got shape {gate_up.shape}")
    _check_projection(op, gate_up, gate_up.shape[-1] // 2, w, bias)


def _compute(dtype: np.dtype) -> Any:
    return gp.float64 if dtype == np.dtype(gp.float64) else gp.float32


def reference_add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: float, w: Any, bias: Any = None) -> tuple[gp.GPUArray, Any]:
    check_add_rms_norm_linear(x, residual, weight, eps, w, bias)
    cdt = _compute(x.dtype)
    h = x if residual is None else (x.astype(cdt) + residual.astype(cdt)).astype(x.dtype)
    hf = h.astype(cdt)
    normed = hf * gp.rsqrt(gp.mean(hf * hf, axis=-1, keepdims=True) + eps)
    if weight is not None:
        normed = normed * weight.astype(cdt)
    return gp.linear(normed.astype(x.dtype), w, bias), h


def reference_swiglu_linear(gate_up: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    check_swiglu_linear(gate_up, w, bias)
    k = gate_up.shape[-1] // 2
    cdt = _compute(gate_up.dtype)
    act = gp.silu(gate_up[..., :k].astype(cdt)) * gate_up[..., k:].astype(cdt)
    return gp.linear(act.astype(gate_up.dtype), w, bias)
