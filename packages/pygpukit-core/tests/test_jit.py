"""gp.jit: signatures, argument packing, NVRTC compilation, the disk cache, launches."""

import os
import subprocess
import sys

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.jit import cache, compiler, signature

SAXPY = r"""
// a comment with a fake kernel: __global__ void saxpy(int nope)
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

TEMPLATE = r"""
template <typename T, int K>
__global__ void scale(T* x, T a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a * (T)K;
}
"""

# slow_fill spins, then writes; twice and again are dependent launches that read
# what the kernel before them wrote (pgk/pdl.cuh).
DEPENDENT = r"""
#include "pgk/pdl.cuh"
extern "C" __global__ void slow_fill(int* x, int n, long long spin) {
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i + 1;
}
extern "C" __global__ void twice(const int* x, int* y, int n) {
    pgk::wait_prior_grids();
    pgk::allow_next_grids();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2 * x[i];
}
"""


def test_signature_from_source():
    params = signature.find_signature(SAXPY, "saxpy")
    assert [(p.name, p.ctype, p.code) for p in params] == [
        ("a", "float", "f"),
        ("x", "float*", "P"),
        ("y", "float*", "P"),
        ("n", "long long", "q"),
    ]


def test_signature_errors():
    with pytest.raises(ValueError, match="no kernel"):
        signature.find_signature(SAXPY, "missing")
    with pytest.raises(TypeError, match="cannot pass type 'MyStruct'"):
        signature.parse_params("MyStruct s, int n")
    with pytest.raises(ValueError, match="references"):
        signature.parse_params("int& n")
    assert signature.parse_params("void") == []


def test_template_signature():
    k = gp.jit(TEMPLATE, "scale<double, 3>")
    assert [p.ctype for p in k.params] == ["double*", "double", "unsigned int"]
    k2 = gp.jit(TEMPLATE, "scale<float, 2>", signature="float* x, float a, unsigned n")
    assert [p.code for p in k2.params] == ["P", "f", "I"]


def test_packing():
    k = gp.jit(SAXPY, "saxpy")
    x = gp.zeros(4, gp.float32)
    packed = k._packer.pack((2.0, x, 0x1000, 4))
    assert len(packed) == 32
    assert int.from_bytes(packed[8:16], "little") == x.data_ptr
    assert int.from_bytes(packed[16:24], "little") == 0x1000
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        k._packer.pack((2.0, x, x))
    with pytest.raises(TypeError, match="has dtype int32"):
        k._packer.pack((2.0, gp.zeros(4, gp.int32), x, 4))
    with pytest.raises(TypeError, match="needs an integer"):
        k._packer.pack((2.0, x, x, 4.5))
    with pytest.raises(TypeError, match="needs a number"):
        k._packer.pack(("2", x, x, 4))
    with pytest.raises(TypeError, match="needs a GPUArray"):
        k._packer.pack((2.0, "x", x, 4))
    k16 = gp.jit("__global__ void f(unsigned char c, half h) {}", "f")
    with pytest.raises(OverflowError, match="does not fit"):
        k16._packer.pack((300, 1.0))
    assert k16._packer.pack((3, 1.0)) == bytes([3, 0]) + np.float16(1.0).tobytes()


def test_launch_on_cpu_backend_is_an_error():
    if gp.backend() != "cpu":
        pytest.skip("CPU backend behaviour")
    k = gp.jit(SAXPY, "saxpy")
    with pytest.raises(gp.BackendError, match="CPU simulation backend"):
        k(1, 32, 1.0, None, None, 0)


def test_compile_to_cubin_and_ptx(need_nvrtc, tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    k = gp.jit(SAXPY, "saxpy")
    b = k.compile(sm=90)
    assert b.kind == "cubin" and b.image[:4] == b"\x7fELF"
    assert b.lowered["saxpy"] == "saxpy"
    kind, arch = compiler.choose_target(max(need_nvrtc.supported_archs) + 1)
    assert kind == "ptx" and arch == f"compute_{max(need_nvrtc.supported_archs)}"
    t = gp.jit(TEMPLATE, "scale<float, 2>").compile(sm=80)
    assert t.lowered["scale<float, 2>"].startswith("_Z")


def test_arch_specific_target(need_nvrtc, tmp_path, monkeypatch):
    """sm_90a code (wgmma) compiles only with arch_suffix="a"."""
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    src = 'extern "C" __global__ void f() { asm volatile("wgmma.fence.sync.aligned;"); }'
    assert gp.jit(src, "f", arch_suffix="a").compile(sm=90).image[:4] == b"\x7fELF"
    with pytest.raises(gp.CompileError):
        gp.jit(src, "f").compile(sm=90)
    with pytest.raises(ValueError, match="arch_suffix"):
        gp.jit(src, "f", arch_suffix="b")


def test_compile_error_shows_the_log(need_nvrtc, tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    src = "__global__ void bad(float* x) {\n  x[0] = undefined_name;\n}\n"
    with pytest.raises(gp.CompileError) as info:
        gp.jit(src, "bad", name="bad.cu").compile(sm=90)
    assert "undefined_name" in str(info.value)
    assert "bad.cu(2)" in info.value.log


def test_cache_key_covers_the_included_headers(tmp_path):
    """A changed, added or renamed header under the include directory changes
    every key: an upgrade that edits pgk/*.cuh must not reuse old binaries."""
    inc = tmp_path / "include" / "pgk"
    inc.mkdir(parents=True)
    (inc / "a.cuh").write_text("int a;")

    def key():
        cache.headers_digest.cache_clear()
        return cache.make_key("src", ["-O3"], ["k"], (13, 0), "cubin", cache.headers_digest(str(tmp_path / "include")))

    first = key()
    assert key() == first
    (inc / "a.cuh").write_text("int a2;")
    second = key()
    (inc / "b.cuh").write_text("")
    third = key()
    (inc / "b.cuh").rename(inc / "c.cuh")
    assert len({first, second, third, key()}) == 4
    assert cache.make_key("src", ["-O3"], ["k"], (13, 0), "cubin", "x") != cache.make_key("src", ["-O3"], ["k"], (13, 0), "cubin", "y")


def test_disk_cache_hit_after_restart(need_nvrtc, tmp_path):
    env = dict(os.environ, PYGPUKIT_CACHE_DIR=str(tmp_path), PYGPUKIT_JIT_DEBUG="1")
    code = f"import pygpukit as gp; gp.jit({SAXPY!r}, 'saxpy').compile(sm=90)"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "[pygpukit.jit] nvrtc" in first.stderr
    files = list(tmp_path.rglob("*.bin"))
    assert len(files) == 1
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "[pygpukit.jit] cache hit" in second.stderr and "[pygpukit.jit] nvrtc" not in second.stderr
    # a damaged file is ignored and rewritten
    files[0].write_bytes(b"PGKK garbage")
    third = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "[pygpukit.jit] nvrtc" in third.stderr
    assert cache.read(files[0].stem) is None or files[0].read_bytes()[:4] == b"PGKK"


def test_unwritable_cache_dir_warns_once(need_nvrtc, tmp_path, monkeypatch):
    target = tmp_path / "file-not-dir"
    target.write_text("x")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(target))
    monkeypatch.setattr(cache, "_warned_unwritable", False)
    with pytest.warns(RuntimeWarning, match="not writable"):
        gp.jit(SAXPY, "saxpy").compile(sm=90)
    ok, why = cache.is_writable(str(target))
    assert not ok and why


@pytest.mark.gpu
def test_jit_kernel_runs(rng):
    k = gp.jit(SAXPY, "saxpy")
    n = 100_003
    x_host = rng.standard_normal(n).astype(np.float32)
    y_host = rng.standard_normal(n).astype(np.float32)
    x, y = gp.from_numpy(x_host), gp.from_numpy(y_host)
    k((n + 255) // 256, 256, 2.5, x, y, n)
    # nvcc/NVRTC contract a * x + y into one FMA (one rounding instead of two)
    want = (2.5 * x_host.astype(np.float64) + y_host).astype(np.float32)
    np.testing.assert_allclose(y.to_numpy(), want, rtol=2e-7, atol=1e-7)
    attrs = k.attributes()
    assert attrs["num_regs"] > 0 and attrs["max_threads_per_block"] >= 256


@pytest.mark.gpu
def test_jit_template_kernel_runs(rng):
    k = gp.jit(TEMPLATE, "scale<double, 3>")
    host = rng.standard_normal(1000)
    x = gp.from_numpy(host)
    k(4, 256, x, 0.5, 1000)
    np.testing.assert_allclose(x.to_numpy(), host * 1.5, rtol=1e-15)


class _Sm:
    def __init__(self, sm):
        self.sm = sm


def test_dependent_launch_needs_a_kernel_that_waits():
    with pytest.raises(ValueError, match="wait_prior_grids"):
        gp.jit(SAXPY, "saxpy", dependent_launch=True)
    k = gp.jit(DEPENDENT, "twice", dependent_launch=True)
    assert k.dependent(_Sm(90)) and not k.dependent(_Sm(80))  # griddepcontrol is SM 90+
    assert not gp.jit(DEPENDENT, "twice").dependent(_Sm(90))
    code = "import pygpukit as gp, sys; sys.path.insert(0, %r); import test_jit as t; " % os.path.dirname(__file__)
    code += "k = gp.jit(t.DEPENDENT, 'twice', dependent_launch=True); print(k.dependent(t._Sm(90)))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYGPUKIT_DEPENDENT_LAUNCH": "0"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


@pytest.mark.gpu
def test_dependent_launches_see_the_previous_kernels_writes():
    fill = gp.jit(DEPENDENT, "slow_fill")
    twice = gp.jit(DEPENDENT, "twice", dependent_launch=True)
    n = 50_000
    want = 4 * (np.arange(n) + 1)
    x, y, z = gp.zeros(n, gp.int32), gp.zeros(n, gp.int32), gp.full(n, -7, gp.int32)

    def chain():  # a slow writer (~1 ms), then two dependent readers: z needs x's writes through y
        fill(-(-n // 256), 256, x, n, 2_000_000)
        twice(-(-n // 256), 256, x, y, n)
        twice(-(-n // 256), 256, y, z, n)

    chain()
    np.testing.assert_array_equal(z.to_numpy(), want)
    with gp.graph() as g:  # captured: the dependencies become programmatic edges
        chain()
    for _ in range(2):
        for a in (x, y, z):
            a[...] = -1
        g.replay()
        np.testing.assert_array_equal(z.to_numpy(), want)


@pytest.mark.gpu
def test_launch_config_errors():
    k = gp.jit(SAXPY, "saxpy")
    x = gp.zeros(4, gp.float32)
    with pytest.raises(ValueError, match="maximum is 1024"):
        k(1, (64, 32), 1.0, x, x, 4)
    with pytest.raises(ValueError, match=">= 1"):
        k(0, 32, 1.0, x, x, 4)
    with pytest.raises(TypeError, match="tuple of 1 to 3 ints"):
        k((1, 1, 1, 1), 32, 1.0, x, x, 4)
    with pytest.raises(ValueError, match="shared_mem=1073741824 is more than this device gives one block"):
        k(1, 32, 1.0, x, x, 4, shared_mem=1 << 30)
    with pytest.raises(ValueError, match="shared_mem=1073741824"):
        k.launcher(1, 32, shared_mem=1 << 30)
    big = gp._runtime.get().props["max_shared_memory_per_block_optin"]
    k.launcher(1, 32, shared_mem=big)(1.0, x, x, 4)  # opted in up to the device's most
    gp.synchronize()
