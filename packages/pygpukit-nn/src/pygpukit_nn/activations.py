"""Activations: silu and relu are core's elementwise functions (one pass at
the copy rate); gelu (exact or tanh) is a registry op whose native
implementation is core's elementwise gelu / gelu_tanh (so that it can be
routed, e.g. to Triton); this module adds squared ReLU, the gated forms
``act(gate) * up`` (SwiGLU, GeGLU) and softmax / log_softmax with a mask.

Gated forms take either one array whose last axis holds [gate, up] (the
fused gate_up projection of Llama/Qwen-style MLPs: first half gate, second
half up) or the two halves as separate arrays. Math in float32 (float64 for
float64), rounded once.

Masked softmax: ``mask`` is boolean (True = keep) or additive (added to x),
broadcastable to x. Masked-out entries get probability 0; a slice with
nothing left gives zeros from softmax and -inf from log_softmax (PyTorch
gives NaN there; zeros are what attention with an empty row wants).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from ._kernels import rows_of
from .checks import FLOATS, check_approximate, check_float, halves

_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
THREADS = 256  # threads per block of the gated / squared-ReLU kernel
UNROLL = 2  # 16-byte vectors per thread per operand: 4 loads in flight at 48 registers (4 took 80: 3 blocks per SM)
FAST_SILU = True  # SiLU of 16-bit outputs by ex2/rcp.approx (kernels/activations.cu: SiluFast)


# -- public API ----------------------------------------------------------------------


def gelu(x: gp.GPUArray, approximate: str = "none") -> gp.GPUArray:
    """GELU, exact (``approximate="none"``) or the tanh form (``"tanh"``), as torch."""
    return ext.op("gelu")(x, approximate)


def silu(x: gp.GPUArray) -> gp.GPUArray:
    """``x * sigmoid(x)``."""
    return gp.silu(x)


def relu(x: gp.GPUArray) -> gp.GPUArray:
    """``max(x, 0)`` (NaN passes through)."""
    return gp.relu(x)


def relu_squared(x: gp.GPUArray) -> gp.GPUArray:
    """``relu(x) ** 2`` (Primer, Nemotron) in one pass."""
    return ext.op("relu_squared")(x)


def swiglu(x: gp.GPUArray, up: gp.GPUArray | None = None) -> gp.GPUArray:
    """``silu(gate) * up``: ``x`` is [gate, up] along the last axis (returns half
    its width), or the gate with ``up`` given separately."""
    return ext.op("swiglu")(x, up)


def geglu(x: gp.GPUArray, up: gp.GPUArray | None = None, approximate: str = "none") -> gp.GPUArray:
    """``gelu(gate) * up`` (``approximate`` as in ``gelu``); layouts as ``swiglu``."""
    return ext.op("geglu")(x, up, approximate)


def softmax(x: gp.GPUArray, axis: int = -1, mask: gp.GPUArray | None = None) -> gp.GPUArray:
    """softmax along ``axis``; ``mask`` boolean (True keeps) or additive, broadcastable to x."""
    return gp.softmax(x, axis=axis) if mask is None else _masked(x, axis, mask, False)


def log_softmax(x: gp.GPUArray, axis: int = -1, mask: gp.GPUArray | None = None) -> gp.GPUArray:
    """log_softmax along ``axis``, masked as ``softmax``."""
    return gp.log_softmax(x, axis=axis) if mask is None else _masked(x, axis, mask, True)


# -- masked softmax (core's kernels on the masked logits) -----------------------------------


def _masked(x: Any, axis: int, mask: Any, log: bool) -> gp.GPUArray:
    op = "log_softmax" if log else "softmax"
    check_float(op, "x", x)
    if not isinstance(mask, gp.GPUArray):
        raise TypeError(f"{op}: mask must be a GPUArray or None, got {type(mask).__name__}")
    try:
        np.broadcast_shapes(mask.shape, x.shape)
    except ValueError:
        raise ValueError(f"{op}: mask of shape {mask.shape} does not broadcast to x's shape {x.shape}") from None
    if np.broadcast_shapes(mask.shape, x.shape) != x.shape:
        raise ValueError(f"{op}: mask of shape {mask.shape} would broadcast x's shape {x.shape} to a bigger one")
    if mask.dtype == np.bool_:
        logits = gp.where(mask, x, gp.asarray(-np.inf, dtype=x.dtype))
    elif mask.dtype in FLOATS:
        logits = x + mask.astype(x.dtype)
    else:
        raise TypeError(f"{op}: mask must be boolean or float, got {mask.dtype}")
    out = gp.log_softmax(logits, axis=axis) if log else gp.softmax(logits, axis=axis)
    empty = gp.max(logits, axis=axis, keepdims=True) == -np.inf  # nothing left in the slice
    return gp.where(empty, gp.asarray(-np.inf if log else 0.0, dtype=out.dtype), out)


# -- gated activations -----------------------------------------------------------------


def elementwise_gelu(x: Any, approximate: str = "none") -> gp.GPUArray:
    """gelu through core's elementwise ufuncs (a kernel on the GPU, NumPy on the CPU)."""
    fn = gp.gelu if check_approximate(approximate, "gelu") == "pgk::Gelu" else gp.gelu_tanh
    return fn(x)


