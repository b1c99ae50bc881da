"""What the DSP modules (filters, resample, mel, features) share: their error
types, argument checks, their CUDA kernels (kernels/<name>.cu, package data)
and the (rows, n) layout of a signal along one axis."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from ._errors import AudioTypeError, AudioValueError

FLOATS = (np.dtype(gp.float32), np.dtype(gp.float64))
CTYPES = {np.dtype(gp.float32): "float", np.dtype(gp.float64): "double"}
INT32_MAX = 2**31 - 1


def kernel(file: str, expr: str, signature: str) -> ext.Kernel:
    """Kernel ``expr`` (a template instantiation) of kernels/``file``.cu, its parameters as ``signature``."""
    return ext.Kernel(ext.kernel_source(__name__, file), expr, signature=signature, name=f"{file}.cu")


def signal(fn: str, x: Any, name: str = "x", finite: bool = True) -> gp.GPUArray:
    """``x`` as a float32 / float64 GPUArray with at least one axis (NumPy arrays are uploaded);
    with ``finite`` every sample must be finite (one reduction on the device)."""
    if isinstance(x, np.ndarray):
        x = gp.asarray(x)
    if not isinstance(x, gp.GPUArray):
        raise AudioTypeError(f"{fn}: {name} must be a GPUArray or a NumPy array, got {type(x).__name__}")
    if x.dtype not in FLOATS:
        raise AudioTypeError(f"{fn}: {name} must be float32 or float64, got {x.dtype}")
    if x.ndim == 0:
        raise AudioValueError(f"{fn}: {name} must have at least one axis, got a scalar")
    if finite and x.size and not bool(gp.all(gp.isfinite(x))):
        raise AudioValueError(f"{fn}: {name} holds NaN or infinite samples")
    return x


def integer(fn: str, name: str, v: Any, low: int, high: int = INT32_MAX) -> int:
    try:
        if isinstance(v, (bool, np.bool_)):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise AudioTypeError(f"{fn}: {name} must be an integer, got {type(v).__name__}") from None
    if not low <= v <= high:
        raise AudioValueError(f"{fn}: {name} must be in [{low}, {high}], got {v}")
    return v


def number(fn: str, name: str, v: Any) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise AudioTypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}")
    v = float(v)
    if not np.isfinite(v):
        raise AudioValueError(f"{fn}: {name} must be finite, got {v}")
    return v


def positive(fn: str, name: str, v: Any) -> float:
    """A finite real number > 0."""
    v = number(fn, name, v)
    if v <= 0:
        raise AudioValueError(f"{fn}: {name} must be positive, got {v}")
    return v


def axis_of(fn: str, axis: Any, ndim: int) -> int:
    a = integer(fn, "axis", axis, -ndim, ndim - 1) if ndim else 0
    return a % ndim


def host_array(fn: str, name: str, a: Any) -> np.ndarray:
    """A coefficient array (NumPy, list or GPUArray) on the host in float64."""
    if isinstance(a, gp.GPUArray):
        a = a.to_numpy()
    try:
        h = np.asarray(a)
    except Exception as e:  # ragged lists and the like
        raise AudioTypeError(f"{fn}: {name} must be an array of numbers: {e}") from None
    if h.dtype.kind not in "biuf":
        raise AudioTypeError(f"{fn}: {name} must hold real numbers, got dtype {h.dtype}")
    h = h.astype(np.float64)
    if not np.all(np.isfinite(h)):
        raise AudioValueError(f"{fn}: {name} holds NaN or infinite values")
    return h


def to_rows(x: gp.GPUArray, axis: int) -> tuple[gp.GPUArray, tuple[int, ...]]:
    """``x`` with ``axis`` moved last (the other axes in order), as contiguous (rows, n),
    and the moved shape."""
    xm = x if axis == x.ndim - 1 else gp.permute_dims(x, moved_order(x.ndim, axis))
    rows = math.prod(xm.shape[:-1])  # not -1: an empty axis leaves it ambiguous
    return gp.ascontiguousarray(xm).reshape(rows, x.shape[axis]), xm.shape


def from_rows(y: gp.GPUArray, moved: tuple[int, ...], axis: int) -> gp.GPUArray:
    """The inverse of ``to_rows`` for an output of length ``y.shape[-1]`` along the axis."""
    y = y.reshape(*moved[:-1], y.shape[-1])
    if axis == len(moved) - 1:
        return y
    return gp.ascontiguousarray(gp.permute_dims(y, tuple(int(i) for i in np.argsort(moved_order(len(moved), axis)))))


def moved_order(ndim: int, axis: int) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i != axis) + (axis,)
