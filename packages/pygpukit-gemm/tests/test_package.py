from importlib import metadata

import pygpukit_gemm


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_gemm.__version__ == metadata.version("pygpukit-gemm")
    requires = metadata.requires("pygpukit-gemm") or []
    assert any(r.startswith("pygpukit-core") for r in requires)
