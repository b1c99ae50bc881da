"""librosa.util.normalize along one axis on the device, for chroma and tempograms."""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from ._errors import AudioValueError


def check_norm(fn: str, norm: Any) -> float | None:
    """``norm`` as a float (inf, -inf, 0 or a p > 0) or None."""
    if norm is None:
        return None
    if isinstance(norm, (bool, np.bool_)) or not isinstance(norm, (int, float, np.integer, np.floating)) or np.isnan(norm):
        raise AudioValueError(f"{fn}: norm must be None, inf, -inf, 0 or a number > 0, got {norm!r}")
    if norm < 0 and not np.isinf(norm):
        raise AudioValueError(f"{fn}: norm must be None, inf, -inf, 0 or a number > 0, got {norm!r}")
    return float(norm)


def normalize(S: gp.GPUArray, norm: float | None, axis: int) -> gp.GPUArray:
    """S divided by its ``norm`` along ``axis``; where that is below the dtype's tiny, S is left as is."""
    if norm is None:
        return S
    mag = gp.abs(S)
    if norm == np.inf:
        length = gp.max(mag, axis=axis, keepdims=True)
    elif norm == -np.inf:
        length = gp.min(mag, axis=axis, keepdims=True)
    elif norm == 0:
        length = gp.sum((mag > 0).astype(mag.dtype), axis=axis, keepdims=True)
    else:
        length = gp.power(gp.sum(gp.power(mag, norm), axis=axis, keepdims=True), 1.0 / norm)
    return S / gp.where(length < np.finfo(mag.dtype).tiny, 1.0, length).astype(mag.dtype)
