import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array


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


def test_on_stream_queues_on_the_given_stream():
    @gp.streams.on_stream
    def where_am_i():
        return gp.current_stream()

    s = gp.Stream()
    assert where_am_i(stream=s) is s
    assert where_am_i() is not s
    with pytest.raises(TypeError, match=r"stream must be a pygpukit\.Stream"):
        where_am_i(stream=7)


def _stream_calls(a, b, i):
    """Every kind of public op, called with stream=."""
    return {
        "ufunc": lambda s: gp.exp(a, stream=s),
        "binary ufunc": lambda s: gp.add(a, b, stream=s),
        "where": lambda s: gp.where(a > 0, a, b, stream=s),
        "clip": lambda s: gp.clip(a, -1, 1, stream=s),
        "zeros": lambda s: gp.zeros((3, 4), stream=s),
        "arange": lambda s: gp.arange(12, stream=s),
        "asarray": lambda s: gp.asarray(np.ones(4), stream=s),
        "tril": lambda s: gp.tril(a, stream=s),
        "sum": lambda s: gp.sum(a, axis=1, stream=s),
        "argmax method": lambda s: a.argmax(axis=0, stream=s),
        "cumsum": lambda s: gp.cumsum(a, axis=1, stream=s),
        "concatenate": lambda s: gp.concatenate([a, b], stream=s),
        "take": lambda s: gp.take(a, i, axis=1, stream=s),
        "sort": lambda s: gp.sort(a, stream=s),
        "softmax": lambda s: gp.softmax(a, stream=s),
        "matmul": lambda s: gp.matmul(a, b.T, stream=s),
        "einsum": lambda s: gp.einsum("ij,kj->ik", a, b, stream=s),
        "copy": lambda s: a.copy(stream=s),
        "astype": lambda s: a.astype(gp.float16, stream=s),
        "to_numpy": lambda s: a.to_numpy(stream=s),
        "random": lambda s: gp.random.default_rng(3).normal(size=(3, 4), stream=s),
    }


def test_every_kind_of_op_accepts_stream(rng):
    host_a, host_b = random_array(rng, (3, 4), np.float32), random_array(rng, (3, 4), np.float32)
    a, b, i = gp.from_numpy(host_a), gp.from_numpy(host_b), gp.from_numpy(np.array([3, 0]))
    s = gp.Stream()
    for name, call in _stream_calls(a, b, i).items():
        on_s = call(s)
        s.synchronize()
        plain = call(None)
        got = on_s if isinstance(on_s, np.ndarray) else on_s.to_numpy()
        want = plain if isinstance(plain, np.ndarray) else plain.to_numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)
