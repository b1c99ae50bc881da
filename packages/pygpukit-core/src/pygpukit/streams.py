"""Streams and events.

Every op runs on the current stream: pygpukit's own default stream unless a
``with stream:`` block (per thread) or the op's ``stream=`` argument says
otherwise. Nothing synchronizes
implicitly except reading values back to the host (``to_numpy``, ``item``,
``repr``, ``bool``). On the CPU backend work is synchronous and streams and
events are bookkeeping only (timing events still measure host time).

asyncio: ``await event``, ``await stream.synchronize_async()`` and
``await gp.synchronize_async()`` wait without blocking the event loop: they
poll the event with a back-off from 20 us to 1 ms through ``asyncio.sleep``
(no threads). On the CPU backend they complete at once.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any, TypeVar, cast

from . import _context, _runtime
from ._errors import GraphCaptureError

_F = TypeVar("_F", bound=Callable[..., Any])


def on_stream(fn: _F) -> _F:
    """Give ``fn`` a keyword ``stream=``: its work is queued on that Stream, as
    inside ``with stream:`` (None: the current stream)."""

    @functools.wraps(fn)
    def call(*args: Any, stream: Stream | None = None, **kwargs: Any) -> Any:
        if stream is None:
            return fn(*args, **kwargs)
        if not isinstance(stream, Stream):
            raise TypeError(f"{fn.__name__}: stream must be a pygpukit.Stream or None, got {type(stream).__name__}")
        with stream:
            return fn(*args, **kwargs)

    return cast(_F, call)


def check_not_capturing(what: str) -> None:
    """Raise GraphCaptureError when ``what`` (a host synchronization) happens during a graph capture."""
    if _context.local.capture is not None:
        raise GraphCaptureError(
            f"{what} waits for the device, which is not allowed while a graph is being captured; "
            "move it out of the `with gp.graph():` block"
        )


# Back-off of the asyncio polls, in seconds: short first (a kernel of a few
# microseconds is done almost at once), then bounded so that a long wait costs
# the event loop about a thousand wake-ups per second.
POLL_MIN_S = 20e-6
POLL_MAX_S = 1e-3


async def poll_until(ready: Callable[[], bool]) -> None:
    """Return once ``ready()`` is true, sleeping between polls (asyncio.sleep,
    doubling from POLL_MIN_S to POLL_MAX_S) so that the event loop keeps running."""
    import asyncio  # here, not at module level: it costs `import pygpukit` 10 ms

    delay = POLL_MIN_S
    while not ready():
        await asyncio.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)


def current_stream_handle() -> int:
    """Handle of the current stream: the one place that decides where an op's work
    (and its output's memory) goes. The hot path of every op."""
    stack = _context.streams.get()
    if stack:
        return stack[-1].handle
    rt = _runtime._runtime
    return (rt or _runtime.get()).stream


class Stream:
    """A CUDA stream. ``priority``: lower numbers are higher priority (CUDA convention);
    it is clamped to the device's range (``Stream.priority_range()``)."""

    def __init__(self, priority: int = 0) -> None:
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"priority must be an int, got {type(priority).__name__}")
        rt = _runtime.get()
        self._rt = rt
        self.priority = priority
        self.handle = rt.native.stream_create(priority, True) if rt.backend == "cuda" else 0
        self._owned = rt.backend == "cuda"
        _live_streams.add(self)
        self._task: Any = None
        task = _context.task.get()
        if task is not None and task.stream is not None:
            # A stream made inside a task is the task's: its allocations and launches count there.
            if not self._owned:
                self.handle = cpu_stream_handle()
            task._adopt(self)

    @classmethod
    def _wrap(cls, handle: int) -> Stream:
        s = cls.__new__(cls)
        s._rt = _runtime.get()
        s.priority = 0
        s.handle = handle
        s._owned = False
        return s

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(lowest, highest) priority numbers the device accepts, e.g. (0, -5)."""
        rt = _runtime.get()
        return tuple(rt.native.stream_priority_range()) if rt.backend == "cuda" else (0, 0)  # type: ignore[return-value]

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream is done."""
        check_not_capturing("Stream.synchronize()")
        if self._rt.backend == "cuda":
            self._rt.native.stream_synchronize(self.handle)

    async def synchronize_async(self) -> None:
        """Wait, without blocking the event loop, until the work queued on this
        stream so far is done."""
        check_not_capturing("Stream.synchronize_async()")
        await Event().record(self)

    def query(self) -> bool:
        """True when all work queued on this stream is done."""
        return self._rt.native.stream_query(self.handle) if self._rt.backend == "cuda" else True

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event`` (no host synchronization)."""
        if self._rt.backend == "cuda":
            self._rt.native.stream_wait_event(self.handle, event.handle)

    def __enter__(self) -> Stream:
        _context.streams.set((*_context.streams.get(), self))
        return self

    def __exit__(self, *exc: object) -> None:
        _context.streams.set(_context.streams.get()[:-1])

    def __del__(self) -> None:
        if getattr(self, "_task", None) is not None:
            self._task._release(self)
        if getattr(self, "_owned", False):
            try:
                self._rt.native.stream_destroy(self.handle)
            except Exception:  # interpreter shutdown: the driver may be gone already
                pass

    def __repr__(self) -> str:
        return f"<pygpukit.Stream handle=0x{self.handle:x} priority={self.priority}>"


_cpu_handles = iter(range(1 << 48, 1 << 49))


def cpu_stream_handle() -> int:
    """A distinct stream handle on the CPU backend (where streams are bookkeeping
    only), so that the scheduler can still tell tasks' streams apart."""
    return next(_cpu_handles)


