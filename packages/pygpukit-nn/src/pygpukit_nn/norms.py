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
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from ._kernels import rows_of
from .checks import check_affine, check_eps, check_float, check_rows

KERNEL_DTYPES = ["float32", "float16", "bfloat16"]
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
MAX_NV = 8  # vectors per thread held in registers; longer rows take the re-reading path
ROW_THREADS = 256  # threads per block when rows are short enough to share one
VECS_PER_THREAD = 2  # 16-byte loads a thread keeps in flight (H100 sweep, benchmarks/results)


# -- public API ----------------------------------------------------------------------


def rms_norm(x: gp.GPUArray, weight: gp.GPUArray | None, eps: float = 1e-6) -> gp.GPUArray:
    """``x * rsqrt(mean(x**2, axis=-1) + eps) * weight`` (weight (D,) or None)."""
    return ext.op("rms_norm")(x, weight, eps)


def layer_norm(x: gp.GPUArray, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5) -> gp.GPUArray:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last axis (biased variance, as torch)."""
    return ext.op("layer_norm")(x, weight, bias, eps)


def add_rms_norm(x: gp.GPUArray, residual: gp.GPUArray, weight: gp.GPUArray | None, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; returns ``(rms_norm(h, weight, eps), h)`` in one pass."""
    return ext.op("add_rms_norm")(x, residual, weight, eps)


