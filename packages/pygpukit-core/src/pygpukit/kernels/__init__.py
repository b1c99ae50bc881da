"""Built-in kernel sources (shipped as package data) and their compiled functions.

Every built-in kernel goes through the same NVRTC path as ``gp.jit``: the
source file is compiled once per name expression and device architecture,
kept in the disk cache, and its CUfunction kept in memory.
"""

from __future__ import annotations

import os
from functools import cache

from ..jit import compiler, module

SOURCES = ("elementwise", "reduce", "indexing", "linalg", "scan", "random", "softmax", "sort")
_functions: dict[tuple[str, str, int], int] = {}


@cache
def source(name: str) -> str:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.cu")) as f:
        return f.read()


def function(name: str, expr: str, sm: int) -> int:
    """The CUfunction of the instantiation ``expr`` of kernel file ``name``."""
    key = (name, expr, sm)
    fn = _functions.get(key)
    if fn is None:
        binary = compiler.compile_source(source(name), [expr], sm, program_name=f"{name}.cu")
        fn = _functions[key] = module.get_function(binary, expr)
    return fn
