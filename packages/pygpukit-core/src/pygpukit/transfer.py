"""Asynchronous host <-> device copies through the Rust transfer engine.

``to_device(x)`` copies a NumPy array chunk by chunk into pinned staging
buffers and DMAs each chunk on a dedicated copy stream while the next one is
copied on the host, so the host copy overlaps the DMA and the copy overlaps
compute already queued on other streams. It returns the GPUArray at once
(the target stream waits for the copy on the device, no host
synchronization) and a :class:`Transfer` to wait for or await. ``to_host``
is the reverse; it returns when the data is on the host. Priorities
("high", "normal", "low") choose the copy stream (high-priority stream for
"high") and the order in which threads get staging buffers; by default the
current task's tier decides (guaranteed: high, best effort: low, else normal).

``gp.from_numpy`` uses the engine for arrays of at least ``ENGINE_THRESHOLD``
bytes on CUDA. On the CPU backend the same engine runs over host memory and
every transfer is complete when it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import numpy as np

from . import _context, _dtypes, _runtime, scheduler
from ._errors import GraphCaptureError
from .array import GPUArray
from .streams import Stream, check_not_capturing, current_stream_handle, poll_until

__all__ = ["ENGINE_THRESHOLD", "Transfer", "configure", "stats", "to_device", "to_host"]

#: ``gp.from_numpy`` sends arrays of at least this many bytes through the
#: engine (CUDA only); smaller ones take one cuMemcpyHtoDAsync, which costs
#: less than a stream wait and an event.
ENGINE_THRESHOLD = 4 << 20

_lock = threading.Lock()
_engine: Any = None  # the _rt.TransferEngine
_copy_streams: tuple[Stream, Stream] | None = None  # (high, low); live as long as the process


class Transfer:
    """One transfer. ``result`` is the GPUArray (to_device) or ndarray (to_host).

    ``done()`` never blocks; ``wait()`` blocks the calling thread (not the
    others: the GIL is released); ``await transfer`` polls without blocking
    the event loop; ``stream_wait(stream)`` makes device work wait for it.
    """

    __slots__ = ("_t", "result")

    def __init__(self, t: Any, result: Any) -> None:
        self._t = t
        self.result = result

    @property
    def nbytes(self) -> int:
        return int(self._t.nbytes)

    @property
    def chunks(self) -> int:
        return int(self._t.chunks)

    @property
    def direction(self) -> str:
        """Either "h2d" or "d2h"."""
        return str(self._t.direction)

    @property
    def priority(self) -> str:
        return str(self._t.priority)

    @property
    def event(self) -> int:
        """Handle of the event recorded on the copy stream after the last chunk."""
        return int(self._t.event)

    def done(self) -> bool:
        """True once every byte has arrived."""
        return bool(self._t.done())

    def wait(self) -> None:
        """Block until every byte has arrived."""
        self._t.wait()

    def stream_wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (default: the current stream) wait for
        this transfer, on the device: the host does not wait."""
        rt = _runtime.get()
        if rt.backend == "cuda":
            rt.native.stream_wait_event(current_stream_handle() if stream is None else _handle(stream), self.event)

    def __await__(self) -> Generator[Any, None, None]:
        return poll_until(self.done).__await__()

    def __repr__(self) -> str:
        return f"<pygpukit.transfer.Transfer {self.direction} {self.nbytes} bytes, {self.chunks} chunks, {self.priority}>"


def _handle(stream: Any) -> int:
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a pygpukit.Stream or None, got {type(stream).__name__}")
    return stream.handle


def configure(chunk_bytes: int | None = None, staging_buffers: int | None = None, copy_threads: int | None = None) -> dict:
    """Replace the engine by one with these sizes (None: the default, 8 MiB x 4
    buffers, up to 4 host copy threads) and return its config. Pinned staging
    memory is allocated at the first transfer; transfers still in flight keep
    the old engine alive until they are dropped."""
    global _engine, _copy_streams
    from . import _rt  # the native modules load on first use, not with `import pygpukit`

    rt = _runtime.get()
    with _lock:
        if rt.backend == "cuda":
            if _copy_streams is None:
                low, high = Stream.priority_range()
                with scheduler.outside_tasks():  # shared by every task
                    _copy_streams = (Stream(priority=high), Stream(priority=low))
                for s in _copy_streams:
                    s._owned = False  # never destroyed: pool blocks live on them
            table, high_h, low_h = rt.native.driver_table(), _copy_streams[0].handle, _copy_streams[1].handle
        else:
            table, high_h, low_h = _rt.host_table(), 0, 0
        _engine = _rt.TransferEngine(table, high_h, low_h, chunk_bytes, staging_buffers, copy_threads)
        return dict(_engine.config)


