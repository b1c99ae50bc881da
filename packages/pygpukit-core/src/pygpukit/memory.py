"""The memory pool: statistics, control and memory history.

Every GPUArray's memory comes from one caching pool in Rust (per process and
device). Freed blocks stay cached for reuse on the same stream; ``empty_cache``
returns unused memory to the driver. ``PYGPUKIT_MEMORY_LIMIT`` (e.g. "8GiB")
caps the memory the pool may reserve. Where the driver supports virtual memory
management the pool grows "expandable segments" (one reserved address range
per stream, with pages mapped as needed, so a large request after many small
frees does not fail for fragmentation); ``PYGPUKIT_EXPANDABLE_SEGMENTS=0``
turns them off.

``record_history()`` records allocator events with their Python stacks, and
``dump_snapshot(path)`` writes them in PyTorch's memory-snapshot format, which
https://pytorch.org/memory_viz displays.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any

from . import _runtime
from ._units import format_bytes as format_bytes  # public: byte counts as gp.info() writes them
from ._units import parse_bytes as parse_bytes  # public: "8GiB" and the like, as set_limit takes them

# Block states of the Rust pool -> PyTorch's snapshot names.
_BLOCK_STATES = {"live": "active_allocated", "pending": "active_pending_free", "cached": "inactive"}


def stats() -> dict[str, Any]:
    """Pool statistics: allocated_bytes, reserved_bytes, peak_allocated_bytes,
    peak_reserved_bytes, num_segments, num_alloc_calls, num_driver_allocs,
    cached_bytes, largest_free_block, num_ooms, limit, fragmentation_bytes
    (reserved minus allocated), expandable_segments (bool),
    num_expandable_segments, expandable_mapped_bytes (physical memory mapped
    into expandable segments, part of reserved_bytes),
    expandable_virtual_bytes (address space they reserve), ..."""
    pool = _runtime.get().pool
    out = dict(pool.stats())
    out["expandable_segments"] = bool(pool.expandable)
    return out


def empty_cache() -> None:
    """Release cached memory that holds no live block back to the driver: whole
    segments, and the free pages of expandable segments."""
    _runtime.get().pool.empty_cache()


def reset_peak_stats() -> None:
    _runtime.get().pool.reset_peak_stats()


def set_limit(limit: int | str | None) -> None:
    """Cap the bytes the pool may reserve (``None`` removes the cap)."""
    _runtime.get().pool.limit = None if limit is None else parse_bytes(limit)


def get_limit() -> int | None:
    return _runtime.get().pool.limit


def available_bytes() -> int | None:
    """Bytes the pool can still hand out: the device's free memory plus what the
    pool holds cached, within the pool's limit. None on the CPU backend."""
    rt = _runtime.get()
    if rt.backend != "cuda":
        return None
    s = rt.pool.stats()
    free = rt.native.mem_get_info()[0] + s["cached_bytes"]
    return free if rt.pool.limit is None else min(free, rt.pool.limit - s["allocated_bytes"])


def record_history(enabled: bool = True, max_entries: int = 100_000, stacks: bool = True) -> None:
    """Start recording the pool's events (alloc, free, segment map/unmap, oom),
    keeping the newest ``max_entries``; with ``stacks`` each alloc and free
    keeps the Python stack it came from. ``record_history(False)`` stops;
    the recorded events stay available to ``snapshot``/``dump_snapshot``
    until recording starts again."""
    if not isinstance(max_entries, int) or isinstance(max_entries, bool):
        raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
    _runtime.get().pool.record_history(bool(enabled), max_entries, bool(stacks))


def _frames(frames: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in frames]


def _segment(device: int, stream: int, kind: str, expandable: bool, blocks: list[Any]) -> dict[str, Any]:
    out_blocks = [
        {"address": ptr, "size": size, "requested_size": req, "state": _BLOCK_STATES[state], "frames": _frames(fr)}
        for ptr, size, req, state, fr in blocks
    ]
    return {
        "device": device,
        "address": blocks[0][0],
        "total_size": sum(b[1] for b in blocks),
        "allocated_size": sum(b[1] for b in blocks if b[3] == "live"),
        "active_size": sum(b[1] for b in blocks if b[3] in ("live", "pending")),
        "requested_size": sum(b[2] for b in blocks if b[3] in ("live", "pending")),
        "stream": stream,
        "segment_type": kind,
        "segment_pool_id": (0, 0),
        "is_expandable": expandable,
        "frames": [],
        "blocks": out_blocks,
    }


def snapshot() -> dict[str, Any]:
    """The pool's state and recorded history as PyTorch's
    ``torch.cuda.memory._snapshot()`` dict: "segments" (an expandable segment
    appears as one segment per mapped range, as in PyTorch) and
    "device_traces" (one list per device up to this one)."""
    pool = _runtime.get().pool
    device = pool.device
    segments = []
    for _id, _ptr, _size, stream, kind, expandable, _mapped, blocks in pool.segments():
        run: list[Any] = []
        for b in [*blocks, None]:
            if b is None or b[3] == "unmapped":
                if run:
                    segments.append(_segment(device, stream, kind, expandable, run))
                run = []
            else:
                run.append(b)
    trace = []
    for action, addr, size, stream, time_us, device_free, frames in pool.history():
        entry: dict[str, Any] = {"action": action, "size": size, "stream": stream, "time_us": time_us, "frames": _frames(frames)}
        if action == "oom":
            entry["device_free"] = device_free
        else:
            entry["addr"] = addr
        trace.append(entry)
    device_traces: list[list[dict[str, Any]]] = [[] for _ in range(device)] + [trace]
    return {
        "segments": segments,
        "device_traces": device_traces,
        "allocator_settings": {"expandable_segments": bool(pool.expandable)},
    }


def dump_snapshot(path: str | os.PathLike[str]) -> None:
    """Write ``snapshot()`` as a pickle to ``path`` (replaced atomically): the
    file https://pytorch.org/memory_viz opens."""
    data = snapshot()
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".snapshot-", dir=os.path.dirname(os.path.abspath(target)))
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(data, f)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
