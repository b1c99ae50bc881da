"""Checks of pygpukit._native that need no GPU (NVRTC parts need an NVRTC).

Takes the module from an installed (or PYTHONPATH-staged) pygpukit:
    PYTHONPATH=<build>/stage python -m pytest native-libs/driver/tests/test_native_cpu.py
The NVRTC tests are skipped when no NVRTC can be loaded (pip install nvidia-cuda-nvrtc).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest
from native_testing import nvrtc_candidates

from pygpukit import _errors, _native

SAXPY = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _libcuda_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def nvrtc() -> str:
    try:
        return _native.nvrtc_load(nvrtc_candidates())
    except _errors.NVRTCError as exc:
        pytest.skip(f"no NVRTC available: {exc}")


# ---- import / driver ---------------------------------------------------------


def test_import_is_fast_and_loads_nothing() -> None:
    code = (
        "import time; t = time.perf_counter(); import pygpukit._native; dt = time.perf_counter() - t\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(dt, 'libcuda' in maps, 'libnvrtc' in maps)\n"
    )
    # pygpukit itself is imported first so that only _native is timed.
    code = "import pygpukit\n" + code
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert float(out[0]) < 0.010, f"import took {float(out[0]) * 1e3:.1f} ms"
    assert out[1] == "False", "libcuda was loaded at import"
    assert out[2] == "False", "libnvrtc was loaded at import"


def test_api_surface() -> None:
    names = """init driver_version device_count set_device current_device device_properties mem_get_info
    driver_table stats stream_create stream_destroy stream_synchronize stream_query stream_priority_range
    stream_wait_event event_create event_destroy event_record event_synchronize event_query event_elapsed_ms
    memcpy_htod memcpy_dtoh memcpy_dtod memset_d8 memset_d32 host_alloc host_free synchronize module_load
    module_unload module_get_function function_attributes function_set_max_dynamic_shared_memory launch
    nvrtc_load nvrtc_version nvrtc_supported_archs nvrtc_compile""".split()
    missing = [n for n in names if not hasattr(_native, n)]
    assert not missing
    assert type(_native.launch).__name__ == "builtin_function_or_method"


def test_stats_keys() -> None:
    assert set(_native.stats()) == {"mem_alloc_calls", "mem_free_calls", "launches", "module_loads"}


def test_launch_argument_checks() -> None:
    with pytest.raises(TypeError):
        _native.launch(1, 2, 3)
    with pytest.raises(OverflowError):
        _native.launch(1, -1, 1, 1, 1, 1, 1, 0, 0, b"")
    with pytest.raises(OverflowError):
        _native.launch(1, 2**32, 1, 1, 1, 1, 1, 0, 0, b"")
    with pytest.raises(TypeError):
        _native.launch(1, 1, 1, 1, 1, 1, 1, 0, 0, 5)
    with pytest.raises(TypeError, match="4 to 20 arguments"):
        _native.launch_u64(1, 1, 1)
    with pytest.raises(TypeError, match="4 to 20 arguments"):
        _native.launch_u64(1, 1, 1, 0, *range(17))
    with pytest.raises(OverflowError):
        _native.launch_u64(1, 2**32, 1, 0)
    with pytest.raises(TypeError):
        _native.launch_u64(1, 1, 1, 0, "x")


@pytest.mark.skipif(_libcuda_loadable(), reason="a CUDA driver is installed")
def test_init_without_driver() -> None:
    for _ in range(2):  # the failure is sticky and raised again
        with pytest.raises(_errors.CudaError) as info:
            _native.init()
        msg = str(info.value)
        assert msg.startswith("CUDA driver not detected: libcuda.so.1 could not be loaded (")
        assert isinstance(info.value, RuntimeError)
    for fn in (_native.device_count, _native.driver_version, lambda: _native.set_device(0)):
        with pytest.raises(_errors.CudaError, match="not detected"):
            fn()
    with pytest.raises(_errors.CudaError, match="not detected"):
        _native.launch(1, 1, 1, 1, 1, 1, 1, 0, 0, b"")


@pytest.mark.skipif(not _libcuda_loadable(), reason="no CUDA driver")
def test_init_with_driver() -> None:
    try:
        _native.init()
    except _errors.CudaError as exc:  # e.g. a container without a GPU
        assert exc.call == "cuInit" and exc.name.startswith("CUDA_ERROR_")
        return
    assert _native.driver_version() >= 12000
    assert _native.device_count() >= 0


# ---- NVRTC -------------------------------------------------------------------


def test_nvrtc_load_failure_lists_candidates() -> None:
    code = (
        "from pygpukit import _native, _errors\n"
        "try:\n"
        "    _native.nvrtc_load(['/nonexistent/libnvrtc.so.13', 'libnvrtc-missing.so.99'])\n"
        "except _errors.NVRTCError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "/nonexistent/libnvrtc.so.13" in out and "libnvrtc-missing.so.99" in out


def test_nvrtc_load_returns_real_path(nvrtc: str) -> None:
    assert os.path.isabs(nvrtc) and os.path.exists(nvrtc)
    assert "nvrtc" in os.path.basename(nvrtc)
    assert _native.nvrtc_load(nvrtc_candidates()) == nvrtc  # idempotent


def test_nvrtc_version_and_archs(nvrtc: str) -> None:
    major, minor = _native.nvrtc_version()
    assert major >= 12 and minor >= 0
    archs = _native.nvrtc_supported_archs()
    assert all(isinstance(a, int) for a in archs)
    assert 80 in archs and 90 in archs


def test_compile_cubin_with_name_expressions(nvrtc: str) -> None:
    image, log, lowered = _native.nvrtc_compile(
        SAXPY, "saxpy.cu", ["--gpu-architecture=sm_90", "-std=c++17"], ["saxpy<float>", "saxpy<double>"], "cubin"
    )
    assert isinstance(image, bytes) and image[:4] == b"\x7fELF"
    assert isinstance(log, str)
    assert set(lowered) == {"saxpy<float>", "saxpy<double>"}
    assert lowered["saxpy<float>"].startswith("_Z") and lowered["saxpy<float>"] != lowered["saxpy<double>"]
    assert lowered["saxpy<float>"].encode() in image


def test_compile_ptx(nvrtc: str) -> None:
    image, _log, lowered = _native.nvrtc_compile(SAXPY, "saxpy.cu", ["--gpu-architecture=compute_80"], ["saxpy<float>"], "ptx")
    assert len(image) > 0
    text = image.rstrip(b"\0").decode()
    assert ".entry" in text and lowered["saxpy<float>"] in text


def test_compile_error_shows_line(nvrtc: str) -> None:
    src = "__global__ void k(float* p) {\n  p[0] = 1.0f\n}\n"
    with pytest.raises(_errors.CompileError) as info:
        _native.nvrtc_compile(src, "bad_kernel.cu", ["--gpu-architecture=sm_90"], [], "cubin")
    err = info.value
    assert isinstance(err, _errors.NVRTCError)
    assert "bad_kernel.cu(" in str(err) and "error" in str(err)
    assert "bad_kernel.cu(" in err.log


def test_compile_bad_option_and_target(nvrtc: str) -> None:
    with pytest.raises(_errors.NVRTCError):
        _native.nvrtc_compile(SAXPY, "s.cu", ["--gpu-architecture=sm_1"], [], "cubin")
    with pytest.raises(ValueError):
        _native.nvrtc_compile(SAXPY, "s.cu", ["--gpu-architecture=sm_90"], [], "sass")
    with pytest.raises(_errors.NVRTCError):  # cubin needs a real architecture
        _native.nvrtc_compile(SAXPY, "s.cu", ["--gpu-architecture=compute_80"], [], "cubin")


def test_compile_from_two_threads(nvrtc: str) -> None:
    barrier = threading.Barrier(2)
    results: dict[int, object] = {}

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(3):
                src = SAXPY + f"\n__global__ void extra{i}(int* p) {{ p[0] = {i}; }}\n"
                results[i] = _native.nvrtc_compile(src, f"t{i}.cu", ["--gpu-architecture=sm_80"], ["saxpy<float>", f"extra{i}"], "cubin")
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        res = results[i]
        assert isinstance(res, tuple), res
        assert res[0][:4] == b"\x7fELF" and f"extra{i}" in res[2]
