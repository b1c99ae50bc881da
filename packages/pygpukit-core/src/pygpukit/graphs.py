"""CUDA graphs: capture a sequence of ops once, replay it with one launch.

::

    x = gp.zeros((1024,))                 # fixed input buffer
    with gp.graph() as g:                 # ops are recorded, not run
        y = gp.exp(x) * 2 + 1             # y is allocated from the graph's pool
    x[...] = new_values                   # update the input in place
    g.replay()                            # y now holds the result for new_values

Rules, as for every CUDA graph:

- Nothing inside the block may wait for the device: ``to_numpy``, ``item``,
  ``repr``, ``bool``, ``synchronize`` and ops that read a count back to the
  host (``nonzero``, boolean-mask indexing, index bounds checks) raise
  :class:`GraphCaptureError` and the capture is abandoned.
- The graph reads and writes the same memory on every replay: keep the arrays
  used inside the block alive as long as you replay, and change inputs in
  place (``x[...] = v``), never by rebinding the name.
- Arrays allocated inside the block come from a pool private to the graph
  (as PyTorch does); that memory lives as long as the graph or the arrays.
- Values computed on the host at capture time are constants of the graph:
  Python scalars, shapes, and the random generators' counters (a random op
  in a graph draws the same numbers on every replay).
- A replay runs on the current stream (or ``stream=``), after the work
  already queued there; replays on one stream run one after another.

On the CPU backend the same API records each backend call during the
block (running it once, as the capture must produce the arrays the block
uses) and replays them in order, writing into the same arrays.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from . import _context, _runtime
from ._errors import CudaError, GraphCaptureError
from .streams import Event, Stream, current_stream_handle

_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED: the pool may grow and kernels compile during capture


def capturing() -> bool:
    """Whether this thread is inside a ``with gp.graph():`` block."""
    return _context.local.capture is not None


class _PoolRouter:
    """Stands in for the runtime's pool while graphs are captured (several at
    once from several threads): allocations on a capture stream come from that
    graph's private pool, all else from the main one."""

    def __init__(self, main: Any) -> None:
        self._main = main
        self._private: dict[int, Any] = {}  # capture stream -> the graph's pool

    def alloc(self, nbytes: int, stream: int = 0, charge: int | None = None) -> Any:
        # The graph's memory is its own, outside the scheduler's task accounting.
        private = self._private.get(stream)
        if private is not None:
            return private.alloc(nbytes, stream)
        return self._main.alloc(nbytes, stream, charge)

    def record_stream(self, block: Any, stream: int) -> None:
        for pool in (self._main, *self._private.values()):
            try:
                pool.record_stream(block, stream)
                return
            except ValueError:  # not this pool's block
                continue
        raise ValueError("record_stream: the block belongs to no live pool")

    def __getattr__(self, name: str) -> Any:  # stats, limit, empty_cache...: the main pool's
        return getattr(self._main, name)


_routing = threading.Lock()  # installs and removes the router, and graphs' pools in it
# Graphs dropped while a capture is under way (e.g. `with gp.graph() as g:` in
# a loop rebinds g as the next capture begins): freeing their memory or
# destroying them then would invalidate that capture, so it waits for the
# last capture to end.
_deferred: list[tuple[Any, int, int, Any, list[int]]] = []
_PIN_CHUNK = 1 << 16  # pinned host memory for captured host-to-device copies is taken in chunks of this


def _destroy(item: tuple[Any, int, int, Any, list[int]]) -> None:
    native, exec_, graph, _pool, pinned = item  # the graph's private memory goes with its pool, after these
    if exec_:
        native.graph_exec_destroy(exec_)
    if graph:
        native.graph_destroy(graph)
    for ptr in pinned:
        native.host_free(ptr)


class _Recorder:
    """The CPU backend's capture: runs every backend call and logs it for replay.
    Every backend op writes into arrays its caller allocated and returns None,
    so a replay writes into the same arrays; a call that returns something (a
    kernel lookup) is no work and is not logged."""

    def __init__(self, ops: Any) -> None:
        self._ops = ops
        self.log: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ops, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if result is None:
                self.log.append((attr, args, kwargs))
            return result

        return call


