"""``launch(kernel, grid, *args, **meta)``: a Triton kernel on pygpukit arrays,
on pygpukit's current stream, through the scheduler's launch gate.

The first call of a signature goes through Triton's own dispatch (binding,
specialization, compile or cache lookup, autotuning) with the arrays
wrapped as ``TritonArray``. Its compiled kernel is then kept under a key
that is at least as fine as Triton's: per argument, an array's dtype and
16-byte alignment; an int's class (i32 / i64 / u64), whether it is 1 and
whether it is a multiple of 16; a float, a bool or None; the value of a
constexpr parameter and of an autotuner key argument; the keyword
arguments' names and the same tokens. A later call with the same key
skips Triton's Python dispatch: it fills the parameter list (array
addresses as ints, which the launcher takes without a driver query) and
calls the compiled launcher directly. Calls that cannot be keyed (tuples,
tensor descriptors, torch tensors, heuristics-wrapped kernels, a chosen
autotuner config with a pre_hook, launch hooks installed) always take
Triton's path, as does every call on a Triton other than 3.6 (the version
whose generated launcher this fills).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pygpukit as gp
from pygpukit.ext import current_stream, launch_gate

from . import _triton, driver
from .array import TritonArray

_GP = gp.GPUArray
_I32_MIN, _I32_MAX, _I64_MIN, _I64_MAX = -(2**31), 2**31 - 1, -(2**63), 2**63 - 1


class _Uncacheable(Exception):
    """An argument the fast path cannot key; Triton's dispatch serves the call."""


class _Kernel:
    """What the fast path needs to know of a kernel: its JITFunction's parameters."""

    __slots__ = ("by_value", "jit", "kernel", "names", "slot", "tuner")

    def __init__(self, kernel: Any) -> None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        self.kernel = kernel  # keeps id(kernel) from being reused while cached
        self.tuner = kernel if isinstance(kernel, Autotuner) and isinstance(kernel.fn, JITFunction) else None
        self.jit = kernel if isinstance(kernel, JITFunction) else (kernel.fn if self.tuner is not None else None)
        params = self.jit.params if self.jit is not None else []
        self.names = [p.name for p in params]
        self.slot = {name: i for i, name in enumerate(self.names)}
        tuned = set(self.tuner.keys) if self.tuner is not None else set()
        # per parameter: keyed by its value (a constexpr, an autotuner key) or by its _token
        self.by_value = tuple(p.is_constexpr or p.name in tuned for p in params)


class _Entry:
    """A compiled kernel ready to launch: the launcher, its function and metadata, and
    the parameter list with constants filled in (runtime slots are set per call)."""

    __slots__ = ("function", "globals", "kw_slots", "launch", "packed", "prefix", "template")

    def __init__(self, launch: Callable[..., Any], prefix: tuple, function: int, packed: Any, template: list, kw_slots: tuple,
                 globals_: tuple) -> None:  # fmt: skip
        self.launch, self.prefix, self.function, self.packed = launch, prefix, function, packed
        self.template, self.kw_slots, self.globals = template, kw_slots, globals_


# The launcher's argument layout this fast path fills is that of Triton 3.6's generated
# CUDA launcher; other versions always take Triton's own dispatch.
FAST_PATH_TRITON = "3.6."
_kernels: dict[int, _Kernel] = {}
_entries: dict[tuple, _Entry] = {}
_ENTRIES_MAX = 8192


def _token(a: Any) -> Any:
    t = type(a)
    if t is _GP:
        return (a.dtype, not a.data_ptr & 15)
    if t is TritonArray:
        return (a.array.dtype, not a.array.data_ptr & 15)
    if t is int:
        if a == 1:
            return 1
        cls = 0 if _I32_MIN <= a <= _I32_MAX else 1 if _I64_MIN <= a <= _I64_MAX else 2
        return (cls, not a & 15)
    if t is float or t is bool or a is None:
        return t
    raise _Uncacheable


def _key(info: _Kernel, args: tuple, meta: dict) -> tuple:
    """The cache key of a call (see the module docstring); _Uncacheable if it has none."""
    if info.jit is None:
        raise _Uncacheable
    if len(args) > len(info.names):
        raise _Uncacheable  # too many arguments: Triton's path reports it
    key: list[Any] = [id(info.kernel)]
    key += [a if v else _token(a) for a, v in zip(args, info.by_value)]
    if meta:
        slot, by_value = info.slot, info.by_value
        for k, v in meta.items():
            i = slot.get(k, -1)
            key.append(k)
            key.append(v if i < 0 or by_value[i] else _token(v))
    return tuple(key)  # may hold an unhashable constexpr: the dict lookups catch that


def _wrap(a: Any) -> Any:
    return TritonArray(a) if type(a) is _GP else a


def _value(a: Any) -> Any:
    """A runtime argument as the launcher takes it: arrays as their address."""
    t = type(a)
    if t is _GP:
        return a.data_ptr
    if t is TritonArray:
        return a.array.data_ptr
    return a


def _check(kernel: Any, grid: Any) -> None:
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        raise TypeError(f"launch: kernel must be a @triton.jit function (autotuned or not), got {type(kernel).__name__}")
    if callable(grid):
        return
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3 or not all(isinstance(g, int) and g >= 0 for g in grid):
        raise ValueError(f"launch: grid must be 1 to 3 non-negative ints or a callable of the kernel's arguments, got {grid!r}")


