"""GPU checks of pygpukit._native (skipped without a CUDA device and NVRTC).

PYTHONPATH=<build>/stage python -m pytest native-libs/driver/tests/test_native_gpu.py
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import threading

import pytest
from native_testing import nvrtc_candidates

from pygpukit import _errors, _native

KERNELS = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, unsigned long long n) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void empty() {}
extern "C" __global__ void store3(long long* out, long long a, unsigned long long b, const long long* p) {
  out[0] = a; out[1] = (long long)b; out[2] = (long long)p;
}
extern "C" __global__ void crash(int* p) { p[threadIdx.x] = 1; }
template <int K> __global__ void fill(int* p) { p[threadIdx.x] = K; }
"""


def _gpu_available() -> bool:
    try:
        _native.init()
        return _native.device_count() > 0
    except _errors.CudaError:
        return False


pytestmark = pytest.mark.skipif(not _gpu_available(), reason="no CUDA device")


class _Table(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_uint32),
        ("struct_size", ctypes.c_uint32),
        ("ctx", ctypes.c_void_p),
        ("is_host", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("mem_alloc", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))),
        ("mem_free", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("mem_get_info", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64))),
        (
            "memcpy_async",
            ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64),
        ),
        (
            "memset_d8_async",
            ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint8, ctypes.c_uint64, ctypes.c_uint64),
        ),
        ("stream_synchronize", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("device_synchronize", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)),
        ("event_create", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))),
        ("event_destroy", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("event_record", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)),
        ("event_query", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("event_synchronize", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("error_string", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int)),
        ("host_alloc", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))),
        ("host_free", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("stream_query", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64)),
        ("vmm_granularity", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))),
        ("vmm_reserve", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))),
        ("vmm_free_range", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)),
        (
            "vmm_map",
            ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)),
        ),
        ("vmm_unmap", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64)),
    ]


def _table() -> _Table:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return _Table.from_address(get(_native.driver_table(), b"pygpukit.driver_table"))


@pytest.fixture(scope="module")
def dev() -> dict:
    _native.set_device(0)
    return _native.device_properties(0)


@pytest.fixture(scope="module")
def table(dev: dict) -> _Table:
    return _table()


@pytest.fixture(scope="module")
def kernels(dev: dict) -> dict:
    try:
        _native.nvrtc_load(nvrtc_candidates())
    except _errors.NVRTCError as exc:
        pytest.skip(f"no NVRTC: {exc}")
    sm = dev["major"] * 10 + dev["minor"]
    archs = _native.nvrtc_supported_archs()
    if sm in archs:
        image, _, lowered = _native.nvrtc_compile(KERNELS, "k.cu", [f"--gpu-architecture=sm_{sm}"], ["fill<7>"], "cubin")
    else:
        arch = max(a for a in archs if a <= sm)
        image, _, lowered = _native.nvrtc_compile(KERNELS, "k.cu", [f"--gpu-architecture=compute_{arch}"], ["fill<7>"], "ptx")
    mod = _native.module_load(image)
    fns = {n: _native.module_get_function(mod, n) for n in ("axpy", "empty", "crash", "store3")}
    fns["fill7"] = _native.module_get_function(mod, lowered["fill<7>"])
    fns["_module"] = mod
    return fns


def _alloc(table: _Table, n: int) -> int:
    out = ctypes.c_uint64()
    assert table.mem_alloc(table.ctx, n, ctypes.byref(out)) == 0
    return out.value


def test_device_properties(dev: dict) -> None:
    keys = """name major minor total_memory multiprocessor_count l2_cache_size max_shared_memory_per_block
    max_shared_memory_per_block_optin max_threads_per_block warp_size clock_rate_khz memory_clock_rate_khz
    memory_bus_width pci_bus_id uuid supports_memory_pools virtual_memory_management_supported""".split()
    assert set(keys) <= set(dev)
    assert dev["warp_size"] == 32 and dev["total_memory"] > 0 and len(dev["uuid"]) == 32
    assert _native.current_device() == 0
    free, total = _native.mem_get_info()
    assert 0 < free <= total
    assert _native.driver_version() >= 12000


