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
import struct
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import _runtime
from pygpukit.streams import current_stream_handle

from . import _dispatch, _kernels

FLOATS = (np.dtype(gp.float16), np.dtype(gp.bfloat16), np.dtype(gp.float32), np.dtype(gp.float64))
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
_GELU = {"none": "pgk::Gelu", "tanh": "pgk::GeluTanh"}
THREADS = 256  # threads per block of the gated / squared-ReLU kernel
UNROLL = 2  # 16-byte vectors per thread per operand: 4 loads in flight at 48 registers (4 took 80: 3 blocks per SM)
FAST_SILU = True  # SiLU of 16-bit outputs by ex2/rcp.approx (kernels/activations.cu: SiluFast)


# -- public API ----------------------------------------------------------------------


def gelu(x: gp.GPUArray, approximate: str = "none") -> gp.GPUArray:
    """GELU, exact (``approximate="none"``) or the tanh form (``"tanh"``), as torch."""
    return _dispatch.op("gelu")(x, approximate)


def silu(x: gp.GPUArray) -> gp.GPUArray:
    """``x * sigmoid(x)``."""
    return gp.silu(x)


def relu(x: gp.GPUArray) -> gp.GPUArray:
    """``max(x, 0)`` (NaN passes through)."""
    return gp.relu(x)


def relu_squared(x: gp.GPUArray) -> gp.GPUArray:
    """``relu(x) ** 2`` (Primer, Nemotron) in one pass."""
    return _dispatch.op("relu_squared")(x)


def swiglu(x: gp.GPUArray, up: gp.GPUArray | None = None) -> gp.GPUArray:
    """``silu(gate) * up``: ``x`` is [gate, up] along the last axis (returns half
    its width), or the gate with ``up`` given separately."""
    return _dispatch.op("swiglu")(x, up)


def geglu(x: gp.GPUArray, up: gp.GPUArray | None = None, approximate: str = "none") -> gp.GPUArray:
    """``gelu(gate) * up`` (``approximate`` as in ``gelu``); layouts as ``swiglu``."""
    return _dispatch.op("geglu")(x, up, approximate)


def softmax(x: gp.GPUArray, axis: int = -1, mask: gp.GPUArray | None = None) -> gp.GPUArray:
    """softmax along ``axis``; ``mask`` boolean (True keeps) or additive, broadcastable to x."""
    return gp.softmax(x, axis=axis) if mask is None else _masked(x, axis, mask, False)


def log_softmax(x: gp.GPUArray, axis: int = -1, mask: gp.GPUArray | None = None) -> gp.GPUArray:
    """log_softmax along ``axis``, masked as ``softmax``."""
    return gp.log_softmax(x, axis=axis) if mask is None else _masked(x, axis, mask, True)


# -- masked softmax (core's kernels on the masked logits) -----------------------------------


def _masked(x: Any, axis: int, mask: Any, log: bool) -> gp.GPUArray:
    op = "log_softmax" if log else "softmax"
    _check_float(op, "x", x)
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


def _check_float(op: str, name: str, a: Any) -> None:
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {type(a).__name__}")
    if a.dtype not in FLOATS:
        raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")


