"""Fused decode ops: the norm or the activation that feeds a linear layer,
and the layer, as one registry op.

- ``add_rms_norm_linear(x, residual, weight, eps, w, bias=None)`` returns
  ``(rms_norm(h, weight, eps) @ w.T + bias, h)`` with ``h = x + residual``
  rounded to x's dtype (``h = x`` when residual is None): a pre-norm block's
  input projection, with the residual stream it updates. The norm is
  ``add_rms_norm``'s (weight None: no scale), rounded once to x's dtype.
- ``swiglu_linear(gate_up, w, bias=None)`` returns
  ``(silu(gate) * up) @ w.T + bias`` for gate_up (..., 2k) holding [gate, up]
  and w (n, k): a gated MLP's down projection over its fused gate/up rows;
  ``silu(gate) * up`` is ``swiglu``'s, rounded once to gate_up's dtype.

The ops are defined here with their reference (every backend): the unfused
path through the registry, ``add_rms_norm`` (``rms_norm`` without a
residual) or ``swiglu``, then ``gp.linear``, so that where no fused kernel
takes a call it costs what the unfused calls cost and gives what they give.
pygpukit-gemm registers its decode GEMV with the op in its prologue for
these op names (1 or 2 rows of float16 / bfloat16), and a model always calls
the op: the registry picks.
"""

from __future__ import annotations

from typing import Any

import pygpukit as gp
from pygpukit import ext

from .checks import check_float


def add_rms_norm_linear(
    x: gp.GPUArray, residual: gp.GPUArray | None, weight: gp.GPUArray | None, eps: float, w: gp.GPUArray, bias: gp.GPUArray | None = None
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``(rms_norm(h, weight, eps) @ w.T + bias, h)`` with ``h = x + residual`` (x when residual is None)."""
    return ext.op("add_rms_norm_linear")(x, residual, weight, eps, w, bias)


def swiglu_linear(gate_up: gp.GPUArray, w: gp.GPUArray, bias: gp.GPUArray | None = None) -> gp.GPUArray:
    """``swiglu(gate_up) @ w.T + bias``: gate_up (..., 2k) holds [gate, up], w is (n, k)."""
    return ext.op("swiglu_linear")(gate_up, w, bias)


# -- checks --------------------------------------------------------------------------


def _check_projection(op: str, x: Any, k: int, w: Any, bias: Any) -> None:
    check_float(op, "w", w)
    check_float(op, "bias", bias, optional=True)
    if w.ndim != 2 or w.shape[1] != k:
        raise ValueError(f"{op}: w must be (out_features, {k}), got shape {w.shape}")
    if bias is not None and bias.shape != (w.shape[0],):
        raise ValueError(f"{op}: bias must be ({w.shape[0]},), got shape {bias.shape}")
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis")


def check_add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: Any, w: Any, bias: Any = None) -> None:
    """The checks of ``add_rms_norm_linear``: TypeError / ValueError naming the argument that is wrong."""
    op = "add_rms_norm_linear"
    check_float(op, "x", x)
    check_float(op, "residual", residual, optional=True)
    check_float(op, "weight", weight, optional=True)
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"{op}: residual must match x {x.shape} {x.dtype}, got {residual.shape} {residual.dtype}")
    k = x.shape[-1] if x.ndim else 0
    if weight is not None and weight.shape != (k,):
        raise ValueError(f"{op}: weight must be ({k},), got shape {weight.shape}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a number >= 0, got {eps!r}")
    _check_projection(op, x, k, w, bias)


def check_swiglu_linear(gate_up: Any, w: Any, bias: Any = None) -> None:
    """The checks of ``swiglu_linear``: TypeError / ValueError naming the argument that is wrong."""
    op = "swiglu_linear"
    check_float(op, "gate_up", gate_up)
    if gate_up.ndim == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"{op}: gate_up must be (..., 2 * k) holding [gate, up], got shape {gate_up.shape}")
    _check_projection(op, gate_up, gate_up.shape[-1] // 2, w, bias)


# -- reference (any backend, any float dtype): the unfused ops ----------------------------------


def reference_add_rms_norm_linear(x: Any, residual: Any, weight: Any, eps: float, w: Any, bias: Any = None) -> tuple[gp.GPUArray, Any]:
    check_add_rms_norm_linear(x, residual, weight, eps, w, bias)
    if residual is None:
        h, normed = x, ext.op("rms_norm")(x, weight, eps)
    else:
        normed, h = ext.op("add_rms_norm")(x, residual, weight, eps)
    return gp.linear(normed, w, bias), h


def reference_swiglu_linear(gate_up: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    check_swiglu_linear(gate_up, w, bias)
    return gp.linear(ext.op("swiglu")(gate_up, None), w, bias)


def register(registry: Any) -> None:
    ext.register_family(registry, "add_rms_norm_linear", nkey=1, doc=__doc__ or "", reference=reference_add_rms_norm_linear)
    ext.register_family(registry, "swiglu_linear", nkey=1, doc=__doc__ or "", reference=reference_swiglu_linear)
