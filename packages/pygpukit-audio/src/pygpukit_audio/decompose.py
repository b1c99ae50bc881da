"""Harmonic-percussive source separation by median filtering, with librosa's numbers.

- ``median_filter(x, size, axis=-1)``: ``scipy.ndimage.median_filter(x, size)``
  along one axis with mode "reflect" (d c b a | a b c d), the window of
  ``size`` samples from ``i - size // 2`` and the value of rank ``size // 2``
  (the upper median for an even size, as scipy).
- ``softmask(X, X_ref, power=1.0, split_zeros=False)``: librosa.util.softmask:
  X^p / (X^p + X_ref^p) computed after dividing both by max(X, X_ref);
  where both are zero 0.5 with ``split_zeros`` else 0; ``power=inf`` gives the
  hard mask X > X_ref (boolean, as librosa).
- ``magphase(D)``: librosa.magphase (|D|, D / |D| with 1 where D is 0).
- ``hpss(S, kernel_size=31, power=2.0, mask=False, margin=1.0)``:
  librosa.decompose.hpss of a magnitude (real) or complex spectrogram
  (..., bins, frames): a median filter of ``kernel_size[0]`` frames along time
  (harmonic) and of ``kernel_size[1]`` bins along frequency (percussive), soft
  masks with the margins; returns (harmonic, percussive) spectrograms (complex
  ones keep S's phase) or, with ``mask``, the two masks.

The op "median_filter_axis" has a CUDA kernel (kernels/decompose.cu, one
thread per output, rank by counting) and a NumPy reference (a gather of the
reflected windows and np.partition). The masks compose core ops in S's dtype.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _dsp
from ._errors import AudioTypeError, AudioValueError

_THREADS = 256  # kMedianThreads
_REF_CHUNK = 1 << 22  # window values the reference gathers at once


# -- public API ----------------------------------------------------------------------


def median_filter(x: Any, size: int, axis: int = -1) -> gp.GPUArray:
    """scipy.ndimage.median_filter of ``x`` along ``axis`` with a window of ``size`` samples, mode "reflect"."""
    fn = "median_filter"
    x = _dsp.signal(fn, x)
    size = _dsp.integer(fn, "size", size, 1)
    axis = _dsp.axis_of(fn, axis, x.ndim)
    return _filter(x, size, axis)


def softmask(X: Any, X_ref: Any, power: float = 1.0, split_zeros: bool = False) -> gp.GPUArray:
    """librosa.util.softmask: the share of X in X + X_ref (raised to ``power``)."""
    fn = "softmask"
    X = _dsp.signal(fn, X, "X")
    X_ref = _dsp.signal(fn, X_ref, "X_ref")
    if X.shape != X_ref.shape:
        raise AudioValueError(f"{fn}: X and X_ref must have the same shape, got {X.shape} and {X_ref.shape}")
    if bool(gp.any(X < 0)) or bool(gp.any(X_ref < 0)):
        raise AudioValueError(f"{fn}: X and X_ref must be non-negative")
    if isinstance(power, (bool, np.bool_)) or not isinstance(power, (int, float, np.integer, np.floating)):
        raise AudioTypeError(f"{fn}: power must be a real number, got {type(power).__name__}")
    if not power > 0:
        raise AudioValueError(f"{fn}: power must be strictly positive, got {power}")
    return _softmask(X, X_ref.astype(X.dtype), float(power), bool(split_zeros))


def hpss(S: Any, kernel_size: Any = 31, power: float = 2.0, mask: bool = False, margin: Any = 1.0) -> tuple[gp.GPUArray, gp.GPUArray]:
    """librosa.decompose.hpss: (harmonic, percussive) parts of a spectrogram S (..., bins, frames)."""
    fn = "hpss"
    if isinstance(S, np.ndarray):
        S = gp.asarray(S)
    if not isinstance(S, gp.GPUArray):
        raise AudioTypeError(f"{fn}: S must be a GPUArray or a NumPy array, got {type(S).__name__}")
    if S.dtype not in (np.complex64, np.complex128) and S.dtype not in _dsp.FLOATS:
        raise AudioTypeError(f"{fn}: S must be float32/float64 or complex64/complex128, got {S.dtype}")
    if S.ndim < 2:
        raise AudioValueError(f"{fn}: S must be (..., bins, frames), got shape {S.shape}")
    if S.size and not bool(gp.all(gp.isfinite(S))):
        raise AudioValueError(f"{fn}: S holds NaN or infinite values")
    win_harm, win_perc = _pair(fn, "kernel_size", kernel_size, lambda n, v: _dsp.integer(fn, n, v, 1))
    margin_harm, margin_perc = _pair(fn, "margin", margin, lambda n, v: _dsp.number(fn, n, v))
    if margin_harm < 1 or margin_perc < 1:
        raise AudioValueError(f"{fn}: margins must be >= 1.0 (a typical range is 1 to 10), got {margin!r}")
    if isinstance(power, (bool, np.bool_)) or not isinstance(power, (int, float, np.integer, np.floating)) or not power > 0:
        raise AudioValueError(f"{fn}: power must be a number > 0 (or inf), got {power!r}")
    phase = None
    if S.dtype.kind == "c":
        S, phase = magphase(S)
    harm = _filter(S, win_harm, S.ndim - 1)
    perc = _filter(S, win_perc, S.ndim - 2)
    split = margin_harm == 1 and margin_perc == 1
    mask_harm = _softmask(harm, perc * margin_harm, float(power), split)
    mask_perc = _softmask(perc, harm * margin_perc, float(power), split)
    if mask:
        return mask_harm, mask_perc
    if phase is None:
        return S * mask_harm, S * mask_perc
    return (S * mask_harm) * phase, (S * mask_perc) * phase


def magphase(D: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
    """librosa.magphase of a complex D: |D| and D / |D| (1 where D is 0)."""
    if isinstance(D, np.ndarray):
        D = gp.asarray(D)
    if not isinstance(D, gp.GPUArray) or D.dtype not in (np.complex64, np.complex128):
        raise AudioTypeError(
            f"magphase: D must be a complex64 / complex128 GPUArray or NumPy array, got {getattr(D, 'dtype', type(D).__name__)}"
        )
    mag = gp.abs(D)
    zeros = (mag == 0).astype(mag.dtype)
    nonzero = mag + zeros
    return mag, (D.real / nonzero + zeros) + 1j * (D.imag / nonzero)


# -- shared steps ----------------------------------------------------------------------


def _pair(fn: str, name: str, v: Any, check: Any) -> tuple[Any, Any]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise AudioValueError(f"{fn}: {name} must be one value or a pair (harmonic, percussive), got {v!r}")
        return check(f"{name}[0]", v[0]), check(f"{name}[1]", v[1])
    c = check(name, v)
    return c, c


def _filter(x: gp.GPUArray, size: int, axis: int) -> gp.GPUArray:
    x = gp.ascontiguousarray(x)
    n = x.shape[axis]
    if x.size == 0 or size == 1:
        return gp.ascontiguousarray(x.astype(x.dtype))
    outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    y = ext.op("median_filter_axis")(x.reshape(outer, n, inner), size)
    return y.reshape(x.shape)


def _softmask(X: gp.GPUArray, X_ref: gp.GPUArray, power: float, split_zeros: bool) -> gp.GPUArray:
    if math.isinf(power):
        return X > X_ref
    Z = gp.maximum(X, X_ref)
    bad = Z < np.finfo(X.dtype).tiny
    Z = gp.where(bad, 1.0, Z).astype(X.dtype)
    m, r = gp.power(X / Z, power), gp.power(X_ref / Z, power)
    good_share = m / gp.where(bad, 1.0, m + r).astype(X.dtype)
    return gp.where(bad, 0.5 if split_zeros else 0.0, good_share).astype(X.dtype)


# -- op "median_filter_axis": (outer, n, inner) filtered along n -------------------------


def _check(x: Any, size: int) -> None:
    if not isinstance(x, gp.GPUArray) or x.dtype not in _dsp.FLOATS or x.ndim != 3:
        raise AudioTypeError("median_filter_axis op: x must be a float32/float64 GPUArray (outer, n, inner)")
    if size < 1:
        raise AudioValueError(f"median_filter_axis op: size must be >= 1, got {size}")


def reflect_indices(n: int, size: int) -> np.ndarray:
    """(n, size): the samples scipy's reflect mode reads for each output (period 2 n)."""
    p = np.arange(n)[:, None] - size // 2 + np.arange(size)[None, :]
    p = np.mod(p, 2 * n)
    return np.where(p < n, p, 2 * n - 1 - p)


