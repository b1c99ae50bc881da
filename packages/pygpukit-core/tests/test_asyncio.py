"""Awaitable synchronization: events, streams, the device and transfers."""

import asyncio
import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import streams


def _pending_for(polls: int):
    """A ready() that is false for its first ``polls`` calls."""
    calls = {"n": 0}

    def ready() -> bool:
        calls["n"] += 1
        return calls["n"] > polls

    return ready, calls


def test_poll_until_backs_off_and_keeps_the_loop_running(monkeypatch):
    slept = []
    real_sleep = asyncio.sleep

    async def fake_sleep(delay):
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    ready, calls = _pending_for(10)
    ticks = []

    async def ticker():
        for i in range(5):
            ticks.append(i)
            await real_sleep(0)

    async def main():
        await asyncio.gather(streams.poll_until(ready), ticker())

    asyncio.run(main())
    assert calls["n"] == 11
    assert ticks == [0, 1, 2, 3, 4]  # the other coroutine ran meanwhile
    assert slept[0] == streams.POLL_MIN_S
    assert all(b == min(2 * a, streams.POLL_MAX_S) for a, b in itertools.pairwise(slept))
    assert slept[-1] == streams.POLL_MAX_S


def test_await_event_polls_its_query():
    e = gp.Event()
    e.record()
    ready, calls = _pending_for(3)
    e.query = ready  # an event that completes on its fourth query

    async def main():
        await e

    asyncio.run(main())
    assert calls["n"] == 4


def test_two_coroutines_await_concurrently():
    a = gp.arange(1000, dtype=gp.float32)
    s1, s2 = gp.Stream(), gp.Stream()
    with s1:
        b = a * 2
    with s2:
        c = a + 1
    order = []

    async def wait_on(stream, name):
        await stream.synchronize_async()
        order.append(name)

    async def main():
        e = gp.Event().record(s1)
        await asyncio.gather(wait_on(s1, "s1"), wait_on(s2, "s2"), e)

    asyncio.run(main())
    assert sorted(order) == ["s1", "s2"]
    np.testing.assert_array_equal(b.to_numpy(), np.arange(1000, dtype=np.float32) * 2)
    np.testing.assert_array_equal(c.to_numpy(), np.arange(1000, dtype=np.float32) + 1)


def test_synchronize_async_covers_every_live_stream():
    s = gp.Stream()
    with s:
        x = gp.ones((4096,), gp.float32) * 3

    async def main():
        await gp.synchronize_async()
        return x.to_numpy()

    np.testing.assert_array_equal(asyncio.run(main()), np.full(4096, 3, np.float32))
    assert s in streams._live_streams


def test_async_waits_refuse_graph_capture():
    a = gp.ones((16,), gp.float32)
    s = gp.Stream()
    with gp.graph():
        _ = a + 1
        with pytest.raises(gp.GraphCaptureError, match="synchronize_async"):
            asyncio.run(gp.synchronize_async())
        with pytest.raises(gp.GraphCaptureError, match=r"Stream\.synchronize_async"):
            asyncio.run(s.synchronize_async())


@pytest.mark.gpu
def test_gpu_await_event_after_long_work():
    x = gp.ones((1 << 24,), gp.float32)
    for _ in range(10):
        x = x * 1.0001
    e = gp.Event().record()

    async def main():
        await e
        return e.query()

    assert asyncio.run(main())


@pytest.mark.gpu
def test_gpu_gather_streams_and_device():
    s1, s2 = gp.Stream(), gp.Stream()
    with s1:
        a = gp.ones((1 << 24,), gp.float32) * 2
    with s2:
        b = gp.ones((1 << 24,), gp.float32) * 3

    async def main():
        await asyncio.gather(s1.synchronize_async(), s2.synchronize_async(), gp.synchronize_async())
        return s1.query() and s2.query()

    assert asyncio.run(main())
    assert float(a[0].item()) == 2.0 and float(b[-1].item()) == 3.0
