"""What the gemm suites share: their inputs, as each implementation's arrays
(the implementations themselves: ``pygpukit.benchmark.peers.impls``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp


def data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * 0.1).astype(np.float32)


def to(name: str, mod: Any, host: np.ndarray, dtype: str) -> Any:
    """``host`` as an array of implementation ``name`` in ``dtype``; None where it has no such dtype."""
    if name == "pygpukit":
        return gp.from_numpy(host.astype(getattr(gp, dtype)))
    if name == "torch":
        return mod.from_numpy(host).cuda().to(getattr(mod, dtype))
    if name == "cupy":
        return None if dtype == "bfloat16" else mod.asarray(host.astype(dtype))
    return host.astype(dtype) if dtype in ("float32", "float64") else None
