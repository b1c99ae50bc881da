"""Pointers are shared with PyTorch in one process (both use the primary context)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _runtime

FILL = r"""
extern "C" __global__ void fill_iota(float* x, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i * 0.5f;
}
"""


@pytest.mark.gpu
def test_pointers_are_valid_across_pytorch_and_pygpukit(rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    n = 4097
    # a pygpukit kernel writes into PyTorch's memory
    t = torch.full((n,), -1.0, device="cuda")
    torch.cuda.synchronize()
    k = gp.jit(FILL, "fill_iota")
    k((n + 255) // 256, 256, t.data_ptr(), n)
    gp.current_stream().synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(n, dtype=np.float32) * 0.5)
    # and PyTorch reads pygpukit's memory through a device-to-device copy
    host = rng.standard_normal(n).astype(np.float32)
    a = gp.from_numpy(host)
    native = _runtime.get().native
    native.memcpy_dtod(t.data_ptr(), a.data_ptr, a.nbytes, gp.current_stream().handle)
    gp.current_stream().synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), host)
