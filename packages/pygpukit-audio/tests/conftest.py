"""Helpers of the audio tests: the DSP modules' ops in the registry (registered
here as a test plugin until the package's plugin lists them), and NVRTC for the compile checks (a failure in CI, where
pygpukit-core brings it; a skip elsewhere without it)."""

from __future__ import annotations

import os

import pytest

import pygpukit as gp
from pygpukit.plugins import hookimpl
from pygpukit.registry import REGISTRY
from pygpukit_audio import filters, mel, resample

DSP_MODULES = (filters, resample, mel)


class _DspOps:
    @hookimpl
    def pygpukit_register_ops(self, registry):
        for module in DSP_MODULES:
            module.register(registry)


if "sosfilt_rows" not in REGISTRY.op_names():
    gp.plugins.register(_DspOps(), name="audio-dsp-tests")


@pytest.fixture
def need_nvrtc(tmp_path, monkeypatch):
    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    return nvrtc.load()
