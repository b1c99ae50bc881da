"""The Rust pool behind every array: stats, reuse, limits, threads."""

import threading

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _runtime


def driver_alloc_calls() -> int:
    rt = _runtime.get()
    if rt.backend == "cuda":
        return rt.native.stats()["mem_alloc_calls"]
    from pygpukit import _rt

    return _rt.host_table_stats()["mem_alloc_calls"]


def test_stats_move_with_arrays():
    before = gp.memory.stats()
    a = gp.empty((1 << 20,), gp.float32)
    mid = gp.memory.stats()
    assert mid["allocated_bytes"] >= before["allocated_bytes"] + a.nbytes
    assert mid["num_alloc_calls"] == before["num_alloc_calls"] + 1
    assert mid["peak_allocated_bytes"] >= mid["allocated_bytes"]
    del a
    after = gp.memory.stats()
    assert after["allocated_bytes"] == before["allocated_bytes"]
    assert after["reserved_bytes"] >= after["allocated_bytes"]


def test_pool_hands_out_the_real_memory_and_reuses_it():
    gp.memory.empty_cache()
    drv0 = driver_alloc_calls()
    st0 = gp.memory.stats()
    ptrs = set()
    for i in range(500):
        a = gp.full((1000 + i,), float(i), gp.float32)
        assert a.to_numpy()[-1] == float(i)
        ptrs.add(a.data_ptr)
        del a
    st1 = gp.memory.stats()
    assert st1["num_alloc_calls"] - st0["num_alloc_calls"] >= 500
    # cached blocks are reused: a handful of driver allocations for 500 arrays
    assert driver_alloc_calls() - drv0 <= 5
    assert st1["num_driver_allocs"] - st0["num_driver_allocs"] <= 5
    assert len(ptrs) < 50


def test_empty_cache_releases_segments():
    # Start without cached pages, so that the block is new memory: a segment
    # of its own, or (expandable segments) pages mapped for it alone.
    gp.memory.empty_cache()
    a = gp.empty((64 << 20,), gp.uint8)
    del a
    before = gp.memory.stats()
    assert before["cached_bytes"] >= 64 << 20
    gp.memory.empty_cache()
    after = gp.memory.stats()
    assert after["reserved_bytes"] <= before["reserved_bytes"] - (64 << 20)
    assert after["num_driver_frees"] > before["num_driver_frees"]
    assert after["allocated_bytes"] == before["allocated_bytes"]


def test_out_of_memory_with_limit():
    gp.memory.empty_cache()
    keep = gp.zeros((1 << 20,), gp.uint8)
    limit = gp.memory.stats()["reserved_bytes"] + (64 << 20)
    gp.memory.set_limit(limit)
    try:
        assert gp.memory.get_limit() == limit
        with pytest.raises(gp.OutOfMemoryError) as info:
            gp.empty((256 << 20,), gp.uint8)
        err = info.value
        assert err.requested == 256 << 20
        assert err.limit == limit
        assert "256.00 MiB" in str(err) and "limit" in str(err)
        assert "allocated_bytes" in err.stats
        assert isinstance(err, MemoryError)
        # the pool still works after an OOM, below the limit
        ok = gp.ones((8 << 20,), gp.uint8)
        assert ok.sum().item() == 8 << 20
        assert gp.memory.stats()["num_ooms"] >= 1
    finally:
        gp.memory.set_limit(None)
    assert gp.memory.get_limit() is None
    del keep


def test_available_bytes_is_free_plus_cached_within_the_limit():
    if gp.backend() != "cuda":
        assert gp.memory.available_bytes() is None
        return
    a = gp.empty((1 << 20,), gp.float32)
    free = gp.memory.available_bytes()
    assert 0 < free <= gp.info().free_memory + gp.memory.stats()["cached_bytes"]
    try:
        gp.memory.set_limit(gp.memory.stats()["allocated_bytes"] + (8 << 20))
        assert gp.memory.available_bytes() == 8 << 20
    finally:
        gp.memory.set_limit(None)
    del a


def test_set_limit_validates():
    with pytest.raises(ValueError):
        gp.memory.set_limit("lots")
    with pytest.raises(ValueError):
        gp.memory.set_limit(-5)


def test_two_threads_allocate_and_free_concurrently():
    errors = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                n = int(rng.integers(1, 50_000))
                host = rng.standard_normal(n).astype(np.float32)
                a = gp.from_numpy(host)
                b = a + 1.0
                np.testing.assert_array_equal(b.to_numpy(), host + np.float32(1.0))
        except Exception as exc:  # surfaced below with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_reset_peak_stats():
    a = gp.empty((1 << 22,), gp.uint8)
    del a
    gp.memory.reset_peak_stats()
    st = gp.memory.stats()
    assert st["peak_allocated_bytes"] == st["allocated_bytes"]


