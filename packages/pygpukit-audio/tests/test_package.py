from importlib import metadata

import pygpukit_audio


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_audio.__version__ == metadata.version("pygpukit-audio")
    requires = metadata.requires("pygpukit-audio") or []
    assert any(r.startswith("pygpukit-core") for r in requires)
