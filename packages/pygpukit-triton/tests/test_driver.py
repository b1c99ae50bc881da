"""The device interface pygpukit's Triton driver hands to Triton's benchmarking
(triton.testing.do_bench, which the autotuner uses): torch.cuda's Event and
synchronize, on pygpukit's events. The driver itself needs a GPU (test_gpu.py)."""

from __future__ import annotations

import time

from pygpukit_triton.driver import DeviceInterface


def test_events_time_the_work_between_them():
    start, end = DeviceInterface.Event(enable_timing=True), DeviceInterface.Event(enable_timing=True)
    start.record()
    time.sleep(0.02)  # on the CPU backend events are host timestamps; on a GPU the idle stream's gap
    end.record()
    DeviceInterface.synchronize()
    ms = start.elapsed_time(end)
    assert 15 <= ms < 1000
    t0 = time.perf_counter()
    DeviceInterface.synchronize()
    assert time.perf_counter() - t0 < 5
