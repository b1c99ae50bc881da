"""Chroma filterbanks, chromagrams and tuning estimation, as librosa's.

- ``chroma_filters(sr, n_fft, n_chroma=12, tuning=0.0, ctroct=5.0, octwidth=2.0, norm=2,
  base_c=True, dtype=float32)``: librosa.filters.chroma, (n_chroma, 1 + n_fft // 2),
  built in float64 on the host (cached) and uploaded in ``dtype``.
- ``chroma_stft(y=None, sr=22050, S=None, norm=inf, n_fft=2048, hop_length=512,
  win_length=None, window="hann", center=True, pad_mode="constant", tuning=None,
  n_chroma=12, ctroct=5.0, octwidth=2.0, base_c=True)``: librosa.feature.chroma_stft:
  the filterbank @ |stft(y)|^2 (or a power spectrogram S), each frame normalized
  (``norm``: None, inf, -inf, 0 or p > 0). ``tuning=None`` estimates it as librosa.
- ``piptrack(y=None, sr=22050, S=None, n_fft=2048, hop_length=None, fmin=150.0,
  fmax=4000.0, threshold=0.1, win_length=None, window="hann", center=True,
  pad_mode="constant", ref=None)``: librosa.piptrack's (pitches, magnitudes) of the
  local spectral peaks (parabolic interpolation), computed on the device.
- ``estimate_tuning(y=None, sr=22050, S=None, n_fft=2048, resolution=0.01,
  bins_per_octave=12, **piptrack arguments)``: librosa.estimate_tuning, the most
  frequent deviation (in fractions of a bin) of the strong peaks from A440's scale.
  The peaks are found on the device; the median and the histogram of their
  deviations run on the host in the spectrogram's dtype, as librosa computes them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, _normalize
from ._errors import AudioTypeError, AudioValueError
from .mel_features import power_spectrogram


@functools.lru_cache(maxsize=64)
def _chroma_weights(
    sr: float, n_fft: int, n_chroma: int, tuning: float, ctroct: float, octwidth: float | None, norm: float | None, base_c: bool
) -> np.ndarray:
    """librosa's construction: a Gaussian bump per chroma over each FFT bin's pitch (in chroma bins)."""
    a440 = 440.0 * 2.0 ** (tuning / n_chroma)
    freqs = np.linspace(0, sr, n_fft, endpoint=False)[1:]
    pitch = n_chroma * np.log2(freqs / (a440 / 16))  # bins above C0-ish (A440 / 16)
    pitch = np.concatenate(([pitch[0] - 1.5 * n_chroma], pitch))  # the DC bin: 1.5 octaves below bin 1
    width = np.concatenate((np.maximum(np.diff(pitch), 1.0), [1.0]))
    half = np.round(n_chroma / 2.0)
    dist = np.remainder(pitch[None, :] - np.arange(n_chroma, dtype=np.float64)[:, None] + half + 10 * n_chroma, n_chroma) - half
    wts = np.exp(-0.5 * (2 * dist / width[None, :]) ** 2)
    if norm is not None:
        wts = _normalize_columns(wts, norm)
    if octwidth is not None:
        wts *= np.exp(-0.5 * ((pitch / n_chroma - ctroct) / octwidth) ** 2)[None, :]
    if base_c:
        wts = np.roll(wts, -3 * (n_chroma // 12), axis=0)
    return wts[:, : 1 + n_fft // 2]


def _normalize_columns(w: np.ndarray, norm: float) -> np.ndarray:
    if norm == np.inf:
        length = np.max(w, axis=0)
    elif norm == -np.inf:
        length = np.min(w, axis=0)
    elif norm == 0:
        length = np.sum(w > 0, axis=0).astype(np.float64)
    else:
        length = np.sum(w**norm, axis=0) ** (1.0 / norm)
    return w / np.where(length < np.finfo(np.float64).tiny, 1.0, length)


def chroma_filters(
    sr: float,
    n_fft: int,
    n_chroma: int = 12,
    tuning: float = 0.0,
    ctroct: float = 5.0,
    octwidth: float | None = 2.0,
    norm: Any = 2,
    base_c: bool = True,
    dtype: Any = gp.float32,
) -> gp.GPUArray:
    """librosa.filters.chroma: (n_chroma, 1 + n_fft // 2) weights of each FFT bin per pitch class."""
    fn = "chroma_filters"
    sr = _dsp.positive(fn, "sr", sr)
    n_fft = _dsp.integer(fn, "n_fft", n_fft, 2)
    n_chroma = _dsp.integer(fn, "n_chroma", n_chroma, 1)
    tuning = _dsp.number(fn, "tuning", tuning)
    ctroct = _dsp.number(fn, "ctroct", ctroct)
    if octwidth is not None:
        octwidth = _dsp.number(fn, "octwidth", octwidth)
        if octwidth <= 0:
            raise AudioValueError(f"{fn}: octwidth must be positive or None, got {octwidth}")
    norm = _normalize.check_norm(fn, norm)
    dt = np.dtype(dtype)
    if dt not in _dsp.FLOATS:
        raise AudioTypeError(f"{fn}: dtype must be float32 or float64, got {dt}")
    w = _chroma_weights(sr, n_fft, n_chroma, tuning, ctroct, octwidth, norm, bool(base_c))
    return gp.asarray(np.ascontiguousarray(w, dtype=dt))


def _power_or_S(fn: str, y: Any, S: Any, n_fft: int, hop: Any, win_length: Any, window: Any, center: bool, pad_mode: str,
                power: float) -> tuple[gp.GPUArray, int]:  # fmt: skip
    """(the spectrogram, n_fft): |stft(y)|^power, or S as given (n_fft from its bins)."""
    if (y is None) == (S is None):
        raise AudioValueError(f"{fn}: give exactly one of y (a signal) and S (a spectrogram)")
    if S is None:
        return power_spectrogram(y, n_fft, hop, win_length, window, center, pad_mode, power), n_fft
    S = _dsp.signal(fn, S, "S")
    if S.ndim < 2 or S.shape[-2] < 3:
        raise AudioValueError(f"{fn}: S must be (..., 1 + n_fft // 2, frames) with at least 3 bins, got {S.shape}")
    return S, 2 * (S.shape[-2] - 1)


def piptrack(
    y: Any = None,
    sr: float = 22050,
    S: Any = None,
    n_fft: int = 2048,
    hop_length: int | None = None,
    fmin: float = 150.0,
    fmax: float = 4000.0,
    threshold: float = 0.1,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
    ref: Any = None,
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """librosa.piptrack: (pitches, magnitudes), both (..., 1 + n_fft // 2, frames), zero off the peaks."""
    fn = "piptrack"
    sr = _dsp.positive(fn, "sr", sr)
    threshold = _dsp.number(fn, "threshold", threshold)
    fmin = max(_dsp.number(fn, "fmin", fmin), 0.0)
    fmax = min(_dsp.number(fn, "fmax", fmax), sr / 2)
    S, n_fft = _power_or_S(fn, y, S, n_fft, hop_length, win_length, window, center, pad_mode, 1.0)
    if S.shape[-2] < 3:
        raise AudioValueError(f"{fn}: n_fft={n_fft} gives fewer than 3 frequency bins")
    S = gp.abs(S)
    dt = S.dtype
    lo, mid, hi = S[..., :-2, :], S[..., 1:-1, :], S[..., 2:, :]
    # the spectral slope (np.gradient: central inside, one-sided at the ends) and the parabola's vertex
    slope = gp.concatenate([S[..., 1:2, :] - S[..., :1, :], (hi - lo) / 2.0, S[..., -1:, :] - S[..., -2:-1, :]], axis=-2)
    a = hi + lo - 2.0 * mid
    b = (hi - lo) / 2.0
    inner = gp.where(gp.abs(b) >= gp.abs(a), 0.0, -b / gp.where(a == 0, 1.0, a)).astype(dt)
    edge = gp.zeros(S.shape[:-2] + (1, S.shape[-1]), dt)
    shift = gp.concatenate([edge, inner, edge], axis=-2)
    if ref is None:
        ref_value = threshold * gp.max(S, axis=-2, keepdims=True)
    else:
        ref_value = abs(_dsp.number(fn, "ref", ref))
    x = gp.where(S > ref_value, S, 0.0).astype(dt)
    # librosa.util.localmax: x[k] > x[k - 1] and x[k] >= x[k + 1]; never bin 0; the last bin against its neighbour
    peak_in = (x[..., 1:-1, :] > x[..., :-2, :]) & (x[..., 1:-1, :] >= x[..., 2:, :])
    peak_last = x[..., -1:, :] > x[..., -2:-1, :]
    peaks = gp.concatenate([edge > 0, peak_in, peak_last], axis=-2)
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)
    band = gp.asarray(((fmin <= freqs) & (freqs < fmax))[:, None])
    keep = peaks & band
    bins = gp.asarray(np.arange(S.shape[-2], dtype=np.float64)[:, None])
    pitch = ((bins + shift.astype(gp.float64)) * sr / n_fft).astype(dt)
    return gp.where(keep, pitch, 0.0).astype(dt), gp.where(keep, S + 0.5 * slope * shift, 0.0).astype(dt)


def estimate_tuning(
    y: Any = None, sr: float = 22050, S: Any = None, n_fft: int = 2048, resolution: float = 0.01, bins_per_octave: int = 12,
    **kwargs: Any,
) -> float:  # fmt: skip
    """librosa.estimate_tuning: the tuning offset in (-0.5, 0.5) bins (0.0 when no peak is found)."""
    fn = "estimate_tuning"
    resolution = _dsp.number(fn, "resolution", resolution)
    if not 0 < resolution < 1:
        raise AudioValueError(f"{fn}: resolution must lie in (0, 1), got {resolution}")
    bpo = _dsp.integer(fn, "bins_per_octave", bins_per_octave, 1)
    pitch, mag = piptrack(y, sr, S, n_fft, **kwargs)
    pitch, mag = pitch.to_numpy(), mag.to_numpy()
    found = pitch > 0
    threshold = np.median(mag[found]) if found.any() else 0.0
    f = pitch[(mag >= threshold) & found]
    if f.size == 0:
        return 0.0
    residual = np.mod(bpo * np.log2(f / 27.5), 1.0)  # in fractions of a bin above A440's scale
    residual[residual >= 0.5] -= 1.0
    counts, edges = np.histogram(residual, np.linspace(-0.5, 0.5, int(np.ceil(1.0 / resolution)) + 1))
    return float(edges[np.argmax(counts)])


def chroma_stft(
    y: Any = None,
    sr: float = 22050,
    S: Any = None,
    norm: Any = np.inf,
    n_fft: int = 2048,
    hop_length: int = 512,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
    tuning: float | None = None,
    n_chroma: int = 12,
    ctroct: float = 5.0,
    octwidth: float | None = 2.0,
    base_c: bool = True,
) -> gp.GPUArray:
    """librosa.feature.chroma_stft: (..., n_chroma, frames)."""
    fn = "chroma_stft"
    norm = _normalize.check_norm(fn, norm)
    S, n_fft = _power_or_S(fn, y, S, n_fft, hop_length, win_length, window, center, pad_mode, 2.0)
    if tuning is None:
        tuning = estimate_tuning(S=S, sr=sr, bins_per_octave=n_chroma)
    fb = chroma_filters(sr, n_fft, n_chroma, tuning, ctroct, octwidth, 2, base_c).astype(S.dtype)
    return _normalize.normalize(gp.matmul(fb, S), norm, -2)
