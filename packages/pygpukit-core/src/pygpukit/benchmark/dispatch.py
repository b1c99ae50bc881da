"""Host cost of the op registry's dispatch: a registry op against calling its
implementation directly, for a do-nothing implementation (the dispatch alone)
and for matmul of two 16x16 float32 arrays (a real op: the implementation
the registry picks here, called directly or dispatched), with positional and
keyword arguments. The dispatch costs the difference of the two records
(target: 0.3 us); each is the best of three interleaved medians."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from ..registry import REGISTRY
from .harness import Recorder, host_time_us

_OP = "bench_dispatch_noop"


def bench_dispatch(rec: Recorder, quick: bool) -> None:
    calls, reps = (500, 3) if quick else (20000, 15)
    if _OP not in REGISTRY.op_names():
        REGISTRY.define(_OP, nkey=1, doc="benchmark: returns its argument")
        for backend in ("cuda", "cpu"):
            REGISTRY.register(_OP, _noop, backend=backend, name="noop")
    dispatched = REGISTRY.dispatcher(_OP)
    x = gp.from_numpy(np.ones((16, 16), np.float32))
    matmul_impl = REGISTRY.implementation("matmul", x, x).fn  # whichever runs here: core's or a plugin's
    cases = {
        "noop": (lambda: dispatched(x), lambda: _noop(x)),
        "noop_kw": (lambda: dispatched(x, flag=1), lambda: _noop(x, flag=1)),
        "matmul_16": (lambda: gp.matmul(x, x), lambda: matmul_impl(x, x)),
    }
    for case, (via, direct) in cases.items():
        # interleaved, so that both see the same machine state
        d, v = [], []
        for _ in range(3):
            d.append(host_time_us(direct, gp.synchronize, calls, reps))
            v.append(host_time_us(via, gp.synchronize, calls, reps))
        direct_us, via_us = min(d), min(v)
        rec.add(f"dispatch_{case}_host", "pygpukit", "us", via_us, False)
        rec.add(f"dispatch_{case}_host", "direct", "us", direct_us, False, note="the implementation called directly")


def _noop(x: Any, flag: int = 0) -> Any:
    return x
