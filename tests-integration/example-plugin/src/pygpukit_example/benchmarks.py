"""The benchmark suite "example" (``python -m pygpukit.benchmark --only
example``): each of the plugin's kernels against what runs without it, in
GB/s of bytes read and written.

- ``softmax_strided_*``: softmax over the first 1000 columns of a wider
  float32 / bfloat16 array, the plugin's kernel ("example") against
  pygpukit's softmax (routed to "pygpukit": a copy, then its row kernel);
- ``scaled_residual_add_*``: the kernel against the reference (pygpukit's
  array ops: casts, a multiply and an add).

On the CPU backend only the reference runs, at a small size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import gp_timer

K, LD = 1000, 1024  # softmax row length and the row stride of the array it is a slice of


def _timed(rec: Recorder, bench: str, impl: str, fn: Callable[[], object], moved: int, quick: bool) -> None:
    warm, reps = (2, 5) if quick else (3, 20)
    ms = median_time_ms(fn, gp_timer(), warm, reps)
    rec.add(bench, impl, "GB/s", moved / ms / 1e6, True)


def run(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    rng = np.random.default_rng(7)
    for dt in (gp.float32, gp.bfloat16):
        name = np.dtype(dt).name
        rows = (4096 if quick else 32768) if gpu else 256
        x = gp.from_numpy((rng.standard_normal((rows, LD), dtype=np.float32) * 3).astype(dt))[:, :K]
        moved = 2 * rows * K * x.itemsize
        bench = f"softmax_strided_{name}_{rows}x{K}"
        if gpu:
            _timed(rec, bench, "example", lambda x=x: gp.softmax(x), moved, quick)
        with gp.routing(softmax="pygpukit"):
            _timed(rec, bench, "pygpukit", lambda x=x: gp.softmax(x), moved, quick)

        n = (1 << 24 if quick else 1 << 27) if gpu else 1 << 16
        a, b = (gp.from_numpy(rng.standard_normal(n, dtype=np.float32).astype(dt)) for _ in range(2))
        bench = f"scaled_residual_add_{name}_2^{n.bit_length() - 1}"
        if gpu:
            _timed(rec, bench, "example", lambda a=a, b=b: gp.ops.scaled_residual_add(a, b, 0.5), 3 * n * a.itemsize, quick)
        with gp.routing(scaled_residual_add="example:reference"):
            _timed(rec, bench, "reference", lambda a=a, b=b: gp.ops.scaled_residual_add(a, b, 0.5), 3 * n * a.itemsize, quick)
