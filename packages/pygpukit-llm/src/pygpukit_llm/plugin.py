"""The llm plugin's hooks: each supported architecture is a model in the
registry (``pygpukit models`` lists them), loaded by ``pygpukit_llm.load``;
and the commands ``pygpukit chat``, ``pygpukit generate`` (cli.py) and
``pygpukit bench-llm`` (bench.py), whose modules are imported when the
command runs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__
from .model import load
from .spec import SPECS

# command -> (module of pygpukit_llm, its main(argv), description)
COMMANDS = {
    "chat": ("cli", "chat_main", "chat with a model directory in the terminal"),
    "generate": ("cli", "generate_main", "complete a prompt with a model directory, streaming the text"),
    "bench-llm": ("bench", "main", "LLM load, decode and prefill throughput, beside transformers where installed"),
}


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


def _command(module: str, function: str) -> Callable[[list[str]], int]:
    def main(argv: list[str]) -> int:
        return getattr(importlib.import_module(f"{__package__}.{module}"), function)(argv)  # type: ignore[no-any-return]

    return main


@hookimpl
def pygpukit_register_commands(registry: Any) -> None:
    for name, (module, function, description) in COMMANDS.items():
        registry.register(name, _command(module, function), description=description)
