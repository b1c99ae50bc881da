"""The ops of the registry: ``gp.ops.table()`` lists every op and its
implementations, and which one runs here and why; ``gp.ops.<name>`` is an
op's dispatcher (core ops are also ``gp.<name>``; plugin ops live here).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .registry import REGISTRY, ImplRow

__all__ = ["ImplRow", "format_table", "names", "table", "which"]


def table() -> list[ImplRow]:
    """One row per implementation: op, implementation, backend, dtypes, minimum SM,
    priority, plugin, and its status here ("runs here [for ...]" or why not)."""
    return REGISTRY.table()


def which(op: str, *args: Any, **kwargs: Any) -> str:
    """The implementation ("plugin:name") that ``op(*args, **kwargs)`` would run here."""
    return REGISTRY.which(op, *args, **kwargs)


def names() -> list[str]:
    """Every op name, core's and the plugins'."""
    return REGISTRY.op_names()


def format_table(rows: list[ImplRow] | None = None) -> str:
    """``table()`` as aligned text, with the routes in force underneath."""
    rows = table() if rows is None else rows
    head = ["op", "implementation", "backend", "dtypes", "min SM", "priority", "status"]
    body = [[r.op, r.impl, r.backend, r.dtypes, str(r.min_sm or "-"), str(r.priority), r.status] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]]
    routes = REGISTRY.routes()
    if routes:
        lines.append("routes: " + ", ".join(f"{op}={t}" for op, t in sorted(routes.items())))
    return "\n".join(lines)


def as_json_rows(rows: list[ImplRow] | None = None) -> list[dict[str, Any]]:
    return [asdict(r) for r in (table() if rows is None else rows)]


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name in REGISTRY.op_names():
        return REGISTRY.dispatcher(name)
    raise AttributeError(f"pygpukit.ops has no op {name!r}; ops: {', '.join(REGISTRY.op_names())}")