def _grid(grid: Any, info: _Kernel, args: tuple, meta: dict, template: list) -> tuple[int, int, int]:
    if callable(grid):
        named = dict(zip(info.names, template))
        named.update(zip(info.names, map(_wrap, args)))
        named.update((k, _wrap(v)) for k, v in meta.items())
        grid = grid(named)
    n = len(grid)
    return grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1


def launch(kernel: Any, grid: Any, *args: Any, **meta: Any) -> Any:
    """Run Triton ``kernel`` over ``grid`` with ``args``: GPUArrays (or TritonArrays)
    for tensor parameters, Python scalars, and constexpr / option keywords in
    ``meta`` (``BLOCK=1024, num_warps=4``), as ``kernel[grid](*args, **meta)`` would,
    on pygpukit's current stream. No array is copied. Returns None."""
    info = _kernels.get(id(kernel))
    if info is not None:
        try:
            entry = _entries.get(_key(info, args, meta))
        except (_Uncacheable, TypeError):
            entry = None
        if entry is not None and not _hooks():
            return _fast(entry, info, grid, args, meta)
    return _slow(kernel, grid, args, meta)


_runtime_knobs: Any = None  # triton.knobs.runtime, set by the first (slow) launch


def _hooks() -> bool:
    """Whether launch hooks (profilers) are installed: those calls take Triton's path."""
    rk = _runtime_knobs
    return rk is None or bool(rk.launch_enter_hook.calls or rk.launch_exit_hook.calls)


def _fast(entry: _Entry, info: _Kernel, grid: Any, args: tuple, meta: dict) -> None:
    for (name, _), (val, scope) in entry.globals:
        if scope.get(name) != val:
            raise RuntimeError(f"Global variable {name} has changed since this kernel was compiled")
    vals = [_value(a) for a in args]
    vals += entry.template[len(args) :]
    for name, i in entry.kw_slots:
        vals[i] = _value(meta[name])
    if type(grid) is tuple and len(grid) == 1:
        g0, g1, g2 = grid[0], 1, 1
    else:
        g0, g1, g2 = _grid(grid, info, args, meta, entry.template)
    stream = current_stream()
    with launch_gate(stream):
        entry.launch(g0, g1, g2, stream, entry.function, *entry.prefix, entry.packed, None, None, None, *vals)


def _slow(kernel: Any, grid: Any, args: tuple, meta: dict) -> None:
    """Triton's own dispatch, then (when the call can be keyed) keep the compiled kernel."""
    _triton.check_runnable()
    _check(kernel, grid)
    wargs = tuple(map(_wrap, args))
    wmeta = {k: _wrap(v) for k, v in meta.items()}
    if _triton.interpreting():
        if gp.backend() == "cuda":
            raise _triton.TritonBackendError(
                "TRITON_INTERPRET=1 runs kernels on host memory, but pygpukit's arrays are on the GPU here; "
                "unset TRITON_INTERPRET or use the CPU backend (PYGPUKIT_BACKEND=cpu)"
            )
        kernel[grid](*wargs, **wmeta)
        return
    global _runtime_knobs
    if _runtime_knobs is None:
        from triton import knobs

        _runtime_knobs = knobs.runtime
    driver.activate()
    with launch_gate(current_stream()):
        compiled = kernel.run(*wargs, grid=grid, warmup=False, **wmeta)
    _remember(kernel, compiled, args, meta)


def _remember(kernel: Any, compiled: Any, args: tuple, meta: dict) -> None:
    import triton

    if not triton.__version__.startswith(FAST_PATH_TRITON):
        return
    info = _kernels.get(id(kernel))
    if info is None:
        info = _kernels[id(kernel)] = _Kernel(kernel)
    if info.jit is None or compiled is None or not hasattr(compiled, "packed_metadata") or _hooks():
        return
    try:
        key = _key(info, args, meta)
        hash(key)
    except (_Uncacheable, TypeError):
        return
    config: dict[str, Any] = {}
    if info.tuner is not None:
        best = info.tuner.best_config
        if best.pre_hook is not None:
            return
        config = best.kwargs
    template: list[Any] = []
    kw_slots = []
    for i, p in enumerate(info.jit.params):
        if i < len(args):
            template.append(None)
        elif p.name in meta:
            template.append(None)
            kw_slots.append((p.name, i))
        elif p.name in config:
            template.append(config[p.name])
        elif p.has_default:
            template.append(p.default)
        else:
            return  # Triton would have raised; nothing to keep
    launcher = compiled.run
    prefix: tuple[Any, ...]
    if launcher.global_scratch_size or launcher.profile_scratch_size:  # CudaLauncher allocates the scratch
        launch_fn, prefix = launcher, ()
    else:  # its C entry point, past the Python frame of CudaLauncher.__call__
        launch_fn, prefix = launcher.launch, (launcher.launch_cooperative_grid, launcher.launch_pdl, None, None)
    if len(_entries) >= _ENTRIES_MAX:
        _entries.clear()
    _entries[key] = _Entry(launch_fn, prefix, compiled.function, compiled.packed_metadata, template, tuple(kw_slots),
                           tuple(info.jit.used_global_vals.items()))  # fmt: skip
