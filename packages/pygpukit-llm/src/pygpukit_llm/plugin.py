"""The llm plugin's hooks: each supported architecture is a model in the
registry (``pygpukit models`` lists them), loaded by ``pygpukit_llm.load``."""

from __future__ import annotations

from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__
from .model import load
from .spec import SPECS


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-llm", __version__, "LLM inference from SafeTensors checkpoints: " + ", ".join(SPECS))


@hookimpl
def pygpukit_register_models(registry: Any) -> None:
    for name, spec in SPECS.items():
        kind = "mixture-of-experts" if spec.moe else "dense"
        mlp = "gated MLP" if spec.gated else "MLP"
        registry.register(
            name, load, description=f"{kind} decoder ({spec.norm} norm, {mlp}, {'rotary' if spec.rotary else 'learned'} positions)"
        )
