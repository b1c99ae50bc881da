"""Random number benchmarks: uniform and normal float32 of 2^26 values, GB/s of
output written, against torch.rand / torch.randn and CuPy's generator where
installed (NumPy's on the CPU backend). A pure write: the floor is the output
bytes over the memory bandwidth."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp

from . import peers
from .harness import Recorder, median_time_ms


def _cases(name: str, mod, n: int) -> dict[str, Callable[[], object]]:
    if name == "pygpukit":
        g = gp.random.default_rng(0)
        return {"uniform": lambda: g.random(n), "normal": lambda: g.standard_normal(n)}
    if name == "torch":
        return {
            "uniform": lambda: mod.rand(n, device="cuda", dtype=mod.float32),
            "normal": lambda: mod.randn(n, device="cuda", dtype=mod.float32),
        }
    if name == "cupy":
        r = mod.random  # the cuRAND-backed legacy API (XORWOW)
        return {"uniform": lambda: r.random_sample(n, dtype=mod.float32), "normal": lambda: r.standard_normal(n, dtype=mod.float32)}
    ng = np.random.default_rng(0)
    return {"uniform": lambda: ng.random(n, dtype=np.float32), "normal": lambda: ng.standard_normal(n, dtype=np.float32)}


def bench_random(rec: Recorder, quick: bool) -> None:
    """uniform / normal float32 (pygpukit: Philox4x32-10; torch: Philox; CuPy: cuRAND
    XORWOW), a new array per call as in each library's API."""

    gpu = gp.backend() == "cuda"
    log2 = (22 if quick else 26) if gpu else (20 if quick else 22)
    warm, reps = ((3, 10) if quick else (5, 30)) if gpu else (1, 3)
    n = 1 << log2
    for name, timer, mod in peers.impls():
        for case, fn in _cases(name, mod, n).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"random_{case}_f32_2^{log2}", name, "GB/s", n * 4 / ms / 1e6, True)
