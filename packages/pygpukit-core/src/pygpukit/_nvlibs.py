"""Where the NVIDIA libraries loaded at run time (NVRTC here; cuBLASLt and
cuFFT in the plugins) are looked for: an environment variable naming a
file, then the ``nvidia-*`` wheels (the ``nvidia`` namespace package: CUDA
13 wheels under ``nvidia/cu13/lib``, CUDA 12 ones under
``nvidia/<library>/lib``), then the system loader's sonames."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence


def wheel_paths(wheel_libs: Sequence[tuple[str, ...]]) -> list[str]:
    """The existing files among ``nvidia/<parts...>`` of every installed NVIDIA wheel root."""
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError:
        return []
    found = []
    for root in getattr(nvidia, "__path__", []):
        for parts in wheel_libs:
            path = os.path.join(root, *parts)
            if os.path.exists(path):
                found.append(path)
    return found


def candidates(env_var: str, wheel_libs: Sequence[tuple[str, ...]], sonames: Sequence[str]) -> list[tuple[str, str]]:
    """(path or soname, where it came from: "env", "wheel" or "system"), in the order to try."""
    out: list[tuple[str, str]] = []
    env = os.environ.get(env_var)
    if env:
        out.append((env, "env"))
    out += [(p, "wheel") for p in wheel_paths(wheel_libs)]
    out += [(s, "system") for s in sonames]
    return out


def load_first(names: Sequence[str]) -> tuple[ctypes.CDLL, str]:
    """The first of ``names`` (paths or sonames) that loads, and its name; an
    OSError saying "tried" and every failure when none does."""
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise OSError("tried " + "; ".join(errors))
