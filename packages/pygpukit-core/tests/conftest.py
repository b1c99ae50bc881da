"""Fixtures: the same tests run on the CPU backend (CI) and on a GPU.

GPU-only tests carry ``@pytest.mark.gpu`` and skip cleanly without one.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import require_nvrtc


def pytest_collection_modifyitems(config, items):
    if gp.backend() == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (running on the CPU simulation backend)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request) -> np.random.Generator:
    # Fresh inputs per test, reproducible per test id.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def need_nvrtc():
    return require_nvrtc()
