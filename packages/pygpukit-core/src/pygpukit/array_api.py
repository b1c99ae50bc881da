"""The Python array API standard's names (2023.12) where they differ from
NumPy's: ``x.__array_namespace__()`` returns the ``pygpukit`` module, so code
written against the standard (``xp.acos``, ``xp.concat``, ``xp.astype``...)
runs on GPUArrays (GPUArray.__array_namespace__ is defined in array.py). The functions are pygpukit's own; this module only adds
the standard's spellings and the few functions NumPy lacks."""

from __future__ import annotations

from typing import Any

from . import _dtypes, ufuncs
from .array import GPUArray
from .reductions import sum as _sum
from .shape import concatenate
from .streams import on_stream

__array_api_version__ = "2023.12"

acos = ufuncs.arccos
acosh = ufuncs.arccosh
asin = ufuncs.arcsin
asinh = ufuncs.arcsinh
atan = ufuncs.arctan
atan2 = ufuncs.arctan2
atanh = ufuncs.arctanh
bitwise_invert = ufuncs.invert
bitwise_left_shift = ufuncs.left_shift
bitwise_right_shift = ufuncs.right_shift
pow = ufuncs.power
concat = concatenate


@on_stream
def astype(x: GPUArray, dtype: Any, /, *, copy: bool = True) -> GPUArray:
    """``x`` converted to ``dtype``; with ``copy=False`` ``x`` itself when it already has it."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"astype expects a GPUArray, got {type(x).__name__}")
    return x.astype(dtype, copy=copy)


def can_cast(from_: Any, to: Any, /) -> bool:
    """Whether ``from_`` (a dtype or an array) converts to ``to`` without loss of kind or range."""
    src = from_.dtype if isinstance(from_, GPUArray) else _dtypes.as_dtype(from_)
    dst = _dtypes.as_dtype(to)
    if src == dst:
        return True
    return _dtypes.result_type(src, dst) == dst


_KINDS = {
    "bool": lambda dt: dt.kind == "b",
    "signed integer": lambda dt: dt.kind == "i",
    "unsigned integer": lambda dt: dt.kind == "u",
    "integral": lambda dt: dt.kind in "iu",
    "real floating": _dtypes.is_float,
    "complex floating": lambda dt: dt.kind == "c",
    "numeric": lambda dt: dt.kind in "iuc" or _dtypes.is_float(dt),
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is ``kind``: a dtype, one of the standard's kind names
    ('bool', 'signed integer', 'unsigned integer', 'integral', 'real floating',
    'complex floating', 'numeric'), or a tuple of those."""
    dt = _dtypes.as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; expected one of {sorted(_KINDS)}")
        return bool(_KINDS[kind](dt))
    return dt == _dtypes.as_dtype(kind)


def matrix_transpose(x: GPUArray, /) -> GPUArray:
    """The last two axes swapped (a view)."""
    if not isinstance(x, GPUArray) or x.ndim < 2:
        raise ValueError("matrix_transpose needs an array of at least 2 dimensions")
    return x.swapaxes(-1, -2)


@on_stream
def vecdot(x1: GPUArray, x2: GPUArray, /, *, axis: int = -1) -> GPUArray:
    """Dot products of the vectors along ``axis`` (the other axes broadcast)."""
    if not (isinstance(x1, GPUArray) and isinstance(x2, GPUArray)):
        raise TypeError("vecdot expects two GPUArrays")
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: axis {axis} has length {x1.shape[axis]} in x1 and {x2.shape[axis]} in x2")
    return _sum(ufuncs.multiply(x1, x2), axis=axis)
