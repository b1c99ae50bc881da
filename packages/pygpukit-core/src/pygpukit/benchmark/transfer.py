"""Host <-> device copies of a 256 MiB pageable float32 array (64 MiB with
--quick): GB/s through the transfer engine (``gp.transfer``: pinned staging
ring on a copy stream) against the plain copy (one cuMemcpyHtoDAsync /
DtoHAsync of the pageable buffer on the current stream, ``direct``) and
torch's ``.cuda()`` / ``.cpu()`` where installed. Host wall time from the
call until the data is usable (device synchronized), median of several runs.

Overlap: a spin kernel of known duration (calibrated to the engine's copy
time) on the compute stream while the same H2D runs; the figure is
(t_copy + t_compute) / t_both: 2 is full overlap, 1 none. ``direct`` issues
its pageable copy on a second stream, which the driver stages synchronously.
On the CPU backend the copies run at ``CPU_MIB`` through host memory and the
overlap case is skipped.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp

from .. import _runtime
from .harness import Recorder

CPU_MIB = 64

_SPIN_SRC = """
extern "C" __global__ void spin(long long cycles, int* out) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    if (threadIdx.x == 0) out[blockIdx.x] = 1;
}
"""


def _wall_s(run: Callable[[], Any], reps: int) -> float:
    """Median host wall time of ``run`` (which ends synchronized), after one warm-up."""
    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_transfer(rec: Recorder, quick: bool) -> None:
    rt = _runtime.get()
    gpu = rt.backend == "cuda"
    mib = (64 if quick else 256) if gpu else CPU_MIB
    reps = 3 if quick else 10
    host = np.random.default_rng(5).standard_normal(mib << 18, dtype=np.float32)  # pageable
    nbytes = host.nbytes
    dev = gp.from_numpy(host)
    back = np.empty_like(host)
    sync = gp.synchronize

    def engine_h2d() -> None:
        gp.transfer.to_device(host)[1].wait()

    def direct_h2d() -> None:
        rt.ops.from_host(dev, host, rt.stream)
        sync()

    def engine_d2h() -> None:
        gp.transfer.to_host(dev, out=back)

    def direct_d2h() -> None:
        rt.ops.to_host(back, dev, rt.stream)

    h2d: dict[str, Callable[[], None]] = {"pygpukit": engine_h2d, "direct": direct_h2d}
    d2h: dict[str, Callable[[], None]] = {"pygpukit": engine_d2h, "direct": direct_d2h}
    torch = None
    if gpu:
        from . import peers

        torch = peers.torch_cuda()
    if torch is not None:
        th = torch.from_numpy(host)
        td = th.cuda()

        def torch_h2d() -> None:
            th.cuda()
            torch.cuda.synchronize()

        h2d["torch"] = torch_h2d
        d2h["torch"] = td.cpu
    for direction, cases in (("h2d", h2d), ("d2h", d2h)):
        for name, run in cases.items():
            s = _wall_s(run, reps)
            rec.add(f"{direction}_{mib}MiB_pageable", name, "GB/s", nbytes / s / 1e9, True)
    np.testing.assert_array_equal(back, host)  # the last D2H was whole
    if gpu:
        _overlap(rec, host, reps)


def _overlap(rec: Recorder, host: np.ndarray, reps: int) -> None:
    spin = gp.jit(_SPIN_SRC, "spin")
    flag = gp.zeros(1, gp.int32)
    side = gp.Stream()

    def kernel_ms(cycles: int) -> float:
        e0, e1 = gp.Event(timing=True), gp.Event(timing=True)
        e0.record()
        spin(1, 32, cycles, flag)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    copies: dict[str, Callable[[], None]] = {
        "pygpukit": lambda: gp.transfer.to_device(host)[1].wait(),
        "direct": lambda: _direct_on(side, host),
    }
    for name, copy in copies.items():
        t_copy = _wall_s(copy, reps)
        kernel_ms(1 << 20)
        cycles = int((1 << 20) * t_copy * 1e3 / kernel_ms(1 << 20))  # a kernel as long as the copy

        def compute(cycles: int = cycles) -> None:
            spin(1, 32, cycles, flag)
            gp.synchronize()

        def both(copy: Callable[[], None] = copy, cycles: int = cycles) -> None:
            spin(1, 32, cycles, flag)
            copy()
            gp.synchronize()

        t_compute = _wall_s(compute, reps)
        t_both = _wall_s(both, reps)
        rec.add(
            f"h2d_{host.nbytes >> 20}MiB_overlap_with_compute",
            name,
            "x",
            (t_copy + t_compute) / t_both,
            True,
            note="(t_copy + t_compute) / t_both; 2 = full overlap",
        )


def _direct_on(stream: gp.Stream, host: np.ndarray) -> None:
    """The plain pageable copy on ``stream``, waited for."""
    rt = _runtime.get()
    with stream:
        dst = gp.empty(host.shape, host.dtype)
    rt.native.memcpy_htod(dst.data_ptr, host, stream.handle)
    stream.synchronize()