def reference_swiglu(x: Any, up: Any = None) -> gp.GPUArray:
    g, u = halves("swiglu", x, up)
    cdt = ext.compute_dtype(x.dtype)
    return (gp.silu(g.astype(cdt)) * u.astype(cdt)).astype(x.dtype)


def reference_geglu(x: Any, up: Any = None, approximate: str = "none") -> gp.GPUArray:
    fn = gp.gelu if check_approximate(approximate) == "pgk::Gelu" else gp.gelu_tanh
    g, u = halves("geglu", x, up)
    cdt = ext.compute_dtype(x.dtype)
    return (fn(g.astype(cdt)) * u.astype(cdt)).astype(x.dtype)


def reference_relu_squared(x: Any) -> gp.GPUArray:
    check_float("relu_squared", "x", x)
    cdt = ext.compute_dtype(x.dtype)
    r = gp.relu(x.astype(cdt))
    return (r * r).astype(x.dtype)


@functools.cache
def _kernel(ct: str, act: str, gated: bool, vec: int) -> Any:
    return ext.Kernel(
        ext.kernel_source(__name__, "activations"),
        f"pgk::act_rows<{ct}, {act}, {'true' if gated else 'false'}, {vec}, {UNROLL}, {THREADS}>",
        signature="const void* g, long long gs, const void* u, long long us, void* y, long long rows, int n, int tiles",
        name="activations.cu",
        dependent_launch=True,
    )


def block_shape(nvec: int) -> tuple[int, int, int]:
    """(threads per row, rows per block, blocks per row) for rows of ``nvec`` vectors:
    a power of two of threads covering the row UNROLL vectors each, up to THREADS."""
    bx = 1
    while bx < THREADS and bx * UNROLL < nvec:
        bx *= 2
    return bx, THREADS // bx, -(-nvec // (bx * UNROLL))


@dataclass(frozen=True, slots=True)
class _Plan:
    """A planned act_rows launch, ``tiles`` blocks per row."""

    launch: ext.Launch
    tiles: int


# (act, dtype, row length, rows, row strides and alignments of g and u) -> the
# launch, for the views rows_of gives: repeated shapes skip the planning.
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.activations")


def _run(act: str, g: Any, u: Any) -> gp.GPUArray:
    """act(g) (* u) over rows of g's last axis, into a new contiguous array."""
    gv, gs = rows_of(g)
    uv, us = rows_of(u) if u is not None else (None, 0)
    dt, n = g.dtype, g.shape[-1]
    rows = g.size // n
    key = (act, dt, n, rows, gs & 7, gv.data_ptr & 15, us & 7, 0 if uv is None else uv.data_ptr & 15)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans.put(key, _plan(act, dt, n, rows, gs, gv, us, uv))
    y = ext.empty(g.shape, dt)
    plan.launch(gv, gs, uv, us, y, rows, n, plan.tiles)
    return y


def _plan(act: str, dt: np.dtype, n: int, rows: int, gs: int, gv: Any, us: int, uv: Any) -> _Plan:
    vec = 16 // dt.itemsize
    while vec > 1 and not (
        n % vec == 0 and gs % vec == 0 and gv.data_ptr % (vec * dt.itemsize) == 0
        and (uv is None or (us % vec == 0 and uv.data_ptr % (vec * dt.itemsize) == 0))
    ):  # fmt: skip
        vec //= 2
    if FAST_SILU and act == "pgk::Silu" and dt.itemsize == 2:
        act = "pgk::SiluFast"
    bx, by, tiles = block_shape(n // vec)
    blocks = -(-rows // by) * tiles
    if blocks >= 2**31:
        raise ValueError(f"{act}: {rows} rows of {n} are too many for one launch")
    return _Plan(_kernel(_CTYPES[dt], act, uv is not None, vec).launcher(blocks, (bx, by)), tiles)


def kernel_swiglu(x: Any, up: Any = None) -> gp.GPUArray:
    g, u = halves("swiglu", x, up)
    return _run("pgk::Silu", g, u)


def kernel_geglu(x: Any, up: Any = None, approximate: str = "none") -> gp.GPUArray:
    act = check_approximate(approximate)
    g, u = halves("geglu", x, up)
    return _run(act, g, u)


def kernel_relu_squared(x: Any) -> gp.GPUArray:
    check_float("relu_squared", "x", x)
    return _run("pgk::ReluSquared", x, None)


def _kernel_takes(x: Any, *rest: Any) -> bool:
    """float16 / bfloat16 / float32, at least one element."""
    return x.dtype in _CTYPES and x.ndim > 0 and x.size > 0


def register(registry: Any) -> None:
    # gelu's definition is core's elementwise gelu / gelu_tanh, on every backend
    ext.register_family(registry, "gelu", nkey=1, doc=gelu.__doc__ or "", reference=elementwise_gelu)
    for op, ref, kern in (
        ("relu_squared", reference_relu_squared, kernel_relu_squared),
        ("swiglu", reference_swiglu, kernel_swiglu),
        ("geglu", reference_geglu, kernel_geglu),
    ):
        ext.register_family(
            registry, op, nkey=1, doc=globals()[op].__doc__ or "", reference=ref, cuda=kern, dtypes=list(_CTYPES), min_sm=80,
            predicate=_kernel_takes,
        )  # fmt: skip
