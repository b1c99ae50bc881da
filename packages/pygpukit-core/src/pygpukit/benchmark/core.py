"""Core benchmarks: copy, add, sum at 2^28 float32; tiny-op host time; pool
alloc+free; NVRTC cold compile and disk-cache hit; ``import pygpukit`` time."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import numpy as np

import pygpukit as gp

from .. import _runtime
from . import peers
from .dispatch import bench_dispatch
from .elementwise import bench_elementwise
from .graphs import bench_graphs
from .harness import Recorder, host_time_us, median_time_ms
from .random import bench_random
from .scheduler import bench_scheduler
from .softmax import bench_softmax
from .sorting import bench_sorting
from .transfer import bench_transfer


def _arrays(name: str, mod, n: int):
    rng = np.random.default_rng(1)
    host_a = rng.standard_normal(n, dtype=np.float32)
    host_b = rng.standard_normal(n, dtype=np.float32)
    if name == "pygpukit":
        return gp.from_numpy(host_a), gp.from_numpy(host_b), gp.synchronize
    if name == "torch":
        return mod.from_numpy(host_a).cuda(), mod.from_numpy(host_b).cuda(), mod.cuda.synchronize
    if name == "cupy":
        return mod.asarray(host_a), mod.asarray(host_b), mod.cuda.Device().synchronize
    return host_a, host_b, lambda: None


def bench_bandwidth(rec: Recorder, quick: bool) -> None:
    log2 = 24 if quick else 28
    for name, timer, mod in peers.impls():
        _bandwidth_one(rec, name, timer, mod, log2, quick)
        peers.free(name, mod)


def _bandwidth_one(rec: Recorder, name: str, timer, mod, log2: int, quick: bool) -> None:
    n = 1 << log2
    warm, reps = (3, 10) if quick else (5, 30)
    a, b, sync = _arrays(name, mod, n)
    if name == "torch":
        out = mod.empty_like(a)
        copy_fn = lambda: out.copy_(a)
    else:
        copy_fn = a.copy
    sync()
    nbytes = n * 4
    for bench, fn, moved in (("copy", copy_fn, 2 * nbytes), ("add", lambda: a + b, 3 * nbytes), ("sum", a.sum, nbytes)):
        ms = median_time_ms(fn, timer, warm, reps)
        rec.add(f"{bench}_f32_2^{log2}", name, "GB/s", moved / ms / 1e6, True)


def bench_host_overhead(rec: Recorder, quick: bool) -> None:
    burst, reps = (50, 20) if quick else (50, 400)
    for name, _, mod in peers.impls():
        _host_overhead_one(rec, name, mod, burst, reps)


def _host_overhead_one(rec: Recorder, name: str, mod, burst: int, reps: int) -> None:
    a, b, sync = _arrays(name, mod, 1024)
    rec.add("tiny_add_1024_host", name, "us", host_time_us(lambda: a + b, sync, burst, reps), False)
    alloc: Callable[[], object]
    if name == "pygpukit":
        alloc = lambda: gp.empty((1 << 18,), gp.float32)
    elif name == "torch":
        alloc = lambda: mod.empty(1 << 18, dtype=mod.float32, device="cuda")
    elif name == "cupy":
        alloc = lambda: mod.empty(1 << 18, dtype=mod.float32)
    else:
        alloc = lambda: np.empty(1 << 18, np.float32)
    rec.add("empty_1MiB_host", name, "us", host_time_us(alloc, sync, burst, reps), False)
    if name == "pygpukit":
        # the pool alone (alloc + free of a block), against the peers' empty()
        rt = _runtime.get()
        raw = lambda: rt.pool.alloc(1 << 20, rt.stream)
        rec.add("pool_alloc_free_1MiB_host", name, "us", host_time_us(raw, sync, burst, reps), False)
    elif name in ("torch", "cupy"):
        rec.add("pool_alloc_free_1MiB_host", name, "us", host_time_us(alloc, sync, burst, reps), False, note="empty()")


def _reduction_cases(name: str, a) -> dict[str, Callable[[], object]]:
    if name == "torch":
        return {
            "sum_last": lambda: a.sum(dim=1),
            "max_last": lambda: a.amax(dim=1),
            "argmax_last": lambda: a.argmax(dim=1),
            "sum_all": a.sum,
            "sum_first": lambda: a.sum(dim=0),
        }
    # pygpukit, CuPy and NumPy share NumPy's spelling
    return {
        "sum_last": lambda: a.sum(axis=1),
        "max_last": lambda: a.max(axis=1),
        "argmax_last": lambda: a.argmax(axis=1),
        "sum_all": a.sum,
        "sum_first": lambda: a.sum(axis=0),
    }


def bench_reductions(rec: Recorder, quick: bool) -> None:
    """sum / max / argmax over the last axis, sum over the first axis and over
    everything of an (8192, 8192) float32 array; GB/s of the input read."""
    side = 2048 if quick else 8192
    warm, reps = (2, 5) if quick else (3, 20)
    host = np.random.default_rng(3).standard_normal((side, side), dtype=np.float32)
    for name, timer, mod in peers.impls():
        arr: object
        if name == "pygpukit":
            arr = gp.from_numpy(host)
        elif name == "torch":
            arr = mod.from_numpy(host).cuda()
        elif name == "cupy":
            arr = mod.asarray(host)
        else:
            arr = host
        for case, fn in _reduction_cases(name, arr).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"{case}_f32_{side}x{side}", name, "GB/s", host.nbytes / ms / 1e6, True)


_EMPTY_SRC = 'extern "C" __global__ void empty4(const float* a, const float* b, float* c, long long n) {}'


def bench_launch(rec: Recorder, quick: bool) -> None:
    """The driver's floor under every op: host time of launching an empty kernel
    (pygpukit's raw launch, gp.jit's call with marshalling, CuPy's RawKernel)."""
    if gp.backend() != "cuda":
        return
    burst, reps = (50, 20) if quick else (50, 400)
    rt = _runtime.get()
    a = gp.zeros(1024, gp.float32)
    k = gp.jit(_EMPTY_SRC, "empty4")
    k(1, 32, a, a, a, 1024)
    fn = k._function(rt)
    packed = k._packer.pack((a, a, a, 1024))
    launch, stream = rt.native.launch, rt.stream
    raw = lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, packed)
    rec.add("launch_empty_host", "pygpukit", "us", host_time_us(raw, gp.synchronize, burst, reps), False, note="native.launch")
    rec.add("jit_call_empty_host", "pygpukit", "us", host_time_us(lambda: k(1, 32, a, a, a, 1024), gp.synchronize, burst, reps), False)
    cupy = peers.cupy_cuda()
    if cupy is not None:
        ck = cupy.RawKernel(_EMPTY_SRC, "empty4")
        ca = cupy.zeros(1024, cupy.float32)
        n = cupy.int64(1024)
        call = lambda: ck((1,), (32,), (ca, ca, ca, n))
        sync = cupy.cuda.Device().synchronize
        rec.add("jit_call_empty_host", "cupy", "us", host_time_us(call, sync, burst, reps), False, note="RawKernel")


