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
    a = gp.empty((64 << 20,), gp.uint8)  # large enough for a segment of its own
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
