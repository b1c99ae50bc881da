"""Shared fixtures: the same tests run on the CPU backend (CI) and on a GPU.

GPU-only tests carry ``@pytest.mark.gpu`` and skip cleanly without one.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import pygpukit as gp

ALL_DTYPES = [
    gp.bool_, gp.int8, gp.int16, gp.int32, gp.int64, gp.uint8, gp.uint16, gp.uint32, gp.uint64,
    gp.float16, gp.bfloat16, gp.float32, gp.float64, gp.float8_e4m3fn, gp.float8_e5m2,
]  # fmt: skip
FLOAT_DTYPES = [gp.float16, gp.bfloat16, gp.float32, gp.float64, gp.float8_e4m3fn, gp.float8_e5m2]


def pytest_collection_modifyitems(config, items):
    if gp.backend() == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (running on the CPU simulation backend)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random values that are exactly representable in ``dtype`` and never all zero."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        lo = 0 if dt.kind == "u" else -50
        return rng.integers(lo, 50, size=shape).astype(dt)
    vals = rng.standard_normal(shape) * 3
    return vals.astype(dt)


@pytest.fixture
def rng(request) -> np.random.Generator:
    # A fresh seed per test (different inputs per test, reproducible per test id).
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
