"""Finding, loading, disabling and listing plugins.

pluggy is imported only here, when the registry is first used: importing
pygpukit costs nothing for plugins. Each plugin's hooks are called on their
own, so a failing plugin is reported (PluginWarning, and its state in
``gp.plugins.plugins()``) and left out without taking the others or core down.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any

from .._errors import PluginError
from ..registry import REGISTRY, OpRegistry
from .registrars import BenchmarkRegistrar, CommandRegistrar, ModelRegistrar, NamespaceRegistrar, OpRegistrar, PluginInfo


class PluginWarning(UserWarning):
    """A plugin could not be loaded or its hooks failed; it was left out."""


@dataclass
class PluginState:
    """A plugin pygpukit knows of: where it came from and whether it is active."""

    name: str
    source: str  # "entry point NAME = VALUE (DIST VERSION)" or "registered explicitly"
    status: str  # "active", "disabled", or "failed: ..."
    info: PluginInfo | None = None
    obj: Any = None


_lock = threading.RLock()
_states: dict[str, PluginState] = {}
_explicit: list[PluginState] = []
_entry_points: dict[str, Any] = {}  # name -> importlib.metadata.EntryPoint
_registry: OpRegistry | None = None  # set once the registry has loaded
_pm: Any = None


def _manager() -> Any:
    global _pm
    if _pm is None:
        import pluggy

        from . import hookspecs

        _pm = pluggy.PluginManager(hookspecs.PROJECT)
        _pm.add_hookspecs(hookspecs)
    return _pm


def _disabled_by_env() -> set[str]:
    return {s.strip() for s in os.environ.get("PYGPUKIT_DISABLE_PLUGINS", "").split(",") if s.strip()}


def load_all(registry: OpRegistry) -> None:
    """Called once by the registry: every entry point of group ``pygpukit``, then
    the plugins registered explicitly, minus those PYGPUKIT_DISABLE_PLUGINS names."""
    global _registry
    with _lock:
        _registry = registry
        off = _disabled_by_env()
        from importlib import metadata  # 20 ms: only when plugins are first loaded

        for ep in sorted(metadata.entry_points(group="pygpukit"), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            source = f"entry point {ep.name} = {ep.value}" + (f" ({dist.name} {dist.version})" if dist is not None else "")
            if ep.name in _states:
                continue  # the same name twice on sys.path: the first wins
            state = _states[ep.name] = PluginState(ep.name, source, "disabled")
            _entry_points[ep.name] = ep
            if ep.name in off:
                state.status = "disabled (PYGPUKIT_DISABLE_PLUGINS)"
                continue
            _load_and_activate(state)
        for state in _explicit:
            if state.name in off:
                state.status = "disabled (PYGPUKIT_DISABLE_PLUGINS)"
            else:
                _activate(state)
        unknown = sorted(off - set(_states) - {s.name for s in _explicit})
        if unknown:  # most likely a typo: the plugin it meant is running
            warnings.warn(f"PYGPUKIT_DISABLE_PLUGINS names no installed plugin: {', '.join(unknown)} (installed: "
                          f"{', '.join(sorted(_states)) or 'none'})", PluginWarning, stacklevel=3)  # fmt: skip


def _load_and_activate(state: PluginState) -> None:
    if state.obj is None:
        ep = _entry_points[state.name]
        try:
            state.obj = ep.load()
        except Exception as e:
            _fail(state, f"importing {ep.value} raised {type(e).__name__}: {e}")
            return
    _activate(state)


def _fail(state: PluginState, why: str) -> None:
    state.status = f"failed: {why}"
    warnings.warn(f"pygpukit plugin {state.name!r} was left out: {why}", PluginWarning, stacklevel=4)


def _activate(state: PluginState) -> None:
    """Register ``state.obj`` with pluggy and call its hooks with registrars in its name."""
    assert _registry is not None
    pm, name = _manager(), state.name
    try:
        pm.register(state.obj, name=name)
        pm.check_pending()  # a hook function pygpukit does not define (a typo) is an error
    except Exception as e:  # pluggy's PluginValidationError
        if pm.has_plugin(name):
            pm.unregister(name=name)
        _fail(state, f"{type(e).__name__}: {e}")
        return
    try:
        state.info = _own_result(pm.hook.pygpukit_plugin_info, name, {})
        _own_result(pm.hook.pygpukit_register_ops, name, {"registry": OpRegistrar(_registry, name)})
        _own_result(pm.hook.pygpukit_register_models, name, {"registry": ModelRegistrar(_registry, name)})
        _own_result(pm.hook.pygpukit_register_benchmarks, name, {"registry": BenchmarkRegistrar(_registry, name)})
        _own_result(pm.hook.pygpukit_register_commands, name, {"registry": CommandRegistrar(_registry, name)})
        _own_result(pm.hook.pygpukit_register_namespaces, name, {"registry": NamespaceRegistrar(_registry, name)})
    except Exception as e:
        _retract(name)
        _fail(state, f"its hooks raised {type(e).__name__}: {e}")
        return
    state.status = "active"


def _own_result(hook: Any, plugin: str, kwargs: dict[str, Any]) -> Any:
    """Call only ``plugin``'s implementation of ``hook`` (None if it has none)."""
    for impl in hook.get_hookimpls():
        if impl.plugin_name == plugin:
            return impl.function(*[kwargs[a] for a in impl.argnames])
    return None


def _retract(name: str) -> None:
    assert _registry is not None
    _registry.remove_plugin(name)
    for catalog in (_registry.models, _registry.benchmarks, _registry.commands, _registry.namespaces):
        catalog.remove_plugin(name)
    pm = _manager()
    if pm.has_plugin(name):
        pm.unregister(name=name)


def register(obj: Any, name: str | None = None) -> PluginState:
    """Register a plugin that is not an installed package (a module or an object
    with ``@hookimpl`` functions). Its hooks run now if the registry has loaded,
    else with the others on first use. Returns its state (check ``status``)."""
    name = name or getattr(obj, "__name__", None) or type(obj).__name__
    with _lock:
        if name in _states or any(s.name == name for s in _explicit):
            raise PluginError(f"a plugin named {name!r} is already known; pass another name=")
        state = PluginState(name, "registered explicitly", "disabled", obj=obj)
        _explicit.append(state)
        if _registry is not None:
            _activate(state)
        return state


def disable(name: str) -> None:
    """Remove every op, implementation and model of plugin ``name``; its
    dispatch caches are cleared, so the next calls take core's or another's."""
    _ensure_loaded()
    with _lock:
        state = _find(name)
        if state.status == "active":
            _retract(name)
        state.status = "disabled"


def enable(name: str) -> PluginState:
    """Bring a disabled plugin back: its hooks run again. Returns its state."""
    _ensure_loaded()
    with _lock:
        state = _find(name)
        if state.status.startswith("disabled"):
            _load_and_activate(state)
        return state


def _ensure_loaded() -> None:
    REGISTRY.ensure_loaded()


def _find(name: str) -> PluginState:
    state = _states.get(name) or next((s for s in _explicit if s.name == name), None)
    if state is None:
        known = sorted([*_states, *(s.name for s in _explicit)])
        raise PluginError(f"no plugin named {name!r}; known plugins: {', '.join(known) or 'none'}")
    return state


def plugins() -> list[PluginState]:
    """Every plugin found or registered, with its source, info and status."""
    _ensure_loaded()
    with _lock:
        return [*(_states[k] for k in sorted(_states)), *_explicit]


REGISTRY.plugin_loader = load_all  # the registry calls it on first use (it imports no plugin code itself)
