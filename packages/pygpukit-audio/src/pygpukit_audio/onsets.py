"""Onset strength and onset detection, as librosa.onset's.

- ``onset_strength(y=None, sr=22050, S=None, n_fft=2048, hop_length=512, lag=1, max_size=1,
  ref=None, detrend=False, center=True, aggregate=np.mean, **mel)``: the spectral flux of
  the log-power mel spectrogram (power_to_db(melspectrogram(y, sr, n_fft, hop_length,
  **mel)), or a log-power ``S``): max(0, S[t] - ref[t - lag]) averaged over the bands
  (``aggregate``: np.mean, np.median is not offered; np.max, np.min, np.sum), ref the
  maximum of S over ``max_size`` neighbouring bands (scipy.ndimage's reflect edges),
  shifted right by lag (+ n_fft // (2 hop_length) with ``center``) with zeros; with
  ``detrend`` filtered by (1 - z^-1) / (1 - 0.99 z^-1). (..., frames), on the device.
- ``onset_detect(y=None, sr=22050, onset_envelope=None, hop_length=512, backtrack=False,
  energy=None, units="frames", normalize=True, pre_max=..., post_max=..., pre_avg=...,
  post_avg=..., delta=0.07, wait=...)``: librosa's peak picking of a 1-d envelope with
  its defaults (windows of 0.03 s and 0.1 s in frames); a NumPy array of onset frames,
  samples or times (its length is data-dependent: the picking runs on the host, over
  frames, a few thousand per minute of audio). ``backtrack`` moves each onset back to the
  preceding local minimum of ``energy`` (default: the normalized envelope).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, filters, mel
from ._errors import AudioValueError
from .mel_features import check_mel_kwargs, melspectrogram

_AGGREGATES = {np.mean: gp.mean, gp.mean: gp.mean, np.max: gp.max, np.amax: gp.max, gp.max: gp.max, np.min: gp.min,
               np.amin: gp.min, gp.min: gp.min, np.sum: gp.sum, gp.sum: gp.sum}  # fmt: skip


def _band_maximum(S: gp.GPUArray, size: int) -> gp.GPUArray:
    """scipy.ndimage.maximum_filter1d(S, size, axis=-2) (mode reflect: edges mirrored with the edge sample)."""
    n = S.shape[-2]
    left = size // 2
    idx = np.pad(np.arange(n, dtype=np.int64), (left, size - 1 - left), mode="symmetric")
    padded = gp.take(S, gp.from_numpy(idx), axis=-2)
    out = padded[..., :n, :]
    for k in range(1, size):
        out = gp.maximum(out, padded[..., k : k + n, :])
    return out


def onset_strength(
    y: Any = None,
    sr: float = 22050,
    S: Any = None,
    n_fft: int = 2048,
    hop_length: int = 512,
    lag: int = 1,
    max_size: int = 1,
    ref: Any = None,
    detrend: bool = False,
    center: bool = True,
    aggregate: Any = np.mean,
    **kwargs: Any,
) -> gp.GPUArray:
    """librosa.onset.onset_strength: the onset envelope (..., frames)."""
    fn = "onset_strength"
    check_mel_kwargs(fn, kwargs, ("win_length", "window", "pad_mode", "power", "n_mels", "fmin", "fmax", "htk", "norm"))
    lag = _dsp.integer(fn, "lag", lag, 1)
    max_size = _dsp.integer(fn, "max_size", max_size, 1)
    n_fft = _dsp.integer(fn, "n_fft", n_fft, 1)
    hop_length = _dsp.integer(fn, "hop_length", hop_length, 1)
    reduce = _AGGREGATES.get(aggregate)
    if reduce is None:
        raise AudioValueError(f"{fn}: aggregate must be np.mean, np.max, np.min or np.sum (or gp's), got {aggregate!r}")
    if (y is None) == (S is None):
        raise AudioValueError(f"{fn}: give exactly one of y (a signal) and S (a log-power spectrogram)")
    if S is None:
        S = mel.power_to_db(melspectrogram(y, sr, n_fft=n_fft, hop_length=hop_length, **kwargs))
    else:
        S = _dsp.signal(fn, S, "S")
        if S.ndim == 1:
            S = S.reshape(1, S.shape[0])
    if S.shape[-1] <= lag:
        raise AudioValueError(f"{fn}: the spectrogram has {S.shape[-1]} frames; lag={lag} needs more")
    if ref is None:
        ref = S if max_size == 1 else _band_maximum(S, max_size)
    else:
        ref = _dsp.signal(fn, ref, "ref")
        if ref.shape != S.shape:
            raise AudioValueError(f"{fn}: ref must have S's shape {S.shape}, got {ref.shape}")
    flux = gp.maximum(S[..., lag:] - ref[..., :-lag], 0.0).astype(S.dtype)
    env = reduce(flux, axis=-2)
    pad = lag + (n_fft // (2 * hop_length) if center else 0)
    env = gp.pad(env, [(0, 0)] * (env.ndim - 1) + [(pad, 0)])
    if detrend:
        env = filters.sosfilt(np.array([[1.0, -1.0, 0.0, 1.0, -0.99, 0.0]]), env, axis=-1)
    return env[..., : S.shape[-1]] if center else env


def _frames(fn: str, name: str, v: Any) -> int:
    """A window length in frames: librosa rounds a fractional one up."""
    v = _dsp.number(fn, name, v)
    if v < 0:
        raise AudioValueError(f"{fn}: {name} must be non-negative, got {v}")
    return math.ceil(v)


def peak_pick(x: np.ndarray, pre_max: int, post_max: int, pre_avg: int, post_avg: int, delta: float, wait: int) -> np.ndarray:
    """librosa.util.peak_pick's sparse result: n is a peak where x[n] is the maximum of
    x[n - pre_max : n + post_max], at least delta above the mean of x[n - pre_avg : n + post_avg],
    and more than ``wait`` frames after the previous peak."""
    n = x.size
    padded = np.concatenate([np.full(pre_max, -np.inf), x.astype(np.float64), np.full(post_max - 1, -np.inf)])
    local_max = np.lib.stride_tricks.sliding_window_view(padded, pre_max + post_max).max(axis=-1)
    delta = np.float32(delta)  # librosa's picker takes delta as float32
    peaks: list[int] = []
    after = 0
    for i in np.flatnonzero(x == local_max):
        if i < after or x[i] < np.mean(x[max(0, i - pre_avg) : min(i + post_avg, n)]) + delta:
            continue
        peaks.append(int(i))
        after = i + wait + 1
    return np.asarray(peaks, dtype=np.int64)


def onset_backtrack(events: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Each event moved back to the nearest local minimum of energy at or before it (frame 0 counts)."""
    e = np.asarray(energy)
    minima = np.unique(np.concatenate([[0], 1 + np.flatnonzero((e[1:-1] <= e[:-2]) & (e[1:-1] < e[2:]))]))
    return minima[np.searchsorted(minima, events, side="right") - 1]


