"""Sorting benchmarks, Mkeys/s (keys in over time): sort of 2^24 float32 (1-D),
argsort of (4096, 4096) float32 along the last axis, topk k=50 of (64, 2^17)
float32; against torch (sort, argsort(stable=True), topk) and CuPy (sort,
argsort; it has no topk) where installed, NumPy on the CPU backend (smaller sizes).

Floors on an H100 (~3 TB/s): the 1-D sort is 4 radix passes of 12 bytes per key
(read for the digit counts, read and write for the scatter): 805 MB, 0.27 ms,
62 Gkeys/s. torch.sort also returns int64 indices (CUB onesweep on key-index
pairs); CuPy sorts keys only (Thrust, onesweep). The argsort reads 4 and writes
8 bytes per key once (one block sorts a row in shared memory): 67 us. topk reads
the keys 6 times (4 select passes, count, write): 200 MB, 67 us.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp

from . import peers
from .harness import Recorder, median_time_ms


def _np_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.argpartition(-x, k - 1, axis=-1)[:, :k]
    vals = np.take_along_axis(x, idx, -1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, -1), np.take_along_axis(idx, order, -1)


def _cases(name: str, mod, hosts: dict[str, np.ndarray], k: int) -> dict[str, Callable[[], object]]:
    one, rows, wide = hosts["sort"], hosts["argsort"], hosts["topk"]
    if name == "pygpukit":
        a, b, c = gp.from_numpy(one), gp.from_numpy(rows), gp.from_numpy(wide)
        return {"sort": lambda: gp.sort(a), "argsort": lambda: gp.argsort(b, axis=-1), "topk": lambda: gp.topk(c, k)}
    if name == "torch":
        a, b, c = (mod.from_numpy(h).cuda() for h in (one, rows, wide))
        return {"sort": lambda: mod.sort(a), "argsort": lambda: mod.argsort(b, dim=-1, stable=True), "topk": lambda: mod.topk(c, k)}
    if name == "cupy":
        a, b = mod.asarray(one), mod.asarray(rows)
        return {"sort": lambda: mod.sort(a), "argsort": lambda: mod.argsort(b, axis=-1)}
    return {
        "sort": lambda: np.sort(one, kind="stable"),
        "argsort": lambda: np.argsort(rows, axis=-1, kind="stable"),
        "topk": lambda: _np_topk(wide, k),
    }


def bench_sorting(rec: Recorder, quick: bool) -> None:

    gpu = gp.backend() == "cuda"
    log2, side, wide = (24, 4096, (64, 1 << 17)) if gpu else (20, 1024, (16, 1 << 15))
    if quick:
        log2, side, wide = log2 - 2, side // 2, (wide[0] // 4, wide[1])
    warm, reps = ((3, 10) if quick else (5, 30)) if gpu else (1, 3)
    k = 50
    rng = np.random.default_rng(5)
    hosts = {
        "sort": rng.standard_normal(1 << log2, dtype=np.float32),
        "argsort": rng.standard_normal((side, side), dtype=np.float32),
        "topk": rng.standard_normal(wide, dtype=np.float32),
    }
    names = {
        "sort": f"sort_f32_2^{log2}",
        "argsort": f"argsort_f32_{side}x{side}",
        "topk": f"topk{k}_f32_{wide[0]}x2^{wide[1].bit_length() - 1}",
    }
    for name, timer, mod in peers.impls():
        for case, fn in _cases(name, mod, hosts, k).items():
            ms = median_time_ms(fn, timer, warm, reps)
            note = "values + int64 indices" if (name, case) == ("torch", "sort") else ""
            rec.add(names[case], name, "Mkeys/s", hosts[case].size / ms / 1e3, True, note=note)
