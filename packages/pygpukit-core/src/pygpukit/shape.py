"""Shape functions as in NumPy / the array API; each returns a view when it can."""

from __future__ import annotations

from typing import Any

from .array import GPUArray, broadcast_to, expand_dims

__all__ = ["ascontiguousarray", "broadcast_to", "expand_dims", "permute_dims", "ravel", "reshape", "squeeze", "swapaxes", "transpose"]


def reshape(a: GPUArray, shape: Any) -> GPUArray:
    return a.reshape(shape)


def transpose(a: GPUArray, axes: Any = None) -> GPUArray:
    return a.transpose(axes)


def permute_dims(a: GPUArray, axes: Any) -> GPUArray:
    """The array API name of transpose with explicit axes."""
    return a.transpose(tuple(axes))


def swapaxes(a: GPUArray, axis1: int, axis2: int) -> GPUArray:
    return a.swapaxes(axis1, axis2)


def squeeze(a: GPUArray, axis: Any = None) -> GPUArray:
    return a.squeeze(axis)


def ravel(a: GPUArray) -> GPUArray:
    return a.ravel()


def ascontiguousarray(a: GPUArray) -> GPUArray:
    """``a`` itself when C-contiguous, else a contiguous copy."""
    return a if a.is_contiguous else a.copy()