def test_table(table: _Table) -> None:
    assert table.abi_version == 3 and table.struct_size == ctypes.sizeof(_Table)
    assert table.is_host == 0 and table.device == 0
    before = _native.stats()
    p = _alloc(table, 1 << 20)
    assert table.memset_d8_async(table.ctx, p, 3, 1 << 20, 0) == 0
    assert table.device_synchronize(table.ctx) == 0
    out = bytearray(16)
    _native.memcpy_dtoh(out, p, 0)
    assert out == b"\x03" * 16
    ev = ctypes.c_uint64()
    assert table.event_create(table.ctx, ctypes.byref(ev)) == 0
    assert table.event_record(table.ctx, ev.value, 0) == 0
    assert table.event_synchronize(table.ctx, ev.value) == 0
    assert table.event_query(table.ctx, ev.value) == 0
    assert table.event_destroy(table.ctx, ev.value) == 0
    pinned = ctypes.c_uint64()
    assert table.host_alloc(table.ctx, 4096, ctypes.byref(pinned)) == 0 and pinned.value != 0
    assert table.memcpy_async(table.ctx, pinned.value, p, 16, 0) == 0
    assert table.stream_synchronize(table.ctx, 0) == 0
    assert table.stream_query(table.ctx, 0) == 0  # idle after the synchronize
    assert ctypes.string_at(pinned.value, 16) == b"\x03" * 16
    assert table.host_free(table.ctx, pinned.value) == 0
    assert table.mem_free(table.ctx, p) == 0
    huge = ctypes.c_uint64()
    assert table.mem_alloc(table.ctx, 1 << 50, ctypes.byref(huge)) == 2  # PGK_ERR_OOM
    assert b"OUT_OF_MEMORY" in table.error_string(table.ctx, 2)
    after = _native.stats()
    assert after["mem_alloc_calls"] == before["mem_alloc_calls"] + 2
    assert after["mem_free_calls"] == before["mem_free_calls"] + 1


def test_table_from_new_thread(table: _Table) -> None:
    errs: list[int] = []

    def work() -> None:  # like a Rust thread: no context current yet
        out = ctypes.c_uint64()
        errs.append(table.mem_alloc(table.ctx, 4096, ctypes.byref(out)))
        errs.append(table.mem_free(table.ctx, out.value))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert errs == [0, 0]


