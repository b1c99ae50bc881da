"""Shared helpers of the nn tests (importable: tests/ is on pytest's path)."""

from __future__ import annotations

import numpy as np


def rel_err(got, ref) -> float:
    """Norm-wise relative error max|got - ref| / max|ref|, in float64."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30)) if ref.size else 0.0


def rand(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    """Standard-normal values exactly representable in ``dtype``, returned as float64."""
    return (rng.standard_normal(shape) * scale).astype(dtype).astype(np.float64)
