"""Build the CPU emulator of CUDA kernels (emulator/*.cpp: a std::thread per
CUDA thread, std::barrier for __syncthreads) over the package's .cu sources."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from pygpukit import ext

HERE = Path(__file__).parent / "emulator"


def build(out: Path, harness: str, kernels: tuple[str, ...]) -> ctypes.CDLL:
    """Compile emulator/``harness`` with the kernels' sources (dynamic shared
    memory pointed at the emulator's buffer) into a library in ``out``; skips
    without g++ and C++20's <barrier>."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed (the kernel emulator needs a C++20 compiler)")
    for name in kernels:
        text = ext.kernel_source("pygpukit_audio", name).replace(
            "extern __shared__ __align__(16) unsigned char smem_raw[];", "unsigned char* smem_raw = g_dyn_smem;"
        )
        (out / f"{name}.cu").write_text(text)
    lib = out / f"lib{Path(harness).stem}.so"
    cmd = [cxx, "-std=c++20", "-O1", "-pthread", "-shared", "-fPIC", f"-I{out}", str(HERE / harness), "-o", str(lib)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0 and "barrier" in run.stderr:
        pytest.skip("this g++ lacks C++20's <barrier>")
    assert run.returncode == 0, run.stderr[-3000:]
    return ctypes.CDLL(str(lib))
