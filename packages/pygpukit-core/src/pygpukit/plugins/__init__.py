"""Plugins: packages (or objects) that add ops, implementations and models.

``from pygpukit.plugins import hookimpl`` gives the marker for a plugin's hook
functions (see ``pygpukit.plugins.hookspecs``); ``plugins()`` lists what was
found, ``register`` adds a plugin that is not installed, ``disable`` and
``enable`` take one out and bring it back. pluggy is imported on first use
of the registry, not by ``import pygpukit``.
"""

from __future__ import annotations

from typing import Any

from .manager import PluginState, PluginWarning, disable, enable, plugins, register
from .registrars import BenchmarkRegistrar, CommandRegistrar, ModelRegistrar, NamespaceRegistrar, OpRegistrar, PluginInfo

__all__ = [
    "BenchmarkRegistrar",
    "CommandRegistrar",
    "ModelRegistrar",
    "NamespaceRegistrar",
    "OpRegistrar",
    "PluginInfo",
    "PluginState",
    "PluginWarning",
    "disable",
    "enable",
    "hookimpl",
    "hookspec",
    "models",
    "plugins",
    "register",
]


def models() -> list[Any]:
    """Every registered model architecture (``ModelEntry``: name, loader, description, plugin)."""
    from ..registry import REGISTRY

    REGISTRY.ensure_loaded()
    return REGISTRY.models.entries()


def __getattr__(name: str) -> Any:
    if name in ("hookimpl", "hookspec"):  # imports pluggy
        from . import hookspecs

        return getattr(hookspecs, name)
    raise AttributeError(f"module 'pygpukit.plugins' has no attribute {name!r}")
