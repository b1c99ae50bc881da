"""Argument checks shared by the functional ops: clear, typed errors that name the op."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

INT32_MAX = 2**31 - 1  # the kernels index with 32-bit integers


def integer(op: str, name: str, v: Any, low: int, high: int = INT32_MAX) -> int:
    """``v`` as an int in [low, high] (bools refused), else TypeError / ValueError naming ``op`` and ``name``."""
    try:
        if isinstance(v, bool):
            raise TypeError
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {type(v).__name__}") from None
    if not low <= v <= high:
        bound = f"at least {low}" if v < low and high == INT32_MAX else f"in [{low}, {high}]"
        raise ValueError(f"{op}: {name} must be {bound}, got {v}")
    return v


def is_int(v: Any) -> bool:
    """An int (Python or NumPy), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