def _halves(op: str, x: Any, up: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
    """(gate, up) views of the arguments, checked."""
    _check_float(op, "x", x)
    if x.ndim == 0:
        raise ValueError(f"{op}: x must have at least one axis")
    if up is None:
        if x.shape[-1] % 2:
            raise ValueError(f"{op}: x holds [gate, up] along its last axis, which must be even, got {x.shape[-1]}")
        h = x.shape[-1] // 2
        return x[..., :h], x[..., h:]
    _check_float(op, "up", up)
    if up.shape != x.shape or up.dtype != x.dtype:
        raise ValueError(f"{op}: up must match the gate's shape {x.shape} and dtype {x.dtype}, got {up.shape} {up.dtype}")
    return x, up


def _check_approximate(approximate: Any, op: str = "geglu") -> str:
    if approximate not in _GELU:
        raise ValueError(f"{op}: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _GELU[approximate]


def elementwise_gelu(x: Any, approximate: str = "none") -> gp.GPUArray:
    """gelu through core's elementwise ufuncs (a kernel on the GPU, NumPy on the CPU)."""
    fn = gp.gelu if _check_approximate(approximate, "gelu") == "pgk::Gelu" else gp.gelu_tanh
    return fn(x)


def reference_swiglu(x: Any, up: Any = None) -> gp.GPUArray:
    g, u = _halves("swiglu", x, up)
    cdt = gp.float64 if x.dtype == np.float64 else gp.float32
    return (gp.silu(g.astype(cdt)) * u.astype(cdt)).astype(x.dtype)


def reference_geglu(x: Any, up: Any = None, approximate: str = "none") -> gp.GPUArray:
    fn = gp.gelu if _check_approximate(approximate) == "pgk::Gelu" else gp.gelu_tanh
    g, u = _halves("geglu", x, up)
    cdt = gp.float64 if x.dtype == np.float64 else gp.float32
    return (fn(g.astype(cdt)) * u.astype(cdt)).astype(x.dtype)


def reference_relu_squared(x: Any) -> gp.GPUArray:
    _check_float("relu_squared", "x", x)
    cdt = gp.float64 if x.dtype == np.float64 else gp.float32
    r = gp.relu(x.astype(cdt))
    return (r * r).astype(x.dtype)


@functools.cache
def _kernel(ct: str, act: str, gated: bool, vec: int) -> Any:
    return gp.jit(
        _kernels.source("activations"),
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


_PARAMS = struct.Struct("@PqPqPqii")
_plans: dict[tuple, tuple[Any, bool, int, int, int, int]] = {}  # call signature -> (function, dependent, vec, block x, y, tiles)


def _run(act: str, g: Any, u: Any) -> gp.GPUArray:
    """act(g) (* u) over rows of g's last axis, into a new contiguous array."""
    gv, gs = _kernels.rows_of(g)
    uv, us = _kernels.rows_of(u) if u is not None else (None, 0)
    dt, n = g.dtype, g.shape[-1]
    key = (act, dt, n, gs & 7, gv.data_ptr & 15, us & 7, 0 if uv is None else uv.data_ptr & 15)
    plan = _plans.get(key)
    if plan is None:
        vec = 16 // dt.itemsize
        while vec > 1 and not (
            n % vec == 0 and gs % vec == 0 and gv.data_ptr % (vec * dt.itemsize) == 0
            and (uv is None or (us % vec == 0 and uv.data_ptr % (vec * dt.itemsize) == 0))
        ):  # fmt: skip
            vec //= 2
        if FAST_SILU and act == "pgk::Silu" and dt.itemsize == 2:
            act = "pgk::SiluFast"
        kern, rt = _kernel(_CTYPES[dt], act, uv is not None, vec), _runtime.get()
        plan = _plans[key] = (kern._function(rt), kern.dependent(rt), vec, *block_shape(n // vec))
    fn, dep, vec, bx, by, tiles = plan
    stream = current_stream_handle()
    y = gp.GPUArray._empty(g.shape, dt, stream)
    rows = g.size // n
    blocks = -(-rows // by) * tiles
    if blocks >= 2**31:
        raise ValueError(f"{act}: {rows} rows of {n} are too many for one launch")
    params = _PARAMS.pack(gv.data_ptr, gs, 0 if uv is None else uv.data_ptr, us, y.data_ptr, rows, n, tiles)
    _runtime.get().native.launch(fn, blocks, 1, 1, bx, by, 1, 0, stream, params, dep)
    return y


def kernel_swiglu(x: Any, up: Any = None) -> gp.GPUArray:
    g, u = _halves("swiglu", x, up)
    return _run("pgk::Silu", g, u)


def kernel_geglu(x: Any, up: Any = None, approximate: str = "none") -> gp.GPUArray:
    act = _check_approximate(approximate)
    g, u = _halves("geglu", x, up)
    return _run(act, g, u)


def kernel_relu_squared(x: Any) -> gp.GPUArray:
    _check_float("relu_squared", "x", x)
    return _run("pgk::ReluSquared", x, None)


def _kernel_takes(x: Any, *rest: Any) -> bool:
    """float16 / bfloat16 / float32, at least one element."""
    return x.dtype in _CTYPES and x.ndim > 0 and x.size > 0


def register(registry: Any) -> None:
    registry.define("gelu", nkey=1, doc=gelu.__doc__ or "")
    for backend in ("cuda", "cpu"):
        registry.register("gelu", elementwise_gelu, backend=backend, name="elementwise")
    for op, nkey, ref, kern in (
        ("relu_squared", 1, reference_relu_squared, kernel_relu_squared),
        ("swiglu", 1, reference_swiglu, kernel_swiglu),
        ("geglu", 1, reference_geglu, kernel_geglu),
    ):
        registry.define(op, nkey=nkey, doc=globals()[op].__doc__ or "")
        for backend in ("cuda", "cpu"):
            registry.register(op, ref, backend=backend, name="reference")
        registry.register(op, kern, backend="cuda", dtypes=list(_CTYPES), min_sm=80, priority=10, predicate=_kernel_takes, name="kernel")
