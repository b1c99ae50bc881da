"""Cross-package checks against the installed wheels (not the source tree)."""

import importlib
import os
from importlib import metadata

import pytest

import pygpukit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = ["pygpukit_gemm", "pygpukit_nn", "pygpukit_llm", "pygpukit_audio", "pygpukit_triton", "pygpukit_serve"]


def test_core_is_the_installed_wheel_with_both_native_modules():
    pkg_dir = os.path.dirname(os.path.abspath(pygpukit.__file__))
    assert not pkg_dir.startswith(os.path.join(REPO, "packages")), f"imported from the source tree: {pkg_dir}"
    from pygpukit import _native, _rt

    assert os.path.dirname(os.path.abspath(_native.__file__)) == pkg_dir
    assert os.path.dirname(os.path.abspath(_rt.__file__)) == pkg_dir
    # kernel sources and their header travel as package data, for NVRTC at run time
    for rel in ("kernels/elementwise.cu", "kernels/reduce.cu", "kernels/include/pgk/types.cuh"):
        assert os.path.isfile(os.path.join(pkg_dir, rel)), rel


def test_core_dependencies_are_only_numpy_ml_dtypes_pluggy_and_nvrtc():
    names = {
        r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        for r in metadata.requires("pygpukit-core") or []
        if "extra ==" not in r
    }
    assert names == {"numpy", "ml_dtypes", "pluggy", "nvidia-cuda-nvrtc"}


@pytest.mark.parametrize("module", PLUGINS)
def test_plugin_packages_install_beside_core(module):
    mod = importlib.import_module(module)
    dist = module.replace("_", "-")
    assert mod.__version__ == metadata.version(dist)
    assert any(r.startswith("pygpukit-core") for r in metadata.requires(dist) or [])
