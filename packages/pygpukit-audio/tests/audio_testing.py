"""Shared helpers of the audio tests (importable: tests/ is on pytest's path)."""

from __future__ import annotations

import numpy as np


def rel_err(got, ref) -> float:
    """Norm-wise relative error max|got - ref| / max|ref|, in float64."""
    got = np.asarray(got).astype(np.complex128)
    ref = np.asarray(ref).astype(np.complex128)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-300)) if ref.size else 0.0


def rand(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Standard-normal values in ``dtype`` (complex: both parts random)."""
    dt = np.dtype(dtype)
    x = rng.standard_normal(shape)
    if dt.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)
