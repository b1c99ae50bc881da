"""Helpers of the audio tests: the plugin registered explicitly when the package
runs from its source tree (not installed, so no entry point), and NVRTC for
the compile checks (a failure in CI, a skip elsewhere without it)."""

from __future__ import annotations

import os
from importlib import metadata

import pytest

import pygpukit as gp

try:
    metadata.version("pygpukit-audio")
except metadata.PackageNotFoundError:
    from pygpukit_audio import plugin

    gp.plugins.register(plugin, name="audio")


@pytest.fixture
def need_nvrtc(tmp_path, monkeypatch):
    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    return nvrtc.load()
