"""For every test directory of the monorepo: tests marked ``gpu`` skip cleanly
on the CPU simulation backend (CI), and run on the GPU test machine; ``rng``
gives fresh random inputs per test, reproducible per test id."""

from __future__ import annotations

import zlib

import numpy as np
import pytest


@pytest.fixture
def rng(request) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def pytest_collection_modifyitems(config, items):
    import pygpukit as gp

    if gp.backend() == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (running on the CPU simulation backend)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
