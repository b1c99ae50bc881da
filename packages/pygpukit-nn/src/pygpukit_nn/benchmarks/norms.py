"""pygpukit-nn's row ops on (8192, 8192) bfloat16 (the issue's shape): rms_norm,
layer_norm, the fused residual add + rms_norm, swiglu (silu(gate) * up of a
(8192, 2 * 8192) gate_up output) and softmax; GB/s of the bytes each must
read and write, against PyTorch's (torch.nn.functional) in the same run.
The floor is those bytes over the copy rate (the bandwidth suite)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from .. import functional as nn


def _cases(name: str, mod, side: int, rng) -> dict[str, tuple[Callable[[], object], int]]:
    """case -> (call, bytes moved); bf16 rows of ``side`` elements."""
    x = rng.standard_normal((side, side), dtype=np.float32)
    r = rng.standard_normal((side, side), dtype=np.float32)
    gu = rng.standard_normal((side, 2 * side), dtype=np.float32)
    w = rng.standard_normal(side, dtype=np.float32)
    n = side * side * 2  # bytes of one (side, side) bf16 array
    moved = {"rms_norm": 2 * n, "layer_norm": 2 * n, "add_rms_norm": 4 * n, "swiglu": 3 * n, "softmax": 2 * n}
    if name == "pygpukit":
        gx, gr, ggu, gw = (gp.from_numpy(a.astype(gp.bfloat16)) for a in (x, r, gu, w))
        calls = {
            "rms_norm": lambda: nn.rms_norm(gx, gw, 1e-6),
            "layer_norm": lambda: nn.layer_norm(gx, gw, gw, 1e-5),
            "add_rms_norm": lambda: nn.add_rms_norm(gx, gr, gw, 1e-6),
            "swiglu": lambda: nn.swiglu(ggu),
            "softmax": lambda: nn.softmax(gx, -1),
        }
    elif name == "torch":
        F = mod.nn.functional
        tx, tr, tgu, tw = (mod.from_numpy(a).cuda().to(mod.bfloat16) for a in (x, r, gu, w))

        def add_rms():
            h = tx + tr
            return F.rms_norm(h, (side,), tw, 1e-6), h

        def swiglu():
            g, u = tgu.chunk(2, dim=-1)
            return F.silu(g) * u

        calls = {
            "rms_norm": lambda: F.rms_norm(tx, (side,), tw, 1e-6),
            "layer_norm": lambda: F.layer_norm(tx, (side,), tw, tw, 1e-5),
            "add_rms_norm": add_rms,
            "swiglu": swiglu,
            "softmax": lambda: mod.softmax(tx, -1),
        }
    else:
        return {}  # NumPy has no bfloat16 row ops worth timing
    return {k: (fn, moved[k]) for k, fn in calls.items()}


def bench_nn_norms(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    side = (2048 if quick else 8192) if gpu else 512
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    for name, timer, mod in impls():
        for case, (fn, moved) in _cases(name, mod, side, np.random.default_rng(7)).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"{case}_bf16_{side}x{side}", name, "GB/s", moved / ms / 1e6, True)
        free(name, mod)