_JIT_SRC = """
// nonce %s
extern "C" __global__ void scale(float* x, float a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + 1.0f;
}
"""


def bench_jit(rec: Recorder, quick: bool) -> None:
    from ..jit import compiler, nvrtc

    if not nvrtc.available():
        return
    from .._runtime import get

    rt = get()
    sm = rt.sm if rt.backend == "cuda" else 90
    reps = 3 if quick else 7
    load = (lambda b: rt.native.module_load(b.image)) if rt.backend == "cuda" else (lambda b: None)

    def cold() -> float:
        src = _JIT_SRC % uuid.uuid4().hex
        t0 = time.perf_counter()
        load(compiler.compile_source(src, ["scale"], sm))
        return (time.perf_counter() - t0) * 1e3

    cold()  # first NVRTC use in the process loads its builtins
    rec.add("jit_cold_compile", "pygpukit", "ms", statistics.median(cold() for _ in range(reps)), False)
    src = _JIT_SRC % "cache-hit"
    compiler.compile_source(src, ["scale"], sm)

    def hit() -> float:
        t0 = time.perf_counter()
        load(compiler.compile_source(src, ["scale"], sm))
        return (time.perf_counter() - t0) * 1e3

    rec.add("jit_disk_cache_hit", "pygpukit", "ms", statistics.median(hit() for _ in range(reps * 3)), False)
    cupy = peers.cupy_cuda() if rt.backend == "cuda" else None
    if cupy is not None:

        def cupy_cold() -> float:
            k = cupy.RawKernel(_JIT_SRC % uuid.uuid4().hex, "scale")
            t0 = time.perf_counter()
            k.compile()
            return (time.perf_counter() - t0) * 1e3

        cupy_cold()
        rec.add("jit_cold_compile", "cupy", "ms", statistics.median(cupy_cold() for _ in range(reps)), False)


def bench_import(rec: Recorder, quick: bool) -> None:
    """``import pygpukit`` minus an empty interpreter, and the part of it that is
    pygpukit's own: minus ``import numpy, ml_dtypes``, its dependencies (whose
    import time depends on the machine: without bytecode caches NumPy alone
    takes 0.3 s). The three are timed interleaved, so drift hits all alike."""
    reps = 3 if quick else 9
    env = dict(os.environ)

    def run(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"pass": [], "import numpy, ml_dtypes": [], "import pygpukit": []}
    for _ in range(reps):
        for code, ts in times.items():
            ts.append(run(code))
    base, deps, t = (statistics.median(ts) for ts in times.values())
    rec.add("import_pygpukit", "pygpukit", "s", max(t - base, 0.0), False, note="python -c 'import pygpukit' minus an empty interpreter")
    rec.add("import_pygpukit_own", "pygpukit", "s", max(t - deps, 0.0), False, note="minus 'import numpy, ml_dtypes'")
    rec.add("import_numpy_ml_dtypes", "pygpukit", "s", max(deps - base, 0.0), False, note="the dependencies alone")


SUITE = {
    "bandwidth": bench_bandwidth,
    "elementwise": bench_elementwise,
    "host_overhead": bench_host_overhead,
    "dispatch": bench_dispatch,
    "launch": bench_launch,
    "graphs": bench_graphs,
    "reductions": bench_reductions,
    "jit": bench_jit,
    "import": bench_import,
    "random": bench_random,
    "softmax": bench_softmax,
    "sorting": bench_sorting,
    "scheduler": bench_scheduler,
    "transfer": bench_transfer,
}
