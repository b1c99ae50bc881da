"""The nn plugin's hooks: every module of the package that defines ops
registers them (a reference implementation on every backend, any float
dtype, and where it has one its CUDA kernel above it); the benchmark suites
of ``python -m pygpukit.benchmark`` (imported when they run, so loading the
plugin stays cheap); and ``gp.nn``, the functional API."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, activations, attention, conv, decode_attn, embedding, fused, kv_cache, moe, norms, positional, sampling

# The modules that define ops, in registration order; each has register(registry).
MODULES = (norms, activations, positional, embedding, attention, kv_cache, decode_attn, sampling, moe, conv, fused)

# suite -> (module under pygpukit_nn.benchmarks, its run function, description)
BENCHMARKS = {
    "nn_norms": ("norms", "bench_nn_norms", "rms_norm, layer_norm, add_rms_norm, swiglu, softmax on bf16 rows (GB/s) against PyTorch"),
    "nn_rope": ("rope", "bench_nn_rope", "RoPE in place and the embedding gather at Llama-3-8B prefill shapes (GB/s) against PyTorch"),
    "nn_sampling": ("sampling", "bench_nn_sampling", "one token per row of (8, 152064) logits: top-p, top-k + top-p, plain (us)"),
    "nn_attention": ("attention", "bench_nn_attention", "causal / GQA bf16 prefill attention (TFLOP/s) against PyTorch's SDPA"),
    "nn_decode": ("decode", "bench_nn_decode", "decode attention, GQA bf16, 1k-32k contexts: contiguous, paged, fp8 caches vs torch"),
    "nn_moe": ("moe", "bench_nn_moe", "MoE routing and moe_forward (Mixtral-like), Whisper's conv1d, bf16, against PyTorch"),
}


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-nn", __version__, "norms, activations, RoPE, embedding, attention, KV caches, sampling, MoE, conv1d")


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    for module in MODULES:
        module.register(registry)


def _suite(module: str, function: str) -> Callable[[Any, bool], None]:
    def run(rec: Any, quick: bool) -> None:
        getattr(importlib.import_module(f"pygpukit_nn.benchmarks.{module}"), function)(rec, quick)

    return run


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    for name, (module, function, description) in BENCHMARKS.items():
        registry.register(name, _suite(module, function), description=description)


@hookimpl
def pygpukit_register_namespaces(registry: Any) -> None:
    registry.register("nn", "pygpukit_nn.functional", description="pygpukit-nn's functional API (norms, activations, attention, ...)")
