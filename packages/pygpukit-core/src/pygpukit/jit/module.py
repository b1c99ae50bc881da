"""Loaded CUDA modules, kept in memory for the life of the process."""

from __future__ import annotations

import threading

from .cache import Binary

_lock = threading.Lock()
_modules: dict[str, int] = {}  # binary key -> CUmodule handle
_functions: dict[tuple[str, str], int] = {}  # (binary key, name expression) -> CUfunction


def get_function(binary: Binary, name_expression: str) -> int:
    """The CUfunction for a kernel of ``binary``, loading the module once per process."""
    key = (binary.key, name_expression)
    fn = _functions.get(key)
    if fn is not None:
        return fn
    from .. import _native

    with _lock:
        mod = _modules.get(binary.key)
        if mod is None:
            mod = _native.module_load(binary.image)
            _modules[binary.key] = mod
        fn = _native.module_get_function(mod, binary.lowered.get(name_expression, name_expression))
        _functions[key] = fn
        return fn
