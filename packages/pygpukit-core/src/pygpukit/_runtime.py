"""Choosing the backend once per process and holding what it needs.

The CUDA backend needs the native module, a driver, a device and NVRTC;
when one is missing pygpukit logs once why and falls back to the CPU
simulation backend, where arrays live in host memory handed out by the same
Rust pool (through its host driver table) and ops run on NumPy.
``PYGPUKIT_BACKEND=cpu`` forces the CPU backend.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from . import _env
from ._errors import BackendError, CudaError, EnvironmentVariableError, NVRTCError
from .jit import nvrtc


@dataclass
class Runtime:
    backend: str  # "cuda" or "cpu"
    reason: str | None  # why the CPU backend was chosen, None on CUDA
    pool: Any  # pygpukit._rt.Pool
    device: int = 0
    props: dict = field(default_factory=dict)
    sm: int = 0  # compute capability as major*10 + minor
    stream: int = 0  # pygpukit's own default stream (never the legacy stream 0 on CUDA)
    native: Any = None  # pygpukit._native on CUDA
    ops: Any = None  # the backend implementation (_backend.cuda.CudaOps / _backend.cpu.CpuOps)


_lock = threading.Lock()
_runtime: Runtime | None = None
BACKENDS = ("auto", "cpu", "cuda")  # PYGPUKIT_BACKEND: auto falls back to the CPU without a usable GPU, cuda refuses to


def get() -> Runtime:
    rt = _runtime
    if rt is not None:
        return rt
    return _init()


def _try_cuda() -> tuple[Runtime | None, str]:
    if _env.choice("PYGPUKIT_BACKEND", BACKENDS, "auto") == "cpu":
        return None, "PYGPUKIT_BACKEND=cpu"
    try:
        from . import _native  # here: its ImportError is a reason to fall back, not a failure
    except ImportError as exc:
        return None, f"native module pygpukit._native is not available ({exc})"
    try:
        _native.init()
    except CudaError as exc:
        return None, str(exc) if "not detected" in str(exc) else f"CUDA driver not detected: {exc}"
    try:
        if _native.device_count() == 0:
            return None, "No GPU devices found"
    except CudaError as exc:
        return None, f"No GPU devices found ({exc})"
    try:
        nvrtc.load()
    except NVRTCError as exc:
        return None, f"NVRTC JIT compiler not available: {exc}"
    from . import _rt  # the native modules load on first use, not with `import pygpukit`

    device = _env.integer("PYGPUKIT_DEVICE", 0)
    if device >= _native.device_count():
        raise EnvironmentVariableError(f"environment variable PYGPUKIT_DEVICE={device}: this machine has "
                                            f"{_native.device_count()} CUDA device(s), numbered from 0")  # fmt: skip
    _native.set_device(device)
    props = _native.device_properties(device)
    stream = _native.stream_create(0, True)
    limit = _env.nbytes("PYGPUKIT_MEMORY_LIMIT")
    # The scheduler's capacity: the pool limit, else the device's memory.
    pool = _rt.Pool(_native.driver_table(), limit, capacity=limit if limit is not None else props["total_memory"])
    _native.set_launch_gate(pool.scheduler().launch_gate())
    rt = Runtime(
        backend="cuda",
        reason=None,
        pool=pool,
        device=device,
        props=props,
        sm=props["major"] * 10 + props["minor"],
        stream=stream,
        native=_native,
    )
    from ._backend.cuda import CudaOps  # the backends load with it, on first use: `import pygpukit` stays cheap

    rt.ops = CudaOps(rt)
    return rt, ""


def _init() -> Runtime:
    global _runtime
    with _lock:
        if _runtime is not None:
            return _runtime
        rt, reason = _try_cuda()
        if rt is None and _env.choice("PYGPUKIT_BACKEND", BACKENDS, "auto") == "cuda":
            raise BackendError(f"PYGPUKIT_BACKEND=cuda, but CUDA is not usable here: {reason}")
        if rt is None:
            from . import _rt  # as in _try_cuda: loaded on first use

            logging.getLogger("pygpukit").warning("Falling back to CPU simulation backend: %s", reason)
            limit = _env.nbytes("PYGPUKIT_MEMORY_LIMIT")
            rt = Runtime(backend="cpu", reason=reason, pool=_rt.Pool(_rt.host_table(), limit, capacity=limit))
            from ._backend.cpu import CpuOps  # as CudaOps in _try_cuda: loaded on first use

            rt.ops = CpuOps(rt)
        _runtime = rt
        return rt
