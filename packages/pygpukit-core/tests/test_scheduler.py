"""The scheduler's Python API: partitions, tasks and tiers, admission, quotas,
eviction, pacing counters, snapshot, asyncio. Same tests on CPU and GPU; the
timing side of pacing is in the benchmark (suite "scheduler")."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import scheduler as sch

MiB = 1 << 20
_names = itertools.count()


def fresh(prefix: str = "p") -> str:
    """A partition name no other test uses (the scheduler is per process)."""
    return f"{prefix}{next(_names)}_{time.monotonic_ns()}"


@pytest.fixture(autouse=True)
def _quick_eviction():
    # Buffers used in the last 50 ms are safe from spilling; tests spill at once.
    sch._sched().set_eviction_grace(0.0)
    yield
    sch._sched().set_eviction_grace(0.05)


def test_partition_and_task_state_machine():
    part = gp.scheduler.partition(fresh(), memory="64MiB", compute=0.5)
    assert part.quota == 64 * MiB and part.compute == 0.5
    t = gp.task("decode", qos="guaranteed", partition=part, memory="8MiB")
    assert t.state == "new"
    with t:
        assert t.state == "running" and gp.scheduler.current_task() is t
        assert gp.streams.current_stream_handle() == t.stream.handle
        x = gp.zeros((256, 1024), gp.float32)  # 1 MiB, charged to the task
        info = t.info()
        assert info.used == MiB and info.reservation == 8 * MiB and info.limit == 8 * MiB
    assert gp.scheduler.current_task() is None
    info = t.info()
    assert info.state == "completed"
    assert set(info.state_times) >= {"pending", "admitted", "running", "completed"}
    assert info.state_times["pending"] <= info.state_times["admitted"] <= info.state_times["running"] <= info.state_times["completed"]
    assert info.used == MiB  # still alive after the task ended
    del x
    assert t.info().used == 0


def test_illegal_transitions_raise_scheduler_errors():
    t = gp.task("t", qos="burstable")
    t.submit()
    with pytest.raises(gp.SchedulerError, match="cannot go from pending to running"):
        gp.scheduler._sched().set_state(t.id, "running")
    t.admit()
    t.start()
    t.complete()
    with pytest.raises(gp.SchedulerError, match="cannot go from completed to running"):
        t.start()
    with pytest.raises(gp.SchedulerError, match=r"cannot go from completed"):
        with t:
            pass


def test_bad_arguments_give_clear_errors():
    with pytest.raises(ValueError, match="qos must be one of"):
        gp.task("x", qos="gold")
    with pytest.raises(ValueError, match="non-empty name"):
        gp.task("")
    with pytest.raises(ValueError, match="compute share"):
        gp.scheduler.partition(fresh(), compute=1.5)
    with pytest.raises(TypeError, match="compute must be a number"):
        gp.scheduler.partition(fresh(), compute="half")
    with pytest.raises(ValueError, match="no partition named"):
        with gp.task("x", partition="no-such-partition"):
            pass
    with pytest.raises(ValueError, match="needs memory="):
        with gp.task("g", qos="guaranteed"):
            pass
    with pytest.raises(ValueError, match="timeout"):
        gp.task("x", timeout=-1)
    with pytest.raises(ValueError, match="memory"):
        gp.task("x", memory="lots")


def test_admission_rejects_with_who_holds_the_memory():
    part = gp.scheduler.partition(fresh(), memory="32MiB")
    with gp.task("hog", qos="guaranteed", partition=part, memory="24MiB"):
        with pytest.raises(gp.AdmissionError) as e:
            with gp.task("late", qos="guaranteed", partition=part, memory="16MiB", timeout=0):
                pass
        err = e.value
        assert err.task == "late" and err.asked == 16 * MiB and err.free == 8 * MiB
        assert err.holders == [("hog", "guaranteed", 24 * MiB)]
        assert "hog (guaranteed): 24.00 MiB" in str(err) and "timeout=0" in str(err)
    with pytest.raises(gp.AdmissionError, match="can never fit"):
        with gp.task("huge", qos="burstable", partition=part, memory="40MiB"):
            pass


def test_admission_waits_in_order_and_times_out():
    part = gp.scheduler.partition(fresh(), memory="32MiB")
    order: list[str] = []
    hog = gp.task("hog", qos="guaranteed", partition=part, memory="32MiB").admit()

    def run(name: str, qos: str) -> None:
        with gp.task(name, qos=qos, partition=part, memory="24MiB", timeout=10):  # one at a time
            order.append(name)
            time.sleep(0.02)

    b = threading.Thread(target=run, args=("b", "burstable"))
    b.start()
    time.sleep(0.05)
    g = threading.Thread(target=run, args=("g", "guaranteed"))
    g.start()
    time.sleep(0.05)
    assert [t.state for t in gp.scheduler.snapshot().tasks if t.name in ("b", "g")].count("pending") == 2
    assert len(gp.scheduler.snapshot().queue) == 2
    hog.complete()
    b.join()
    g.join()
    assert sorted(order) == ["b", "g"] and order[0] == "g"  # the higher tier first, though it came later
    with gp.task("hog2", qos="guaranteed", partition=part, memory="32MiB"):
        t0 = time.perf_counter()
        with pytest.raises(gp.AdmissionError, match="timed out"):
            with gp.task("w", qos="burstable", partition=part, memory="1MiB", timeout=0.1):
                pass
        assert 0.08 < time.perf_counter() - t0 < 5


def test_quota_errors_name_the_limit_and_reservations_are_kept():
    part = gp.scheduler.partition(fresh(), memory="16MiB")
    with gp.task("decode", qos="guaranteed", partition=part, memory="12MiB"):
        keep = gp.empty((12 * MiB,), gp.uint8)  # all of its reservation
        with pytest.raises(gp.OutOfMemoryError, match="the limit of task 'decode'"):
            gp.empty((512,), gp.uint8)
    del keep
    with gp.task("decode2", qos="guaranteed", partition=part, memory="12MiB"):
        with gp.task("batch", qos="best_effort", partition=part):
            a = gp.empty((4 * MiB,), gp.uint8)
            with pytest.raises(gp.OutOfMemoryError) as e:
                gp.empty((MiB,), gp.uint8)  # the rest is decode2's, unused but reserved
            assert "partition" in str(e.value) and "decode2 (guaranteed): 12.00 MiB" in str(e.value)
            assert e.value.requested == MiB and e.value.limit == 16 * MiB
            assert ("decode2", "guaranteed", 12 * MiB) in e.value.stats["holders"]
            del a


def test_evictable_arrays_spill_and_restore_byte_identical():
    part = gp.scheduler.partition(fresh(), memory="16MiB")
    rng = np.random.default_rng(0)
    host = rng.standard_normal(3 * MiB // 4).astype(np.float32)  # 3 MiB
    model = gp.task("idle-model", qos="best_effort", partition=part).admit().start()
    with gp.streams.Stream._wrap(model.stream.handle):
        w = gp.from_numpy(host, evictable=True)
        kv = gp.zeros((MiB // 4,), gp.float32, evictable=True)  # 1 MiB, used later: more recent
    assert isinstance(w, gp.EvictableArray) and w.resident
    model.pause()  # idle: its arrays may be spilled
    with gp.task("busy", qos="burstable", partition=part):
        big = gp.empty((13 * MiB,), gp.uint8)  # 3+1+13 > 16: the least recently used goes first
        assert not w.resident and kv.resident
        snap = gp.scheduler.snapshot()
        assert snap.eviction["evictions"] == 1 and snap.eviction["evicted_bytes"] == host.nbytes
        del big
    model.start()
    with gp.streams.Stream._wrap(model.stream.handle):
        np.testing.assert_array_equal(w.to_numpy(), host)  # restored on use, same bytes
        assert w.resident
        assert float((w * 2).sum().item()) == pytest.approx(float(host.astype(np.float64).sum() * 2), rel=1e-4)
    model.complete()
    assert gp.scheduler.snapshot().eviction["restores"] >= 1


def test_views_pin_evictable_arrays_and_running_tasks_keep_theirs():
    part = gp.scheduler.partition(fresh(), memory="4MiB")
    owner = gp.task("owner", qos="best_effort", partition=part).admit().start()
    with gp.streams.Stream._wrap(owner.stream.handle):
        a = gp.ones((MiB // 4,), gp.float32, evictable=True)
    view = a[10:20]
    owner.pause()
    with gp.task("other", qos="burstable", partition=part):
        with pytest.raises(gp.OutOfMemoryError):
            gp.empty((3 * MiB + MiB // 2,), gp.uint8)  # a is pinned by the view
        assert a.resident
        del view
        b = gp.empty((3 * MiB + MiB // 2,), gp.uint8)
        assert not a.resident
        del b
    with pytest.raises(gp.SchedulerError):
        owner.start()
        a.evict()  # a running task's array cannot be spilled
    owner.complete()


def test_evictable_needs_a_task_and_rejects_record_stream():
    with pytest.raises(ValueError, match="belong to a task"):
        gp.empty((10,), gp.float32, evictable=True)
    with gp.task("t"):
        a = gp.asarray(gp.arange(5, dtype=gp.float32), evictable=True)
        assert isinstance(a, gp.EvictableArray)
        np.testing.assert_array_equal(a.to_numpy(), np.arange(5, dtype=np.float32))
        with pytest.raises(TypeError, match="record_stream"):
            a.record_stream(gp.Stream())
        with pytest.raises(ValueError, match="always a new copy"):
            gp.asarray(a, copy=False, evictable=True)


def test_decorator_and_explicit_api():
    part = gp.scheduler.partition(fresh())

    @gp.task("step", qos="burstable", partition=part)
    def step(n: int) -> str:
        t = gp.scheduler.current_task()
        assert t is not None and t.name == "step"
        gp.empty((n,), gp.uint8)
        return t.state

    assert step(1024) == "running" and step(10) == "running"
    runs = [t for t in gp.scheduler.snapshot().tasks if t.name == "step" and t.partition == part.name]
    assert len(runs) == 2 and all(t.state == "completed" for t in runs)

    with pytest.raises(RuntimeError, match="boom"):
        with gp.task("fails", partition=part) as f:
            raise RuntimeError("boom")
    assert f.state == "failed" and "boom" in f.info().error


def test_streams_made_inside_a_task_are_charged_to_it():
    part = gp.scheduler.partition(fresh())
    with gp.task("t", partition=part) as t:
        s = gp.Stream()
        with s:
            x = gp.empty((MiB,), gp.uint8)
        assert t.info().used == MiB
        del x
        assert t.info().used == 0
        with gp.task("inner", partition=part) as inner:  # a nested task has a stream of its own
            assert inner.stream.handle != t.stream.handle
            y = gp.empty((MiB,), gp.uint8)
            assert inner.info().used == MiB and t.info().used == 0
            del y


def test_snapshot_json_and_pacing_settings():
    part = gp.scheduler.partition(fresh(), memory="1GiB", compute=0.25)
    with gp.task("be", qos="best_effort", partition=part) as t:
        gp.arange(1000, dtype=gp.float32) + 1  # launches on the CUDA backend
        snap = gp.scheduler.snapshot()
        doc = json.loads(snap.to_json())
        me = next(x for x in doc["tasks"] if x["id"] == t.id)
        assert me["qos"] == "best_effort" and me["partition"] == part.name and me["state"] == "running"
        assert {p["name"] for p in doc["partitions"]} >= {"default", part.name}
        assert doc["pacing"] == gp.scheduler.pacing()
        assert "allocated_bytes" in doc["pool"]
        if gp.info().backend == "cuda":
            assert me["launches"] >= 1
            assert t.sm_budget == max(1, round(0.25 * gp._runtime.get().props["multiprocessor_count"]))
    old = gp.scheduler.pacing()
    gp.scheduler.set_pacing(idle_window=4, contended_window=0, max_hold_us=1000)
    assert gp.scheduler.pacing() == {"idle_window": 4, "contended_window": 0, "max_hold_us": 1000}
    gp.scheduler.set_pacing(**old)
    with pytest.raises(ValueError):
        gp.scheduler.set_pacing(idle_window=0)
    with pytest.raises(ValueError):
        gp.scheduler.set_pacing(contended_window=-1)


def test_capacity_bounds_reservations():
    keep = gp.empty((MiB,), gp.uint8)  # something committed outside tasks
    snap = gp.scheduler.snapshot()
    old = snap.capacity
    gp.scheduler.set_capacity(snap.committed + 8 * MiB)
    try:
        with pytest.raises(gp.AdmissionError, match="capacity"):
            with gp.task("g", qos="guaranteed", memory="16MiB", timeout=0):
                pass
        with pytest.raises(ValueError, match="below what is committed"):
            gp.scheduler.set_capacity(snap.committed - 1)
    finally:
        gp.scheduler.set_capacity(old)
    del keep


def test_asyncio_tasks_run_concurrently_each_on_its_stream():
    part = gp.scheduler.partition(fresh(), memory="64MiB")
    seen: dict[str, int] = {}

    async def model(name: str, n: int) -> float:
        async with gp.task(name, qos="burstable", partition=part) as t:
            x = gp.arange(n, dtype=gp.float64)
            await asyncio.sleep(0.01)  # the other coroutine runs here
            assert gp.scheduler.current_task() is t  # each coroutine keeps its own task and stream
            seen[name] = gp.streams.current_stream_handle()
            assert seen[name] == t.stream.handle
            return float(x.sum().item())

    async def main() -> list[float]:
        return await asyncio.gather(model("a", 100), model("b", 1000))

    assert asyncio.run(main()) == [4950.0, 499500.0]
    assert seen["a"] != seen["b"]


def test_admission_in_asyncio_does_not_block_the_loop():
    part = gp.scheduler.partition(fresh(), memory="16MiB")
    events: list[str] = []

    async def waiter() -> None:
        async with gp.task("w", qos="guaranteed", partition=part, memory="16MiB", timeout=5):
            events.append("admitted")

    async def main() -> None:
        hog = gp.task("hog", qos="guaranteed", partition=part, memory="16MiB").admit()
        w = asyncio.create_task(waiter())
        for _ in range(5):
            await asyncio.sleep(0.01)
            events.append("tick")  # the loop runs while w waits
        hog.complete()
        await w

    asyncio.run(main())
    assert events[:5] == ["tick"] * 5 and events[-1] == "admitted"


def test_top_renders_published_snapshots(tmp_path, capsys):
    from pygpukit import cli, top

    with gp.task("shown", qos="burstable"):
        path = sch.publish_once(tmp_path)
        assert path.name.endswith(".json")
    docs = top.collect(tmp_path)
    assert len(docs) == 1 and any(t["name"] == "shown" for t in docs[0]["snapshot"]["tasks"])
    (tmp_path / "999999999.json").write_text(json.dumps({"pid": 999999999, "time": 0, "snapshot": {}}))
    assert len(top.collect(tmp_path)) == 1 and not (tmp_path / "999999999.json").exists()  # dead process forgotten
    assert cli.main(["top", "--once", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "shown" in out and "PARTITION" in out and "default" in out
    assert cli.main(["top", "--json", "--dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["pid"] > 0


_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}"""


