"""Triton implementations of pygpukit's ops, with the signatures of the ops
they implement (pygpukit-nn's norms, activations, gelu, rope and sdpa;
core's softmax, matmul and linear). The plugin registers them under backend
"triton" (nn's only where pygpukit-nn is installed: they check their
arguments with ``pygpukit_nn.checks``); they can also be called directly."""

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
