"""Graph replay: 100 tiny in-place adds (1024 float32) captured once and
replayed; GPU time per captured kernel, against torch.cuda.CUDAGraph and
CuPy's stream capture where installed. Without graphs each of these kernels
costs a launch (several microseconds of host time); replayed, only the
device's per-node cost remains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp

from . import peers
from .harness import Recorder, median_time_ms

N_OPS = 100


def _replay(name: str, mod: Any) -> Callable[[], Any] | None:
    host = np.ones(1024, np.float32)
    if name == "pygpukit":
        a, b, c = (gp.from_numpy(host) for _ in range(3))
        with gp.graph() as g:
            for _ in range(N_OPS):
                gp.add(a, b, out=c)
        return g.replay
    if name == "torch":
        a, b, c = (mod.from_numpy(host).cuda() for _ in range(3))
        side = mod.cuda.Stream()
        side.wait_stream(mod.cuda.current_stream())
        with mod.cuda.stream(side):  # warm-up outside capture, as torch requires
            mod.add(a, b, out=c)
        mod.cuda.current_stream().wait_stream(side)
        tg = mod.cuda.CUDAGraph()
        with mod.cuda.graph(tg):
            for _ in range(N_OPS):
                mod.add(a, b, out=c)
        return tg.replay
    if name == "cupy":
        a, b, c = (mod.asarray(host) for _ in range(3))
        mod.add(a, b, out=c)  # compile outside capture
        stream = mod.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(N_OPS):
                mod.add(a, b, out=c)
            cg = stream.end_capture()
        return lambda: cg.launch(mod.cuda.get_current_stream())
    return None


def bench_graphs(rec: Recorder, quick: bool) -> None:

    if gp.backend() != "cuda":
        return
    warm, reps = (3, 10) if quick else (10, 100)
    for name, timer, mod in peers.impls():
        replay = _replay(name, mod)
        if replay is None:
            continue
        ms = median_time_ms(replay, timer, warm, reps)
        rec.add(f"graph_replay_{N_OPS}_adds_per_kernel", name, "us", ms * 1e3 / N_OPS, False)
