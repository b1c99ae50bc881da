"""Finding and loading NVRTC, independently of whether a GPU is present.

Search order: ``PYGPUKIT_NVRTC_PATH``, the ``nvidia-cuda-nvrtc`` wheel (CUDA
13 layout ``nvidia/cu13/lib``, CUDA 12 layout ``nvidia/cuda_nvrtc/lib``),
then the system loader (``libnvrtc.so.13``, ``.12``, ``libnvrtc.so``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from .. import _nvlibs
from .._errors import NVRTCError

_WHEEL_LIBS = (("cu13", "lib", "libnvrtc.so.13"), ("cuda_nvrtc", "lib", "libnvrtc.so.12"))
_SYSTEM_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


@dataclass(frozen=True)
class NVRTCInfo:
    path: str
    version: tuple[int, int]
    supported_archs: tuple[int, ...]
    source: str  # "env", "wheel" or "system"


def wheel_candidates() -> list[str]:
    """Paths of libnvrtc inside installed nvidia-cuda-nvrtc wheels."""
    return _nvlibs.wheel_paths(_WHEEL_LIBS)


def candidates() -> list[tuple[str, str]]:
    return _nvlibs.candidates("PYGPUKIT_NVRTC_PATH", _WHEEL_LIBS, _SYSTEM_SONAMES)


_lock = threading.Lock()
_info: NVRTCInfo | None = None
_error: NVRTCError | None = None


def load() -> NVRTCInfo:
    """Load NVRTC once per process; raise NVRTCError saying what was tried."""
    global _info, _error
    if _info is not None:
        return _info
    with _lock:
        if _info is not None:
            return _info
        if _error is not None:
            raise _error
        try:
            from .. import _native
        except ImportError as exc:
            _error = NVRTCError(f"NVRTC cannot be loaded: pygpukit._native is not importable ({exc})")
            raise _error from exc
        cands = candidates()
        try:
            path = _native.nvrtc_load([p for p, _ in cands])
        except NVRTCError as exc:
            _error = NVRTCError(f"{exc}\nInstall NVRTC with: pip install nvidia-cuda-nvrtc")
            raise _error from exc
        source = next((s for p, s in cands if p == path or os.path.basename(p) == os.path.basename(path)), "system")
        if source == "system" and any(os.path.realpath(p) == os.path.realpath(path) for p in wheel_candidates()):
            source = "wheel"
        _info = NVRTCInfo(
            path=path,
            version=tuple(_native.nvrtc_version()),  # type: ignore[arg-type]
            supported_archs=tuple(_native.nvrtc_supported_archs()),
            source=source,
        )
        return _info


def available() -> bool:
    try:
        load()
    except NVRTCError:
        return False
    return True
