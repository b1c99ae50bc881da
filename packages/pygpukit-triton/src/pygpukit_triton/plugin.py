"""The triton plugin's hooks: Triton implementations of pygpukit's ops under
backend "triton" (see pygpukit_triton.ops), and the benchmark suite
``triton_ops``. The implementations rank below every native one (priority
-1): the registry runs them where an op is routed to Triton
(``gp.route("rms_norm", "triton")``, ``PYGPUKIT_ROUTE``), for the arguments
their predicates accept.

Core's ops (softmax, matmul, linear) are always registered. The ops that
pygpukit-nn defines (norms, activations, rope, sdpa) are registered only
when pygpukit_nn is importable (the optional dependency ``nn``:
``pip install 'pygpukit-triton[nn]'``): their implementations check their
arguments with nn's public ``pygpukit_nn.checks``. Loading the plugin does
not import Triton; without Triton the registry lists these implementations
as not runnable here."""

from __future__ import annotations

import importlib.util
from importlib import metadata
from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, _triton
from .ops import activations, attention, norms, rotary, softmax_rows, tiled_matmul

PRIORITY = -1
MIN_SM = 80  # bfloat16 loads, stores and tensor-core dots
FLOATS = ["float16", "bfloat16", "float32"]
HALF = ["float16", "bfloat16"]

# (op, implementation, dtypes, predicate) of core's ops
CORE_OPS = (
    ("softmax", softmax_rows.softmax, FLOATS, softmax_rows.applies),
    ("matmul", tiled_matmul.matmul, HALF, tiled_matmul.applies),
    ("linear", tiled_matmul.linear, HALF, tiled_matmul.applies),
)
# ... and of pygpukit-nn's ops (op names and signatures of pygpukit-nn)
NN_OPS = (
    ("rms_norm", norms.rms_norm, FLOATS, norms.applies),
    ("layer_norm", norms.layer_norm, FLOATS, norms.applies),
    ("add_rms_norm", norms.add_rms_norm, FLOATS, norms.applies),
    ("add_layer_norm", norms.add_layer_norm, FLOATS, norms.applies),
    ("swiglu", activations.swiglu, FLOATS, activations.applies),
    ("geglu", activations.geglu, FLOATS, activations.applies),
    ("gelu", activations.gelu, FLOATS, activations.applies),
    ("rope", rotary.rope, FLOATS, rotary.applies),
    ("sdpa", attention.sdpa, HALF, attention.applies),
)


def has_nn() -> bool:
    """Whether pygpukit-nn is importable (without importing it)."""
    return importlib.util.find_spec("pygpukit_nn") is not None


def _triton_version() -> str:
    try:
        return f"triton {metadata.version('triton')}"
    except metadata.PackageNotFoundError:
        return f"triton not installed: {_triton.INSTALL_HINT}"


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    missing = "" if has_nn() else f"; not registered (pygpukit-nn is not installed): {', '.join(op for op, *_ in NN_OPS)}"
    return PluginInfo("pygpukit-triton", __version__, f"Triton implementations of norms, softmax, activations (gelu, swiglu, geglu), rope, matmul, linear, "
                                                      f"attention ({_triton_version()}){missing}")  # fmt: skip


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    # every op here is another's (core's or nn's): implementations only, no definitions
    for op, fn, dtypes, predicate in CORE_OPS + (NN_OPS if has_nn() else ()):
        registry.register(op, fn, backend="triton", dtypes=dtypes, min_sm=MIN_SM, priority=PRIORITY, predicate=predicate, name="triton")


def _bench_triton_ops(rec: Any, quick: bool) -> None:
    from .benchmarks.triton_ops import bench_triton_ops  # imported when the suite runs

    bench_triton_ops(rec, quick)


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    registry.register(
        "triton_ops",
        _bench_triton_ops,
        description="pygpukit-triton's ops (norms, softmax, activations, rope, matmul, sdpa) beside the native ones and "
        "PyTorch, and the host time of a Triton launch (GPU and triton only)",
    )
