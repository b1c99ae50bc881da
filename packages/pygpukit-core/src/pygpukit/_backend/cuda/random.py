"""kernels/random.cu: a distribution of pygpukit/_backend/random.py filling an array."""

from __future__ import annotations

from typing import Any

from ... import _dtypes
from ..random import BERNOULLI, INT_LARGE, INT_SMALL, normal_dist, uniform_dist
from .launch import THREADS, Base, grid_for


class RandomOps(Base):
    def random_fill(self, out: Any, dist: Any, key: int, offset: int, a: Any, b: Any, stream: int) -> None:
        """Fill contiguous ``out`` (a pool block: 16-byte aligned) from the Philox blocks
        offset, offset + 1, ... under ``key``; ``dist`` (a _backend.random.Dist) turns
        each block into ``dist.per_block`` values. Grid-stride, about two waves."""
        n = out._size
        args = dist.pack(out._ptr, n, key, offset, a, b)
        grid = min(grid_for(-(-n // dist.per_block), THREADS), self.sms * 16)
        self.launch(self._fn("random", dist.expr(out._dtype)), grid, 1, 1, THREADS, 1, 1, 0, stream, args)


def instantiations() -> list[str]:
    """kernels/random.cu: every (distribution, output dtype) pair that a Generator can launch."""
    floats = [dt for dt in _dtypes.SUPPORTED if _dtypes.is_float(dt)]
    out = [d.expr(dt) for dt in floats for d in (uniform_dist(dt), normal_dist(dt))]
    out += [INT_SMALL.expr(dt) for dt in _dtypes.SUPPORTED if dt.kind in "biu"]
    out += [INT_LARGE.expr(dt) for dt in (_dtypes.int64, _dtypes.uint64)]
    out += [BERNOULLI.expr(dt) for dt in _dtypes.REAL]
    return sorted(out)
