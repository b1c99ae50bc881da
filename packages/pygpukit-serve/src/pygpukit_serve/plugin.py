"""The serve plugin's hooks: the command ``pygpukit serve`` (cli.py, imported when it runs)."""

from __future__ import annotations

from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo(
        "pygpukit-serve", __version__, "an OpenAI-compatible server: continuous batching, prefix caching, a QoS tier per model"
    )


def _serve(argv: list[str]) -> int:
    from .cli import main

    return main(argv)


@hookimpl
def pygpukit_register_commands(registry: Any) -> None:
    registry.register("serve", _serve, description="serve models over an OpenAI-compatible HTTP API")


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    def run(rec: Any, quick: bool) -> None:  # imports the suite (the engine, pygpukit-llm) only when it runs
        from .benchmarks import serve

        serve.run(rec, quick)

    registry.register("serve", run, description="the engine under closed-loop and Poisson loads (tok/s, TTFT, ITL) against generate")
