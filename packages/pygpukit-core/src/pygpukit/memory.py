"""The memory pool: statistics and control.

Every GPUArray's memory comes from one caching pool in Rust (per process and
device). Freed blocks stay cached for reuse on the same stream; ``empty_cache``
returns unused segments to the driver. ``PYGPUKIT_MEMORY_LIMIT`` (e.g.
"8GiB") caps the memory the pool may reserve.
"""

from __future__ import annotations

from typing import Any

from . import _runtime
from ._units import parse_bytes


def stats() -> dict[str, Any]:
    """Pool statistics: allocated_bytes, reserved_bytes, peak_allocated_bytes,
    peak_reserved_bytes, num_segments, num_alloc_calls, num_driver_allocs,
    cached_bytes, largest_free_block, num_ooms, limit, ..."""
    return dict(_runtime.get().pool.stats())


def empty_cache() -> None:
    """Release every cached segment that holds no live block back to the driver."""
    _runtime.get().pool.empty_cache()


def reset_peak_stats() -> None:
    _runtime.get().pool.reset_peak_stats()


def set_limit(limit: int | str | None) -> None:
    """Cap the bytes the pool may reserve (``None`` removes the cap)."""
    _runtime.get().pool.limit = None if limit is None else parse_bytes(limit)


def get_limit() -> int | None:
    return _runtime.get().pool.limit
