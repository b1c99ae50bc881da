"""Helpers of the audio tests: the plugin registered explicitly when the package
runs from its source tree (not installed, so no entry point), and NVRTC for
the compile checks (a failure in CI, a skip elsewhere without it)."""

from __future__ import annotations

from importlib import metadata

import pytest

import pygpukit as gp
from gp_testing import require_nvrtc

try:
    metadata.version("pygpukit-audio")
except metadata.PackageNotFoundError:
    from pygpukit_audio import plugin

    gp.plugins.register(plugin, name="audio")


@pytest.fixture
def need_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))  # compile, not a cache hit
    return require_nvrtc()
