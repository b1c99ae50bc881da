"""How an elementwise call is typed and planned: NumPy's loop resolution (the dtype
a ufunc computes in and returns for given operand dtypes) and the plans of the
fast path that every call form of pygpukit.ufuncs tries first.

Plans by operand dtypes: (compute, result dtype, [scalar conversion,] the
backend's kernel for that result dtype); False where the general path serves
them (int64 against uint64, which compares exactly there; a scalar type the
kernels take no parameter of). The backend is chosen once per process, so its
kernels can be kept here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from .array import GPUArray

COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}


@cache
def loop(uf: Any, types: tuple[Any, ...]) -> tuple[np.dtype, np.dtype]:
    """(compute dtype, result dtype) of ufunc ``uf`` for operands of these dtypes
    (Python ``int``/``float`` for weak scalars), as NumPy resolves them."""
    try:
        if any(isinstance(t, np.dtype) and t in _dtypes._ML_FLOATS for t in types):
            # NumPy does not know ml_dtypes' promotion, and ml_dtypes registers
            # loops for some ufuncs only: resolve as float32, then keep the
            # promoted ml dtype wherever that gives a float.
            promoted = _dtypes.result_type(*(t if isinstance(t, np.dtype) else t(1) for t in types))
            if promoted not in _dtypes._ML_FLOATS:
                dts = uf.resolver.resolve_dtypes((promoted,) * uf.nin + (None,))
            else:
                as_f32 = uf.resolver.resolve_dtypes((_dtypes.float32,) * uf.nin + (None,))
                dts = tuple(promoted if d == _dtypes.float32 else d for d in as_f32)
        else:
            dts = uf.resolver.resolve_dtypes((*types, None))
    except TypeError as e:
        names = ", ".join(t.name if isinstance(t, np.dtype) else f"Python {t.__name__}" for t in types)
        raise TypeError(f"{uf.name} is not supported for input dtypes ({names}): {e}") from None
    compute, out = _dtypes.as_dtype(dts[0]), _dtypes.as_dtype(dts[-1])
    if _dtypes.is_complex(compute) and not uf.complex:
        raise TypeError(f"{uf.name} is not supported for complex inputs")
    return compute, out


class Plans(dict):  # type: ignore[type-arg]
    """Plans by key, each made on first use by ``make(*key)`` (a subscript, the cheapest lookup)."""

    def __init__(self, make: Callable[..., Any]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: tuple[Any, ...]) -> Any:
        plan = self[key] = self.make(*key)
        return plan


def _ops() -> Any:
    return (_runtime._runtime or _runtime.get()).ops


def _pair_plan(uf: Any, da: np.dtype, db: np.dtype) -> tuple[np.dtype, np.dtype, Any] | bool:
    if uf.name in COMPARISONS and {da, db} == {_dtypes.int64, _dtypes.uint64}:
        return False
    compute, out_dt = loop(uf, (da, db))
    return compute, out_dt, _ops().binary_kernel(uf, compute, da, db, out_dt)


def _single_plan(uf: Any, dt: np.dtype) -> tuple[np.dtype, np.dtype, Any]:
    compute, out_dt = loop(uf, (dt,))
    return compute, out_dt, _ops().unary_kernel(uf, None, compute, dt, out_dt)


def _scalar_plan(uf: Any, dt: np.dtype, st: type, side: str) -> tuple[np.dtype, np.dtype, Callable[[Any], Any], Any] | bool:
    """(compute, result dtype, conversion, kernel) of ``uf`` with a scalar of type ``st``
    on ``side``; the conversion gives the kernel parameter, or None where ``apply``
    must decide (an integer out of range, a negative integer power, an overflow)."""
    weak = SCALAR_TYPES[st]
    compute, out_dt = loop(uf, (weak, dt) if side == "Left" else (dt, weak))
    lo: float = -math.inf
    hi: float = math.inf
    if st is int and dt.kind in "iu":  # apply's bounds check of a Python int
        lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    elif compute.kind in "iu":
        lo, hi = int(np.iinfo(compute).min), int(np.iinfo(compute).max)
    convert: Callable[[Any], Any] | None = None
    if compute.kind in "iu":
        if uf.name == "power" and side == "Right":  # a negative exponent raises in apply
            lo = 0
        convert = lambda s: int(s) if lo <= s <= hi else None
    elif _dtypes.is_float(compute):
        lim, to = float(_dtypes.finfo(compute).max), compute.type
        if st is int:  # through a double exactly (as apply's int64 -> float conversion rounds once)
            lim = min(lim, 2.0**53)
        lo, hi = max(lo, -lim), min(hi, lim)  # beyond: an overflow, which apply converts quietly
        convert = lambda s: float(to(s)) if lo <= s <= hi else None
    if convert is None:
        return False
    return compute, out_dt, convert, _ops().unary_kernel(uf, side, compute, dt, out_dt)


pairs = Plans(_pair_plan)  # (uf, dtype, dtype)
singles = Plans(_single_plan)  # (uf, dtype)
scalars = Plans(_scalar_plan)  # (uf, array dtype, scalar type, side)
_same_kind = Plans(lambda src, dst: bool(np.can_cast(src, dst, "same_kind")))  # (result dtype, out's dtype)
# The loop type of a Python scalar operand: the weak Python type, or bool_ (bool is strong).
SCALAR_TYPES: dict[type, Any] = {int: int, float: float, bool: _dtypes.bool_}


def fits_out(out: Any, shape: tuple[int, ...], dt: np.dtype) -> bool:
    """``out`` takes the contiguous kernels' result of ``shape`` and ``dt``; when it does
    not, ``apply`` checks it and raises NumPy's errors."""
    if type(out) is not GPUArray or not out._contig or out._shape != shape or out._ptr & 15:
        return False
    return out._dtype == dt or _same_kind[(dt, out._dtype)]  # type: ignore[no-any-return]


def overlaps(a: GPUArray, out: GPUArray) -> bool:
    """Whether contiguous ``a`` shares memory with ``out`` other than as the same view
    (``apply`` then reads it from a copy)."""
    return a._block is out._block and a._ptr != out._ptr
