import numpy as np
import pytest

import pygpukit as gp


def test_stream_context_makes_it_current():
    s = gp.Stream()
    default = gp.current_stream()
    with s:
        assert gp.current_stream() is s
        a = gp.arange(10, dtype=gp.float32) * 2
    s.synchronize()
    assert s.query()
    assert gp.current_stream().handle == default.handle
    np.testing.assert_array_equal(a.to_numpy(), np.arange(10, dtype=np.float32) * 2)


def test_stream_priority_validation():
    lo, hi = gp.Stream.priority_range()
    assert hi <= lo
    gp.Stream(priority=hi)
    with pytest.raises(TypeError):
        gp.Stream(priority="high")


def test_events_time_and_order():
    s = gp.Stream()
    e0, e1 = gp.Event(timing=True), gp.Event(timing=True)
    with s:
        e0.record()
        a = gp.ones((1 << 16,), gp.float32)
        b = a + a
        e1.record()
    e1.synchronize()
    assert e1.query()
    assert e0.elapsed_time(e1) >= 0.0
    other = gp.Stream()
    other.wait_event(e1)
    with other:
        c = b * 2
    assert c.sum().item() == 4 * (1 << 16)


def test_elapsed_time_needs_timing_events():
    e0, e1 = gp.Event(), gp.Event()
    e0.record()
    e1.record()
    with pytest.raises(ValueError, match="timing=True"):
        e0.elapsed_time(e1)


@pytest.mark.gpu
def test_streams_are_real_cuda_streams():
    s = gp.Stream()
    assert s.handle != 0
    assert gp.current_stream().handle != 0  # never the legacy default stream


def test_record_stream_holds_memory_for_another_stream():
    s = gp.Stream()
    a = gp.arange(1 << 16, dtype=gp.float32)
    with s:
        b = a * 2  # s reads a
    a.record_stream(s)
    with pytest.raises(TypeError, match=r"gp\.Stream"):
        a.record_stream(5)
    del a  # freed on its own stream, but held until s's work is done
    s.synchronize()
    c = gp.zeros(1 << 16, gp.float32)  # the pool may now reuse the block
    assert c.sum().item() == 0
    np.testing.assert_array_equal(b.to_numpy(), np.arange(1 << 16, dtype=np.float32) * 2)
    assert gp.memory.stats()["num_pending_frees"] == 0
