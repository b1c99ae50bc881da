"""The scheduler experiment: a latency-critical decode loop beside a batch job.

decode: a step of 20 layers x (GEMV of a [1, 4096] bf16 vector by a
4096 x 4096 bf16 weight, an RMS norm, a residual add) = 60 small kernels,
the host waiting for each step's end as a decoder waits for its token; 500
steps, step time from events on the decode stream. batch: another thread
running back-to-back 8192^3 bf16 matmuls (two in flight). Reported: decode
p50 / p99 solo, beside the batch on two plain streams, on two streams of
highest and lowest priority (what stream priorities alone give), and under the
scheduler (decode a Guaranteed task of partition "inference", batch a
BestEffort task of partition "batch" with compute share 0.5); the batch's
TFLOP/s in each case. Also the host time of a pool allocation inside a task
over one outside. The real kernels are the registry's ops (``linear``, and
``rms_norm`` where a plugin such as pygpukit-nn defines it); without a
plugin, core's kernels stand in.
On the CPU backend only the allocation case runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp

from .harness import Recorder, host_time_us

HIDDEN, LAYERS, BATCH_N = 4096, 20, 8192


def _rms_norm() -> Callable[[Any, Any], Any]:
    if "rms_norm" in gp.ops.names():
        rms_norm = gp.ops.rms_norm
        return lambda x, w: rms_norm(x, w, 1e-6)
    return lambda x, w: x * w  # one elementwise kernel stands in


class _Decode:
    def __init__(self, layers: int, hidden: int) -> None:
        rng = np.random.default_rng(0)
        self.w = [gp.from_numpy((rng.standard_normal((hidden, hidden)) * 0.02).astype(gp.bfloat16)) for _ in range(layers)]
        self.g = gp.from_numpy(np.ones(hidden, gp.bfloat16))
        self.x = gp.from_numpy(rng.standard_normal((1, hidden)).astype(gp.bfloat16))
        self.norm = _rms_norm()

    def step(self) -> Any:
        h = self.x
        for w in self.w:
            h = self.norm(gp.linear(h, w), self.g) + h
        return h

    def run(self, steps: int, warm: int) -> list[float]:
        """Step times in ms (events on the current stream; the host waits each step)."""
        times = []
        for i in range(warm + steps):
            start, end = gp.Event(timing=True), gp.Event(timing=True)
            start.record()
            self.step()
            end.record()
            end.synchronize()
            if i >= warm:
                times.append(start.elapsed_time(end))
        return times


class _Batch(threading.Thread):
    """Back-to-back n^3 bf16 matmuls, two in flight, until stopped."""

    def __init__(self, n: int, task: Any = None, priority: int = 0) -> None:
        super().__init__(daemon=True)
        self.priority = priority
        rng = np.random.default_rng(1)
        self.a = gp.from_numpy(rng.standard_normal((n, n)).astype(gp.bfloat16))
        self.b = gp.from_numpy(rng.standard_normal((n, n)).astype(gp.bfloat16))
        self.n, self.task, self.done, self.stop = n, task, 0, threading.Event()
        self.seconds = 0.0
        gp.synchronize()

    def _loop(self) -> None:
        ring: list[Any] = []
        t0 = time.perf_counter()
        while not self.stop.is_set():
            self.a @ self.b
            ring.append(gp.Event().record())
            if len(ring) > 2:
                ring.pop(0).synchronize()
                self.done += 1
        for e in ring:
            e.synchronize()
            self.done += 1
        self.seconds = time.perf_counter() - t0

    def run(self) -> None:
        if self.task is None:
            with gp.Stream(self.priority):
                self._loop()
        else:
            with self.task:
                self._loop()

    def tflops(self) -> float:
        return 2 * self.n**3 * self.done / self.seconds / 1e12


def _percentiles(times: list[float]) -> tuple[float, float]:
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def _solo_batch(n: int, seconds: float) -> float:
    b = _Batch(n)
    b.start()
    time.sleep(seconds)
    b.stop.set()
    b.join()
    return b.tflops()


def _colocated(dec: _Decode, steps: int, warm: int, n: int, mode: str) -> tuple[list[float], _Batch]:
    """mode: "plain_streams", "priority_streams" or "scheduler"."""
    least, greatest = gp.Stream.priority_range()
    decode_task = None
    if mode == "scheduler":
        inference = gp.scheduler.partition("bench-inference", compute=0.5)
        batch_part = gp.scheduler.partition("bench-batch", compute=0.5)
        batch = _Batch(n, gp.task("batch", qos="best_effort", partition=batch_part))
        decode_task = gp.task("decode", qos="guaranteed", partition=inference, memory="256MiB")
    else:
        batch = _Batch(n, priority=least if mode == "priority_streams" else 0)
    batch.start()
    time.sleep(0.2)  # the batch is running when decoding starts
    if decode_task is None:
        with gp.Stream(greatest if mode == "priority_streams" else 0):
            times = dec.run(steps, warm)
    else:
        with decode_task:
            times = dec.run(steps, warm)
    batch.stop.set()
    batch.join()
    return times, batch


def _alloc_cost(rec: Recorder, quick: bool) -> None:
    reps = 200 if quick else 2000

    def one() -> None:
        gp.empty((64,), gp.float32)

    sync = gp.synchronize
    outside = host_time_us(one, sync, 100, reps // 100)
    with gp.task("alloc-cost"):
        inside = host_time_us(one, sync, 100, reps // 100)
    rec.add("pool_alloc_free_outside_task", "pygpukit", "us", outside, False)
    rec.add("pool_alloc_free_inside_task", "pygpukit", "us", inside, False, f"{inside / outside:.2f}x outside (target <= 1.5x)")


def bench_scheduler(rec: Recorder, quick: bool) -> None:
    _alloc_cost(rec, quick)
    if gp.backend() != "cuda":
        return
    steps, warm = (50, 5) if quick else (500, 20)
    n = 2048 if quick else BATCH_N
    dec = _Decode(4 if quick else LAYERS, 1024 if quick else HIDDEN)
    with gp.Stream():
        solo = dec.run(steps, warm)
    p50, p99 = _percentiles(solo)
    rec.add("decode_step_p50_solo", "pygpukit", "ms", p50, False, f"{3 * len(dec.w)} kernels per step")
    rec.add("decode_step_p99_solo", "pygpukit", "ms", p99, False)
    solo_tf = _solo_batch(n, 0.5 if quick else 3.0)
    rec.add(f"batch_gemm_{n}_solo", "pygpukit", "TFLOP/s", solo_tf, True)
    for label in ("plain_streams", "priority_streams", "scheduler"):
        times, batch = _colocated(dec, steps, warm, n, label)
        q50, q99 = _percentiles(times)
        tf = batch.tflops()
        how = ""
        if batch.task is not None:
            c = batch.task.counters or {}
            how = f"; SM budget {batch.task.sm_budget}, {c.get('waits', 0)} of {c.get('launches', 0)} launches paced"
        rec.add(f"decode_step_p50_{label}", "pygpukit", "ms", q50, False, f"{q50 / p50:.2f}x solo")
        rec.add(f"decode_step_p99_{label}", "pygpukit", "ms", q99, False, f"{q99 / p99:.2f}x solo p99 (target <= 1.5x)")
        rec.add(f"batch_gemm_{n}_{label}", "pygpukit", "TFLOP/s", tf, True, f"{tf / solo_tf:.2f} of solo (target >= 0.4){how}")
