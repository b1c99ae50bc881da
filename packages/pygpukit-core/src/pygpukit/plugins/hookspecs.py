"""The hooks a pygpukit plugin implements (pluggy, project name "pygpukit").

A plugin is a module or object with functions marked ``@hookimpl``; an
installed package announces it through the entry-point group ``pygpukit``::

    [project.entry-points.pygpukit]
    mine = "my_package.plugin"

and an object that is not installed is registered with
``gp.plugins.register(obj, name="mine")``. Hooks are called once per plugin
when the registry is first used (not at ``import pygpukit``), each with
registrars bound to the plugin's name, so every op, implementation and model
is attributed to the plugin that gave it.
"""

from __future__ import annotations

import pluggy

from .registrars import BenchmarkRegistrar, CommandRegistrar, ModelRegistrar, NamespaceRegistrar, OpRegistrar, PluginInfo

PROJECT = "pygpukit"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def pygpukit_plugin_info() -> PluginInfo:  # type: ignore[empty-body]
    """Name, version and a one-line description of the plugin."""


@hookspec
def pygpukit_register_ops(registry: OpRegistrar) -> None:
    """Define new ops (``registry.define``) and register implementations
    (``registry.register(op, fn, backend=..., dtypes=..., min_sm=..., priority=...,
    predicate=...)``) of new or existing ops."""


@hookspec
def pygpukit_register_models(registry: ModelRegistrar) -> None:
    """Register model architectures: ``registry.register(name, loader, description=...)``."""


@hookspec
def pygpukit_register_benchmarks(registry: BenchmarkRegistrar) -> None:
    """Register benchmark suites of ``python -m pygpukit.benchmark``:
    ``registry.register(name, run, description=...)``, ``run(recorder, quick)``."""


@hookspec
def pygpukit_register_commands(registry: CommandRegistrar) -> None:
    """Register ``pygpukit NAME`` commands: ``registry.register(name, main, description=...)``,
    ``main(argv)`` returns an exit status."""


@hookspec
def pygpukit_register_namespaces(registry: NamespaceRegistrar) -> None:
    """Register attributes of ``pygpukit`` served by a module of the plugin
    (``registry.register("nn", "pygpukit_nn.functional")`` gives ``gp.nn``)."""