def onset_detect(
    y: Any = None,
    sr: float = 22050,
    onset_envelope: Any = None,
    hop_length: int = 512,
    backtrack: bool = False,
    energy: Any = None,
    units: str = "frames",
    normalize: bool = True,
    pre_max: float | None = None,
    post_max: float | None = None,
    pre_avg: float | None = None,
    post_avg: float | None = None,
    delta: float = 0.07,
    wait: float | None = None,
) -> np.ndarray:
    """librosa.onset.onset_detect (sparse): onset positions in ``units`` ("frames", "samples", "time")."""
    fn = "onset_detect"
    sr = _dsp.positive(fn, "sr", sr)
    hop_length = _dsp.integer(fn, "hop_length", hop_length, 1)
    if units not in ("frames", "samples", "time"):
        raise AudioValueError(f"{fn}: units must be 'frames', 'samples' or 'time', got {units!r}")
    if onset_envelope is None:
        if y is None:
            raise AudioValueError(f"{fn}: give y (a signal) or onset_envelope")
        onset_envelope = onset_strength(y, sr, hop_length=hop_length)
    env = _dsp.signal(fn, onset_envelope, "onset_envelope")
    if env.ndim != 1:
        raise AudioValueError(f"{fn}: onset_envelope must be 1-d (one signal), got shape {env.shape}")
    x = env.to_numpy()
    if normalize:
        x = x - np.min(x)
        x = x / (np.max(x) + np.finfo(x.dtype).tiny)
    pre_max = _frames(fn, "pre_max", 0.03 * sr // hop_length if pre_max is None else pre_max)
    post_max = _frames(fn, "post_max", 0.0 * sr // hop_length + 1 if post_max is None else post_max)
    pre_avg = _frames(fn, "pre_avg", 0.1 * sr // hop_length if pre_avg is None else pre_avg)
    post_avg = _frames(fn, "post_avg", 0.1 * sr // hop_length + 1 if post_avg is None else post_avg)
    wait = _frames(fn, "wait", 0.03 * sr // hop_length if wait is None else wait)
    delta = _dsp.number(fn, "delta", delta)
    if post_max < 1 or post_avg < 1 or delta < 0:
        raise AudioValueError(f"{fn}: post_max and post_avg must be positive and delta non-negative")
    if not x.any():
        onsets = np.zeros(0, dtype=np.int64)
    else:
        onsets = peak_pick(x, pre_max, post_max, pre_avg, post_avg, delta, wait)
        if backtrack and onsets.size:
            e = x if energy is None else _dsp.host_array(fn, "energy", energy)
            onsets = onset_backtrack(onsets, e)
    if units == "samples":
        return onsets * hop_length
    if units == "time":
        return onsets * hop_length / sr
    return onsets
