"""The implementations a suite measures (pygpukit and each peer available
here) and the release of one's cached memory before the next runs; as core's
suites do (pygpukit.benchmark.core)."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark import peers


def impls() -> list[tuple[str, peers.Timer, Any]]:
    """(name, timer, module) for pygpukit and each available peer: PyTorch and
    CuPy on the GPU, NumPy on the CPU backend."""
    if gp.backend() != "cuda":
        return [("pygpukit", peers.host_timer(), gp), ("numpy", peers.host_timer(), np)]
    out = [("pygpukit", peers.gp_timer(), gp)]
    torch = peers.torch_cuda()
    if torch is not None:
        out.append(("torch", peers.torch_timer(torch), torch))
    cupy = peers.cupy_cuda()
    if cupy is not None:
        out.append(("cupy", peers.cupy_timer(cupy), cupy))
    return out


def free(name: str, mod: Any) -> None:
    """Give an implementation's cached device memory back before the next one runs."""
    if name == "pygpukit":
        gp.memory.empty_cache()
    elif name == "torch":
        mod.cuda.empty_cache()
    elif name == "cupy":
        mod.get_default_memory_pool().free_all_blocks()
