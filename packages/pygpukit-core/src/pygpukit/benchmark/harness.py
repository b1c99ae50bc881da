"""The benchmark harness shared by core and every plugin.

A benchmark produces records::

    {"bench": "add_f32_2^28", "impl": "pygpukit", "metric": "GB/s", "value": 2940.1,
     "higher_is_better": true, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-22"}

one per measured thing and implementation, so that ratios against peers
(torch, cupy) can be computed from any results file. GPU time is taken with
events after warm-up; every figure is a median of many runs.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Record:
    bench: str
    impl: str
    metric: str
    value: float
    higher_is_better: bool
    gpu: str
    date: str
    note: str = ""


BACKENDS = ("native", "triton")  # what ``--backends`` may name: pygpukit's own kernels, pygpukit-triton's


class Recorder:
    def __init__(self, gpu: str, backends: tuple[str, ...] = ("native",)) -> None:
        self.gpu = gpu
        self.backends = backends  # the op backends a suite that compares them measures (--backends)
        self.date = datetime.date.today().isoformat()
        self.records: list[Record] = []

    def add(self, bench: str, impl: str, metric: str, value: float, higher_is_better: bool, note: str = "") -> None:
        rec = Record(bench, impl, metric, round(float(value), 4), higher_is_better, self.gpu, self.date, note)
        self.records.append(rec)
        print(f"  {bench:<28} {impl:<10} {rec.value:>12.4g} {metric}", flush=True)


def median_time_ms(
    run: Callable[[], Any],
    start_stop: Callable[[], tuple[Callable[[], None], Callable[[], float]]],
    warmup: int,
    reps: int,
    min_ms: float = 2.0,
) -> float:
    """Median GPU time of one call of ``run``, in milliseconds, over ``reps``
    measurements after ``warmup`` calls.

    ``start_stop()`` returns (begin, end) callables: begin() marks the start,
    end() marks the end and returns elapsed milliseconds (events for GPUs).
    Each measurement times enough back-to-back calls to span ``min_ms``, so
    the host's launch latency before the first kernel (which an idle GPU would
    otherwise wait for inside the events) is spread thin: the figure is what
    the device sustains. Host overhead has benchmarks of its own (``*_host``).
    """
    for _ in range(warmup):
        run()
    begin, end = start_stop()
    begin()
    run()
    inner = max(1, min(100, math.ceil(min_ms / max(end(), 1e-6))))
    times = []
    for _ in range(reps):
        begin, end = start_stop()
        begin()
        for _ in range(inner):
            run()
        times.append(end() / inner)
    return statistics.median(times)


def host_time_us(run: Callable[[], Any], sync: Callable[[], None], burst: int, reps: int) -> float:
    """Median host time per call of ``run`` in microseconds.

    Calls are timed in bursts of ``burst`` with a synchronization (not timed)
    between bursts, so the GPU's queue never fills: a full queue would make a
    launch wait for the GPU, which is not host overhead.
    """
    for _ in range(burst):
        run()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(burst):
            run()
        times.append((time.perf_counter() - t0) / burst * 1e6)
        sync()
    return statistics.median(times)


def ratios(records: list[Record], base: str = "pygpukit") -> list[tuple[str, str, float]]:
    """(bench, peer, ratio) where ratio > 1 means ``base`` is better than the peer."""
    by_bench: dict[tuple[str, str], dict[str, Record]] = {}
    for r in records:
        by_bench.setdefault((r.bench, r.metric), {})[r.impl] = r
    out = []
    for (bench, _), impls in by_bench.items():
        if base not in impls:
            continue
        ours = impls[base]
        for peer, rec in impls.items():
            if peer == base or rec.value == 0 or ours.value == 0:
                continue
            ratio = ours.value / rec.value if ours.higher_is_better else rec.value / ours.value
            out.append((bench, peer, ratio))
    return out


def compare(old: list[dict], new: list[Record], threshold: float = 0.05) -> list[str]:
    """Lines naming each (bench, impl) that got worse than ``old`` by more than ``threshold``."""
    old_by = {(o["bench"], o["impl"], o["metric"]): o for o in old}
    lines = []
    for r in new:
        o = old_by.get((r.bench, r.impl, r.metric))
        if o is None or o["value"] == 0 or r.value == 0:
            continue
        change = r.value / o["value"] if r.higher_is_better else o["value"] / r.value
        if change < 1 - threshold:
            lines.append(f"REGRESSION {r.bench} [{r.impl}]: {o['value']} -> {r.value} {r.metric} ({(1 - change) * 100:.1f}% worse)")
    return lines


def table(records: list[Record], markdown: bool = False) -> str:
    impls = sorted({r.impl for r in records}, key=lambda i: (i != "pygpukit", i))
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for r in records:
        rows.setdefault((r.bench, r.metric), {})[r.impl] = r.value
    rat = {(b, p): x for b, p, x in ratios(records)}
    peers = [i for i in impls if i != "pygpukit"]
    head = ["bench", "metric", *impls, *[f"vs {p}" for p in peers]]
    body = []
    for (bench, metric), vals in rows.items():
        cells = [bench, metric, *[f"{vals[i]:.4g}" if i in vals else "-" for i in impls]]
        cells += [f"{rat[(bench, p)]:.2f}x" if (bench, p) in rat else "-" for p in peers]
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c) + " |" for c in body]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*row) for row in [head, *body])


def write_json(records: list[Record], path: str) -> None:
    with open(path, "w") as f:
        json.dump([asdict(r) for r in records], f, indent=1)
