"""Shared test helpers for pygpukit-core (importable: tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.jit import nvrtc

ALL_DTYPES = [
    gp.bool_, gp.int8, gp.int16, gp.int32, gp.int64, gp.uint8, gp.uint16, gp.uint32, gp.uint64,
    gp.float16, gp.bfloat16, gp.float32, gp.float64, gp.float8_e4m3fn, gp.float8_e5m2,
]  # fmt: skip
FLOAT_DTYPES = [gp.float16, gp.bfloat16, gp.float32, gp.float64, gp.float8_e4m3fn, gp.float8_e5m2]


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random values that are exactly representable in ``dtype`` and never all zero."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.integers(0, 2, size=shape)).astype(bool)
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -50
        return np.asarray(rng.integers(lo, 50, size=shape)).astype(dt)
    return np.asarray(rng.standard_normal(shape) * 3).astype(dt)


def require_nvrtc():
    """NVRTC is a dependency of pygpukit-core: in CI its absence is a failure, elsewhere a skip."""
    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    return nvrtc.load()
