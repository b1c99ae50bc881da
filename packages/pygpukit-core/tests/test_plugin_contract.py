"""The plugin contract (docs/plugins.md), checked on the plugins' sources: a
plugin imports no ``pygpukit._*`` module (nor a private name of a public
one), reads no private attribute of a GPUArray or a JitKernel (the public
ones and ``pygpukit.ext`` say the same), and packs no kernel parameters with
``struct`` (``ext.Kernel(...).launcher(...)`` packs them from the kernel's
signature). Read from the repository's source trees, found beside this file;
skipped where this file is not inside the repository (an installed sdist).
The layers between packages are import-linter's (pyproject.toml)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[3]
if not (ROOT / "packages").is_dir():
    pytest.skip(f"no repository around {Path(__file__).resolve()}: the plugins' sources are not here", allow_module_level=True)

PLUGINS = ["gemm", "nn", "llm", "audio", "triton", "serve"]
SOURCES = {
    **{f"pygpukit-{p}": ROOT / "packages" / f"pygpukit-{p}" / "src" for p in PLUGINS},
    "example-plugin": ROOT / "tests-integration" / "example-plugin" / "src",
}
# GPUArray's and JitKernel's private attributes; a plugin's own objects may have
# attributes so named only as self._x / cls._x
PRIVATE_ATTRIBUTES = frozenset(
    {"_ptr", "_shape", "_dtype", "_strides", "_contig", "_empty", "_block", "_size", "_new", "_function", "_packer"}
)
STRUCT_PACKING = frozenset({"Struct", "pack", "pack_into"})
# a format with a byte order (<, >, !, =) has standard sizes and no padding: a file
# or wire format; kernel parameters are native ("@" or none: C alignment)
FILE_FORMAT = re.compile(r"[<>!=]")
RULES = ("private import", "private attribute", "struct packing")


class Violation(NamedTuple):
    rule: str
    path: str
    line: int
    what: str


def _private_module(name: str) -> bool:
    """``pygpukit._x``, ``pygpukit.jit._x``...: a pygpukit module path with a private part."""
    parts = name.split(".")
    return parts[0] == "pygpukit" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def violations(source: str, where: str) -> list[Violation]:
    """What in ``source`` (the text of a plugin module at ``where``) breaks the contract."""
    found = []

    def add(rule: str, node: ast.AST, what: str) -> None:
        found.append(Violation(rule, where, node.lineno, what))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_module(alias.name):
                    add("private import", node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _private_module(node.module):
                add("private import", node, f"from {node.module} import ...")
            elif node.module.split(".")[0] == "pygpukit":
                for alias in node.names:
                    if _private_module(f"{node.module}.{alias.name}"):
                        add("private import", node, f"from {node.module} import {alias.name}")
            elif node.module == "struct":
                for alias in node.names:
                    if alias.name in STRUCT_PACKING:
                        add("struct packing", node, f"from struct import {alias.name}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func, arg = node.func, node.args[0].value
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "import_module" and isinstance(arg, str) and _private_module(arg):
                add("private import", node, f"import_module({arg!r})")
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr in PRIVATE_ATTRIBUTES and owner not in ("self", "cls"):
                add("private attribute", node, f"{ast.unparse(node.value)}.{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STRUCT_PACKING:
            func = node.func
            if isinstance(func.value, ast.Name) and func.value.id == "struct":
                fmt = node.args[0] if node.args else None
                if not (isinstance(fmt, ast.Constant) and isinstance(fmt.value, str) and FILE_FORMAT.match(fmt.value)):
                    add("struct packing", node, f"struct.{func.attr}({ast.unparse(fmt) if fmt is not None else ''})")
    return sorted(found, key=lambda v: (v.rule, v.path, v.line))


def _scan(package: str) -> list[Violation]:
    src = SOURCES[package]
    if not src.is_dir():
        pytest.skip(f"{package}: no sources at {src}")
    found = []
    for path in sorted(src.rglob("*.py")):
        found += violations(path.read_text(), str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("package", sorted(SOURCES))
def test_plugin_sources_keep_the_contract(package, rule):
    found = [v for v in _scan(package) if v.rule == rule]
    listing = "\n".join(f"  {v.path}:{v.line}: {v.what}" for v in found)
    assert not found, f"{package}: {len(found)} use(s) of a {rule} (docs/plugins.md says what to use instead):\n{listing}"


def test_the_examples_plugin_authors_copy_keep_it():
    """The Python examples of docs/plugins.md and of pygpukit.ext's docstring."""
    ext = ast.get_docstring(ast.parse((ROOT / "packages/pygpukit-core/src/pygpukit/ext.py").read_text())) or ""
    blocks = [("pygpukit/ext.py", m.group(1)) for m in re.finditer(r"::\n\n((?:    .*\n|\n)+)", ext)]
    doc = (ROOT / "docs" / "plugins.md").read_text()
    blocks += [(f"docs/plugins.md block {i}", b) for i, b in enumerate(re.findall(r"```python\n(.*?)```", doc, flags=re.S))]
    assert len(blocks) > 3
    for where, block in blocks:
        lines = block.splitlines()
        indent = min(len(s) - len(s.lstrip()) for s in lines if s.strip())
        assert violations("\n".join(s[indent:] for s in lines), where) == []


def test_the_check_finds_what_it_should():
    source = """
import struct
import pygpukit._runtime as rt
from pygpukit import _dtypes, ext, __version__
from pygpukit._errors import PluginError
from pygpukit.jit import _private
from .kernels import _mine
importlib.import_module("pygpukit._native")

class Mine:
    def f(self, x, y):
        self._ptr = x._ptr + y.data_ptr
        return cls._shape, x.buffer._dtype, self._size, launch._packer, GPUArray._empty((2,), d)

P = struct.Struct("@PPq")
header = struct.pack("<Q", 8)
args = struct.pack("PPi", a, b, n)
fmt = struct.Struct(FORMAT)
"""
    got = [(v.rule, v.line, v.what) for v in violations(source, "m.py")]
    assert got == [
        ("private attribute", 12, "x._ptr"),
        ("private attribute", 13, "x.buffer._dtype"),
        ("private attribute", 13, "launch._packer"),
        ("private attribute", 13, "GPUArray._empty"),
        ("private import", 3, "import pygpukit._runtime"),
        ("private import", 4, "from pygpukit import _dtypes"),
        ("private import", 5, "from pygpukit._errors import ..."),
        ("private import", 6, "from pygpukit.jit import _private"),
        ("private import", 8, "import_module('pygpukit._native')"),
        ("struct packing", 15, "struct.Struct('@PPq')"),
        ("struct packing", 17, "struct.pack('PPi')"),
        ("struct packing", 18, "struct.Struct(FORMAT)"),
    ]
