"""The functional API of pygpukit-nn, also reachable as ``gp.nn``: each
function dispatches through the op registry (see ``pygpukit ops``), so a
route or another plugin can replace any of them."""

from __future__ import annotations

from .activations import geglu, gelu, log_softmax, relu, relu_squared, silu, softmax, swiglu
from .attention import scaled_dot_product_attention
from .conv import adaptive_avg_pool1d, avg_pool1d, conv1d, max_pool1d
from .decode_attn import decode_attention
from .embedding import embedding, lm_head
from .fused import add_rms_norm_linear, swiglu_linear
from .kv_cache import KVCache, PagedKVCache, kv_append, kv_gather
from .moe import moe_forward, permute, router_topk, unpermute
from .norms import add_layer_norm, add_rms_norm, group_norm, layer_norm, rms_norm
from .positional import RotaryEmbedding, alibi_bias, alibi_slopes, apply_rope, rope_cos_sin, rope_frequencies
from .sampling import apply_penalties, sample, token_counts

__all__ = [
    "KVCache",
    "PagedKVCache",
    "RotaryEmbedding",
    "adaptive_avg_pool1d",
    "add_layer_norm",
    "add_rms_norm",
    "add_rms_norm_linear",
    "alibi_bias",
    "alibi_slopes",
    "apply_penalties",
    "apply_rope",
    "avg_pool1d",
    "conv1d",
    "decode_attention",
    "embedding",
    "geglu",
    "gelu",
    "group_norm",
    "kv_append",
    "kv_gather",
    "layer_norm",
    "lm_head",
    "log_softmax",
    "max_pool1d",
    "moe_forward",
    "permute",
    "relu",
    "relu_squared",
    "rms_norm",
    "rope_cos_sin",
    "rope_frequencies",
    "router_topk",
    "sample",
    "scaled_dot_product_attention",
    "silu",
    "softmax",
    "swiglu",
    "swiglu_linear",
    "token_counts",
    "unpermute",
]