class Graph:
    """A captured sequence of ops; see the module documentation for the rules."""

    def __init__(self) -> None:
        self._rt = _runtime.get()
        self._graph = self._exec = 0
        self._log: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] | None = None
        self._pool: Any = None
        self._stream: Stream | None = None
        self._saved: tuple[Any, Any] | None = None  # the CPU backend's pool and ops during a capture
        self._entered = False
        self._ready = False
        self._pinned: list[int] = []  # pinned host chunks holding what captured host-to-device copies read
        self._pin_at = self._pin_end = 0  # the free part of the last chunk

    def _pin(self, src: np.ndarray) -> np.ndarray:
        """``src``'s bytes in host memory that lives as long as the graph (pinned on
        CUDA). A host-to-device copy captured from pageable memory would read
        that address again on every replay, long after the array is gone; the
        copy reads this instead, so the capture-time values are the graph's
        constants (as the module doc says)."""
        if self._rt.backend != "cuda":  # the CPU replay log keeps it alive
            return src.copy()
        n = max(src.nbytes, 1)
        at = (self._pin_at + 15) & ~15
        if at + n > self._pin_end:
            size = max(n, _PIN_CHUNK)
            ptr = self._rt.native.host_alloc(size)
            self._pinned.append(ptr)
            at, self._pin_end = ptr, ptr + size
        self._pin_at = at + n
        view = np.ctypeslib.as_array((ctypes.c_uint8 * src.nbytes).from_address(at)).view(src.dtype).reshape(src.shape)
        view[...] = src
        return view

    # -- capture ---------------------------------------------------------------
    def __enter__(self) -> Graph:
        if _context.local.capture is not None:
            raise GraphCaptureError("graph captures cannot be nested")
        if self._ready or self._entered:
            raise GraphCaptureError("this graph has already been captured; make a new one")
        rt = self._rt
        self._stream = Stream()
        if rt.backend == "cuda":  # the captured work comes after what is already queued
            self._stream.wait_event(Event().record())
        self._entered = True
        with _routing:
            if rt.backend == "cuda":
                if not isinstance(rt.pool, _PoolRouter):
                    rt.pool = rt.ops.pool = _PoolRouter(rt.pool)  # CudaOps keeps its own reference for the hot path
                main = rt.pool._main
                self._pool = type(main)(rt.native.driver_table(), main.limit)
                rt.pool._private[self._stream.handle] = self._pool
            else:
                if isinstance(rt.ops, _Recorder):
                    raise GraphCaptureError("another thread is capturing a graph; on the CPU backend captures run one at a time")
                from . import _rt  # the native modules load on first use, not with `import pygpukit`

                self._pool = type(rt.pool)(_rt.host_table(), rt.pool.limit)
                self._saved = (rt.pool, rt.ops)
                rt.pool = _PoolRouter(rt.pool)
                rt.pool._private[self._stream.handle] = self._pool
                rt.ops = _Recorder(rt.ops)
        self._stream.__enter__()
        _context.local.capture = self
        if rt.backend == "cuda":
            try:
                rt.native.stream_begin_capture(self._stream.handle, _RELAXED)
            except BaseException:
                self._restore()
                raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        rt = self._rt
        try:
            if rt.backend == "cuda":
                status = rt.native.stream_capture_status(self._stream.handle)  # type: ignore[union-attr]
                try:
                    self._graph = rt.native.stream_end_capture(self._stream.handle)  # type: ignore[union-attr]
                except CudaError as e:
                    if exc_type is None:
                        raise GraphCaptureError(f"the capture was invalidated by an operation it does not allow: {e}") from e
                    return  # the body's own error explains what went wrong
                if exc_type is None and status != 1:
                    raise GraphCaptureError("the capture was invalidated by an operation it does not allow")
            else:
                self._log = rt.ops.log
        finally:
            self._restore()
        if exc_type is not None:
            self._release()
            return
        if rt.backend == "cuda":
            self._exec = rt.native.graph_instantiate(self._graph)
        self._ready = True

    def _restore(self) -> None:
        _context.local.capture = None
        self._stream.__exit__()  # type: ignore[union-attr]
        rt = self._rt
        with _routing:
            if rt.backend != "cuda":
                rt.pool, rt.ops = self._saved  # type: ignore[misc]
            else:
                rt.pool._private.pop(self._stream.handle, None)  # type: ignore[union-attr]
                if rt.pool._private:
                    return
                rt.pool = rt.ops.pool = rt.pool._main  # the last capture: the main pool serves alone again
            pending = _deferred[:]
            _deferred.clear()
        for item in pending:
            _destroy(item)

    # -- use -------------------------------------------------------------------
    def replay(self, stream: Stream | None = None) -> None:
        """Run the captured work again (queued on ``stream`` or the current stream)."""
        if not self._ready:
            raise GraphCaptureError("replay() needs a graph whose capture has finished")
        if self._rt.backend == "cuda":
            self._rt.native.graph_launch(self._exec, stream.handle if stream is not None else current_stream_handle())
            return
        for fn, args, kwargs in self._log or ():
            fn(*args, **kwargs)

    @property
    def num_nodes(self) -> int:
        """Captured operations (kernels, copies, memsets); backend calls on the CPU."""
        if not self._ready:
            raise GraphCaptureError("the graph has not been captured yet")
        if self._rt.backend == "cuda":
            return int(self._rt.native.graph_node_count(self._graph))
        return len(self._log or ())

    def _release(self) -> None:
        item = (self._rt.native, self._exec, self._graph, self._pool, self._pinned)
        self._exec = self._graph = 0
        self._pinned, self._pin_at, self._pin_end = [], 0, 0
        self._pool = self._log = None
        self._ready = False
        with _routing:
            if isinstance(self._rt.pool, _PoolRouter):  # a capture is under way (this thread's or another's)
                _deferred.append(item)
                return
        _destroy(item)

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass

    def __repr__(self) -> str:
        state = f"{self.num_nodes} nodes" if self._ready else "not captured"
        return f"<pygpukit.Graph {state}>"


def graph() -> Graph:
    """A new graph, to be captured with ``with gp.graph() as g:`` and run with ``g.replay()``."""
    return Graph()
