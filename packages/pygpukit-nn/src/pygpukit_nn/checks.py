"""Argument checks of nn's ops, public so that other implementations of the
same ops (pygpukit-triton's, a third party's) validate exactly as nn does:
clear, typed errors that name the op and the argument."""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

import pygpukit as gp

__all__ = [
    "FLOATS",
    "INT32_MAX",
    "ROPE_LAYOUTS",
    "SDPA_LAYOUTS",
    "AttentionArgs",
    "check_affine",
    "check_approximate",
    "check_attention",
    "check_eps",
    "check_float",
    "check_rope",
    "check_rows",
    "halves",
    "integer",
    "is_int",
]

INT32_MAX = 2**31 - 1  # the kernels index with 32-bit integers
FLOATS = (np.dtype(gp.float16), np.dtype(gp.bfloat16), np.dtype(gp.float32), np.dtype(gp.float64))
_INDEX = (np.dtype(np.int32), np.dtype(np.int64))
_GELU = {"none": "pgk::Gelu", "tanh": "pgk::GeluTanh"}  # approximate -> the kernels' functor
ROPE_LAYOUTS = ("neox", "gptj")
SDPA_LAYOUTS = ("bhsd", "bshd")


# -- scalars ---------------------------------------------------------------------------


def integer(op: str, name: str, v: Any, low: int, high: int = INT32_MAX) -> int:
    """``v`` as an int in [low, high] (bools refused), else TypeError / ValueError naming ``op`` and ``name``."""
    try:
        if isinstance(v, bool):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {type(v).__name__}") from None
    if not low <= v <= high:
        bound = f"at least {low}" if v < low and high == INT32_MAX else f"in [{low}, {high}]"
        raise ValueError(f"{op}: {name} must be {bound}, got {v}")
    return v


def is_int(v: Any) -> bool:
    """An int (Python or NumPy), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_eps(op: str, eps: Any) -> float:
    """``eps`` as a float, or ValueError unless it is a non-negative number."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a non-negative number, got {eps!r}")
    return float(eps)


# -- float operands ----------------------------------------------------------------------


def check_float(op: str, name: str, a: Any, optional: bool = False) -> None:
    """TypeError unless ``a`` is a float16 / bfloat16 / float32 / float64 GPUArray
    (or None, when ``optional``)."""
    if a is None and optional:
        return
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray{' or None' if optional else ''}, got {type(a).__name__}")
    if a.dtype not in FLOATS:
        raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")


def check_affine(op: str, name: str, a: Any, size: int) -> None:
    """A norm's weight or bias: None, or a float GPUArray of shape (size,)."""
    if a is None:
        return
    check_float(op, name, a)
    if a.shape != (size,):
        raise ValueError(f"{op}: {name} must have shape ({size},), got {a.shape}")


