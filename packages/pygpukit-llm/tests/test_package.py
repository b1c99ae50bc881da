from importlib import metadata

import pygpukit_llm


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_llm.__version__ == metadata.version("pygpukit-llm")
    requires = metadata.requires("pygpukit-llm") or []
    assert any(r.startswith("pygpukit-core") for r in requires)
