"""swiglu and geglu of pygpukit-nn (``act(gate) * up``, the gate and up either
halves of x's last axis or separate arrays) and gelu (exact or tanh), on
Triton's ``act_rows``: float32 math, rounded once."""

from __future__ import annotations

from typing import Any

import pygpukit as gp

from ._common import FLOATS, get, launch, next_pow2, rows_of

_GELU = {"none": 1, "tanh": 2}  # the kernel's ACT codes
MAX_BLOCK = 1024


def _run(act: int, g: Any, u: Any) -> gp.GPUArray:
    gv, gs = rows_of(g)
    uv, us = rows_of(u) if u is not None else (None, 0)
    n = g.shape[-1]
    y = gp.empty(g.shape, g.dtype)
    if y.size == 0:
        return y
    block = min(next_pow2(n), MAX_BLOCK)
    launch(get("rows").act_rows, (g.size // n, -(-n // block)), gv, gs, uv, us, y, n, ACT=act, GATED=u is not None, BLOCK=block,
           num_warps=4)  # fmt: skip
    return y


def swiglu(x: Any, up: Any = None) -> gp.GPUArray:
    """``silu(gate) * up``: x is [gate, up] along its last axis, or the gate with ``up`` separate."""
    from pygpukit_nn.checks import halves

    g, u = halves("swiglu", x, up)
    return _run(0, g, u)


def geglu(x: Any, up: Any = None, approximate: str = "none") -> gp.GPUArray:
    """``gelu(gate) * up`` (``approximate``: "none" or "tanh"); layouts as ``swiglu``."""
    from pygpukit_nn.checks import check_approximate, halves

    check_approximate(approximate)
    g, u = halves("geglu", x, up)
    return _run(_GELU[approximate], g, u)


def gelu(x: Any, approximate: str = "none") -> gp.GPUArray:
    """GELU of x, exact (``approximate="none"``) or the tanh form (``"tanh"``), as torch."""
    from pygpukit_nn.checks import check_approximate

    check_approximate(approximate, "gelu")
    if not isinstance(x, gp.GPUArray):
        raise TypeError(f"gelu: x must be a GPUArray, got {type(x).__name__}")
    if x.dtype not in FLOATS:
        raise TypeError(f"gelu (triton): x must be float16, bfloat16 or float32, got {x.dtype}")
    if x.ndim == 0:
        return _run(_GELU[approximate], x.reshape(1), None).reshape(())
    return _run(_GELU[approximate], x, None)


def applies(x: Any, *rest: Any, **kwargs: Any) -> bool:
    """Predicate: float16 / bfloat16 / float32, at least one element."""
    return isinstance(x, gp.GPUArray) and x.dtype in FLOATS and x.ndim > 0 and x.size > 0
