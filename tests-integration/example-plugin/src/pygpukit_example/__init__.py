"""pygpukit-example-plugin: a third-party kernel plugin, written only against
pygpukit's public API (``pygpukit``, ``pygpukit.plugins``, ``pygpukit.ext``).
docs/plugins.md in the pygpukit repository walks through it.

- a new op, ``scaled_residual_add(x, residual, alpha)`` = residual + alpha * x,
  with a reference on every backend and a CUDA kernel (residual.py,
  kernels/scaled_residual_add.cu);
- a faster ``softmax`` / ``log_softmax`` for row-strided arrays, which
  pygpukit copies first (softmax.py, kernels/softmax_strided.cu);
- a model architecture ("example-affine"), a benchmark suite ("example"), a
  command (``pygpukit example``) and a namespace (``gp.example``): plugin.py.

Nothing here runs at import time but reading the kernel sources: the hooks in
plugin.py register everything when pygpukit first loads its plugins.
"""

from __future__ import annotations

from typing import Any

from pygpukit import ext

__version__ = "0.4.0"
__all__ = ["scaled_residual_add"]


def scaled_residual_add(x: Any, residual: Any, alpha: float = 1.0) -> Any:
    """residual + alpha * x for two float arrays of one shape and dtype;
    float16 and bfloat16 compute in float32 and round once. Dispatched by
    pygpukit's registry (``gp.ops.scaled_residual_add`` is the same op)."""
    return ext.op("scaled_residual_add")(x, residual, alpha)
