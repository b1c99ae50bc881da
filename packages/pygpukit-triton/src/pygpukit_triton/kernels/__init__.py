"""The Triton kernels of pygpukit_triton's ops, one module per family. These
modules import triton; the ops import them on first use (``get``)."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType


@functools.cache
def get(name: str) -> ModuleType:
    """The kernel module ``name`` (imported once; TritonNotInstalledError without Triton)."""
    from .._triton import require

    require()
    return importlib.import_module(f"{__name__}.{name}")
