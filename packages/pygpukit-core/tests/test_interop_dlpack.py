"""DLPack and __cuda_array_interface__: zero-copy both ways (NumPy on the CPU
backend; PyTorch and CuPy on a GPU)."""

import gc

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array
from pygpukit import interop


def _on_cpu():
    return gp.backend() == "cpu"


@pytest.mark.parametrize("dtype", [gp.float32, gp.int16, gp.uint8, gp.bool_, gp.float64], ids=str)
def test_numpy_round_trip_zero_copy(rng, dtype):
    if not _on_cpu():
        pytest.skip("NumPy consumes host memory: CPU backend only")
    host = random_array(rng, (4, 6), dtype)
    a = gp.from_numpy(host)
    v = np.from_dlpack(a)  # a NumPy view of pygpukit memory
    np.testing.assert_array_equal(v, host)
    assert v.__array_interface__["data"][0] == a.data_ptr
    back = gp.from_dlpack(host)  # pygpukit view of NumPy memory
    assert back.data_ptr == host.__array_interface__["data"][0]
    np.testing.assert_array_equal(back.to_numpy(), host)
    t = a.T[::2]  # strided export
    np.testing.assert_array_equal(np.from_dlpack(t), host.T[::2])


def test_exported_tensor_is_released(rng):
    a = gp.from_numpy(random_array(rng, (100,), np.float32))
    before = len(interop._exported)
    cap = a.__dlpack__(max_version=(1, 0))
    assert len(interop._exported) == before + 1
    del cap  # never consumed: the capsule's destructor frees it
    gc.collect()
    assert len(interop._exported) == before
    if _on_cpu():
        v = np.from_dlpack(a)
        assert len(interop._exported) == before + 1
        del v
        gc.collect()
        assert len(interop._exported) == before


def test_legacy_capsule_and_self_round_trip(rng):
    host = random_array(rng, (3, 5), np.float32)
    a = gp.from_numpy(host)
    b = gp.from_dlpack(a)
    assert b.data_ptr == a.data_ptr and b.shape == a.shape
    np.testing.assert_array_equal(b.to_numpy(), host)
    cap = a.__dlpack__()  # no max_version: legacy DLManagedTensor
    assert "dltensor" in repr(cap)
    assert a.__dlpack_device__() == ((1, 0) if _on_cpu() else (2, 0))


def test_dlpack_errors():
    with pytest.raises(TypeError, match="__dlpack__"):
        gp.from_dlpack([1, 2, 3])
    with pytest.raises(TypeError, match="no DLPack type code"):
        interop._dl_dtype(np.dtype("U4"))
    if _on_cpu():
        assert not hasattr(gp.zeros(3), "__cuda_array_interface__")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "uint8", "bool"])
def test_torch_both_ways(rng, dtype):
    torch = pytest.importorskip("torch")
    t = torch.arange(24, device="cuda").reshape(4, 6).to(getattr(torch, dtype))
    a = gp.from_dlpack(t)
    assert a.data_ptr == t.data_ptr() and a.shape == (4, 6)
    np.testing.assert_array_equal(a.astype(gp.float64).to_numpy(), t.double().cpu().numpy())
    a[0] = 1  # writes are visible to torch: same memory
    gp.current_stream().synchronize()
    assert t[0].double().cpu().tolist() == [1.0] * 6
    t2 = torch.from_dlpack(a.T)
    assert t2.data_ptr() == a.data_ptr and tuple(t2.shape) == (6, 4) and t2.stride() == (1, 6)
    np.testing.assert_array_equal(t2.double().cpu().numpy(), a.T.astype(gp.float64).to_numpy())


@pytest.mark.gpu
def test_torch_float8_and_cuda_array_interface(rng):
    torch = pytest.importorskip("torch")
    host = random_array(rng, (64,), np.float32)
    t = torch.from_numpy(host).cuda().to(torch.float8_e4m3fn)
    a = gp.from_dlpack(t)
    assert a.dtype == gp.float8_e4m3fn
    np.testing.assert_array_equal(a.to_numpy().astype(np.float32), t.float().cpu().numpy())
    g = gp.from_numpy(host)
    cai = g.__cuda_array_interface__
    assert cai["version"] == 3 and cai["data"][0] == g.data_ptr and cai["stream"] != 0
    gp.synchronize()  # PyTorch ignores the interface's stream: the copy into g must be done before torch reads it
    tt = torch.as_tensor(g, device="cuda")
    assert tt.data_ptr() == g.data_ptr
    np.testing.assert_array_equal(tt.cpu().numpy(), host)


@pytest.mark.gpu
def test_cupy_both_ways(rng):
    cupy = pytest.importorskip("cupy")
    host = random_array(rng, (5, 7), np.float32)
    c = cupy.asarray(host)
    a = gp.from_dlpack(c)
    assert a.data_ptr == c.data.ptr
    np.testing.assert_array_equal(a.to_numpy(), host)
    c2 = cupy.from_dlpack(a[1:, ::2])
    np.testing.assert_array_equal(cupy.asnumpy(c2), host[1:, ::2])
    c3 = cupy.asarray(a)  # through __cuda_array_interface__
    assert c3.data.ptr == a.data_ptr
