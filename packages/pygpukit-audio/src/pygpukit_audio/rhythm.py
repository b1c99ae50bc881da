"""Autocorrelation tempogram and tempo estimation, as librosa.feature's.

- ``tempogram(y=None, sr=22050, onset_envelope=None, hop_length=512, win_length=384,
  center=True, window="hann", norm=inf)``: librosa.feature.tempogram: the windowed
  autocorrelation (FFT of 5-smooth length >= 2 win_length - 1) of the onset envelope
  around every frame (padded by win_length // 2 ramps to zero with ``center``), each
  frame normalized; (..., win_length, frames).
- ``tempo(y=None, sr=22050, onset_envelope=None, tg=None, hop_length=512, start_bpm=120.0,
  std_bpm=1.0, ac_size=8.0, max_tempo=320.0, aggregate=np.mean)``: librosa.feature.rhythm
  .tempo (beat.tempo): the lag maximizing log1p(1e6 tempogram) plus a log-normal prior
  around start_bpm (std_bpm octaves), over lags slower than max_tempo; with ``aggregate``
  (np.mean) the tempogram is averaged over time first: (..., 1), else one estimate per
  frame (..., frames). Beats per minute in float64, a GPUArray.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, _normalize
from . import fft as gfft
from ._errors import AudioValueError
from .onsets import onset_strength
from .windows import get_window


def next_fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n (scipy.fft.next_fast_len(n, real=True))."""
    best = 1 << max(n - 1, 0).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = -(-n // p35)  # pad the rest with a power of two
            cand = p35 * (1 << max(q - 1, 0).bit_length())
            best = min(best, cand)
            p35 *= 3
        p5 *= 5
    return best


def _envelope(fn: str, y: Any, sr: float, onset_envelope: Any, hop_length: int) -> gp.GPUArray:
    if onset_envelope is None:
        if y is None:
            raise AudioValueError(f"{fn}: give y (a signal) or onset_envelope")
        return onset_strength(y, sr, hop_length=hop_length)
    return _dsp.signal(fn, onset_envelope, "onset_envelope")


@functools.lru_cache(maxsize=16)
def _lag_index(win: int, n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.int64)[:, None] + np.arange(win, dtype=np.int64)[None, :]).reshape(-1)


def tempogram(
    y: Any = None,
    sr: float = 22050,
    onset_envelope: Any = None,
    hop_length: int = 512,
    win_length: int = 384,
    center: bool = True,
    window: Any = "hann",
    norm: Any = np.inf,
) -> gp.GPUArray:
    """librosa.feature.tempogram: (..., win_length, frames)."""
    fn = "tempogram"
    hop_length = _dsp.integer(fn, "hop_length", hop_length, 1)
    win = _dsp.integer(fn, "win_length", win_length, 1)
    norm = _normalize.check_norm(fn, norm)
    env = _envelope(fn, y, sr, onset_envelope, hop_length)
    n = env.shape[-1]
    if center:
        half = win // 2
        # numpy.pad's linear_ramp to zero: the edge value / half per step
        ramp = gp.asarray(np.arange(half, dtype=np.float64).astype(env.dtype))
        left = (env[..., :1] / half) * ramp if half else env[..., :0]
        right = (env[..., -1:] / half) * gp.flip(ramp, axis=0) if half else env[..., :0]
        env = gp.concatenate([left.astype(env.dtype), env, right.astype(env.dtype)], axis=-1)
    elif n < win:
        raise AudioValueError(f"{fn}: the onset envelope has {n} frames, fewer than win_length={win} with center=False")
    else:
        n = n - win + 1
    lead = env.shape[:-1]
    frames = gp.take(env, gp.from_numpy(_lag_index(win, n)), axis=-1).reshape(*lead, n, win)
    frames = frames * gp.asarray(get_window(window, win).astype(env.dtype))
    n_pad = next_fast_len(2 * win - 1)
    spec = gfft.rfft(frames, n=n_pad, axis=-1)
    acf = gfft.irfft(spec.real * spec.real + spec.imag * spec.imag, n=n_pad, axis=-1)[..., :win]
    return _normalize.normalize(gp.ascontiguousarray(acf.swapaxes(-1, -2)), norm, -2)


def tempo(
    y: Any = None,
    sr: float = 22050,
    onset_envelope: Any = None,
    tg: Any = None,
    hop_length: int = 512,
    start_bpm: float = 120.0,
    std_bpm: float = 1.0,
    ac_size: float = 8.0,
    max_tempo: float | None = 320.0,
    aggregate: Any = np.mean,
) -> gp.GPUArray:
    """librosa.feature.rhythm.tempo: beats per minute, (..., 1) with ``aggregate``, else (..., frames)."""
    fn = "tempo"
    sr = _dsp.number(fn, "sr", sr)
    hop_length = _dsp.integer(fn, "hop_length", hop_length, 1)
    start_bpm, std_bpm = _dsp.number(fn, "start_bpm", start_bpm), _dsp.number(fn, "std_bpm", std_bpm)
    if sr <= 0 or start_bpm <= 0 or std_bpm <= 0:
        raise AudioValueError(f"{fn}: sr, start_bpm and std_bpm must be positive, got {sr}, {start_bpm}, {std_bpm}")
    if aggregate not in (None, np.mean, gp.mean):
        raise AudioValueError(f"{fn}: aggregate must be np.mean or None, got {aggregate!r}")
    if tg is None:
        win = int(_dsp.number(fn, "ac_size", ac_size) * sr) // hop_length  # librosa.time_to_frames
        if win < 2:
            raise AudioValueError(f"{fn}: ac_size={ac_size} s is under two frames at this sr and hop_length")
        tg = tempogram(y, sr, onset_envelope, hop_length, win)
    else:
        tg = _dsp.signal(fn, tg, "tg")
        if tg.ndim < 2 or tg.shape[-2] < 2:
            raise AudioValueError(f"{fn}: tg must be a tempogram (..., lags >= 2, frames), got shape {tg.shape}")
        win = tg.shape[-2]
    if aggregate is not None:
        tg = gp.mean(tg, axis=-1, keepdims=True)
    bpms = np.full(win, np.inf)
    bpms[1:] = 60.0 * sr / (hop_length * np.arange(1.0, win))
    with np.errstate(divide="ignore"):
        logprior = -0.5 * ((np.log2(bpms) - np.log2(start_bpm)) / std_bpm) ** 2
    if max_tempo is not None:
        logprior[: int(np.argmax(bpms < _dsp.number(fn, "max_tempo", max_tempo)))] = -np.inf
    score = gp.log1p(1e6 * tg).astype(gp.float64) + gp.asarray(logprior[:, None])
    best = gp.argmax(score, axis=-2)
    return gp.take(gp.asarray(bpms), best.reshape(-1), axis=0).reshape(best.shape)
