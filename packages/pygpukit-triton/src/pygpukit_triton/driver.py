"""The Triton driver pygpukit installs: Triton's own CUDA driver (its launcher,
its binary loader) with the device, stream and benchmark taken from pygpukit
instead of PyTorch.

Triton 3.6's ``GPUDriver.__init__`` imports torch for the current device,
stream and compute capability, and ``CudaDriver.is_active`` needs torch to
say that a GPU exists; without torch Triton has no driver at all. This
driver skips both and answers from pygpukit's runtime, so kernels launch
with torch absent. Once active (``activate()``, done by every
pygpukit_triton launch), a Triton launch without an explicit stream runs on
pygpukit's current stream (``with gp.Stream():`` included). Its device
interface (what ``triton.testing.do_bench``, and so the autotuner, times
with) is pygpukit's events, and kernels that need a global scratch buffer
get it from pygpukit's pool.
"""

from __future__ import annotations

import threading
from typing import Any

import pygpukit as gp
from pygpukit import ext

from . import _triton

_lock = threading.Lock()
_driver: Any = None  # the PygpukitDriver once made
L2_FLUSH_BYTES = 256 << 20  # as triton.testing.do_bench: larger than the H100's 50 MiB L2


class _TimingEvent:
    """torch.cuda.Event as triton.testing.do_bench uses it, on pygpukit's current stream."""

    def __init__(self, enable_timing: bool = False) -> None:
        self._event = gp.Event(timing=enable_timing)

    def record(self) -> None:
        self._event.record()

    def elapsed_time(self, end: _TimingEvent) -> float:
        return self._event.elapsed_time(end._event)


class DeviceInterface:
    """The ``torch.cuda`` subset Triton's benchmarking calls (synchronize, Event)."""

    Event = _TimingEvent

    @staticmethod
    def synchronize() -> None:
        gp.synchronize()


def _make_driver_class() -> type:
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher, CudaUtils

    class PygpukitDriver(CudaDriver):
        """CudaDriver answering from pygpukit's runtime (no torch)."""

        def __init__(self) -> None:  # not CudaDriver's: GPUDriver.__init__ imports torch
            self._device = ext.device()
            self.utils = CudaUtils()
            self.launcher_cls = CudaLauncher

        @staticmethod
        def is_active() -> bool:
            return ext.device().backend == "cuda"

        def get_current_device(self) -> int:
            return self._device.ordinal

        def set_current_device(self, device: int) -> None:
            if device != self._device.ordinal:
                raise _triton.TritonBackendError(
                    f"pygpukit runs on device {self._device.ordinal} (PYGPUKIT_DEVICE); Triton asked for device {device}"
                )

        def get_device_capability(self, device: int | None = None) -> tuple[int, int]:
            props = self._device.properties
            return props["major"], props["minor"]

        def get_current_stream(self, device: int | None = None) -> int:
            return ext.current_stream()

        def get_active_torch_device(self) -> Any:
            import torch  # only asked for by torch-based Triton utilities

            return torch.device("cuda", self._device.ordinal)

        def get_device_interface(self) -> Any:
            return DeviceInterface

        def get_empty_cache_for_benchmark(self) -> Any:
            return gp.empty((L2_FLUSH_BYTES // 4,), gp.int32)

        def clear_cache(self, cache: Any) -> None:
            cache[...] = 0

    return PygpukitDriver


def activate() -> Any:
    """Make pygpukit's driver Triton's active driver (once; again if someone reset it)."""
    global _driver
    triton = _triton.require()
    config = triton.runtime.driver
    if _driver is not None and config._active is _driver:
        return _driver
    with _lock:
        if _driver is None:
            _driver = _make_driver_class()()
            _install_allocator(triton)
        config.set_active(_driver)
    return _driver


def _install_allocator(triton: Any) -> None:
    """Scratch memory for kernels that need it (device-side TMA descriptors), from pygpukit's pool,
    unless the user set an allocator of their own."""
    from triton.runtime import _allocation

    from .array import TritonArray

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        triton.set_allocator(lambda size, align, stream: TritonArray(gp.empty((max(int(size), 1),), gp.uint8)))
