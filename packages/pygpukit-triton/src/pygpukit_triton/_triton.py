"""Importing Triton, once, with a clear error when it is missing.

Nothing else in the package imports ``triton`` at module level: importing
pygpukit_triton (and loading its plugin) works without Triton, and the
registry reports the "triton" backend as unavailable there.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pygpukit as gp

INSTALL_HINT = "pip install triton==3.6.* (or pip install 'pygpukit-triton[triton]')"


class TritonNotInstalledError(gp.PyGPUkitError, ImportError):
    """Triton is not installed; the message says what to install."""


class TritonBackendError(gp.PyGPUkitError, RuntimeError):
    """Triton is installed but cannot run here (no CUDA GPU and no interpreter)."""


def available() -> bool:
    """Whether the ``triton`` package can be imported (without importing it)."""
    return importlib.util.find_spec("triton") is not None


def require() -> Any:
    """The ``triton`` module, or TritonNotInstalledError naming what to install."""
    try:
        import triton
    except ImportError as e:
        raise TritonNotInstalledError(f"pygpukit_triton needs Triton, which is not installed ({e}); install it with: {INSTALL_HINT}") from e
    return triton


def interpreting() -> bool:
    """Whether Triton runs kernels in its NumPy interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def check_runnable() -> None:
    """Raise unless a Triton kernel can run on pygpukit arrays here: a CUDA GPU,
    or the CPU backend with Triton's interpreter (host memory arrays)."""
    require()
    if gp.backend() != "cuda" and not interpreting():
        raise TritonBackendError(
            "Triton kernels need a CUDA GPU; pygpukit runs on the CPU backend here. "
            "Set TRITON_INTERPRET=1 (before importing triton) to run them in Triton's interpreter on host arrays."
        )
