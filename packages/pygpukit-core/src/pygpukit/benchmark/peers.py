"""Optional peers measured beside pygpukit: PyTorch and CuPy, when importable with a GPU."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Timer = Callable[[], tuple[Callable[[], None], Callable[[], float]]]


def torch_cuda() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def cupy_cuda() -> Any | None:
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # not installed, or no usable device
        return None
    return cupy


def gp_timer() -> Timer:
    import pygpukit as gp

    def start_stop() -> tuple[Callable[[], None], Callable[[], float]]:
        e0, e1 = gp.Event(timing=True), gp.Event(timing=True)

        def end() -> float:
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1)

        def begin() -> None:
            e0.record()

        return begin, end

    return start_stop


def torch_timer(torch: Any) -> Timer:
    def start_stop() -> tuple[Callable[[], None], Callable[[], float]]:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def end() -> float:
            e1.record()
            e1.synchronize()
            return float(e0.elapsed_time(e1))

        return e0.record, end

    return start_stop


def cupy_timer(cupy: Any) -> Timer:
    def start_stop() -> tuple[Callable[[], None], Callable[[], float]]:
        e0, e1 = cupy.cuda.Event(), cupy.cuda.Event()

        def end() -> float:
            e1.record()
            e1.synchronize()
            return float(cupy.cuda.get_elapsed_time(e0, e1))

        return e0.record, end

    return start_stop


def host_timer() -> Timer:
    def start_stop() -> tuple[Callable[[], None], Callable[[], float]]:
        t: list[float] = []

        def end() -> float:
            return (time.perf_counter() - t[0]) * 1e3

        return (lambda: t.append(time.perf_counter())), end

    return start_stop


def impls() -> list[tuple[str, Timer, Any]]:
    """(name, timer, module) for pygpukit and each peer available here: PyTorch
    and CuPy on the GPU, NumPy on the CPU backend (every suite compares these)."""
    import numpy as np

    import pygpukit as gp

    if gp.backend() != "cuda":
        return [("pygpukit", host_timer(), gp), ("numpy", host_timer(), np)]
    out = [("pygpukit", gp_timer(), gp)]
    torch = torch_cuda()
    if torch is not None:
        out.append(("torch", torch_timer(torch), torch))
    cupy = cupy_cuda()
    if cupy is not None:
        out.append(("cupy", cupy_timer(cupy), cupy))
    return out


def free(name: str, mod: Any) -> None:
    """Give an implementation's cached device memory back before the next one runs."""
    if name == "pygpukit":
        mod.memory.empty_cache()
    elif name == "torch":
        mod.cuda.empty_cache()
    elif name == "cupy":
        mod.get_default_memory_pool().free_all_blocks()
