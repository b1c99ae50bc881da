"""The triton plugin's hooks: Triton implementations of pygpukit's ops under
backend "triton" (see pygpukit_triton.ops). They rank below every native
implementation (priority -1): the registry runs them where an op is routed
to Triton (``gp.route("rms_norm", "triton")``, ``PYGPUKIT_ROUTE``), for the
arguments their predicates accept. Ops that pygpukit-nn defines are
registered only when it is installed and active. Loading the plugin does
not import Triton; without Triton the registry lists these implementations
as not runnable here."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from pygpukit import PluginError
from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, _triton
from .ops import activations, attention, norms, rotary, softmax_rows, tiled_matmul

PRIORITY = -1
MIN_SM = 80  # bfloat16 loads, stores and tensor-core dots
FLOATS = ["float16", "bfloat16", "float32"]
HALF = ["float16", "bfloat16"]

# (op, implementation, dtypes, predicate): op names and signatures of pygpukit-nn and core
OPS = (
    ("rms_norm", norms.rms_norm, FLOATS, norms.applies),
    ("layer_norm", norms.layer_norm, FLOATS, norms.applies),
    ("add_rms_norm", norms.add_rms_norm, FLOATS, norms.applies),
    ("add_layer_norm", norms.add_layer_norm, FLOATS, norms.applies),
    ("softmax", softmax_rows.softmax, FLOATS, softmax_rows.applies),
    ("swiglu", activations.swiglu, FLOATS, activations.applies),
    ("geglu", activations.geglu, FLOATS, activations.applies),
    ("gelu", activations.gelu, FLOATS, activations.applies),
    ("rope", rotary.rope, FLOATS, rotary.applies),
    ("matmul", tiled_matmul.matmul, HALF, tiled_matmul.applies),
    ("linear", tiled_matmul.linear, HALF, tiled_matmul.applies),
    ("sdpa", attention.sdpa, HALF, attention.applies),
)
_skipped: list[str] = []


def _triton_version() -> str:
    try:
        return f"triton {metadata.version('triton')}"
    except metadata.PackageNotFoundError:
        return f"triton not installed: {_triton.INSTALL_HINT}"


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    missing = f"; not registered (op not defined here): {', '.join(_skipped)}" if _skipped else ""
    return PluginInfo("pygpukit-triton", __version__, f"Triton implementations of norms, softmax, activations (gelu, swiglu, geglu), rope, matmul, linear, "
                                                      f"attention ({_triton_version()}){missing}")  # fmt: skip


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    _skipped.clear()
    for op, fn, dtypes, predicate in OPS:
        try:
            registry.register(op, fn, backend="triton", dtypes=dtypes, min_sm=MIN_SM, priority=PRIORITY, predicate=predicate, name="triton")
        except PluginError as e:
            if "is not defined" not in str(e):  # pygpukit-nn absent or disabled: its ops do not exist
                raise
            _skipped.append(op)