def add_layer_norm(
    x: gp.GPUArray, residual: gp.GPUArray, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; returns ``(layer_norm(h, weight, bias, eps), h)`` in one pass."""
    return ext.op("add_layer_norm")(x, residual, weight, bias, eps)


def group_norm(
    x: gp.GPUArray, num_groups: int, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5
) -> gp.GPUArray:
    """GroupNorm of x (N, C, *spatial): each sample's C channels form ``num_groups``
    groups normalized together; weight and bias (C,) are per channel (torch's)."""
    return ext.op("group_norm")(x, num_groups, weight, bias, eps)


# -- checks --------------------------------------------------------------------------


def _check_groups(x: Any, num_groups: Any, weight: Any, bias: Any, eps: Any) -> float:
    check_float("group_norm", "x", x)
    if x.ndim < 2:
        raise ValueError(f"group_norm: x must be (N, C, *spatial), got shape {x.shape}")
    c = x.shape[1]
    if isinstance(num_groups, bool) or not isinstance(num_groups, (int, np.integer)) or num_groups < 1 or c % num_groups:
        raise ValueError(f"group_norm: num_groups must be a positive divisor of the {c} channels, got {num_groups!r}")
    check_affine("group_norm", "weight", weight, c)
    check_affine("group_norm", "bias", bias, c)
    return check_eps("group_norm", eps)


# -- reference (any backend, any float dtype) -----------------------------------------


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
    cdt = ext.compute_dtype(x.dtype)
    h = x if residual is None else (x.astype(cdt) + residual.astype(cdt)).astype(x.dtype)
    y = _affine(_normalize(h.astype(cdt), (-1,), layer, eps), weight, bias, (x.shape[-1],))
    return y.astype(x.dtype), h


def reference_rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> gp.GPUArray:
    return _reference_rows(x, None, weight, None, check_rows("rms_norm", x, None, weight, None, eps), False)[0]


def reference_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    return _reference_rows(x, None, weight, bias, check_rows("layer_norm", x, None, weight, bias, eps), True)[0]


def reference_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    return _reference_rows(x, residual, weight, None, check_rows("add_rms_norm", x, residual, weight, None, eps), False)


def reference_add_layer_norm(x: Any, residual: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple[Any, Any]:
    return _reference_rows(x, residual, weight, bias, check_rows("add_layer_norm", x, residual, weight, bias, eps), True)


def reference_group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = _check_groups(x, num_groups, weight, bias, eps)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    g = x.astype(ext.compute_dtype(x.dtype)).reshape(n, num_groups, -1)
    y = _normalize(g, (-1,), True, e).reshape(n, c, *spatial)
    return _affine(y, weight, bias, (c,) + (1,) * len(spatial)).astype(x.dtype)


# -- CUDA kernel -----------------------------------------------------------------------


@functools.cache
def _kernel(ct: str, wt: str, vec: int, nv: int, mode: int, resid: bool, has_w: bool, has_b: bool, group: bool, threads: int) -> Any:
    flags = ", ".join("true" if f else "false" for f in (resid, has_w, has_b, group))
    return ext.Kernel(
        ext.kernel_source(__name__, "norms"),
        f"pgk::norm_rows<{ct}, {wt}, {vec}, {nv}, {mode}, {flags}, {threads}>",
        signature="const void* x, long long xs, const void* res, long long rs, void* h, const void* w, const void* b, void* y, "
        "long long rows, int n, int groups, int chan_len, float eps",
        name="norms.cu",
        dependent_launch=True,
    )


def launch_shape(n: int, vec: int) -> tuple[int, int, int]:
    """(threads per row, vectors per thread (0: the re-reading path), rows per block)
    for rows of n elements read VEC at a time: about VECS_PER_THREAD vectors per thread."""
    nvec = n // vec
    tpr = 1
    while tpr < 1024 and tpr * VECS_PER_THREAD < nvec:
        tpr *= 2
    nv = -(-nvec // tpr)
    if nv > MAX_NV:
        tpr, nv = 1024, 0
    return tpr, nv, (max(1, ROW_THREADS // tpr) if tpr <= 32 else 1)


@dataclass(frozen=True, slots=True)
class _Plan:
    """A planned norm_rows launch (None: no rows) and its scalar arguments."""

    launch: ext.Launch | None
    rows: int
    n: int
    xs: int  # x's row stride, in elements
    rs: int  # the residual's row stride
    groups: int
    chan_len: int


# Launches planned by call signature: (op, layouts of x, residual, weight,
# bias). Only calls that need no copy or cast are planned, so a hit launches
# straight away.
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.norms")


def _launch(plan: _Plan, x: Any, res: Any, w: Any, b: Any, eps: float) -> tuple[gp.GPUArray, Any]:
    stream = ext.current_stream()
    y = ext.empty(x.shape, x.dtype, stream)
    h = None if res is None else ext.empty(x.shape, x.dtype, stream)
    if plan.launch is not None:
        plan.launch(x, plan.xs, res, plan.rs, h, w, b, y, plan.rows, plan.n, plan.groups, plan.chan_len, eps)
    return y, h


def _run(op: str, x: Any, res: Any, weight: Any, bias: Any, eps: float, rows: int, n: int, groups: int = 1, chan_len: int = 1) -> tuple:
    """Plan (once per call signature) and launch norm_rows over ``rows`` rows of n
    elements; returns (y, h or None). Callers have checked the arguments."""
    key = (op, ext.layout_key(x, 16), ext.layout_key(res, 16), ext.layout_key(weight, 32), ext.layout_key(bias, 32))
    plan = _plans.get(key)
    if plan is not None:
        return _launch(plan, x, res, weight, bias, eps)
    xv, xs = rows_of(x)
    rv, rs = rows_of(res) if res is not None else (None, 0)
    dt, item = x.dtype, x.dtype.itemsize
    # Weight and bias: both in x's dtype or both float32, contiguous, read VEC at a time.
    wdt = dt if all(a is None or a.dtype == dt for a in (weight, bias)) else np.dtype(np.float32)
    w, b = (None if a is None else a.astype(wdt, copy=False) for a in (weight, bias))
    vec = 16 // item
    while vec > 1 and not (
        n % vec == 0 and xs % vec == 0 and xv.data_ptr % (vec * item) == 0
        and (rv is None or (rs % vec == 0 and rv.data_ptr % (vec * item) == 0))
        and (op != "group_norm" or chan_len % vec == 0)
        and all(a is None or (a.is_contiguous and a.data_ptr % (vec * wdt.itemsize) == 0) for a in (w, b))
    ):  # fmt: skip
        vec //= 2
    w, b = (a if a is None or a.is_contiguous else a.copy() for a in (w, b))
    launch = None
    if rows:
        tpr, nv, by = launch_shape(n, vec)
        kern = _kernel(_CTYPES[dt], _CTYPES[wdt], vec, nv, 1 if "layer" in op or op == "group_norm" else 0, rv is not None,
                       w is not None, b is not None, op == "group_norm", tpr * by)  # fmt: skip
        launch = kern.launcher(-(-rows // by), (tpr, by))
    plan = _Plan(launch, rows, n, xs, rs, groups, chan_len)
    if xv is x and rv is res and w is weight and b is bias:
        _plans.put(key, plan)
    return _launch(plan, xv, rv, w, b, eps)


def kernel_rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> gp.GPUArray:
    e = check_rows("rms_norm", x, None, weight, None, eps)
    return _run("rms_norm", x, None, weight, None, e, x.size // x.shape[-1], x.shape[-1])[0]


def kernel_layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = check_rows("layer_norm", x, None, weight, bias, eps)
    return _run("layer_norm", x, None, weight, bias, e, x.size // x.shape[-1], x.shape[-1])[0]


def kernel_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    e = check_rows("add_rms_norm", x, residual, weight, None, eps)
    return _run("add_rms_norm", x, residual, weight, None, e, x.size // x.shape[-1], x.shape[-1])


def kernel_add_layer_norm(x: Any, residual: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple[Any, Any]:
    e = check_rows("add_layer_norm", x, residual, weight, bias, eps)
    return _run("add_layer_norm", x, residual, weight, bias, e, x.size // x.shape[-1], x.shape[-1])


def kernel_group_norm(x: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    e = _check_groups(x, num_groups, weight, bias, eps)
    n, c = x.shape[:2]
    chan_len = x.size // (n * c)
    flat = (x if x.is_contiguous else x.copy()).reshape(n * num_groups, (c // num_groups) * chan_len)
    y = _run("group_norm", flat, None, weight, bias, e, n * num_groups, flat.shape[1], int(num_groups), chan_len)[0]
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
        ext.register_family(
            registry, op, nkey=nkey, doc=globals()[op].__doc__ or "", reference=ref, cuda=kern, dtypes=KERNEL_DTYPES, min_sm=80,
            predicate=_kernel_dtypes,
        )  # fmt: skip
