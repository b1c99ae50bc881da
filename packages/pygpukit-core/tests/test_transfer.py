import asyncio
import threading

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import ALL_DTYPES, random_array
from pygpukit.benchmark import Recorder

CHUNK = 4096


@pytest.fixture
def small_chunks():
    """An engine of 3 x 4 KiB buffers, so that small arrays take many chunks."""
    cfg = gp.transfer.configure(chunk_bytes=CHUNK, staging_buffers=3, copy_threads=2)
    yield cfg
    gp.transfer.configure()


def _bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


@pytest.mark.parametrize("dtype", ALL_DTYPES + [gp.complex64, gp.complex128])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (1023,), (3, 4097), (2, 3, 1367)])
def test_round_trip_is_byte_identical(small_chunks, rng, dtype, shape):
    x = random_array(rng, shape, dtype) if np.dtype(dtype).kind != "c" else (rng.standard_normal(shape) + 1j).astype(dtype)
    a, t = gp.transfer.to_device(x)
    assert isinstance(a, gp.GPUArray) and a.shape == x.shape and a.dtype == x.dtype
    assert t.result is a and t.direction == "h2d" and t.nbytes == x.nbytes
    assert t.chunks == -(-x.nbytes // CHUNK)
    t.wait()
    assert t.done()
    assert _bytes(a.to_numpy()) == _bytes(x)
    back = gp.transfer.to_host(a)
    assert back.done() and back.direction == "d2h" and back.chunks == t.chunks
    assert back.result.shape == x.shape and back.result.dtype == x.dtype
    assert _bytes(back.result) == _bytes(x)


def test_nan_payloads_survive(small_chunks):
    x = np.array([0x7FC00001, 0xFFC12345, 0x7F800001] * 2000, np.uint32).view(np.float32)
    a, _ = gp.transfer.to_device(x)
    assert _bytes(gp.transfer.to_host(a).result) == _bytes(x)


def test_source_may_change_once_to_device_returns(small_chunks, rng):
    x = rng.standard_normal(10_000).astype(np.float32)
    keep = x.copy()
    a, t = gp.transfer.to_device(x)
    x[:] = -1.0
    t.wait()
    np.testing.assert_array_equal(a.to_numpy(), keep)


def test_to_host_fills_out_and_copies_views(small_chunks, rng):
    x = rng.standard_normal((64, 33)).astype(np.float64)
    a = gp.from_numpy(x)
    out = np.full((33, 64), np.nan)
    t = gp.transfer.to_host(a.T, out=out, priority="high")
    assert t.result is out and t.priority == "high"
    np.testing.assert_array_equal(out, x.T)
    np.testing.assert_array_equal(gp.transfer.to_host(a[::2, 1:]).result, x[::2, 1:])


def test_bad_arguments_raise_typed_errors(small_chunks):
    x = np.arange(100, dtype=np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        gp.transfer.to_device(x[::2])
    with pytest.raises(TypeError, match=r"numpy\.ndarray"):
        gp.transfer.to_device([1.0, 2.0])
    with pytest.raises(ValueError, match="'high', 'normal' or 'low'"):
        gp.transfer.to_device(x, priority="urgent")
    with pytest.raises(TypeError, match=r"stream must be a pygpukit\.Stream"):
        gp.transfer.to_device(x, stream=3)
    a = gp.from_numpy(x)
    with pytest.raises(TypeError, match="GPUArray"):
        gp.transfer.to_host(x)
    with pytest.raises(ValueError, match="'high', 'normal' or 'low'"):
        gp.transfer.to_host(a, priority="bulk")
    with pytest.raises(ValueError, match=r"shape \(100,\) and dtype float32"):
        gp.transfer.to_host(a, out=np.empty(99, np.float32))
    with pytest.raises(ValueError, match=r"shape \(100,\) and dtype float32"):
        gp.transfer.to_host(a, out=np.empty(100, np.float64))
    ro = np.empty(100, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable C-contiguous"):
        gp.transfer.to_host(a, out=ro)
    with pytest.raises(TypeError, match=r"out must be a numpy\.ndarray"):
        gp.transfer.to_host(a, out=[0.0] * 100)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"chunk_bytes": 0}, "chunk_bytes must be > 0"),
        ({"staging_buffers": 0}, "staging_buffers must be in 1..=64"),
        ({"copy_threads": 65}, "copy_threads must be in 1..=64"),
        ({"chunk_bytes": 1 << 30, "staging_buffers": 8}, "at most"),
    ],
)
def test_configure_rejects_bad_sizes(kwargs, message):
    before = gp.transfer.stats()
    with pytest.raises(ValueError, match=message):
        gp.transfer.configure(**kwargs)
    # The engine in place is kept.
    assert gp.transfer.stats()["chunk_bytes"] == before["chunk_bytes"]


def test_configure_and_stats(rng):
    try:
        cfg = gp.transfer.configure(chunk_bytes=1000, staging_buffers=2, copy_threads=1)
        assert cfg == {"chunk_bytes": 1000, "staging_buffers": 2, "copy_threads": 1}
        s0 = gp.transfer.stats()
        assert s0["h2d_transfers"] == 0 and s0["staging_bytes"] == 0  # allocated at first use
        x = rng.standard_normal(1000).astype(np.float32)  # 4000 bytes: 4 chunks
        a, _ = gp.transfer.to_device(x)
        gp.transfer.to_host(a)
        s = gp.transfer.stats()
        assert (s["h2d_transfers"], s["h2d_bytes"], s["d2h_transfers"], s["d2h_bytes"]) == (1, 4000, 1, 4000)
        assert s["chunks"] == 8 and s["staging_bytes"] == 2000
        assert s["busy_s"] > 0 and s["host_copy_s"] > 0 and s["wait_s"] >= 0 and s["staging_waits"] >= 0
    finally:
        gp.transfer.configure()


