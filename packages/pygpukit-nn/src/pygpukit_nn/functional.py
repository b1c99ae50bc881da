"""The functional API of pygpukit-nn, also reachable as ``gp.nn``: each
function dispatches through the op registry (see ``pygpukit ops``), so a
route or another plugin can replace any of them."""

from __future__ import annotations

from .activations import geglu, gelu, log_softmax, relu, relu_squared, silu, softmax, swiglu
from .norms import add_layer_norm, add_rms_norm, group_norm, layer_norm, rms_norm

__all__ = [
    "add_layer_norm",
    "add_rms_norm",
    "geglu",
    "gelu",
    "group_norm",
    "layer_norm",
    "log_softmax",
    "relu",
    "relu_squared",
    "rms_norm",
    "silu",
    "softmax",
    "swiglu",
]
