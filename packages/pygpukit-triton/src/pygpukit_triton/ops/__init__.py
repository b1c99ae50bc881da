"""Triton implementations of pygpukit's ops, with the signatures of the ops
they implement (pygpukit-nn's norms, activations, rope and sdpa; core's
softmax and matmul). The plugin registers them under backend "triton";
they can also be called directly. ``gelu`` is core's ufunc ``gp.gelu`` (not
a registry op), so it is only offered here as a function."""

from .activations import geglu, gelu, swiglu
from .attention import sdpa
from .norms import add_layer_norm, add_rms_norm, layer_norm, rms_norm
from .rotary import rope
from .softmax_rows import softmax
from .tiled_matmul import linear, matmul

__all__ = [
    "add_layer_norm",
    "add_rms_norm",
    "geglu",
    "gelu",
    "layer_norm",
    "linear",
    "matmul",
    "rms_norm",
    "rope",
    "sdpa",
    "softmax",
    "swiglu",
]
