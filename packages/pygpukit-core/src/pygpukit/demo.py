"""``pygpukit demo``: a short tour on whatever backend this machine has."""

from __future__ import annotations

import numpy as np

import pygpukit as gp

SCALE_SRC = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def main() -> int:
    print("== pygpukit.info()")
    print(gp.info())

    print("\n== arrays")
    rng = np.random.default_rng(0)
    host = rng.standard_normal((4, 5)).astype(np.float32)
    a = gp.from_numpy(host)
    b = gp.arange(5, dtype=gp.float32)
    c = a * 2.0 + b  # broadcasts (4, 5) with (5,)
    print("a * 2 + arange(5) =", c)
    err = np.abs(c.to_numpy() - (host.astype(np.float64) * 2 + np.arange(5))).max()
    print(f"max abs error vs NumPy float64: {err:.2e}")
    big = gp.ones((1 << 20,), dtype=gp.bfloat16)
    print("sum of 2^20 bfloat16 ones =", big.sum().item())

    print("\n== gp.jit kernel")
    saxpy = gp.jit(SCALE_SRC, "saxpy")
    print(saxpy)
    if gp.backend() == "cuda":
        n = 1 << 16
        x = gp.from_numpy(rng.standard_normal(n).astype(np.float32))
        y = gp.zeros((n,), gp.float32)
        saxpy((n + 255) // 256, 256, 3.0, x, y, n)
        print("saxpy(3, x, 0) == 3x:", bool(np.allclose(y.to_numpy(), 3 * x.to_numpy())))
    else:
        try:
            saxpy(1, 32, 3.0, None, None, 0)
        except gp.BackendError as exc:
            print("on the CPU backend kernels do not run:", exc)

    print("\n== memory pool")
    st = gp.memory.stats()
    for key in ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "num_segments", "num_alloc_calls", "num_driver_allocs"):
        print(f"{key:>22} : {st[key]}")
    return 0