def test_transfers_from_several_threads(small_chunks):
    errors = []

    def work(seed: int) -> None:
        r = np.random.default_rng(seed)
        try:
            for i in range(5):
                x = r.integers(0, 255, size=CHUNK * 3 + seed * 17 + i, dtype=np.uint8)
                a, t = gp.transfer.to_device(x, priority=("high", "normal", "low")[seed % 3])
                t.wait()
                if _bytes(gp.transfer.to_host(a).result) != _bytes(x):
                    errors.append((seed, i))
        except Exception as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []


def test_await_transfer(small_chunks, rng):
    x = rng.standard_normal(5000)

    async def main():
        a, t = gp.transfer.to_device(x)
        await t
        return a

    np.testing.assert_array_equal(asyncio.run(main()).to_numpy(), x)


def test_from_numpy_is_unchanged_for_large_arrays(rng):
    x = rng.standard_normal((gp.transfer.ENGINE_THRESHOLD // 8) + 3)
    np.testing.assert_array_equal(gp.from_numpy(x).to_numpy(), x)


def test_transfer_benchmark_suite_runs(monkeypatch):
    from pygpukit.benchmark import transfer as bench

    monkeypatch.setattr(bench, "CPU_MIB", 4)
    rec = Recorder("cpu")
    bench.bench_transfer(rec, quick=True)
    benches = {(r.bench.split("_")[0], r.impl) for r in rec.records if r.bench.endswith("MiB_pageable")}
    assert {("h2d", "pygpukit"), ("h2d", "direct"), ("d2h", "pygpukit")} <= benches  # sizes differ on a GPU
    assert all(r.value > 0 for r in rec.records)


# ----- GPU -----------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_large_round_trip_and_from_numpy_path(rng):
    x = rng.standard_normal(1 << 24).astype(np.float32)  # 64 MiB: 8 chunks
    before = gp.transfer.stats()
    a = gp.from_numpy(x)
    mid = gp.transfer.stats()
    assert mid["h2d_transfers"] == before["h2d_transfers"] + 1
    small = gp.from_numpy(x[:1000])
    assert gp.transfer.stats()["h2d_transfers"] == mid["h2d_transfers"]
    np.testing.assert_array_equal(small.to_numpy(), x[:1000])
    np.testing.assert_array_equal(gp.transfer.to_host(a).result, x)


@pytest.mark.gpu
def test_gpu_consumer_waits_for_the_copy_and_copy_waits_for_the_producer(rng):
    x = rng.standard_normal(1 << 24).astype(np.float32)
    a, t = gp.transfer.to_device(x)
    b = a * 2  # queued at once on the current stream, which waits on the device
    np.testing.assert_array_equal(gp.transfer.to_host(b).result, x * 2)
    c = (a + 1) * 3  # the copy stream must wait for this before reading c
    np.testing.assert_array_equal(gp.transfer.to_host(c).result, (x + 1) * 3)
    other = gp.Stream()
    t.stream_wait(other)
    with other:
        d = a - 1
    np.testing.assert_array_equal(gp.transfer.to_host(d, stream=other).result, x - 1)


@pytest.mark.gpu
def test_gpu_freed_destinations_are_not_overwritten_under_running_kernels(rng):
    # Each array is freed while the kernels reading it may still be queued; the
    # next transfer must not land in its block before they ran. x * 1 + 0 is
    # exact, so every result must equal its source.
    xs = [rng.standard_normal(1 << 22).astype(np.float32) for _ in range(4)]
    outs = []
    for x in xs * 3:
        a, _ = gp.transfer.to_device(x)
        y = a
        for _ in range(20):
            y = y * 1.0 + 0.0
        outs.append(y)
        del a, y
    for x, y in zip(xs * 3, outs):
        np.testing.assert_array_equal(y.to_numpy(), x)


_SPIN = """
extern "C" __global__ void spin(long long cycles, int* out) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    out[0] = 1;
}
"""


@pytest.mark.gpu
def test_gpu_copy_overlaps_compute_queued_before_it(rng):
    # A kernel of about 0.5 s on the compute stream; a 64 MiB copy issued after
    # it must finish while it still runs (no hidden dependency on that stream),
    # and work queued after the copy on the compute stream waits for both.
    x = rng.standard_normal(1 << 24).astype(np.float32)
    spin = gp.jit(_SPIN, "spin")
    flag = gp.zeros(1, gp.int32)
    spin(1, 1, 1 << 30, flag)  # ~0.5 s at 2 GHz
    kernel_done = gp.Event().record()
    a, t = gp.transfer.to_device(x)
    t.wait()
    assert not kernel_done.query(), "the copy waited for the compute stream"
    np.testing.assert_array_equal((a + 0).to_numpy(), x)
    assert kernel_done.query()


@pytest.mark.gpu
def test_gpu_priorities_choose_the_copy_stream(rng):
    x = rng.standard_normal(1 << 20).astype(np.float32)
    _, hi = gp.transfer.to_device(x, priority="high")
    _, lo = gp.transfer.to_device(x, priority="low")
    _, no = gp.transfer.to_device(x, priority="normal")
    assert hi._t.stream != lo._t.stream and lo._t.stream == no._t.stream


@pytest.mark.gpu
def test_gpu_await_transfer(rng):
    x = rng.standard_normal(1 << 25).astype(np.float32)  # 128 MiB

    async def main():
        a, t = gp.transfer.to_device(x, priority="high")
        await t
        return a, t.done()

    a, done = asyncio.run(main())
    assert done
    np.testing.assert_array_equal(a.to_numpy(), x)
