"""The nn plugin's hooks: every module of the package defines its ops in the
registry and registers a reference implementation (any backend, any float
dtype) and, where it has one, its CUDA kernel (above the reference)."""

from __future__ import annotations

from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, activations, attention, conv, decode, embedding, kv_cache, moe, norms, positional, sampling

# The modules that define ops, in registration order; each has register(registry).
MODULES = (norms, activations, positional, embedding, attention, kv_cache, decode, sampling, moe, conv)


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-nn", __version__, "norms, activations, RoPE, embedding, attention, KV caches, sampling, MoE, conv1d")


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    for module in MODULES:
        module.register(registry)