def _get() -> Any:
    engine = _engine
    if engine is None:
        configure()
        engine = _engine
    return engine


def stats() -> dict:
    """The engine's counters and config: h2d/d2h transfers and bytes, chunks,
    staging_waits (a buffer was still in use: the DMA was the bottleneck),
    staging_bytes, and host times in seconds: busy (inside transfer calls),
    host_copy (pageable <-> pinned copies) and wait (for staging buffers)."""
    engine = _get()
    raw = dict(engine.stats())
    out: dict[str, Any] = {k: v for k, v in raw.items() if not k.endswith("_ns")}
    for k in ("busy", "host_copy", "wait"):
        out[f"{k}_s"] = raw[f"{k}_ns"] * 1e-9
    out.update(engine.config)
    return out


def to_device(array: np.ndarray, priority: str | None = None, stream: Stream | None = None) -> tuple[GPUArray, Transfer]:
    """Copy a C-contiguous NumPy array to a new GPUArray through the engine.

    Returns once ``array`` may be modified again; the copy finishes on the
    copy stream of ``priority``. ``stream`` (default: the current stream)
    waits for it on the device, so the array can be used there at once; use
    ``transfer.stream_wait(other)`` before using it on another stream.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"to_device expects a numpy.ndarray, got {type(array).__name__}")
    dt = _dtypes.as_dtype(array.dtype)
    if not array.flags.c_contiguous:
        raise ValueError(
            f"to_device needs a C-contiguous array, got one with shape {array.shape} and strides "
            f"{array.strides}; use np.ascontiguousarray(a)"
        )
    consumer = current_stream_handle() if stream is None else _handle(stream)
    if _context.local.capture is not None:
        raise GraphCaptureError("gp.transfer.to_device() runs on a copy stream outside the graph; call it before `with gp.graph():`")
    engine = _get()
    rt = _runtime.get()
    priority = scheduler.transfer_priority() if priority is None else priority
    copy_stream = engine.stream(priority)
    # The block belongs to the copy stream, so that reusing it never waits for
    # compute queued earlier; the consumer stream is recorded, so that when the
    # array is freed the block is reused only after the consumer's work.
    # Charged to the consumer stream's task, the one that will use the array.
    block = rt.pool.alloc(array.nbytes, copy_stream, consumer)
    out = GPUArray._new(tuple(array.shape), dt, block, block.ptr)
    if consumer != copy_stream:
        rt.pool.record_stream(out._block, consumer)
    t = engine.host_to_device(out.data_ptr, array.ctypes.data, array.nbytes, priority)
    transfer = Transfer(t, out)
    transfer.stream_wait(stream)
    return out, transfer


def to_host(array: GPUArray, out: np.ndarray | None = None, priority: str | None = None, stream: Stream | None = None) -> Transfer:
    """Copy ``array`` to ``out`` (a new ndarray when None) through the engine,
    after the work queued on ``stream`` (default: the current stream); returns
    when the data is in ``out`` (``transfer.result``). A non-contiguous array
    is copied to a contiguous one on the device first."""
    if not isinstance(array, GPUArray):
        raise TypeError(f"to_host expects a GPUArray, got {type(array).__name__}")
    producer = current_stream_handle() if stream is None else _handle(stream)
    if out is None:
        out = np.empty(array.shape, dtype=array.dtype)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray or None, got {type(out).__name__}")
    elif out.shape != array.shape or out.dtype != array.dtype:
        raise ValueError(f"out must have shape {array.shape} and dtype {array.dtype}, got {out.shape} and {out.dtype}")
    elif not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writable C-contiguous array")
    check_not_capturing("gp.transfer.to_host()")
    priority = scheduler.transfer_priority() if priority is None else priority
    src = array
    if not array.is_contiguous:
        with Stream._wrap(producer):
            src = array.copy()
    engine = _get()
    rt = _runtime.get()
    if rt.backend == "cuda":
        # The copy stream must not read the source before its producer wrote it.
        native = rt.native
        ev = native.event_create(False)
        try:
            native.event_record(ev, producer)
            native.stream_wait_event(engine.stream(priority), ev)
        finally:
            native.event_destroy(ev)
    t = engine.device_to_host(out.ctypes.data, src.data_ptr, out.nbytes, priority)
    return Transfer(t, out)
