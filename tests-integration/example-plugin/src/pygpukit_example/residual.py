"""The example's new op: ``scaled_residual_add(x, residual, alpha)`` =
residual + alpha * x, the residual connection of a transformer block with a
layer scale, in one pass over memory.

- ``reference``: the definition, on every backend and for any float dtype,
  written with pygpukit's array ops (they handle every layout); float16 and
  bfloat16 compute in float32 (``ext.compute_dtype``) and round once.
- ``kernel``: kernels/scaled_residual_add.cu for float16, bfloat16 and
  float32 when both operands are row-strided (``layout.rows_of``); its
  predicate ``kernel_takes`` leaves every other call to the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .layout import rows_of, vector_width

OP = "scaled_residual_add"
DOC = "residual + alpha * x (float16/bfloat16 compute in float32, rounded once)"
FLOATS = frozenset(np.dtype(d) for d in (gp.float16, gp.bfloat16, gp.float32, gp.float64))
KERNEL_DTYPES = ["float16", "bfloat16", "float32"]
CTYPES = {np.dtype(gp.float16): "pgk::half", np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float32): "float"}
THREADS = 256  # kThreads
BLOCKS_PER_SM = 2048 // THREADS  # a full SM; the grid strides beyond that

SOURCE = ext.kernel_source(__name__, "scaled_residual_add")


def _check(x: Any, residual: Any, alpha: Any) -> None:
    if not isinstance(x, gp.GPUArray) or not isinstance(residual, gp.GPUArray):
        raise TypeError(f"{OP}: x and residual must be GPUArrays, got {type(x).__name__} and {type(residual).__name__}")
    if x.dtype not in FLOATS or x.dtype != residual.dtype or x.shape != residual.shape:
        raise TypeError(
            f"{OP}: x and residual must be float arrays of one dtype and shape, "
            f"got {x.dtype} {x.shape} and {residual.dtype} {residual.shape}"
        )
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"{OP}: alpha must be a real number, got {type(alpha).__name__}")


def reference(x: Any, residual: Any, alpha: Any = 1.0) -> gp.GPUArray:
    """residual + alpha * x, computed in ``ext.compute_dtype(x.dtype)``."""
    _check(x, residual, alpha)
    ct = ext.compute_dtype(x.dtype)
    out = residual.astype(ct, copy=False) + x.astype(ct, copy=False) * float(alpha)
    return out.astype(x.dtype, copy=False)


# -- the kernel ---------------------------------------------------------------------


def kernel_takes(x: Any, residual: Any, alpha: Any = 1.0) -> bool:
    """Predicate: same shape and dtype, not empty, both operands row-strided."""
    if type(x) is not gp.GPUArray or type(residual) is not gp.GPUArray:
        return False
    if x.shape != residual.shape or x.dtype != residual.dtype or not x.size or type(alpha) not in (float, int):
        return False
    return (x.is_contiguous or rows_of(x) is not None) and (residual.is_contiguous or rows_of(residual) is not None)


@dataclass(frozen=True, slots=True)
class Plan:
    """The launch for one layout of (x, residual), and its scalar arguments."""

    launch: ext.Launch
    rows: int
    cols: int
    ldx: int
    ldr: int


_plans: ext.PlanCache[tuple[Any, ...], Plan] = ext.PlanCache("example.scaled_residual_add")


def kernel(x: gp.GPUArray, residual: gp.GPUArray, alpha: float = 1.0) -> gp.GPUArray:
    """The CUDA implementation (its predicate has checked the arguments)."""
    key = (ext.layout_key(x), ext.layout_key(residual))
    plan = _plans.get(key) or _plans.put(key, _plan(x, residual))
    out = ext.empty(x.shape, x.dtype)
    plan.launch(x, residual, out, plan.rows, plan.cols, plan.ldx, plan.ldr, alpha)
    return out


def _plan(x: gp.GPUArray, residual: gp.GPUArray) -> Plan:
    if x.is_contiguous and residual.is_contiguous:
        rows, cols, ldx, ldr = 1, x.size, x.size, x.size
        vec = vector_width(x.itemsize, (x.data_ptr % 16, residual.data_ptr % 16))
    else:
        # a non-contiguous operand has several rows (one row of unit stride would be contiguous)
        cols = x.shape[-1]
        (rows, ldx), (_, ldr) = rows_of(x), rows_of(residual)  # type: ignore[misc]
        vec = vector_width(x.itemsize, (x.data_ptr % 16, residual.data_ptr % 16), cols, ldx, ldr)
    vectors = rows * (cols // vec)
    blocks = max(1, min(-(-vectors // THREADS), BLOCKS_PER_SM * ext.device().multiprocessor_count))
    return Plan(_kernel(CTYPES[x.dtype], vec).launcher(blocks, THREADS), rows, cols, ldx, ldr)


@cache
def _kernel(ctype: str, vec: int) -> ext.Kernel:
    return ext.Kernel(SOURCE, f"scaled_residual_add<{ctype}, {vec}>", name="scaled_residual_add.cu")


def instantiations() -> list[str]:
    """Every name expression ``kernel`` may compile (for a compile test without a GPU)."""
    return [f"scaled_residual_add<{c}, {v}>" for c in CTYPES.values() for v in (1, 16 // (4 if c == "float" else 2))]
