"""pygpukit-triton's tests: on the CPU backend with Triton installed, kernels run
in Triton's interpreter (TRITON_INTERPRET=1, set here before anything imports
triton: the decorator reads it); on a GPU they compile and run for real."""

from __future__ import annotations

import importlib.util
import os

import pytest

import pygpukit as gp

HAS_TRITON = importlib.util.find_spec("triton") is not None
if HAS_TRITON and gp.backend() == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"


@pytest.fixture
def need_triton():
    if not HAS_TRITON:
        pytest.skip("triton is not installed (pip install triton): the kernel tests need it")


@pytest.fixture
def triton_plugin():
    """The triton plugin active in the registry (registered explicitly when the
    package is on the path but not installed with its entry point)."""
    names = {p.name for p in gp.plugins.plugins() if p.status == "active"}
    if "triton" not in names:
        from pygpukit_triton import plugin

        gp.plugins.register(plugin, name="triton")
    return "triton"