@pytest.mark.gpu
def test_best_effort_launches_wait_for_guaranteed_work():
    if gp.info().backend != "cuda":
        pytest.skip("pacing needs the CUDA backend")
    spin = gp.jit(_SPIN, "spin")
    spin(1, 1, 1)
    gp.arange(1000, dtype=gp.float32) + 1  # kernels loaded before: the ~20 ms window must not go to first-use costs
    gp.synchronize()
    cycles = int(gp._runtime.get().props["clock_rate_khz"]) * 1000 // 50  # ~20 ms
    old = gp.scheduler.pacing()
    gp.scheduler.set_pacing(idle_window=8, contended_window=0, max_hold_us=2_000_000)
    try:
        with gp.task("g", qos="guaranteed", memory="1MiB") as g:
            assert g.stream.priority == gp.Stream.priority_range()[1]  # the highest priority
            with gp.task("be", qos="best_effort") as be:
                assert be.stream.priority == gp.Stream.priority_range()[0]
                spin(1, 1, cycles, stream=g.stream)  # the guaranteed stream is busy for ~20 ms
                t0 = time.perf_counter()
                x = gp.arange(1000, dtype=gp.float32)  # held at the gate until the guaranteed stream drains
                held = time.perf_counter() - t0
                y = x + 1
                np.testing.assert_array_equal(y.to_numpy(), np.arange(1000, dtype=np.float32) + 1)
                info = be.info()
                assert info.waits >= 1 and info.launches >= 2 and held > 0.005
                assert info.wait_ns > 5e6
            assert be.counters is not None and be.counters["launches"] == info.launches
    finally:
        gp.scheduler.set_pacing(**old)


