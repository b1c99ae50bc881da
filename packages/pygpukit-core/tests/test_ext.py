"""pygpukit.ext, the plugin contract: each public function on the CPU backend,
and the kernel launchers on a GPU."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext, plans
from pygpukit.registry import OpRegistry

ON_GPU = gp.backend() == "cuda"
SRC = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, long long n, int* hits) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { y[i] = a * x[i] + y[i]; }
    if (i == 0 && hits) atomicAdd(hits, 1);
}"""


def test_kernel_source_reads_package_data_and_names_what_is_missing():
    text = ext.kernel_source("pygpukit.ext", "softmax")  # a module: its package's kernels/softmax.cu
    assert "__global__" in text
    with pytest.raises(gp.PluginError, match=r"ships no kernels/nope\.cu"):
        ext.kernel_source("pygpukit", "nope")


def test_raw_and_dtype_rules():
    a = gp.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))[:, ::2]
    r = ext.raw(a)
    assert (r.ptr, r.shape, r.strides, r.dtype, r.contiguous) == (a.data_ptr, (3, 2), (16, 8), np.dtype(np.float32), False)
    with pytest.raises(TypeError, match="expects a GPUArray, got ndarray"):
        ext.raw(np.zeros(2))
    assert ext.accumulator_dtype(gp.bfloat16) == np.float32 and ext.accumulator_dtype(np.int8) == np.int64
    assert ext.compute_dtype(gp.float16) == np.float32 and ext.compute_dtype(np.float64) == np.float64
    with pytest.raises(TypeError, match="int32 is not a real floating dtype"):
        ext.compute_dtype(np.int32)


def test_empty_allocates_on_the_current_stream():
    y = ext.empty((2, 3), np.dtype(np.float16))
    assert y.shape == (2, 3) and y.dtype == np.float16 and y.is_contiguous
    assert ext.current_stream() == gp.current_stream().handle


def test_device_describes_the_backend():
    d = ext.device()
    assert d.backend == gp.backend() and (d.sm >= 70) == ON_GPU and (d.multiprocessor_count > 0) == ON_GPU
    assert ext.device() is d  # made once


def test_plan_cache_keeps_plans_and_evicts_the_oldest():
    cache = ext.PlanCache("test.plans", maxsize=2)
    assert cache.get(1) is None
    assert cache.put(1, "one") == "one" and cache.get(1) == "one"
    cache.put(2, "two")
    cache.put(3, "three")  # the oldest goes
    assert 1 not in cache and cache.get(3) == "three" and len(cache) == 2
    assert {"name": "test.plans", "plans": 2} in plans.stats()
    plans.clear_all()
    assert len(cache) == 0
    with pytest.raises(ValueError, match="maxsize must be a positive int"):
        ext.PlanCache("bad", maxsize=0)


def test_layout_key_separates_layouts():
    a = gp.from_numpy(np.ones((4, 4), np.float32))
    assert ext.layout_key(a) == ((4, 4), None, np.dtype(np.float32), a.data_ptr % 16)
    assert ext.layout_key(a[:, 1:]) != ext.layout_key(a[:, :3])  # strides and alignment differ
    assert ext.layout_key(None) is None


def test_register_family_defines_and_ranks():
    reg = OpRegistry(load_plugins=False)
    ref = lambda x: "reference"
    fast = lambda x: "kernel"
    ext.register_family(reg, "thing", nkey=1, reference=ref, cuda=fast, dtypes=["float32"], predicate=lambda x: x.size > 2, doc="a thing")
    op = reg.dispatcher("thing")
    big, small = gp.from_numpy(np.ones(4, np.float32)), gp.from_numpy(np.ones(1, np.float32))
    assert op(big) == ("kernel" if ON_GPU else "reference") and op(small) == "reference"
    rows = {r.impl: r for r in reg.table()}
    assert set(rows) == {"pygpukit:reference", "pygpukit:kernel"}
    ext.register_family(reg, "thing", nkey=1, define=False, cuda=fast, cuda_name="other")
    assert "pygpukit:other" in {r.impl for r in reg.table()}
    with pytest.raises(gp.PluginError, match="needs a callable reference"):
        ext.register_family(reg, "fresh", nkey=1)


def test_op_is_the_registry_dispatcher():
    assert ext.op("softmax") is gp.ops.softmax


def test_launch_gate_around_a_foreign_launch():
    with ext.launch_gate(ext.current_stream()) as g:
        assert isinstance(g, ext.launch_gate)
    with pytest.raises(RuntimeError, match="failed launch"), ext.launch_gate(ext.current_stream()):
        raise RuntimeError("failed launch")  # not counted: the block raised


def test_load_library_tries_env_wheel_system_in_order(monkeypatch, tmp_path):
    missing = tmp_path / "libnope.so"
    monkeypatch.setenv("PYGPUKIT_TEST_LIB", str(missing))
    cands = ext.library_candidates("PYGPUKIT_TEST_LIB", [("cu13", "lib", "libnope.so")], ["libnope.so.1"])
    assert cands[0] == (str(missing), "env") and cands[-1] == ("libnope.so.1", "system")
    with pytest.raises(OSError, match=r"tried .*libnope\.so.*libnope\.so\.1"):
        ext.load_library("PYGPUKIT_TEST_LIB", [], ["libnope.so.1"])


@pytest.mark.skipif(ON_GPU, reason="the CPU backend's answer")
def test_cuda_only_entry_points_say_so_on_the_cpu_backend():
    with pytest.raises(gp.BackendError, match="needs the CUDA backend"):
        ext.encode_tensor_map_2d(0, 64, 64, 128, 64, 64, np.uint16)
    with pytest.raises(gp.BackendError, match="needs the CUDA backend"):
        ext.Kernel(SRC, "axpy").launcher(1, 32)


def test_packer_fast_and_checked_paths():
    k = ext.Kernel(SRC, "axpy")
    x = gp.from_numpy(np.ones(3, np.float32))
    fast = k._packer.pack((2.0, x, x, 3, None))
    assert fast == k._packer.pack((np.float32(2.0), x.data_ptr, x, np.int64(3), 0))  # the checked conversions agree
    with pytest.raises(TypeError, match=r"takes 5 arguments, got 4"):
        k._packer.pack((2.0, x, x, 3))
    with pytest.raises(TypeError, match=r"parameter x .* has dtype int32"):
        k._packer.pack((2.0, gp.from_numpy(np.ones(3, np.int32)), x, 3, None))
    with pytest.raises(OverflowError, match="does not fit"):
        k._packer.pack((2.0, x, x, 1 << 70, None))


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_launcher_runs_on_the_current_stream_and_on_another():
    n = 1000
    rng = np.random.default_rng(5)
    xh, yh = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y = gp.from_numpy(xh), gp.from_numpy(yh)
    hits = gp.zeros(1, gp.int32)
    launch = ext.Kernel(SRC, "axpy").launcher(-(-n // 128), 128)
    assert launch.grid == (8, 1, 1) and launch.block == (128, 1, 1)
    launch(0.5, x, y, n, hits)
    s = gp.Stream()
    gp.synchronize()
    launch.on(s.handle, 0.5, x, y, n, None)
    s.synchronize()
    np.testing.assert_allclose(y.to_numpy(), yh.astype(np.float64) + xh, rtol=1e-6)
    assert hits.item() == 1
    with pytest.raises(TypeError, match="takes 5 arguments, got 4"):
        launch(0.5, x, y, n)
