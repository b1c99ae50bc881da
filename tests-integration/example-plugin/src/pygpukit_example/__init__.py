"""A third-party plugin, as an outside package would write one.

- a new op, ``axpy(x, y, alpha)`` = alpha * x + y, for float32/float64 on the
  CUDA and CPU backends;
- an override of core's ``softmax`` for float64 (priority 10) along one axis
  of a non-empty array (a predicate: core keeps the other cases), which counts
  its calls so that tests can see it ran;
- a model architecture, "example-affine".
"""

from __future__ import annotations

import pygpukit as gp
from pygpukit.plugins import PluginInfo, hookimpl

__version__ = "0.3.0"
calls = {"softmax": 0}


def axpy(x, y, alpha=1.0):
    return x * alpha + y


def softmax64(x, axis=-1):
    calls["softmax"] += 1
    e = gp.exp(x - gp.max(x, axis=axis, keepdims=True))
    return e / gp.sum(e, axis=axis, keepdims=True)


def one_axis(x, axis=-1):
    return isinstance(axis, int) and x.size > 0


def load_affine(scale, shift):
    return lambda x: x * scale + shift


@hookimpl
def pygpukit_plugin_info():
    return PluginInfo("pygpukit-example-plugin", __version__, "axpy, a float64 softmax, an affine model")


@hookimpl
def pygpukit_register_ops(registry):
    registry.define("axpy", nkey=2, doc="alpha * x + y")
    for backend in ("cuda", "cpu"):
        registry.register("axpy", axpy, backend=backend, dtypes=["float32", "float64"])
        registry.register("softmax", softmax64, backend=backend, dtypes=["float64"], priority=10, predicate=one_axis)


@hookimpl
def pygpukit_register_models(registry):
    registry.register("example-affine", load_affine, description="x * scale + shift")
