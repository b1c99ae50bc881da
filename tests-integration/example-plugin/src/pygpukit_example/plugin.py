"""The example plugin's hooks: what it adds to pygpukit, each attributed to
the plugin "example" (the name of its entry point)."""

from __future__ import annotations

from typing import Any

from pygpukit import ext
from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, benchmarks, cli, residual, softmax

MIN_SM = 80  # bfloat16 conversions


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-example-plugin", __version__, "scaled_residual_add, a softmax for row-strided arrays, an affine model")


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    # a new op: defined here, its reference on every backend, its kernel above it on CUDA
    ext.register_family(
        registry, residual.OP, nkey=2, doc=residual.DOC, reference=residual.reference,
        cuda=residual.kernel, dtypes=residual.KERNEL_DTYPES, min_sm=MIN_SM, priority=10, predicate=residual.kernel_takes,
    )  # fmt: skip
    # pygpukit's ops: only a kernel, above the builtin (priority 0), for the calls its predicate takes
    for op, fn in (("softmax", softmax.softmax), ("log_softmax", softmax.log_softmax)):
        ext.register_family(
            registry, op, nkey=1, define=False, cuda=fn, dtypes=softmax.KERNEL_DTYPES, min_sm=MIN_SM, priority=10, predicate=softmax.takes
        )


def load_affine(scale: float, shift: float) -> Any:
    """A "model": x * scale + shift."""
    return lambda x: x * scale + shift


@hookimpl
def pygpukit_register_models(registry: Any) -> None:
    registry.register("example-affine", load_affine, description="x * scale + shift")


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    registry.register(
        "example", benchmarks.run, description="scaled_residual_add and softmax of row-strided arrays, kernel against the alternative"
    )


@hookimpl
def pygpukit_register_commands(registry: Any) -> None:
    registry.register("example", cli.main, description="check the example plugin's ops against NumPy on this machine")


@hookimpl
def pygpukit_register_namespaces(registry: Any) -> None:
    registry.register("example", "pygpukit_example", description="the example plugin's functions (gp.example.scaled_residual_add)")
