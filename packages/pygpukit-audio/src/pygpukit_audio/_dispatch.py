"""The registry's dispatcher of an op, for the public functions: each passes
its arguments positionally (the registry's fast path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pygpukit.registry import REGISTRY


def op(name: str) -> Callable[..., Any]:
    """``gp.ops.<name>``: loads the plugins on first use, then a dict lookup."""
    return REGISTRY.dispatcher(name)
