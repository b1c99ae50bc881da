"""The CPU backend's twins of the functors of kernels/include/pgk/math.cuh that
NumPy does not have (or defines differently); pygpukit.ufuncs hands them to
its ufuncs as ``cpu=``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_erf = np.frompyfunc(math.erf, 1, 1)


def int_reciprocal(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "biu":
        return np.reciprocal(x)
    return np.where(x == 0, 0, np.reciprocal(np.where(x == 0, 1, x))).astype(x.dtype)


def power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu" or b.dtype.kind == "u":
        return np.power(a, b)
    neg = b < 0
    r = np.power(a, np.where(neg, 0, b))
    special = np.asarray(np.where(a == 1, 1, np.where(a == -1, np.where(b & 1, -1, 1), 0))).astype(r.dtype)
    return np.where(neg, special, r)


def erf_np(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1 + erf_np(x * x.dtype.type(math.sqrt(0.5))))).astype(x.dtype)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = x.dtype.type(math.sqrt(2 / math.pi))
    return (0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x * x * x)))).astype(x.dtype)


def maximum_minimum(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)
