from importlib import metadata

import pygpukit as gp
import pygpukit_nn
from pygpukit_nn import functional


def test_installed_as_a_separate_package_depending_on_core():
    assert pygpukit_nn.__version__ == metadata.version("pygpukit-nn")
    requires = metadata.requires("pygpukit-nn") or []
    assert any(r.startswith("pygpukit-core") for r in requires)


def test_gp_nn_is_the_functional_api():
    assert gp.nn is functional  # registered as a namespace by the plugin