def reference_median_filter_axis(x: gp.GPUArray, size: int) -> gp.GPUArray:
    _check(x, size)
    h = np.ascontiguousarray(np.moveaxis(x.to_numpy(), 1, -1))  # (outer, inner, n)
    idx = reflect_indices(h.shape[-1], size)
    flat = h.reshape(-1, h.shape[-1])
    res = np.empty_like(flat)
    step = max(1, _REF_CHUNK // max(1, idx.size))
    for s in range(0, flat.shape[0], step):
        res[s : s + step] = np.partition(flat[s : s + step][:, idx], size // 2, axis=-1)[..., size // 2]
    return gp.asarray(np.ascontiguousarray(np.moveaxis(res.reshape(h.shape), -1, 1)))


@functools.cache
def median_kernel(ct: str) -> Any:
    return _dsp.kernel(
        "decompose", f"pgk_audio::median_filter_axis<{ct}>", "const void* x, long long total, long long n, long long inner, int k, void* y"
    )


def kernel_median_filter_axis(x: gp.GPUArray, size: int) -> gp.GPUArray:
    _check(x, size)
    outer, n, inner = x.shape
    x = gp.ascontiguousarray(x)
    y = ext.empty(x.shape, x.dtype)
    total = outer * n * inner
    median_kernel(_dsp.CTYPES[x.dtype])(-(-total // _THREADS), _THREADS, x, total, n, inner, size, y)
    return y


def _kernel_takes(x: Any, size: Any) -> bool:
    """Non-empty inputs with a flat index grid below 2^31 blocks; windows up to 1024 (O(k^2) per output)."""
    return 0 < x.size < (1 << 31) * _THREADS and size <= 1024


def register(registry: Any) -> None:
    ext.register_family(
        registry, "median_filter_axis", nkey=1, doc="median of size samples along n of (outer, n, inner), scipy.ndimage's reflect mode",
        reference=reference_median_filter_axis, cuda=kernel_median_filter_axis, dtypes=["float32", "float64"], predicate=_kernel_takes,
    )  # fmt: skip
