"""Core's import graph has no cycle and no edge to a plugin package.

The graph is read from the installed package's source with ``ast`` (nothing is
imported): module-level and function-level imports alike, without the
``if TYPE_CHECKING:`` blocks. ``from package import name`` is an edge to the
submodule ``package.name`` when there is one, else to the package's
``__init__``; ``import a.b`` is an edge to ``a.b``. Cycles are the strongly
connected components (Tarjan) of more than one module.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "pygpukit"


def _package_dirs() -> list[Path]:
    """Every directory of the package (an editable install splits sources and built modules)."""
    spec = importlib.util.find_spec(PACKAGE)  # finds, does not import
    assert spec is not None and spec.submodule_search_locations, f"{PACKAGE} is not installed"
    return [Path(p) for p in spec.submodule_search_locations]


def _modules(roots: list[Path]) -> dict[str, Path | None]:
    """Dotted module name -> source file (None for an extension module or a stub-only one)."""
    mods: dict[str, Path | None] = {}
    suffixes = (*importlib.machinery.EXTENSION_SUFFIXES, ".pyi", ".py")
    for root, path in sorted((r, p) for r in roots for p in r.rglob("*")):
        suffix = next((s for s in suffixes if path.name.endswith(s)), None)
        if suffix is None or not path.is_file():
            continue
        parts = [PACKAGE, *path.relative_to(root).parts]
        parts[-1] = path.name[: -len(suffix)]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if suffix == ".py":
            mods[name] = path
        else:
            mods.setdefault(name, None)
    return mods


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _imports_of(other)
        else:
            yield from _imports_of(child)


def _imports_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, mods: dict[str, Path | None]) -> Iterator[str]:
    """Dotted names of the modules ``node`` imports: ``from p import n`` gives p.n when
    that is a module of the package, else p."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        base = (module if is_package else module.rpartition(".")[0]).split(".")
        if node.level > 1:
            base = base[: -(node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        yield sub if sub in mods else source


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between pygpukit's modules, outside top-level packages each module imports)."""
    mods = _modules(_package_dirs())
    edges: dict[str, set[str]] = {m: set() for m in mods}
    external: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        if path is None:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree):
            for target in _targets(node, module, path.name == "__init__.py", mods):
                if target in mods:
                    if target != module:
                        edges[module].add(target)
                else:
                    external[module].add(target.split(".")[0])
    return edges, external


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], edges: dict[str, set[str]]) -> str:
    inside = set(component)
    lines = [f"  {m} -> {', '.join(sorted(edges[m] & inside))}" for m in component]
    return f"{len(component)} modules:\n" + "\n".join(lines)


def test_the_tarjan_finds_cycles_and_only_them():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert cycles(edges) == [["a", "b", "c"]]


def test_core_has_no_import_cycle():
    edges, _ = import_graph()
    assert "pygpukit.array" in edges and "pygpukit._backend.cuda" in edges  # the graph is read
    found = cycles(edges)
    assert not found, "import cycles in pygpukit:\n" + "\n".join(_describe(c, edges) for c in found)


def test_core_imports_no_plugin_package():
    _, external = import_graph()
    bad = sorted(f"{m} imports {p}" for m, pkgs in external.items() for p in pkgs if p.startswith("pygpukit_"))
    assert not bad, "core imports plugin packages:\n" + "\n".join(bad)
