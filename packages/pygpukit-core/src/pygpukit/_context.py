"""What the work of this thread (or asyncio task) belongs to: its ``with stream:``
stack, the scheduler task it runs in and the graph it is capturing.

This state sits below streams, the scheduler and graphs, which all read it:
a stream made inside a task is adopted by that task, and every op asks for
the current stream and whether a capture is under way.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any


class _ThreadState(threading.local):
    # A class-level default: reading it never raises AttributeError (which
    # would cost a microsecond on every op).
    capture: Any = None  # the Graph this thread is capturing (graphs.py)


local = _ThreadState()
# The `with stream:` stack (streams.Stream objects), per thread and per asyncio
# task (a context variable), so that coroutines in tasks of their own each keep their stream.
streams: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("pygpukit_streams", default=())
# The scheduler.Task this thread or coroutine runs in.
task: contextvars.ContextVar[Any] = contextvars.ContextVar("pygpukit_task", default=None)