@pytest.mark.gpu
def test_best_effort_matmul_is_paced_and_correct():
    if gp.info().backend != "cuda":
        pytest.skip("needs the CUDA backend")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((256, 192)).astype(np.float32)
    b = rng.standard_normal((192, 128)).astype(np.float32)
    part = gp.scheduler.partition(fresh("batch"), compute=0.5)
    with gp.task("be-mm", qos="best_effort", partition=part) as t:
        c = gp.from_numpy(a) @ gp.from_numpy(b)
        np.testing.assert_allclose(c.to_numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        assert t.sm_budget is not None and t.info().launches >= 1


def test_transfers_are_charged_to_the_consumer_task():
    part = gp.scheduler.partition(fresh(), memory="8MiB")
    host = np.arange(MiB, dtype=np.uint8)
    with gp.task("loader", partition=part) as t:
        a, tr = gp.transfer.to_device(host)
        tr.wait()
        assert t.info().used == MiB
        np.testing.assert_array_equal(a.to_numpy(), host)
        with pytest.raises(gp.OutOfMemoryError, match="partition"):
            gp.transfer.to_device(np.zeros(8 * MiB, np.uint8))
        del a, tr  # the transfer holds its destination too
        assert t.info().used == 0


def test_transfer_priority_follows_the_tier_and_copy_streams_are_shared():
    host = np.ones(4096, np.float32)
    for qos, want in (("guaranteed", "high"), ("burstable", "normal"), ("best_effort", "low")):
        with gp.task(f"io-{qos}", qos=qos, memory="1MiB" if qos == "guaranteed" else None) as t:
            a, tr = gp.transfer.to_device(host)
            assert tr.priority == want
            np.testing.assert_array_equal(a.to_numpy(), host)
            assert len(t.info().streams) == 1  # the engine's copy streams are nobody's
    _, tr = gp.transfer.to_device(host)
    assert tr.priority == "normal"