def test_axpy_roundtrip(table: _Table, kernels: dict) -> None:
    n = 1 << 16
    x = struct.pack(f"{n}f", *range(n))
    y = struct.pack(f"{n}f", *([1.0] * n))
    dx, dy = _alloc(table, 4 * n), _alloc(table, 4 * n)
    s = _native.stream_create()
    try:
        _native.memcpy_htod(dx, x, s)
        _native.memcpy_htod(dy, memoryview(y), s)
        launches = _native.stats()["launches"]
        args = struct.pack("fPPQ", 2.0, dx, dy, n)
        _native.launch(kernels["axpy"], (n + 255) // 256, 1, 1, 256, 1, 1, 0, s, args)
        assert _native.stats()["launches"] == launches + 1
        out = bytearray(4 * n)
        _native.memcpy_dtoh(out, dy, s)
        got = struct.unpack(f"{n}f", out)
        assert got[0] == 1.0 and got[10] == 21.0 and got[n - 1] == 2.0 * (n - 1) + 1.0
        _native.launch(kernels["fill7"], 1, 1, 1, 32, 1, 1, 0, s, struct.pack("P", dx))
        _native.memcpy_dtoh(out, dx, s)
        assert struct.unpack("32i", out[:128]) == (7,) * 32
        _native.memset_d32(dx, 0xFFFFFFFF, n, s)
        _native.memcpy_dtod(dy, dx, 4 * n, s)
        _native.stream_synchronize(s)
        _native.memcpy_dtoh(out, dy, s)
        assert out == b"\xff" * (4 * n)
        with pytest.raises(ValueError):
            _native.memcpy_htod(dx, memoryview(bytearray(64))[::2], s)
    finally:
        _native.stream_destroy(s)
        table.mem_free(table.ctx, dx)
        table.mem_free(table.ctx, dy)


def test_streams_events(kernels: dict) -> None:
    lo, hi = _native.stream_priority_range()
    assert hi <= lo
    s1, s2 = _native.stream_create(hi, True), _native.stream_create()
    a, b = _native.event_create(), _native.event_create(timing=True)
    nt = _native.event_create(False)
    _native.event_record(a, s1)
    for _ in range(10):
        _native.launch(kernels["empty"], 1, 1, 1, 1, 1, 1, 0, s1, b"")
    _native.event_record(b, s1)
    _native.event_record(nt, s1)
    _native.stream_wait_event(s2, nt)
    _native.event_synchronize(b)
    assert _native.event_query(b) and _native.stream_query(s1)
    assert _native.event_elapsed_ms(a, b) >= 0.0
    with pytest.raises(_errors.CudaError):
        _native.event_elapsed_ms(a, nt)  # timing disabled
    _native.stream_synchronize(s2)
    _native.synchronize()
    for e in (a, b, nt):
        _native.event_destroy(e)
    _native.stream_destroy(s1)
    _native.stream_destroy(s2)


def test_function_attributes(kernels: dict, dev: dict) -> None:
    attrs = _native.function_attributes(kernels["axpy"])
    assert set(attrs) == {"num_regs", "shared_size_bytes", "local_size_bytes", "max_threads_per_block", "const_size_bytes"}
    assert attrs["max_threads_per_block"] > 0
    _native.function_set_max_dynamic_shared_memory(kernels["empty"], dev["max_shared_memory_per_block_optin"])


def test_launch_errors(kernels: dict) -> None:
    with pytest.raises(_errors.CudaError) as info:
        _native.launch(kernels["empty"], 1, 1, 1, 100000, 1, 1, 0, 0, b"")  # too many threads
    assert info.value.call == "cuLaunchKernel" and info.value.name.startswith("CUDA_ERROR_")
    with pytest.raises(_errors.CudaError, match="cuModuleGetFunction"):
        _native.module_get_function(kernels["_module"], "no_such_kernel")


def test_launch_from_threads(kernels: dict) -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            s = _native.stream_create()
            for _ in range(100):
                _native.launch(kernels["empty"], 1, 1, 1, 32, 1, 1, 0, s, b"")
            _native.stream_synchronize(s)
            _native.stream_destroy(s)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_host_alloc(table: _Table) -> None:
    n = 1 << 20
    h = _native.host_alloc(n)
    buf = (ctypes.c_ubyte * n).from_address(h)
    ctypes.memset(h, 9, n)
    d = _alloc(table, n)
    s = _native.stream_create()
    _native.memcpy_htod(d, buf, s)
    _native.stream_synchronize(s)
    out = bytearray(n)
    _native.memcpy_dtoh(out, d, s)
    assert out == b"\x09" * n
    _native.stream_destroy(s)
    table.mem_free(table.ctx, d)
    del buf
    _native.host_free(h)


def test_vmm_map_unmap(table: _Table) -> None:
    g = ctypes.c_uint64()
    st = table.vmm_granularity(table.ctx, ctypes.byref(g))
    if st == 801:  # CUDA_ERROR_NOT_SUPPORTED: the pool uses cuMemAlloc segments
        pytest.skip("no virtual memory management on this device")
    assert st == 0 and g.value > 0 and g.value % 4096 == 0
    n = g.value
    va = ctypes.c_uint64()
    assert table.vmm_reserve(table.ctx, 3 * n, ctypes.byref(va)) == 0
    handles = []
    for i in (1, 2):  # two chunks side by side form one usable range
        h = ctypes.c_uint64()
        assert table.vmm_map(table.ctx, va.value + i * n, n, ctypes.byref(h)) == 0
        handles.append(h.value)
    assert table.memset_d8_async(table.ctx, va.value + n, 0x3C, 2 * n, 0) == 0
    assert table.device_synchronize(table.ctx) == 0
    out = bytearray(16)
    _native.memcpy_dtoh(out, va.value + 2 * n - 8, 0)
    assert out == b"\x3c" * 16
    before = _native.mem_get_info()[0]
    assert table.vmm_unmap(table.ctx, va.value + n, n, handles[0]) == 0
    assert _native.mem_get_info()[0] >= before + n  # the chunk went back to the device
    assert table.vmm_unmap(table.ctx, va.value + 2 * n, n, handles[1]) == 0
    assert table.vmm_free_range(table.ctx, va.value, 3 * n) == 0


def test_launch_u64_passes_8_byte_params(table: _Table, kernels: dict) -> None:
    import numpy as np

    out = _alloc(table, 24)
    s = _native.stream_create()
    _native.launch_u64(kernels["store3"], 1, 1, s, out, -5, 2**64 - 1, 0x1234)
    host = np.zeros(3, np.int64)
    _native.memcpy_dtoh(host, out, s)
    assert host.tolist() == [-5, -1, 0x1234]
    _native.stream_destroy(s)
    table.mem_free(table.ctx, out)


def test_many_launches_are_counted(kernels: dict) -> None:
    # Launch cost is measured by the benchmark (launch_empty_host), not here.
    s = _native.stream_create()
    f, launch = kernels["empty"], _native.launch
    before = _native.stats()["launches"]
    for _ in range(5000):
        launch(f, 1, 1, 1, 32, 1, 1, 0, s, b"")
    _native.stream_synchronize(s)
    _native.stream_destroy(s)
    assert _native.stats()["launches"] - before == 5000


def test_sync_debug_names_failing_launch(kernels: dict) -> None:
    code = (
        "import struct\n"
        "from pygpukit import _native, _errors\n"
        "from test_native_gpu import KERNELS\nfrom native_testing import nvrtc_candidates\n"
        "_native.init(); _native.set_device(0); _native.nvrtc_load(nvrtc_candidates())\n"
        "p = _native.device_properties(0); sm = p['major'] * 10 + p['minor']\n"
        "img, _, _ = _native.nvrtc_compile(KERNELS, 'k.cu', [f'--gpu-architecture=compute_{min(sm, 80)}'], [], 'ptx')\n"
        "f = _native.module_get_function(_native.module_load(img), 'crash')\n"
        "try:\n"
        "    _native.launch(f, 1, 1, 1, 32, 1, 1, 0, 0, struct.pack('P', 8))\n"
        "except _errors.CudaError as e:\n"
        "    print('CAUGHT', e.call, e.name, str(e))\n"
    )
    env = dict(os.environ, PYGPUKIT_SYNC_DEBUG="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "CAUGHT cuLaunchKernel" in out, out
    assert "crash" in out or "kernel 0x" in out