# Every Stream made here, for synchronize_async (which cannot wait for the
# whole context as cuCtxSynchronize does).
_live_streams: weakref.WeakSet[Stream] = weakref.WeakSet()


def current_stream() -> Stream:
    """The stream ops on this thread (or asyncio task) are queued on."""
    stack = _context.streams.get()
    return stack[-1] if stack else Stream._wrap(_runtime.get().stream)


class Event:
    """A CUDA event; with ``timing=True`` it can measure elapsed time between two records."""

    def __init__(self, timing: bool = False) -> None:
        rt = _runtime.get()
        self._rt = rt
        self.timing = timing
        self.handle = rt.native.event_create(timing) if rt.backend == "cuda" else 0
        self._host_time: float | None = None

    def record(self, stream: Stream | None = None) -> Event:
        handle = stream.handle if stream is not None else current_stream_handle()
        if self._rt.backend == "cuda":
            self._rt.native.event_record(self.handle, handle)
        else:
            self._host_time = time.perf_counter()
        return self

    def synchronize(self) -> None:
        check_not_capturing("Event.synchronize()")
        if self._rt.backend == "cuda":
            self._rt.native.event_synchronize(self.handle)

    def query(self) -> bool:
        return self._rt.native.event_query(self.handle) if self._rt.backend == "cuda" else True

    def __await__(self) -> Generator[Any, None, None]:
        """``await event``: wait for it without blocking the event loop."""
        return poll_until(self.query).__await__()

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end``; both must have been recorded with timing=True."""
        if not (self.timing and end.timing):
            raise ValueError("elapsed_time needs two events created with timing=True")
        if self._rt.backend == "cuda":
            return float(self._rt.native.event_elapsed_ms(self.handle, end.handle))
        if self._host_time is None or end._host_time is None:
            raise ValueError("elapsed_time needs both events to have been recorded")
        return (end._host_time - self._host_time) * 1e3

    def __del__(self) -> None:
        if getattr(self, "handle", 0) and self._rt.backend == "cuda":
            try:
                self._rt.native.event_destroy(self.handle)
            except Exception:  # interpreter shutdown: the driver may be gone already
                pass


def synchronize() -> None:
    """Wait for all work on the device (all streams)."""
    check_not_capturing("synchronize()")
    rt = _runtime.get()
    if rt.backend == "cuda":
        rt.native.synchronize()


async def synchronize_async() -> None:
    """Wait, without blocking the event loop, for the work queued so far on
    pygpukit's default stream and on every live ``gp.Stream`` (streams of
    other libraries are not seen: use ``synchronize()`` for those)."""
    check_not_capturing("synchronize_async()")
    rt = _runtime.get()
    if rt.backend != "cuda":
        return
    streams = [Stream._wrap(rt.stream), *list(_live_streams)]
    for event in [Event().record(s) for s in streams]:
        await event
