"""``pygpukit doctor``: check the installation, say what is wrong and how to fix it."""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass

from ._errors import CudaError, NVRTCError

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN or FAIL
    detail: str
    fix: str = ""


def native_copies(paths: list[str] | None = None) -> dict[str, list[str]]:
    """Every copy of pygpukit's native modules on ``paths`` (default sys.path), by module."""
    found: dict[str, list[str]] = {"_native": [], "_rt": []}
    for entry in paths if paths is not None else sys.path:
        for mod in found:
            for f in glob.glob(os.path.join(entry or ".", "pygpukit", f"{mod}.*so")):
                real = os.path.realpath(f)
                if real not in found[mod]:
                    found[mod].append(real)
    return found


def loaded_nvrtc_libraries(maps_path: str = "/proc/self/maps") -> list[str]:
    """Distinct libnvrtc files mapped into this process (Linux)."""
    libs: list[str] = []
    try:
        with open(maps_path) as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                base = os.path.basename(path)
                if base.startswith("libnvrtc.so") and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    return libs


def driver_vs_nvrtc(driver: int, nvrtc_version: tuple[int, int], sm: int | None, archs: tuple[int, ...]) -> Check:
    nv = nvrtc_version[0] * 1000 + nvrtc_version[1] * 10
    drv = f"{driver // 1000}.{(driver % 1000) // 10}"
    if nv <= driver:
        return Check("driver vs NVRTC", OK, f"driver supports CUDA {drv}, NVRTC is {nvrtc_version[0]}.{nvrtc_version[1]}")
    if sm is not None and sm in archs:
        return Check(
            "driver vs NVRTC",
            OK,
            f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} is newer than the driver (CUDA {drv}): PTX from it would be "
            f"rejected (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), but pygpukit compiles CUBIN for sm_{sm}, which the driver loads",
        )
    return Check(
        "driver vs NVRTC",
        FAIL,
        f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} is newer than the driver (CUDA {drv}) and cannot emit CUBIN for "
        f"sm_{sm}, so pygpukit would have to load PTX the driver rejects",
        f"install an NVRTC no newer than the driver: pip install 'nvidia-cuda-nvrtc=={driver // 1000}.*' (or update the NVIDIA driver)",
    )


def run_checks() -> list[Check]:
    checks: list[Check] = []
    copies = native_copies()
    for mod, paths in copies.items():
        if len(paths) > 1:
            checks.append(Check(f"copies of pygpukit.{mod}", FAIL, "several on sys.path: " + ", ".join(paths),
                                "remove the stale copies (pip uninstall pygpukit-core, then reinstall; check PYTHONPATH)"))  # fmt: skip
    try:
        from . import _rt

        checks.append(Check("pygpukit._rt (Rust pool)", OK, _rt.__file__ or ""))
    except ImportError as exc:
        checks.append(
            Check("pygpukit._rt (Rust pool)", FAIL, str(exc), "reinstall pygpukit-core: pip install --force-reinstall pygpukit-core")
        )
        return checks
    try:
        from . import _native
    except ImportError as exc:
        checks.append(
            Check("pygpukit._native (driver layer)", FAIL, str(exc), "reinstall pygpukit-core: pip install --force-reinstall pygpukit-core")
        )
        return checks
    checks.append(Check("pygpukit._native (driver layer)", OK, _native.__file__ or ""))

    nv = None
    try:
        from .jit import nvrtc

        nv = nvrtc.load()
        checks.append(Check("NVRTC", OK, f"{nv.version[0]}.{nv.version[1]} from {nv.source}: {nv.path}"))
    except NVRTCError as exc:
        checks.append(Check("NVRTC", FAIL, str(exc).splitlines()[0], "pip install nvidia-cuda-nvrtc"))
    libs = loaded_nvrtc_libraries()
    if len(libs) > 1:
        checks.append(Check("copies of libnvrtc", WARN, "several loaded in this process: " + ", ".join(libs),
                            "keep one NVRTC: uninstall the extra nvidia-cuda-nvrtc wheel or unset LD_LIBRARY_PATH entries"))  # fmt: skip

    sm = None
    try:
        _native.init()
        driver = _native.driver_version()
        count = _native.device_count()
        if count == 0:
            checks.append(Check("GPU", FAIL, "No GPU devices found", "check nvidia-smi and CUDA_VISIBLE_DEVICES"))
        else:
            props = _native.device_properties(0)
            sm = props["major"] * 10 + props["minor"]
            checks.append(Check("GPU", OK, f"{count} device(s); device 0: {props['name']} (sm_{sm})"))
        checks.append(Check("NVIDIA driver", OK, f"CUDA {driver // 1000}.{(driver % 1000) // 10}"))
        if nv is not None:
            checks.append(driver_vs_nvrtc(driver, nv.version, sm, nv.supported_archs))
    except CudaError as exc:
        checks.append(Check("NVIDIA driver", WARN, f"{exc}; pygpukit runs on the CPU simulation backend",
                            "install the NVIDIA driver (libcuda.so.1) to use a GPU"))  # fmt: skip

    from .jit import cache

    ok, why = cache.is_writable()
    if ok:
        checks.append(Check("kernel cache", OK, cache.cache_dir()))
    else:
        checks.append(Check("kernel cache", FAIL, f"{cache.cache_dir()} is not writable: {why}",
                            "set PYGPUKIT_CACHE_DIR to a writable directory"))  # fmt: skip

    if sm is not None and nv is not None:
        checks.append(_smoke_test())
    return checks


def _smoke_test() -> Check:
    import numpy as np

    from . import creation

    try:
        a = np.arange(1000, dtype=np.float32)
        got = (creation.from_numpy(a) + creation.from_numpy(a)).to_numpy()
        if not np.array_equal(got, a + a):
            return Check("kernel launch", FAIL, "a test kernel gave wrong results", "report this with `pygpukit info` output")
    except Exception as exc:  # report any failure of the stack as a finding
        return Check("kernel launch", FAIL, f"{type(exc).__name__}: {exc}", "run with PYGPUKIT_JIT_DEBUG=1 for details")
    return Check("kernel launch", OK, "compiled, launched and checked a kernel")


def main() -> int:
    checks = run_checks()
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"[{c.status:>4}] {c.name.ljust(width)}  {c.detail}")
        if c.fix:
            print(f"       {''.ljust(width)}  fix: {c.fix}")
    failed = [c for c in checks if c.status == FAIL]
    print(f"\n{len(failed)} problem(s) found." if failed else "\nNo problems found.")
    return 1 if failed else 0
