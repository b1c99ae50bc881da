"""What a plugin's hooks receive and return: the registrars bound to the
plugin's name (every op, model, benchmark, command and namespace it adds is
attributed to it) and ``PluginInfo``. A leaf module: the hookspecs, the
manager and the registry's users import it, it imports only the registry's
entry types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import PluginError
from ..registry import BenchmarkEntry, CommandEntry, ModelEntry, NamespaceEntry

if TYPE_CHECKING:
    from ..registry import Impl, OpRegistry


@dataclass(frozen=True)
class PluginInfo:
    """What ``pygpukit_plugin_info`` returns."""

    name: str
    version: str = ""
    description: str = ""


class OpRegistrar:
    """The op registry as a plugin sees it: everything it adds carries its name."""

    def __init__(self, registry: OpRegistry, plugin: str) -> None:
        self._registry = registry
        self.plugin = plugin

    def define(self, op: str, *, nkey: int, doc: str = "") -> Callable[..., Any]:
        return self._registry.define(op, nkey=nkey, doc=doc, plugin=self.plugin)

    def register(self, op: str, fn: Callable[..., Any], *, backend: str, **fields: Any) -> Impl:
        if "plugin" in fields:
            raise PluginError(f"plugin {self.plugin!r}: the plugin of an implementation is the registering plugin")
        return self._registry.register(op, fn, backend=backend, plugin=self.plugin, **fields)


class ModelRegistrar:
    def __init__(self, registry: OpRegistry, plugin: str) -> None:
        self._models = registry.models
        self.plugin = plugin

    def register(self, name: str, loader: Callable[..., Any], *, description: str = "") -> ModelEntry:
        return self._models.register(name, loader, description=description, plugin=self.plugin)


class BenchmarkRegistrar:
    """``register(name, run, description=...)``: a suite of ``python -m pygpukit.benchmark``;
    ``run(recorder, quick)`` records with ``pygpukit.benchmark.harness``."""

    def __init__(self, registry: OpRegistry, plugin: str) -> None:
        self._catalog = registry.benchmarks
        self.plugin = plugin

    def register(self, name: str, run: Callable[..., Any], *, description: str = "") -> BenchmarkEntry:
        if not callable(run):
            raise PluginError(f"plugin {self.plugin!r}: benchmark {name!r} must be callable as run(recorder, quick)")
        return self._catalog.add(BenchmarkEntry(name, run, description, self.plugin))  # type: ignore[no-any-return]


class CommandRegistrar:
    """``register(name, main, description=...)``: ``pygpukit NAME args...`` calls
    ``main(args)``, which returns an exit status (None counts as 0)."""

    def __init__(self, registry: OpRegistry, plugin: str) -> None:
        self._catalog = registry.commands
        self.plugin = plugin

    def register(self, name: str, main: Callable[[list[str]], Any], *, description: str = "") -> CommandEntry:
        if not callable(main):
            raise PluginError(f"plugin {self.plugin!r}: command {name!r} must be callable as main(argv)")
        return self._catalog.add(CommandEntry(name, main, description, self.plugin))  # type: ignore[no-any-return]


class NamespaceRegistrar:
    """``register(name, module, description=...)``: ``gp.<name>`` is the module
    named ``module`` (a dotted import path), imported on first access."""

    def __init__(self, registry: OpRegistry, plugin: str) -> None:
        self._catalog = registry.namespaces
        self.plugin = plugin

    def register(self, name: str, module: str, *, description: str = "") -> NamespaceEntry:
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            raise PluginError(f"plugin {self.plugin!r}: namespace {name!r} needs a dotted module path, got {module!r}")
        if not name.isidentifier():
            raise PluginError(f"plugin {self.plugin!r}: namespace name {name!r} is not a Python identifier")
        return self._catalog.add(NamespaceEntry(name, module, description, self.plugin))  # type: ignore[no-any-return]
