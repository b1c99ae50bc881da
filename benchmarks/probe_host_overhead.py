"""Where the host time of a tiny elementwise op goes (run on a GPU machine).

python benchmarks/probe_host_overhead.py  -> one line per layer, microseconds per call
"""

import struct
import timeit

import numpy as np

import pygpukit as gp
from pygpukit import _runtime
from pygpukit.benchmark.harness import host_time_us

rt = _runtime.get()
a = gp.from_numpy(np.ones(1024, np.float32))
b = gp.from_numpy(np.ones(1024, np.float32))
c = a + b
ops = rt.ops
_, fn, per_block, _ = next(iter(ops._contig_binary.values()))
packed = struct.pack("@PPPq", a.data_ptr, b.data_ptr, c.data_ptr, 1024)
launch, stream, pool = rt.native.launch, rt.stream, rt.pool
real_launch = ops.launch


def noop(*args):
    return None


cases = {
    "a + b": lambda: a + b,
    "native.launch (packed)": lambda: launch(fn, 1, 1, 1, 256, 1, 1, 0, stream, packed),
    "native.launch_u64": lambda: rt.native.launch_u64(fn, 1, 256, stream, a.data_ptr, b.data_ptr, c.data_ptr, 1024),
    "struct.pack": lambda: struct.pack("@PPPq", 1, 2, 3, 4),
    "pool.alloc+free": lambda: pool.alloc(4096, stream),
    "gp.empty": lambda: gp.empty((1024,), gp.float32),
}


def burst_us(f):
    """Host time per call in bursts of 50 with a sync between them (the harness's method)."""
    return host_time_us(f, gp.synchronize, 50, 200)


for name, f in cases.items():
    for _ in range(2000):
        f()
    gp.synchronize()
    t = min(timeit.repeat(f, number=20000, repeat=7)) / 20000 * 1e6
    gp.synchronize()
    print(f"{t:8.3f} us  {name}   (burst of 50: {burst_us(f):.3f} us)")
ops.launch = noop
t = min(timeit.repeat(lambda: a + b, number=20000, repeat=7)) / 20000 * 1e6
ops.launch = real_launch
print(f"{t:8.3f} us  a + b without the launch call")

# The driver's own cost per launch: an empty kernel without parameters, one
# with parameters through the packed buffer, and CuPy's launch (kernelParams).
EMPTY = (
    'extern "C" __global__ void empty0() {}\nextern "C" __global__ void empty4(const float* a, const float* b, float* c, long long n) {}\n'
)
k0 = gp.jit(EMPTY, "empty0")
k4 = gp.jit(EMPTY, "empty4")
f0 = k0._function(rt)
f4 = k4._function(rt)
print(f"{burst_us(lambda: launch(f0, 1, 1, 1, 32, 1, 1, 0, stream, b'')):8.3f} us  native.launch empty kernel, no params")
print(f"{burst_us(lambda: launch(f4, 1, 1, 1, 32, 1, 1, 0, stream, packed)):8.3f} us  native.launch empty kernel, 32 B param buffer")
print(f"{burst_us(lambda: k4(1, 32, a, b, c, 1024)):8.3f} us  jit kernel call (marshalling + launch)")
try:
    import cupy

    ck = cupy.RawKernel(EMPTY, "empty4")
    ca = cupy.ones(1024, cupy.float32)
    ck((1,), (32,), (ca, ca, ca, cupy.int64(1024)))
    cupy.cuda.Device().synchronize()

    def cupy_burst():
        import time

        ts = []
        for _ in range(200):
            t0 = time.perf_counter()
            for _ in range(50):
                ck((1,), (32,), (ca, ca, ca, cupy.int64(1024)))
            ts.append((time.perf_counter() - t0) / 50 * 1e6)
            cupy.cuda.Device().synchronize()
        ts.sort()
        return ts[100]

    print(f"{cupy_burst():8.3f} us  cupy RawKernel launch, empty kernel, 4 params")
except ImportError:
    pass
