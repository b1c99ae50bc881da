import os

import pytest

from pygpukit.jit import nvrtc


@pytest.fixture
def need_nvrtc():
    """NVRTC is a dependency of pygpukit-core: in CI its absence is a failure, elsewhere a skip."""
    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    return nvrtc.load()
