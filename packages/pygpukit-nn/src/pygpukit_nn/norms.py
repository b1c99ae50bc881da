"""Normalizations over the last axis (RMSNorm, LayerNorm, each also fused with
the residual add before it) and GroupNorm over (channels / groups, *spatial).

Statistics are computed in float32 for float16, bfloat16 and float32 inputs
(float64 stays float64 on the reference path), and each output is rounded
once to the input dtype. The fused forms ``add_rms_norm`` / ``add_layer_norm``
return ``(normed, h)`` with ``h = x + residual`` rounded to the dtype, the new
residual stream, and normalize that rounded ``h`` (as a Hugging Face decoder
layer does). Weights and biases may be float32 or the input's dtype.

The CUDA kernel (kernels/norms.cu) keeps a row in registers between one read
and one write; its launch is planned once per call signature.
"""

from __future__ import annotations

import functools
import struct
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import _runtime
from pygpukit.streams import current_stream_handle

from . import _dispatch, _kernels

FLOATS = (np.dtype(gp.float16), np.dtype(gp.bfloat16), np.dtype(gp.float32), np.dtype(gp.float64))
KERNEL_DTYPES = ["float32", "float16", "bfloat16"]
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
MAX_NV = 8  # vectors per thread held in registers; longer rows take the re-reading path
ROW_THREADS = 256  # threads per block when rows are short enough to share one


# -- public API ----------------------------------------------------------------------


def rms_norm(x: gp.GPUArray, weight: gp.GPUArray | None, eps: float = 1e-6) -> gp.GPUArray:
    """``x * rsqrt(mean(x**2, axis=-1) + eps) * weight`` (weight (D,) or None)."""
    return _dispatch.op("rms_norm")(x, weight, eps)


def layer_norm(x: gp.GPUArray, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5) -> gp.GPUArray:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last axis (biased variance, as torch)."""
    return _dispatch.op("layer_norm")(x, weight, bias, eps)


def add_rms_norm(x: gp.GPUArray, residual: gp.GPUArray, weight: gp.GPUArray | None, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; returns ``(rms_norm(h, weight, eps), h)`` in one pass."""
    return _dispatch.op("add_rms_norm")(x, residual, weight, eps)


