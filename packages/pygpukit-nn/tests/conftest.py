"""Helpers of the nn tests: NVRTC for the compile checks (a failure in CI,
where pygpukit-core brings it; a skip elsewhere without it)."""

from __future__ import annotations

import pytest

from gp_testing import require_nvrtc


@pytest.fixture
def need_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))  # compile, not a cache hit
    return require_nvrtc()
