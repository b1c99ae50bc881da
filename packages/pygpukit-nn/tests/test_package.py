from importlib import metadata

import pygpukit_nn


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_nn.__version__ == metadata.version("pygpukit-nn")
    requires = metadata.requires("pygpukit-nn") or []
    assert any(r.startswith("pygpukit-core") for r in requires)
