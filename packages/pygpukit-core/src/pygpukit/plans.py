"""Plan caches: what a kernel launch was worked out to be (kernel, grid,
strides, tile sizes...) kept by exactly what it depends on, so that the next
call with the same shapes, dtypes, strides and alignment launches at once.

A plugin keeps one ``PlanCache`` per kind of plan, with a typed plan (a
frozen dataclass, say) as the value and a key built from ``layout_key`` of
its arrays plus its own scalars. Plans hold CUfunctions of the current
device, so every cache is emptied when the device changes and by
``clear_all()``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")

_caches: weakref.WeakSet[PlanCache[Any, Any]] = weakref.WeakSet()
_lock = threading.Lock()


class PlanCache(Generic[K, P]):
    """A dict of plans with a name (for ``stats()``) and a bound on its size:
    when ``maxsize`` is reached the oldest plans go first."""

    __slots__ = ("__weakref__", "_plans", "maxsize", "name")

    def __init__(self, name: str, maxsize: int = 4096) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"PlanCache: name must be a non-empty str, got {name!r}")
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"PlanCache {name!r}: maxsize must be a positive int, got {maxsize!r}")
        self.name = name
        self.maxsize = maxsize
        self._plans: dict[K, P] = {}
        with _lock:
            _caches.add(self)

    def get(self, key: K) -> P | None:
        """The plan for ``key``, or None (the hot path: one dict lookup)."""
        return self._plans.get(key)

    def put(self, key: K, plan: P) -> P:
        """Keep ``plan`` for ``key``; returns it."""
        plans = self._plans
        if len(plans) >= self.maxsize and key not in plans:
            del plans[next(iter(plans))]
        plans[key] = plan
        return plan

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: object) -> bool:
        return key in self._plans

    def __repr__(self) -> str:
        return f"<PlanCache {self.name!r}: {len(self._plans)} plans, maxsize {self.maxsize}>"


def layout_key(a: Any, align: int = 16) -> tuple[Any, ...] | None:
    """What a plan depends on in one array argument: shape, strides (None when
    C-contiguous), dtype and the data pointer's offset from ``align`` bytes.
    None for None (an optional argument that was left out)."""
    if a is None:
        return None
    return (a._shape, a._strides, a._dtype, a._ptr % align)


def stats() -> list[dict[str, Any]]:
    """Every live plan cache: its name and how many plans it holds."""
    with _lock:
        caches = list(_caches)
    return sorted(({"name": c.name, "plans": len(c)} for c in caches), key=lambda r: r["name"])


def clear_all() -> None:
    """Empty every plan cache (their plans name CUfunctions of one device)."""
    with _lock:
        caches = list(_caches)
    for c in caches:
        c.clear()
