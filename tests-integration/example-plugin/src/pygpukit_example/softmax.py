"""A faster implementation of pygpukit's ``softmax`` and ``log_softmax`` for
the calls it is good at: the last axis of a float16 / bfloat16 / float32
array whose rows are unit-stride but not packed (``scores[:, :n]``,
``x[::2]``, a broadcast row), up to 1024 elements a row. pygpukit copies such
an array to a contiguous one and then runs its row kernel; kernels/
softmax_strided.cu reads the rows where they lie (one launch, half the
traffic). Registered above the builtin with a predicate, so every other call
(contiguous arrays, other axes, longer rows, other dtypes) stays with
pygpukit or whichever implementation ranks next.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .layout import rows_of, vector_width

KERNEL_DTYPES = ["float16", "bfloat16", "float32"]
CTYPES = {np.dtype(gp.float16): "pgk::half", np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float32): "float"}
ROWS_PER_BLOCK = 8  # kRowsPerBlock: a warp per row
LANE_VALUES = 32  # values a lane keeps in registers
MAX_ROW = 32 * LANE_VALUES

SOURCE = ext.kernel_source(__name__, "softmax_strided")


def takes(x: Any, axis: Any = -1) -> bool:
    """Predicate: the last axis of a non-contiguous array with row-strided rows of at most MAX_ROW."""
    if type(x) is not gp.GPUArray or x.is_contiguous or type(axis) is not int:
        return False
    shape = x.shape
    return axis in (-1, len(shape) - 1) and 0 < shape[-1] <= MAX_ROW and rows_of(x) is not None


@dataclass(frozen=True, slots=True)
class Plan:
    """The launch for one layout of x, and its scalar arguments."""

    launch: ext.Launch
    rows: int
    k: int
    ld: int


_plans: ext.PlanCache[tuple[Any, ...], Plan] = ext.PlanCache("example.softmax_strided")


def softmax(x: gp.GPUArray, axis: int = -1) -> gp.GPUArray:
    return _run(x, 0)


def log_softmax(x: gp.GPUArray, axis: int = -1) -> gp.GPUArray:
    return _run(x, 1)


def _run(x: gp.GPUArray, log: int) -> gp.GPUArray:
    key = (ext.layout_key(x), log)
    plan = _plans.get(key) or _plans.put(key, _plan(x, log))
    y = ext.empty(x.shape, x.dtype)
    plan.launch(x, y, plan.rows, plan.k, plan.ld)
    return y


def _plan(x: gp.GPUArray, log: int) -> Plan:
    k = x.shape[-1]
    rows, ld = rows_of(x)  # type: ignore[misc]
    vec = vector_width(x.itemsize, (x.data_ptr % 16,), k, ld)
    nv = 1 << (-(-k // (32 * vec)) - 1).bit_length()  # vectors per lane, a power of two
    launch = _kernel(CTYPES[x.dtype], log, vec, nv).launcher(-(-rows // ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK)
    return Plan(launch, rows, k, ld)


@cache
def _kernel(ctype: str, log: int, vec: int, nv: int) -> ext.Kernel:
    return ext.Kernel(SOURCE, f"softmax_strided<{ctype}, {log}, {vec}, {nv}>", name="softmax_strided.cu")


def instantiations() -> list[str]:
    """Every name expression ``_plan`` may compile (for a compile test without a GPU)."""
    out = []
    for c in CTYPES.values():
        for vec in (1, 16 // (4 if c == "float" else 2)):
            for log in (0, 1):
                nv = 1
                while nv * vec <= LANE_VALUES:
                    out.append(f"softmax_strided<{c}, {log}, {vec}, {nv}>")
                    nv *= 2
    return out