def check_rows(op: str, x: Any, residual: Any, weight: Any, bias: Any, eps: Any) -> float:
    """Checks of the last-axis norms (rms_norm, layer_norm and their add_ forms); returns eps as a float."""
    check_float(op, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis, got a 0-d array")
    if residual is not None:
        check_float(op, "residual", residual)
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(f"{op}: residual must match x's shape {x.shape} and dtype {x.dtype}, got {residual.shape} {residual.dtype}")
    check_affine(op, "weight", weight, x.shape[-1])
    check_affine(op, "bias", bias, x.shape[-1])
    return check_eps(op, eps)


# -- activations ---------------------------------------------------------------------------


def halves(op: str, x: Any, up: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
    """(gate, up) of a gated activation's arguments, checked: x's last axis halves, or x and ``up``."""
    check_float(op, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis")
    if up is None:
        if x.shape[-1] % 2:
            raise ValueError(f"{op}: x holds [gate, up] along its last axis, which must be even, got {x.shape[-1]}")
        h = x.shape[-1] // 2
        return x[..., :h], x[..., h:]
    check_float(op, "up", up)
    if up.shape != x.shape or up.dtype != x.dtype:
        raise ValueError(f"{op}: up must match the gate's shape {x.shape} and dtype {x.dtype}, got {up.shape} {up.dtype}")
    return x, up


def check_approximate(approximate: Any, op: str = "geglu") -> str:
    """GELU's ``approximate`` ("none" or "tanh"), else ValueError; returns nn's kernel functor name for it."""
    if approximate not in _GELU:
        raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _GELU[approximate]


# -- rope ------------------------------------------------------------------------------------


def _no_broadcast(x: gp.GPUArray, name: str) -> None:
    if x.size and any(st == 0 and n > 1 for st, n in zip(x.strides, x.shape)):
        raise ValueError(f"rope: {name} must not be a broadcast view (it is written in place), got strides {x.strides}")


def check_rope(q: Any, k: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any) -> tuple[tuple[int, ...], int]:
    """Checks of the rope operands; returns (the leading shape (T,) or (B, S), rotary_dim / 2)."""
    if not isinstance(q, gp.GPUArray):
        raise TypeError(f"rope: q must be a GPUArray, got {type(q).__name__}")
    if q.dtype not in FLOATS:
        raise TypeError(f"rope: q must be float16, bfloat16, float32 or float64, got {q.dtype}")
    if q.ndim not in (3, 4):
        raise ValueError(f"rope: q must be (T, heads, head_dim) or (B, S, heads, head_dim), got shape {q.shape}")
    lead, d = q.shape[:-2], q.shape[-1]
    if k is not None:
        if not isinstance(k, gp.GPUArray):
            raise TypeError(f"rope: k must be a GPUArray or None, got {type(k).__name__}")
        if k.dtype != q.dtype:
            raise TypeError(f"rope: k must have q's dtype {q.dtype}, got {k.dtype}")
        if k.ndim != q.ndim or k.shape[:-2] != lead or k.shape[-1] != d:
            raise ValueError(f"rope: k must be {(*lead, 'heads', d)} like q {q.shape}, got shape {k.shape}")
        _no_broadcast(k, "k")
    _no_broadcast(q, "q")
    if not isinstance(cos_sin, gp.GPUArray):
        raise TypeError(f"rope: cos_sin must be a GPUArray, got {type(cos_sin).__name__}")
    if cos_sin.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"rope: cos_sin must be float32 (or float64), got {cos_sin.dtype}")
    if cos_sin.ndim != 3 or cos_sin.shape[1] != 2:
        raise ValueError(f"rope: cos_sin must be (max_positions, 2, rotary_dim / 2), got shape {cos_sin.shape}")
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"rope: layout must be one of {', '.join(ROPE_LAYOUTS)}, got {layout!r}")
    if not is_int(rotary_dim):
        raise TypeError(f"rope: rotary_dim must be an int, got {type(rotary_dim).__name__}")
    if rotary_dim % 2 or not 2 <= rotary_dim <= d or rotary_dim != 2 * cos_sin.shape[2]:
        raise ValueError(
            f"rope: rotary_dim must be even, in [2, head_dim={d}] and twice cos_sin's last axis ({cos_sin.shape[2]}), got {rotary_dim}"
        )
    if not isinstance(positions, gp.GPUArray):
        raise TypeError(f"rope: positions must be a GPUArray, got {type(positions).__name__}")
    if positions.dtype not in _INDEX:
        raise TypeError(f"rope: positions must be int32 or int64, got {positions.dtype}")
    if positions.shape != lead and positions.shape != lead[-1:]:
        want = f"{lead}" if len(lead) == 1 else f"{lead} or {lead[-1:]}"
        raise ValueError(f"rope: positions must have shape {want} for q of shape {q.shape}, got {positions.shape}")
    return lead, int(rotary_dim) // 2


# -- attention --------------------------------------------------------------------------------


class AttentionArgs(NamedTuple):
    """Checked arguments of ``sdpa``, with q, k and v as (B, H, S, D) views."""

    q: gp.GPUArray
    k: gp.GPUArray
    v: gp.GPUArray
    mask: gp.GPUArray | None  # 4-d, broadcastable to (B, Hq, Sq, Sk)
    scale: float
    left: int | None  # None: no limit
    right: int | None  # None: no limit; causal folds in as right <= 0
    kv_lens: gp.GPUArray | None
    bshd: bool


def _window_side(side: Any, which: str) -> int | None:
    if side is None:
        return None
    if isinstance(side, bool) or not isinstance(side, (int, np.integer)):
        raise TypeError(f"sdpa: window {which} must be an int or None, got {type(side).__name__}")
    if side < -1:
        raise ValueError(f"sdpa: window {which} must be >= 0, or -1 / None for no limit, got {side}")
    return None if side == -1 else int(side)


def check_attention(q: Any, k: Any, v: Any, mask: Any, causal: Any, scale: Any, window: Any, kv_lens: Any, layout: Any) -> AttentionArgs:
    """Every check of ``sdpa`` (the arguments of ``scaled_dot_product_attention``); returns them checked."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, gp.GPUArray):
            raise TypeError(f"sdpa: {name} must be a GPUArray, got {type(a).__name__}")
        if a.dtype not in FLOATS:
            raise TypeError(f"sdpa: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")
        if a.ndim != 4:
            raise ValueError(f"sdpa: {name} must be 4-d ({'B, S, H, D' if layout == 'bshd' else 'B, H, S, D'}), got shape {a.shape}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"sdpa: q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if layout not in SDPA_LAYOUTS:
        raise ValueError(f"sdpa: layout must be 'bhsd' or 'bshd', got {layout!r}")
    bshd = layout == "bshd"
    if bshd:
        q, k, v = q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2)
    (b, hq, sq, d), (bk, hkv, sk, dk), (bv, hv, sv, dv) = q.shape, k.shape, v.shape
    if (bk, hkv, sk) != (bv, hv, sv):
        raise ValueError(f"sdpa: k and v must agree in batch, heads and keys, got k {k.shape} and v {v.shape} (as B, H, S, D)")
    if bk != b:
        raise ValueError(f"sdpa: q and k must have the same batch size, got {b} and {bk}")
    if dk != d or d < 1 or dv < 1:
        raise ValueError(f"sdpa: k's head_dim must equal q's ({d}) and both be >= 1, got {dk} (v's: {dv})")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"sdpa: q's {hq} heads must be a multiple of k/v's {hkv} heads (GQA), got mismatched heads")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"sdpa: causal must be a bool, got {type(causal).__name__}")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) or not math.isfinite(scale):
        raise ValueError(f"sdpa: scale must be a finite number or None, got {scale!r}")
    left = right = None
    if window is not None:
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise TypeError(f"sdpa: window must be a (left, right) pair or None, got {window!r}")
        left, right = _window_side(window[0], "left"), _window_side(window[1], "right")
    if causal:
        right = 0 if right is None else min(right, 0)
    if kv_lens is not None:
        if not isinstance(kv_lens, gp.GPUArray) or kv_lens.dtype.kind not in "iu":
            raise TypeError(f"sdpa: kv_lens must be a GPUArray of integers, got {getattr(kv_lens, 'dtype', type(kv_lens).__name__)}")
        if kv_lens.shape != (b,):
            raise ValueError(f"sdpa: kv_lens must have shape ({b},) (one length per sequence), got {kv_lens.shape}")
    if mask is not None:
        mask = _check_mask(mask, (b, hq, sq, sk))
    return AttentionArgs(q, k, v, mask, float(scale), left, right, kv_lens, bshd)


def _check_mask(mask: Any, target: tuple[int, int, int, int]) -> gp.GPUArray:
    if not isinstance(mask, gp.GPUArray):
        raise TypeError(f"sdpa: mask must be a GPUArray or None, got {type(mask).__name__}")
    if mask.dtype != np.bool_ and mask.dtype not in FLOATS:
        raise TypeError(f"sdpa: mask must be boolean (True = attend) or float (added to the scores), got {mask.dtype}")
    shape = (1,) * (4 - mask.ndim) + mask.shape
    if mask.ndim > 4 or any(m not in (1, t) for m, t in zip(shape, target)):
        raise ValueError(f"sdpa: mask of shape {mask.shape} does not broadcast to (B, Hq, Sq, Sk) = {target}")
    return mask.reshape(shape)
