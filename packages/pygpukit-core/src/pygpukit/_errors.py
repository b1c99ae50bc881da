"""Exception types of pygpukit.

This module imports nothing from pygpukit: the native modules (_native, _rt)
import it at load time to raise these exact classes.
"""

from __future__ import annotations

__all__ = [
    "AdmissionError",
    "BackendError",
    "CompileError",
    "CudaError",
    "NVRTCError",
    "OutOfMemoryError",
    "PluginError",
    "PyGPUkitError",
    "RouteError",
    "SchedulerError",
]


class PyGPUkitError(Exception):
    """Base class of every error raised by pygpukit itself."""


class CudaError(PyGPUkitError, RuntimeError):
    """A CUDA driver call failed.

    Attributes: ``call`` (the driver function, e.g. ``"cuMemAlloc"``),
    ``code`` (the CUresult number) and ``name`` (e.g.
    ``"CUDA_ERROR_ILLEGAL_ADDRESS"``).
    """

    def __init__(self, message: str, call: str = "", code: int = 0, name: str = "") -> None:
        super().__init__(message)
        self.call = call
        self.code = code
        self.name = name


class NVRTCError(PyGPUkitError, RuntimeError):
    """NVRTC could not be loaded or failed outside of compiling a source."""


class CompileError(NVRTCError):
    """NVRTC rejected a CUDA source. ``log`` holds NVRTC's full log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class OutOfMemoryError(PyGPUkitError, MemoryError):
    """The memory pool could not satisfy a request, even after releasing its cache.

    Attributes: ``requested`` (bytes asked for), ``stats`` (pool stats at
    the time, a dict) and ``limit`` (the pool's byte limit or None).
    """

    def __init__(
        self,
        message: str,
        requested: int = 0,
        stats: dict | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.stats = dict(stats or {})
        self.limit = limit


class BackendError(PyGPUkitError, RuntimeError):
    """An operation needs a backend that is not available (for example NVRTC on CPU)."""


class EnvironmentVariableError(PyGPUkitError, ValueError):
    """A PYGPUKIT_* environment variable holds a value pygpukit cannot use."""


class GraphCaptureError(PyGPUkitError, RuntimeError):
    """A graph capture broke one of its rules (a host synchronization inside
    ``with gp.graph():``, nested captures), or a graph was used before capture."""


class RouteError(PyGPUkitError, ValueError):
    """An op was routed to an implementation that cannot run it: a backend
    that is not available here, a name no plugin registered, or dtypes the
    routed implementations do not take. The message lists what exists."""


class PluginError(PyGPUkitError, RuntimeError):
    """A plugin broke the registry's rules (a duplicate name, an unknown
    backend or op); the message names the plugin."""


class SchedulerError(PyGPUkitError, RuntimeError):
    """The scheduler refused an operation: an illegal task state transition
    (the message says from which state to which), an unknown task or buffer."""


class AdmissionError(SchedulerError):
    """A task's memory reservation does not fit (now, within its timeout, or
    ever). Attributes: ``task``, ``asked`` and ``free`` (bytes), and
    ``holders``: (task, qos, bytes) of who holds the memory, largest first."""

    def __init__(self, message: str, task: str = "", asked: int = 0, free: int = 0, holders: list | None = None) -> None:
        super().__init__(message)
        self.task = task
        self.asked = asked
        self.free = free
        self.holders = list(holders or [])
