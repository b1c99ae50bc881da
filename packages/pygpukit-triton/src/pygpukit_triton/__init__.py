"""Triton kernels on PyGPUkit arrays and streams.

``launch(kernel, grid, *args, **meta)`` runs any ``@triton.jit`` kernel
(autotuned or not) on GPUArrays, on pygpukit's current stream, without
copies and without PyTorch; ``tensor(x)`` wraps a GPUArray for a direct
``kernel[grid](...)`` call. ``pygpukit_triton.ops`` holds Triton
implementations of pygpukit's ops, registered under the backend "triton"
(route with ``gp.route("rms_norm", "triton")``). Importing this package
does not import Triton; using it without Triton raises
``TritonNotInstalledError`` naming what to install. See docs/triton.md.
"""

from __future__ import annotations

from typing import Any

from ._triton import TritonBackendError, TritonNotInstalledError, available
from .array import TritonArray
from .launcher import launch

__version__ = "0.1.0"

__all__ = ["TritonArray", "TritonBackendError", "TritonNotInstalledError", "available", "launch", "tensor"]


def tensor(array: Any) -> TritonArray:
    """``array`` (a GPUArray) wrapped for a direct ``kernel[grid](tensor(x), ...)`` call; on
    a GPU this also makes pygpukit's driver Triton's active one (pygpukit's current stream)."""
    from . import _triton, driver

    wrapped = TritonArray(array)
    _triton.check_runnable()
    if not _triton.interpreting():
        driver.activate()
    return wrapped
