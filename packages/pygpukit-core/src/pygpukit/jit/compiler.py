"""Turning CUDA C++ into a loadable binary with NVRTC, through the disk cache.

Target choice: CUBIN for the device's exact SM when this NVRTC knows it
(no PTX JIT in the driver, and no "PTX newer than the driver" failure);
otherwise PTX for the newest virtual architecture NVRTC has that is not
above the device, which the driver compiles at load time.
"""

from __future__ import annotations

import os
import sys
import time

from .. import _env
from .._errors import CompileError
from . import cache, nvrtc
from .cache import Binary

# Package data on the file system (pygpukit has native modules: it is never imported from a zip).
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels", "include")
BASE_OPTIONS = ("-std=c++17", f"--include-path={INCLUDE_DIR}")


def debug_enabled() -> bool:
    return _env.flag("PYGPUKIT_JIT_DEBUG", False)


def choose_target(sm: int, arch_suffix: str = "") -> tuple[str, str]:
    """("cubin", "sm_90") or ("ptx", "compute_89") for a device of compute capability ``sm``."""
    archs = nvrtc.load().supported_archs
    if sm in archs:
        return "cubin", f"sm_{sm}{arch_suffix}"
    lower = [a for a in archs if a <= sm]
    if not lower:
        raise CompileError(
            f"this NVRTC (version {nvrtc.load().version}) supports architectures {archs}, "
            f"none at or below the device's sm_{sm}; install an NVRTC that supports it"
        )
    return "ptx", f"compute_{max(lower)}"


def compile_source(
    source: str,
    name_expressions: list[str],
    sm: int,
    options: tuple[str, ...] | list[str] = (),
    program_name: str = "kernel.cu",
    arch_suffix: str = "",
) -> Binary:
    """Compile ``source`` for compute capability ``sm`` (e.g. 90), using the disk cache."""
    info = nvrtc.load()
    kind, arch = choose_target(sm, arch_suffix)
    opts = [*BASE_OPTIONS, f"--gpu-architecture={arch}", *options]
    key = cache.make_key(source, opts, list(name_expressions), info.version, kind, cache.headers_digest(INCLUDE_DIR))
    t0 = time.perf_counter()
    hit = cache.read(key)
    if hit is not None:
        if debug_enabled():
            _debug(f"cache hit {program_name} {arch} ({(time.perf_counter() - t0) * 1e3:.2f} ms) {cache.cache_dir()}")
        return hit
    from .. import _native

    image, log, lowered = _native.nvrtc_compile(source, program_name, opts, list(name_expressions), kind)
    binary = Binary(image=image, kind=kind, lowered=dict(lowered), key=key)
    cache.write(binary)
    if debug_enabled():
        _debug(
            f"nvrtc {program_name} {' '.join(opts)} names={list(name_expressions)} "
            f"-> {kind} {len(image)} B in {(time.perf_counter() - t0) * 1e3:.1f} ms" + (f"\n{log}" if log.strip() else "")
        )
    return binary


def _debug(msg: str) -> None:
    print(f"[pygpukit.jit] {msg}", file=sys.stderr, flush=True)
