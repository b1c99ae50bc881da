"""Every name expression pygpukit launches, per kernel source: what the compile
check builds (tests/test_kernels_compile.py) and scripts/warm-kernel-cache.py
compiles ahead of time.

The CUDA backend's family modules know their templates; the elementwise
kernels are instantiated for the front end's ufuncs, which is why this list
lives here, above both, and not in the backend.
"""

from __future__ import annotations

from .. import ufuncs
from .._backend.cuda import elementwise, indexing, random, reduce, softmax, sort


def instantiations() -> dict[str, list[str]]:
    """Per kernel file (kernels.SOURCES), the name expressions of every kernel
    template with every dtype it serves (casts between every pair)."""
    out = {
        "elementwise": elementwise.instantiations(uf for uf in vars(ufuncs).values() if isinstance(uf, ufuncs.Ufunc)),
        "random": random.instantiations(),
        "softmax": softmax.instantiations(),
        "sort": sort.instantiations(),
    }
    out.update(reduce.instantiations())
    out.update(indexing.instantiations())
    return out
