"""The arithmetic of the arange fill, which both backends share so that they
give NumPy's values bit for bit."""

from __future__ import annotations

import numpy as np

from .. import _dtypes


def arange_terms(dt: np.dtype, start: float | int, step: float | int) -> tuple[np.generic, np.generic, np.generic]:
    """(start, delta, second) of NumPy's arange fill for dtype ``dt``, in the
    dtype the fill computes in: out[i] = start + i * delta for i != 1."""
    calc = _dtypes.int64 if dt.kind in "biu" else (_dtypes.float64 if dt == _dtypes.float64 else _dtypes.float32)
    first = np.asarray(start).astype(dt).astype(calc)
    second = np.asarray(start + step).astype(dt).astype(calc)
    with np.errstate(over="ignore"):
        delta = second - first  # type: ignore[operator]
    return first[()], delta[()], second[()]  # type: ignore[return-value]
