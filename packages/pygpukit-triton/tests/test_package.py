from importlib import metadata

import pygpukit_triton


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_triton.__version__ == metadata.version("pygpukit-triton")
    requires = metadata.requires("pygpukit-triton") or []
    assert any(r.startswith("pygpukit-core") for r in requires)
