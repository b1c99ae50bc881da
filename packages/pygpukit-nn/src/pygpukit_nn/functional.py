"""The functional API of pygpukit-nn, also reachable as ``gp.nn``: each
function dispatches through the op registry (see ``pygpukit ops``), so a
route or another plugin can replace any of them."""

from __future__ import annotations

from .activations import geglu, gelu, log_softmax, relu, relu_squared, silu, softmax, swiglu
from .embedding import embedding, lm_head
from .norms import add_layer_norm, add_rms_norm, group_norm, layer_norm, rms_norm
from .positional import RotaryEmbedding, alibi_bias, alibi_slopes, apply_rope, rope_cos_sin, rope_frequencies

__all__ = [
    "RotaryEmbedding",
    "add_layer_norm",
    "add_rms_norm",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "embedding",
    "geglu",
    "gelu",
    "group_norm",
    "layer_norm",
    "lm_head",
    "log_softmax",
    "relu",
    "relu_squared",
    "rms_norm",
    "rope_cos_sin",
    "rope_frequencies",
    "silu",
    "softmax",
    "swiglu",
]
