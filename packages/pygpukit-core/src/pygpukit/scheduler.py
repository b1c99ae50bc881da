"""The GPU scheduler: partitions, tasks with QoS tiers, admission, quotas,
eviction and launch pacing. The policy lives in Rust (``pygpukit._rt``);
this module is the Python face of it.

- ``partition("inference", memory="40GiB", compute=0.6)``: a hard quota on
  the live bytes of everything placed in it, and a compute share that paces
  its best-effort launches. Everything not placed is in "default".
- ``with task("decode", qos="guaranteed", partition="inference", memory="2GiB"):``
  (or ``async with``, or as a decorator, or the explicit object API): the task
  is admitted first (its reservation must fit; it waits in order, or raises
  ``AdmissionError``), then gets its own stream with the tier's priority; all
  work inside runs on that stream, every allocation is charged to the task,
  and every launch passes the pacing gate.
- ``snapshot()``: partitions, tasks, queue, memory and pacing counters.
- A process that runs tasks publishes its snapshot once a second (a daemon
  thread started by the first task; ``PYGPUKIT_PUBLISH=0`` turns it off) as
  ``<run dir>/<pid>.json``, written to a temporary file and renamed so a
  reader never sees half a file; ``pygpukit top`` (pygpukit.top) reads them.
  The run directory is ``PYGPUKIT_RUN_DIR``, default ``<tmp>/pygpukit-<uid>``.

See docs/scheduler.md for the semantics of each tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from . import _context, _dtypes, _env, _runtime
from ._errors import SchedulerError
from ._units import parse_bytes
from .array import EvictableArray
from .streams import Stream, cpu_stream_handle, current_stream_handle

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "Partition",
    "Snapshot",
    "Task",
    "TaskInfo",
    "current_task",
    "evictable_empty",
    "pacing",
    "partition",
    "publish_once",
    "run_dir",
    "set_capacity",
    "set_pacing",
    "sm_budget",
    "snapshot",
    "task",
]

QOS = ("guaranteed", "burstable", "best_effort")
_F = TypeVar("_F", bound=Callable[..., Any])


def _sched() -> Any:
    rt = _runtime.get()
    s = rt.__dict__.get("scheduler")
    if s is None:
        s = rt.__dict__["scheduler"] = rt.pool.scheduler()
    return s


def _bytes(value: int | str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what}: {exc}") from None


def _qos(qos: str) -> str:
    q = str(qos).lower().replace("-", "_")
    if q == "besteffort":
        q = "best_effort"
    if q not in QOS:
        raise ValueError(f"qos must be one of {', '.join(QOS)}; got {qos!r}")
    return q


# -- partitions ------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """A named share of the device: ``quota`` bytes (None: no quota) and ``compute`` in (0, 1]."""

    name: str
    quota: int | None
    compute: float


def partition(name: str, memory: int | str | None = None, compute: float = 1.0) -> Partition:
    """Create the partition ``name`` (or update it while nothing exceeds the new quota)."""
    if not isinstance(name, str):
        raise TypeError(f"partition name must be a str, got {type(name).__name__}")
    if isinstance(compute, bool) or not isinstance(compute, (int, float)) or not math.isfinite(compute):
        raise TypeError(f"compute must be a number in (0, 1], got {compute!r}")
    quota = _bytes(memory, f"partition {name!r} memory")
    _sched().partition(name, quota, float(compute))
    return Partition(name, quota, float(compute))


def set_capacity(capacity: int | str | None) -> None:
    """Bound the sum of reservations and live allocations (default: the pool's
    limit, else the device's memory). It cannot go below what is committed now."""
    _sched().set_capacity(_bytes(capacity, "capacity"))


def set_pacing(idle_window: int = 8, contended_window: int = 1, max_hold_us: int = 5000) -> None:
    """Pacing of best-effort launches: at most ``idle_window`` in flight per stream
    while no guaranteed task has work queued, ``contended_window`` while one has
    (0: hold each launch until the guaranteed streams drain, at most ``max_hold_us``)."""
    for n, v in (("idle_window", idle_window), ("contended_window", contended_window), ("max_hold_us", max_hold_us)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{n} must be an int >= 0, got {v!r}")
    _sched().set_pacing(idle_window, contended_window, max_hold_us)


def pacing() -> dict[str, int]:
    """The pacing settings (see ``set_pacing``)."""
    return dict(_sched().pacing)


# -- tasks -----------------------------------------------------------------------


def current_task() -> Task | None:
    """The task this thread or coroutine runs in, if any."""
    return _context.task.get()


@contextlib.contextmanager
def outside_tasks() -> Iterator[None]:
    """Run the block as if outside any task: streams made in it are not
    adopted by the current task (a task's own stream, the copy streams)."""
    outer = _context.task.set(None)
    try:
        yield
    finally:
        _context.task.reset(outer)


def transfer_priority() -> str:
    """The transfer engine's priority for the current task's tier."""
    t = _context.task.get()
    return "normal" if t is None else {"guaranteed": "high", "best_effort": "low"}.get(t.qos, "normal")


def sm_budget() -> int | None:
    """How many SMs the current task's kernels should size their grids for:
    a best-effort task in a partition of compute share c < 1 gets c of the
    device's SMs (libraries that can target an SM count, such as cuBLASLt,
    leave the rest to the other partitions); None means all of them."""
    t = _context.task.get()
    return None if t is None else t.sm_budget


def _budget(qos: str, partition: str) -> int | None:
    if qos != "best_effort":
        return None
    share = next((p["compute"] for p in _sched().snapshot()["partitions"] if p["name"] == partition), 1.0)
    sms = int(_runtime.get().props.get("multiprocessor_count", 0))
    return max(1, round(share * sms)) if share < 1.0 and sms else None


class Task:
    """A unit of GPU work with a QoS tier, a partition and memory terms.

    ``memory``: the reservation (Guaranteed: also its limit; Burstable: the
    minimum it is sure to get; BestEffort: ignored). ``limit``: a cap on live
    bytes (Burstable and BestEffort; default: the partition's quota).
    ``timeout``: seconds to wait for admission (None: for ever, 0: not at all).

    ``with task:`` admits, starts, runs on the task's stream and completes (fails
    on an exception, is cancelled on KeyboardInterrupt or asyncio cancellation).
    A task runs once; as a decorator, each call runs in a fresh task of the same terms.
    """

    def __init__(
        self,
        name: str,
        qos: str = "burstable",
        partition: str | Partition = "default",
        memory: int | str | None = None,
        limit: int | str | None = None,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a task needs a non-empty name, got {name!r}")
        self.name = name
        self.qos = _qos(qos)
        self.partition = partition.name if isinstance(partition, Partition) else str(partition)
        self.memory = _bytes(memory, f"task {name!r} memory") or 0
        self.limit = _bytes(limit, f"task {name!r} limit")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be seconds >= 0 or None, got {timeout!r}")
        self.timeout = timeout
        self.id: int | None = None
        self.stream: Stream | None = None
        self.counters: dict[str, int] | None = None  # launch counters, once the task ended
        self._token: contextvars.Token[Task | None] | None = None
        self._adopted: list[int] = []  # handles of streams made inside the task
        self.sm_budget: int | None = None  # SMs its kernels should size for (best effort, compute < 1)

    # -- the explicit API --------------------------------------------------------
    def submit(self) -> Task:
        """Queue for admission (``admit`` does this when needed)."""
        if self.id is None:
            self.id = _sched().submit(self.name, self.qos, self.partition, self.memory, self.limit)
        return self

    def admit(self, timeout: float | None = ...) -> Task:  # type: ignore[assignment]
        """Wait until the reservation fits (``timeout`` defaults to the task's)."""
        self.submit()
        _sched().admit(self.id, self.timeout if timeout is ... else timeout)
        return self

    def start(self) -> Task:
        """Running: create the task's stream (with the tier's priority) and its pacing lane."""
        s = _sched()
        if self.stream is None:
            least, greatest = Stream.priority_range()
            self.stream = _take_stream(s.stream_priority(self.qos, least, greatest))
            s.add_stream(self.id, self.stream.handle)
            self.sm_budget = _budget(self.qos, self.partition)
            start_publisher()
        s.set_state(self.id, "running")
        return self

    def pause(self) -> Task:
        """Back to Admitted: keeps its reservation, but its evictable arrays may be spilled."""
        _sched().set_state(self.id, "admitted")
        return self

    def complete(self) -> None:
        self._end("completed")

    def fail(self, error: str = "") -> None:
        self._end("failed", error or None)

    def cancel(self) -> None:
        self._end("cancelled")

    def _end(self, state: str, error: str | None = None) -> None:
        if self.id is None:
            raise SchedulerError(f"task {self.name!r} was never submitted")
        s = _sched()
        if self.stream is not None:
            self.counters = s.remove_stream(self.stream.handle)
            _give_back(self.stream)
        for h in self._adopted:
            s.remove_stream(h)
        self._adopted.clear()
        s.set_state(self.id, state, error)

    def _adopt(self, stream: Stream) -> None:
        _sched().add_stream(self.id, stream.handle)
        stream._task = self
        self._adopted.append(stream.handle)

    def _release(self, stream: Stream) -> None:
        if stream.handle in self._adopted:
            self._adopted.remove(stream.handle)
            _sched().remove_stream(stream.handle)

    @property
    def state(self) -> str:
        """pending, admitted, running, completed, failed or cancelled ("new" before submit)."""
        if self.id is None:
            return "new"
        return self.info().state

    def info(self) -> TaskInfo:
        """This task's entry of ``snapshot()``."""
        for t in snapshot().tasks:
            if t.id == self.id:
                return t
        raise SchedulerError(f"task {self.name!r} (id {self.id}) is no longer tracked")

    # -- context manager, async context manager, decorator ---------------------
    def __enter__(self) -> Task:
        self.admit()
        return self._enter()

    def _enter(self) -> Task:
        if self._token is not None:
            raise SchedulerError(f"task {self.name!r} is entered already; a task runs once")
        try:
            self.start()
        except BaseException:
            self.fail("could not start")
            raise
        self._token = _context.task.set(self)
        assert self.stream is not None
        self.stream.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.stream is not None and self._token is not None
        self.stream.__exit__(exc_type, exc, tb)
        _context.task.reset(self._token)
        if exc_type is None:
            self.complete()
        elif issubclass(exc_type, (KeyboardInterrupt, asyncio.CancelledError)):
            self.cancel()
        else:
            self.fail(f"{exc_type.__name__}: {exc}")

    async def __aenter__(self) -> Task:
        # Admission may wait: do it in a thread so the event loop keeps running.
        self.submit()
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, functools.partial(_sched().admit, self.id, self.timeout))
        except asyncio.CancelledError:
            self.cancel()
            raise
        return self._enter()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: _F) -> _F:
        terms = dict(qos=self.qos, partition=self.partition, memory=self.memory, limit=self.limit, timeout=self.timeout)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                async with Task(self.name, **terms):  # type: ignore[arg-type]
                    return await fn(*args, **kwargs)

            return cast(_F, run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with Task(self.name, **terms):  # type: ignore[arg-type]
                return fn(*args, **kwargs)

        return cast(_F, run)

    def __repr__(self) -> str:
        return f"<pygpukit.Task {self.name!r} qos={self.qos} partition={self.partition!r} state={self.state}>"


# Idle task streams by priority. A task's stream is reused by later tasks of
# its tier and never destroyed: the pool keeps blocks (and records events) on
# the streams they were used on, so a destroyed stream would leave it holding
# a dead handle (and CUDA may hand the same handle to a new stream).
_idle_streams: dict[int, list[Stream]] = {}
_idle_lock = threading.Lock()


def _take_stream(priority: int) -> Stream:
    with _idle_lock:
        idle = _idle_streams.get(priority)
        if idle:
            return idle.pop()
    with outside_tasks():  # the task's own stream, not one adopted by an enclosing task
        stream = Stream(priority)
    stream._owned = False  # kept for the life of the process
    if _runtime.get().backend == "cpu":
        # The CPU backend has no streams; a per-task handle keeps charging per task.
        stream.handle = cpu_stream_handle()
    return stream


def _give_back(stream: Stream) -> None:
    with _idle_lock:
        _idle_streams.setdefault(stream.priority, []).append(stream)


# ``gp.task("decode", qos="guaranteed", memory="2GiB")``: the spelling of the
# context manager and decorator; the class and the function are one.
task = Task


# -- evictable arrays ------------------------------------------------------------


def evictable_empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A C-contiguous EvictableArray of the current task (see ``gp.empty(..., evictable=True)``)."""
    nbytes = math.prod(shape) * dtype.itemsize
    buf = _sched().alloc_buffer(nbytes, current_stream_handle())
    return EvictableArray._wrap(shape, _dtypes.as_dtype(dtype), buf)


# -- snapshot --------------------------------------------------------------------


@dataclass
class TaskInfo:
    id: int
    name: str
    qos: str
    partition: str
    state: str
    reservation: int
    limit: int | None
    used: int
    peak: int
    allocations: int
    evictions: int
    restores: int
    launches: int
    completions: int
    waits: int
    wait_ns: int
    streams: list[int]
    state_times: dict[str, float]  # seconds after submission at which each state was entered
    error: str | None


@dataclass
class PartitionInfo:
    name: str
    quota: int | None
    compute: float
    committed: int
    used: int
    untasked: int


@dataclass
class Snapshot:
    """What the scheduler knows now; ``to_json()`` for tools."""

    capacity: int | None
    committed: int
    partitions: list[PartitionInfo]
    tasks: list[TaskInfo]
    queue: list[int]  # pending task ids in admission order
    eviction: dict[str, int]
    pacing: dict[str, int]
    pool: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def snapshot() -> Snapshot:
    s = _sched()
    raw = s.snapshot()
    return Snapshot(
        capacity=raw["capacity"],
        committed=raw["committed"],
        partitions=[PartitionInfo(**p) for p in raw["partitions"]],
        tasks=[TaskInfo(**t) for t in raw["tasks"]],
        queue=list(raw["queue"]),
        eviction=dict(raw["eviction"]),
        pacing=dict(s.pacing),
        pool=dict(_runtime.get().pool.stats()),
    )


# -- publishing (read by ``pygpukit top``) ------------------------------------------

_publisher: threading.Thread | None = None
_publish_lock = threading.Lock()


def run_dir() -> Path:
    from pathlib import Path  # here: pathlib would cost `import pygpukit` several ms

    d = os.environ.get("PYGPUKIT_RUN_DIR")
    return Path(d) if d else Path(tempfile.gettempdir()) / f"pygpukit-{os.getuid()}"


def publish_once(directory: Path | None = None) -> Path:
    """Write this process's snapshot now; returns the file."""
    d = directory or run_dir()
    d.mkdir(parents=True, exist_ok=True)
    rt = _runtime.get()
    doc = {
        "pid": os.getpid(),
        "argv": " ".join(sys.argv)[:200],
        "time": time.time(),
        "backend": rt.backend,
        "device": rt.props.get("name", "cpu"),
        "snapshot": snapshot().to_dict(),
    }
    path = d / f"{os.getpid()}.json"
    tmp = d / f".{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return path


def start_publisher(interval: float = 1.0) -> bool:
    """Start the publishing thread once per process (unless PYGPUKIT_PUBLISH=0)."""
    global _publisher
    if not _env.flag("PYGPUKIT_PUBLISH", True):
        return False
    with _publish_lock:
        if _publisher is not None and _publisher.is_alive():
            return True

        def loop() -> None:
            warned = False
            while True:
                try:
                    publish_once()
                except Exception as exc:  # a full or unwritable disk must not break the program: say it once
                    if not warned:
                        warned = True
                        logging.getLogger("pygpukit").warning(
                            "cannot publish the scheduler snapshot for pygpukit top in %s (PYGPUKIT_RUN_DIR): %s", run_dir(), exc
                        )
                time.sleep(interval)

        _publisher = threading.Thread(target=loop, name="pygpukit-publish", daemon=True)
        _publisher.start()
    return True