# ----- expandable segments ----------------------------------------------------

MIB = 1 << 20


def _table():
    rt = _runtime.get()
    from pygpukit import _rt

    return rt.native.driver_table() if rt.backend == "cuda" else _rt.host_table()


def _private_pool(**kwargs):
    from pygpukit import _rt

    return _rt.Pool(_table(), **kwargs)


def test_stats_report_fragmentation_and_expandable_segments():
    keep = gp.ones((3 * MIB,), gp.uint8)
    st = gp.memory.stats()
    assert st["fragmentation_bytes"] == st["reserved_bytes"] - st["allocated_bytes"]
    assert st["largest_free_block"] <= st["cached_bytes"]
    assert isinstance(st["expandable_segments"], bool)
    if st["expandable_segments"]:
        assert st["num_expandable_segments"] >= 1
        assert 3 * MIB <= st["expandable_mapped_bytes"] <= st["expandable_virtual_bytes"]
    else:
        assert st["expandable_mapped_bytes"] == st["expandable_virtual_bytes"] == 0
    del keep


def test_expandable_segments_setting(monkeypatch):
    from pygpukit import _rt

    assert _private_pool(expandable=False).expandable is False
    monkeypatch.setenv("PYGPUKIT_EXPANDABLE_SEGMENTS", "0")
    assert _private_pool().expandable is False
    monkeypatch.setenv("PYGPUKIT_EXPANDABLE_SEGMENTS", "sometimes")
    with pytest.raises(ValueError, match="PYGPUKIT_EXPANDABLE_SEGMENTS"):
        _private_pool()
    monkeypatch.delenv("PYGPUKIT_EXPANDABLE_SEGMENTS")
    # The host table always emulates virtual memory.
    assert _rt.Pool(_rt.host_table()).expandable is True


def _big_after_small_frees(expandable: bool) -> bool:
    """20 blocks of 2 MiB, every other one freed, then 16 MiB under a 48 MiB
    limit: fits only if the freed pieces can be given back."""
    pool = _private_pool(limit=48 * MIB, expandable=expandable)
    if pool.expandable != expandable:
        pytest.skip("the device has no virtual memory management")
    blocks = [pool.alloc(2 * MIB) for _ in range(20)]
    del blocks[1::2]
    try:
        big = pool.alloc(16 * MIB)
    except gp.OutOfMemoryError:
        return False
    st = pool.stats()
    assert st["allocated_bytes"] == 10 * 2 * MIB + 16 * MIB
    assert st["reserved_bytes"] <= 48 * MIB
    del big
    return True


def test_large_request_after_small_frees_needs_expandable_segments():
    assert _big_after_small_frees(expandable=True)
    assert not _big_after_small_frees(expandable=False)


@pytest.mark.skipif(_runtime.get().backend != "cpu", reason="host table counters")
def test_empty_cache_returns_host_pages():
    from pygpukit import _rt

    pool = _rt.Pool(_rt.host_table(), expandable=True)
    mapped0 = _rt.host_table_stats()["vmm_mapped_bytes"]
    keep = pool.alloc(MIB)
    blocks = [pool.alloc(8 * MIB) for _ in range(4)]
    assert _rt.host_table_stats()["vmm_mapped_bytes"] - mapped0 == 34 * MIB
    del blocks[1:3]  # a hole in the middle of the segment
    pool.empty_cache()
    st = pool.stats()
    assert st["reserved_bytes"] == 18 * MIB
    assert _rt.host_table_stats()["vmm_mapped_bytes"] - mapped0 == 18 * MIB
    del keep, blocks
    pool.empty_cache()
    assert pool.stats()["reserved_bytes"] == 0
    assert pool.stats()["expandable_virtual_bytes"] == 0
    assert _rt.host_table_stats()["vmm_mapped_bytes"] == mapped0


