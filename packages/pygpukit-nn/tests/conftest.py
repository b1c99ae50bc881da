"""Helpers of the nn tests: NVRTC for the compile checks (a failure in CI,
where pygpukit-core brings it; a skip elsewhere without it)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def need_nvrtc(tmp_path, monkeypatch):
    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    return nvrtc.load()
