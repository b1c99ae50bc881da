"""Spectral features of a magnitude spectrogram and loading audio files.

- ``spectral_centroid(S, sr=22050, freq=None)``, ``spectral_bandwidth(S, sr=22050,
  freq=None, centroid=None, norm=True, p=2)``, ``spectral_rolloff(S, sr=22050,
  freq=None, roll_percent=0.85)``: librosa.feature's, from a non-negative
  spectrogram S (..., 1 + n_fft // 2, frames) and bin frequencies ``freq``
  (default: those of an rfft of n_fft = 2 (n_freq - 1) points at sr); each
  returns (..., 1, frames) in S's dtype (librosa promotes float32 to float64).
- ``load(path, sr=None, mono=True, dtype=float32, offset=0.0, duration=None)``:
  (samples, rate) as librosa.load, read with soundfile (WAV, FLAC, OGG ...; an
  optional dependency: ``pip install soundfile``) into a GPUArray: (n,) when
  mono or single-channel, else (channels, n); resampled with ``resample``
  (polyphase, scipy's filter) when ``sr`` differs from the file's rate.

These are compositions of core ops (reductions, cumsum, where), which run on
the GPU through their own kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, resampling
from ._errors import AudioValueError


class MissingDependencyError(gp.PyGPUkitError, ImportError):
    """An optional dependency of an audio function is not installed."""


def _spectrogram(fn: str, S: Any, sr: Any, freq: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
    """S checked (float, >= 2 axes, no negative values) and freq as a (n_freq, 1) column of S's dtype."""
    S = _dsp.signal(fn, S, "S")
    if S.ndim < 2:
        raise AudioValueError(f"{fn}: S must be (..., n_freq, frames), got shape {S.shape}")
    if S.size and bool(gp.any(S < 0)):
        raise AudioValueError(f"{fn}: S must be a magnitude spectrogram: it is only defined with non-negative energies")
    n_freq = S.shape[-2]
    if freq is None:
        f = np.fft.rfftfreq(n=2 * (n_freq - 1), d=1.0 / _dsp.number(fn, "sr", sr)) if n_freq > 1 else np.zeros(1)
        freq = gp.asarray(f)
    elif not isinstance(freq, gp.GPUArray):
        freq = gp.asarray(_dsp.host_array(fn, "freq", freq))
    if freq.shape != (n_freq,):
        raise AudioValueError(f"{fn}: freq must be 1-d with one frequency per bin ({n_freq}), got shape {freq.shape}")
    return S, freq.astype(S.dtype).reshape(n_freq, 1)


def _normalized(S: gp.GPUArray) -> gp.GPUArray:
    """S over its L1 norm along the bins (librosa's normalize(norm=1, axis=-2)): silent frames stay zero."""
    length = gp.sum(gp.abs(S), axis=-2, keepdims=True)
    return S / gp.where(length < np.finfo(S.dtype).tiny, 1.0, length)


def spectral_centroid(S: Any, sr: float = 22050, freq: Any = None) -> gp.GPUArray:
    """Each frame's centre of mass over frequency, (..., 1, frames)."""
    S, f = _spectrogram("spectral_centroid", S, sr, freq)
    return gp.sum(f * _normalized(S), axis=-2, keepdims=True)


def spectral_bandwidth(S: Any, sr: float = 22050, freq: Any = None, centroid: Any = None, norm: bool = True, p: float = 2) -> gp.GPUArray:
    """(sum_k S[k] |freq[k] - centroid|^p)^(1/p) per frame (S L1-normalized with ``norm``), (..., 1, frames)."""
    fn = "spectral_bandwidth"
    S, f = _spectrogram(fn, S, sr, freq)
    p = _dsp.positive(fn, "p", p)
    if centroid is None:
        centroid = gp.sum(f * _normalized(S), axis=-2, keepdims=True)
    else:
        centroid = _dsp.signal(fn, centroid, "centroid")
        if centroid.shape != S.shape[:-2] + (1, S.shape[-1]):
            raise AudioValueError(f"{fn}: centroid must have shape {S.shape[:-2] + (1, S.shape[-1])}, got {centroid.shape}")
    weights = _normalized(S) if norm else S
    return gp.power(gp.sum(weights * gp.power(gp.abs(f - centroid.astype(S.dtype)), p), axis=-2, keepdims=True), 1.0 / p)


def spectral_rolloff(S: Any, sr: float = 22050, freq: Any = None, roll_percent: float = 0.85) -> gp.GPUArray:
    """The lowest bin frequency below which ``roll_percent`` of each frame's energy lies, (..., 1, frames)."""
    fn = "spectral_rolloff"
    roll = _dsp.number(fn, "roll_percent", roll_percent)
    if not 0.0 < roll < 1.0:
        raise AudioValueError(f"{fn}: roll_percent must lie between 0 and 1, got {roll}")
    S, f = _spectrogram(fn, S, sr, freq)
    total = gp.cumsum(S, axis=-2)
    threshold = roll * total[..., -1:, :]
    return gp.min(gp.where(total < threshold, np.inf, f), axis=-2, keepdims=True).astype(S.dtype)


def load(
    path: Any, sr: Any = None, mono: bool = True, dtype: Any = gp.float32, offset: float = 0.0, duration: float | None = None
) -> tuple[gp.GPUArray, int]:
    """Read an audio file into a GPUArray: (samples, rate), as librosa.load."""
    fn = "load"
    try:
        import soundfile
    except ImportError:
        raise MissingDependencyError("load needs the soundfile package to read audio files: pip install soundfile") from None
    dt = np.dtype(dtype)
    if dt not in _dsp.FLOATS:
        raise _dsp.AudioTypeError(f"{fn}: dtype must be float32 or float64, got {dt}")
    target = None if sr is None else resampling.rate(fn, "sr", sr)
    offset = _dsp.number(fn, "offset", offset)
    if offset < 0:
        raise AudioValueError(f"{fn}: offset must be non-negative, got {offset}")
    if duration is not None and _dsp.number(fn, "duration", duration) <= 0:
        raise AudioValueError(f"{fn}: duration must be positive, got {duration}")
    try:
        with soundfile.SoundFile(path) as f:
            native = int(f.samplerate)
            f.seek(min(round(offset * native), f.frames))
            frames = -1 if duration is None else round(float(duration) * native)
            data = f.read(frames, dtype=dt.name, always_2d=True)
    except (RuntimeError, OSError, soundfile.LibsndfileError) as e:
        raise AudioValueError(f"{fn}: soundfile cannot read {path!r}: {e}") from e
    y = data.T  # (channels, n)
    y = y.mean(axis=0, dtype=dt) if mono else (y[0] if y.shape[0] == 1 else y)
    out = gp.asarray(np.ascontiguousarray(y, dtype=dt))
    if target is None or target == native:
        return out, native
    return (resampling.resample(out, native, target) if out.shape[-1] else out), target