@pytest.mark.gpu
def test_gpu_expandable_pool_is_the_default_and_gives_memory_back():
    rt = _runtime.get()
    assert gp.memory.stats()["expandable_segments"], "H100/H200 support virtual memory"
    gp.full((MIB,), 1.0, gp.float32).sum().item()  # load the kernels first (modules take device memory)
    gp.memory.empty_cache()
    free0 = rt.native.mem_get_info()[0]
    arrays = [gp.full((MIB,), float(i), gp.float32) for i in range(64)]  # 4 MiB each
    del arrays[::2]
    big = gp.full((48 * MIB // 4,), 2.0, gp.float32)
    assert big.sum().item() == 2.0 * big.size
    for i, a in zip(range(1, 64, 2), arrays):
        assert a[-1].item() == float(i)
    del arrays, big
    gp.memory.empty_cache()
    st = gp.memory.stats()
    assert st["expandable_mapped_bytes"] <= st["reserved_bytes"]
    # Every page the test mapped went back to the device.
    assert rt.native.mem_get_info()[0] >= free0 - 4 * MIB


# ----- memory history ---------------------------------------------------------


def _trace():
    snap = gp.memory.snapshot()
    return snap["device_traces"][_runtime.get().pool.device]


def test_record_history_traces_a_scripted_sequence(tmp_path):
    import pickle

    gp.memory.record_history(max_entries=1000)
    try:
        a = gp.empty((1000,), gp.float32)  # 4000 B -> a 4096-byte block
        b = gp.empty((3 * MIB,), gp.uint8)
        pa, pb = a.data_ptr, b.data_ptr
        del a
        path = tmp_path / "snap.pickle"
        gp.memory.dump_snapshot(path)
    finally:
        gp.memory.record_history(False)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert set(snap) >= {"segments", "device_traces"}
    trace = snap["device_traces"][_runtime.get().pool.device]
    ours = [(e["action"], e["addr"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested", "free_completed")]
    assert ours == [
        ("alloc", pa, 4096),
        ("alloc", pb, 3 * MIB),
        ("free_requested", pa, 4096),
        ("free_completed", pa, 4096),
    ]
    for e in trace:
        assert set(e) >= {"action", "size", "stream", "time_us", "frames"}
        if e["action"] != "oom":
            assert "addr" in e
    alloc_a = next(e for e in trace if e["action"] == "alloc")
    here = [f for f in alloc_a["frames"] if f["filename"] == __file__]
    assert here and here[0]["name"] == "test_record_history_traces_a_scripted_sequence"
    assert all(set(f) == {"filename", "line", "name"} for f in alloc_a["frames"])
    # The live block b is in a segment, with the stack of its allocation.
    found = False
    for seg in snap["segments"]:
        assert set(seg) >= {"device", "address", "total_size", "allocated_size", "active_size", "stream", "segment_type", "blocks"}
        assert seg["segment_type"] in ("small", "large")
        addr = seg["address"]
        for blk in seg["blocks"]:
            assert blk["address"] == addr  # blocks tile the segment
            addr += blk["size"]
            assert blk["state"] in ("active_allocated", "active_pending_free", "inactive")
            if blk["address"] == pb:
                found = True
                assert blk["state"] == "active_allocated" and blk["requested_size"] == 3 * MIB
                assert any(f["filename"] == __file__ for f in blk["frames"])
        assert addr == seg["address"] + seg["total_size"]
        assert seg["allocated_size"] == sum(x["size"] for x in seg["blocks"] if x["state"] == "active_allocated")
    assert found
    del b


def test_record_history_stop_ring_and_options():
    gp.memory.record_history(max_entries=4, stacks=False)
    assert _runtime.get().pool.recording
    for _ in range(5):
        del_me = gp.empty((10,), gp.float32)
        del del_me
    gp.memory.record_history(False)
    assert not _runtime.get().pool.recording
    trace = _trace()
    assert len(trace) == 4, "the ring keeps the newest entries"
    assert all(e["frames"] == [] for e in trace), "stacks=False records no frames"
    keep = gp.empty((10,), gp.float32)  # not recorded after the stop
    assert len(_trace()) == 4
    with pytest.raises(ValueError, match="max_entries"):
        gp.memory.record_history(max_entries=0)
    with pytest.raises(TypeError, match="max_entries"):
        gp.memory.record_history(max_entries="many")  # type: ignore[arg-type]
    del keep


def test_record_history_records_oom():
    gp.memory.record_history()
    gp.memory.set_limit(gp.memory.stats()["reserved_bytes"] + 4 * MIB)
    try:
        with pytest.raises(gp.OutOfMemoryError):
            gp.empty((512 * MIB,), gp.uint8)
    finally:
        gp.memory.set_limit(None)
        gp.memory.record_history(False)
    oom = [e for e in _trace() if e["action"] == "oom"]
    assert oom and oom[-1]["size"] == 512 * MIB and oom[-1]["device_free"] > 0