def add_layer_norm(
    x: gp.GPUArray, residual: gp.GPUArray, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; returns ``(layer_norm(h, weight, bias, eps), h)`` in one pass."""
    return _dispatch.op("add_layer_norm")(x, residual, weight, bias, eps)


def group_norm(
    x: gp.GPUArray, num_groups: int, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5
) -> gp.GPUArray:
    """GroupNorm of x (N, C, *spatial): each sample's C channels form ``num_groups``
    groups normalized together; weight and bias (C,) are per channel (torch's)."""
    return _dispatch.op("group_norm")(x, num_groups, weight, bias, eps)


# -- checks --------------------------------------------------------------------------


def _check_float(op: str, name: str, a: Any) -> None:
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {type(a).__name__}")
    if a.dtype not in FLOATS:
        raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")


def _check_affine(op: str, name: str, a: Any, size: int) -> None:
    if a is None:
        return
    _check_float(op, name, a)
    if a.shape != (size,):
        raise ValueError(f"{op}: {name} must have shape ({size},), got {a.shape}")


def _check_eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a non-negative number, got {eps!r}")
    return float(eps)


def _check_rows(op: str, x: Any, residual: Any, weight: Any, bias: Any, eps: Any) -> float:
    """Checks of the last-axis norms; returns eps as a float."""
    _check_float(op, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis, got a 0-d array")
    if residual is not None:
        _check_float(op, "residual", residual)
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(f"{op}: residual must match x's shape {x.shape} and dtype {x.dtype}, got {residual.shape} {residual.dtype}")
    _check_affine(op, "weight", weight, x.shape[-1])
    _check_affine(op, "bias", bias, x.shape[-1])
    return _check_eps(op, eps)


def _check_groups(x: Any, num_groups: Any, weight: Any, bias: Any, eps: Any) -> float:
    _check_float("group_norm", "x", x)
    if x.ndim < 2:
        raise ValueError(f"group_norm: x must be (N, C, *spatial), got shape {x.shape}")
    c = x.shape[1]
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or num_groups < 1 or c % num_groups:
        raise ValueError(f"group_norm: num_groups must be a positive divisor of the {c} channels, got {num_groups!r}")
    _check_affine("group_norm", "weight", weight, c)
    _check_affine("group_norm", "bias", bias, c)
    return _check_eps("group_norm", eps)


# -- reference (any backend, any float dtype) -----------------------------------------


def _compute_dtype(dt: np.dtype) -> Any:
    return gp.float64 if dt == np.float64 else gp.float32


def _normalize(h: gp.GPUArray, axes: tuple[int, ...], layer: bool, eps: float) -> gp.GPUArray:
    """h (already in the compute dtype) normalized over ``axes``."""
    if layer:
        h = h - gp.mean(h, axis=axes, keepdims=True)
    return h * (1.0 / gp.sqrt(gp.mean(h * h, axis=axes, keepdims=True) + eps))


def _affine(v: gp.GPUArray, weight: Any, bias: Any, shape: tuple[int, ...]) -> gp.GPUArray:
    if weight is not None:
        v = v * weight.astype(v.dtype).reshape(shape)
    if bias is not None:
        v = v + bias.astype(v.dtype).reshape(shape)
    return v


def _reference_rows(x: Any, residual: Any, weight: Any, bias: Any, eps: float, layer: bool) -> tuple[gp.GPUArray, Any]:
    cdt = _compute_dtype(x.dtype)
    h = x if residual is None else (x.astype(cdt) + residual.astype(cdt)).astype(x.dtype)
    y = _affine(_normalize(h.astype(cdt), (-1,), layer, eps), weight, bias, (x.shape[-1],))
    return y.astype(x.dtype), h


def reference_rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> gp.GPUArray:
    return _reference_rows(x, None, weight, None, _check_rows("rms_norm", x, None, weight, None, eps), False)[0]


def reference_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    return _reference_rows(x, None, weight, bias, _check_rows("layer_norm", x, None, weight, bias, eps), True)[0]


def reference_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    return _reference_rows(x, residual, weight, None, _check_rows("add_rms_norm", x, residual, weight, None, eps), False)


def reference_add_layer_norm(x: Any, residual: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple[Any, Any]:
    return _reference_rows(x, residual, weight, bias, _check_rows("add_layer_norm", x, residual, weight, bias, eps), True)


def reference_group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = _check_groups(x, num_groups, weight, bias, eps)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    g = x.astype(_compute_dtype(x.dtype)).reshape(n, num_groups, -1)
    y = _normalize(g, (-1,), True, e).reshape(n, c, *spatial)
    return _affine(y, weight, bias, (c,) + (1,) * len(spatial)).astype(x.dtype)


# -- CUDA kernel -----------------------------------------------------------------------


@functools.cache
def _kernel(ct: str, wt: str, vec: int, nv: int, mode: int, resid: bool, has_w: bool, has_b: bool, group: bool) -> Any:
    flags = ", ".join("true" if f else "false" for f in (resid, has_w, has_b, group))
    return gp.jit(
        _kernels.source("norms"),
        f"pgk::norm_rows<{ct}, {wt}, {vec}, {nv}, {mode}, {flags}>",
        signature="const void* x, long long xs, const void* res, long long rs, void* h, const void* w, const void* b, void* y, "
        "long long rows, int n, int groups, int chan_len, float eps",
        name="norms.cu",
    )


def launch_shape(n: int, vec: int) -> tuple[int, int, int]:
    """(threads per row, vectors per thread (0: the re-reading path), rows per block)
    for rows of n elements read VEC at a time: about 4 vectors in flight per thread."""
    nvec = n // vec
    tpr = 1
    while tpr < 1024 and tpr * 4 < nvec:
        tpr *= 2
    nv = -(-nvec // tpr)
    if nv > MAX_NV:
        tpr, nv = 1024, 0
    return tpr, nv, (max(1, ROW_THREADS // tpr) if tpr <= 32 else 1)


_PARAMS = struct.Struct("@PqPqPPPPqiiif")
# Planned launches by call signature: (function, grid, block (x, y), vec).
_plans: dict[tuple, tuple[int, int, int, int]] = {}


def _run(
    op: str, x: Any, residual: Any, weight: Any, bias: Any, eps: float, mode: int, rows: int, n: int, groups: int = 1, chan_len: int = 1
) -> tuple[gp.GPUArray, Any]:
    """Launch norm_rows over ``rows`` rows of n elements; returns (y, h or None)."""
    xv, xs = _kernels.rows_of(x)
    rv, rs = _kernels.rows_of(residual) if residual is not None else (None, 0)
    dt = x.dtype
    w = weight if weight is None or weight.dtype in (dt, np.float32) else weight.astype(gp.float32)
    b = bias if bias is None or bias.dtype == (w.dtype if w is not None else bias.dtype) else bias.astype(gp.float32)
    if w is not None and b is not None and w.dtype != b.dtype:
        w, b = w.astype(gp.float32), b.astype(gp.float32)
    w = w if w is None or w.is_contiguous else w.copy()
    b = b if b is None or b.is_contiguous else b.copy()
    wdt = (w if w is not None else b if b is not None else x).dtype
    key = (op, dt, wdt, n, groups, chan_len, xs & 7, xv.data_ptr & 15, rs & 7, 0 if rv is None else rv.data_ptr & 15, w is None, b is None)
    plan = _plans.get(key)
    if plan is None:
        vec = 16 // dt.itemsize
        aligned = xs % vec == 0 and xv.data_ptr % 16 == 0 and (rv is None or (rs % vec == 0 and rv.data_ptr % 16 == 0))
        while vec > 1 and not (aligned and n % vec == 0 and (op != "group_norm" or chan_len % vec == 0)):
            vec //= 2
            aligned = xs % vec == 0 and xv.data_ptr % (vec * dt.itemsize) == 0
            aligned = aligned and (rv is None or (rs % vec == 0 and rv.data_ptr % (vec * dt.itemsize) == 0))
        tpr, nv, by = launch_shape(n, vec)
        kern = _kernel(_CTYPES[dt], _CTYPES[np.dtype(wdt)], vec, nv, mode, rv is not None, w is not None, b is not None, op == "group_norm")
        plan = _plans[key] = (kern._function(_runtime.get()), tpr, by, vec)
    fn, tpr, by, _ = plan
    stream = current_stream_handle()
    y = gp.GPUArray._empty(x.shape, dt, stream)
    h = gp.GPUArray._empty(x.shape, dt, stream) if rv is not None else None
    if rows:
        params = _PARAMS.pack(
            xv.data_ptr, xs, 0 if rv is None else rv.data_ptr, rs, 0 if h is None else h.data_ptr,
            0 if w is None else w.data_ptr, 0 if b is None else b.data_ptr, y.data_ptr, rows, n, groups, chan_len, eps,
        )  # fmt: skip
        _runtime.get().native.launch(fn, -(-rows // by), 1, 1, tpr, by, 1, 0, stream, params)
    return y, h


def kernel_rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> gp.GPUArray:
    e = _check_rows("rms_norm", x, None, weight, None, eps)
    return _run("rms_norm", x, None, weight, None, e, 0, x.size // max(x.shape[-1], 1), x.shape[-1])[0]


def kernel_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = _check_rows("layer_norm", x, None, weight, bias, eps)
    return _run("layer_norm", x, None, weight, bias, e, 1, x.size // max(x.shape[-1], 1), x.shape[-1])[0]


def kernel_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    e = _check_rows("add_rms_norm", x, residual, weight, None, eps)
    return _run("add_rms_norm", x, residual, weight, None, e, 0, x.size // max(x.shape[-1], 1), x.shape[-1])  # type: ignore[return-value]


def kernel_add_layer_norm(x: Any, residual: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple[Any, Any]:
    e = _check_rows("add_layer_norm", x, residual, weight, bias, eps)
    return _run("add_layer_norm", x, residual, weight, bias, e, 1, x.size // max(x.shape[-1], 1), x.shape[-1])


def kernel_group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = _check_groups(x, num_groups, weight, bias, eps)
    n, c = x.shape[:2]
    chan_len = x.size // max(n * c, 1)
    xc = x if x.is_contiguous else x.copy()
    flat = xc.reshape(n * num_groups, (c // num_groups) * chan_len)
    y = _run("group_norm", flat, None, weight, bias, e, 1, n * num_groups, flat.shape[1], int(num_groups), chan_len)[0]
    return y.reshape(x.shape)


def _kernel_dtypes(x: Any, *rest: Any) -> bool:
    """The kernel takes float16 / bfloat16 / float32 rows of at least one element."""
    return x.dtype in _CTYPES and x.size > 0 and x.ndim > 0


def register(registry: Any) -> None:
    ops = (
        ("rms_norm", 1, reference_rms_norm, kernel_rms_norm),
        ("layer_norm", 1, reference_layer_norm, kernel_layer_norm),
        ("add_rms_norm", 2, reference_add_rms_norm, kernel_add_rms_norm),
        ("add_layer_norm", 2, reference_add_layer_norm, kernel_add_layer_norm),
        ("group_norm", 1, reference_group_norm, kernel_group_norm),
    )
    for op, nkey, ref, kern in ops:
        registry.define(op, nkey=nkey, doc=globals()[op].__doc__ or "")
        for backend in ("cuda", "cpu"):
            registry.register(op, ref, backend=backend, name="reference")
        registry.register(op, kern, backend="cuda", dtypes=KERNEL_DTYPES, min_sm=80, priority=10, predicate=_kernel_dtypes, name="kernel")
