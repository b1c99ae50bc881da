"""Phase reconstruction and phase-vocoder time scaling with librosa's numbers.

- ``griffinlim(S, n_iter=32, hop_length=None, win_length=None, n_fft=None, window="hann",
  center=True, length=None, pad_mode="constant", momentum=0.99, init="random",
  random_state=None)``: librosa.griffinlim: the fast Griffin-Lim iteration
  (momentum) from a magnitude spectrogram S (..., bins, frames) through this
  package's istft / stft; the random initial phases are drawn on the host as
  librosa draws them (an int seed gives numpy.random.RandomState(seed), a
  Generator or RandomState is used as is, None a fresh default_rng()), so a
  seeded call starts from librosa's phases.
- ``phase_vocoder(D, rate, hop_length=None, n_fft=None)``: librosa.phase_vocoder
  of a complex STFT (..., bins, frames): frames at 0, rate, 2 rate ...,
  magnitudes interpolated linearly between neighbouring frames, phases
  advanced by the expected advance plus the wrapped deviation. librosa runs a
  loop over output frames; here every frame's phase increment is computed at
  once and accumulated by a cumulative sum along time, in float64 whatever D's
  dtype (librosa accumulates complex64 input in float32, whose phase error
  grows with time: compare complex64 results with librosa on complex128).

Both are compositions of core ops and the stft / istft ops, so they run on
the GPU through those kernels.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp
from ._errors import AudioTypeError, AudioValueError
from .stft import istft, spectrogram, stft


def griffinlim(
    S: Any,
    n_iter: int = 32,
    hop_length: int | None = None,
    win_length: int | None = None,
    n_fft: int | None = None,
    window: Any = "hann",
    center: bool = True,
    length: int | None = None,
    pad_mode: str = "constant",
    momentum: float = 0.99,
    init: str | None = "random",
    random_state: Any = None,
) -> gp.GPUArray:
    """librosa.griffinlim: a signal (..., length) whose STFT magnitude approximates S."""
    fn = "griffinlim"
    S = _dsp.signal(fn, S, "S")
    if S.ndim < 2 or S.shape[-2] < 2 or S.shape[-1] < 1:
        raise AudioValueError(f"{fn}: S must be a magnitude spectrogram (..., bins >= 2, frames >= 1), got shape {S.shape}")
    if bool(gp.any(S < 0)):
        raise AudioValueError(f"{fn}: S must be a magnitude spectrogram: it has negative values")
    n_iter = _dsp.integer(fn, "n_iter", n_iter, 0)
    momentum = _dsp.number(fn, "momentum", momentum)
    if momentum < 0:
        raise AudioValueError(f"{fn}: momentum must be >= 0, got {momentum}")
    if momentum > 1:
        warnings.warn(f"Griffin-Lim with momentum={momentum} > 1 can be unstable", stacklevel=2)
    if n_fft is None:
        n_fft = 2 * (S.shape[-2] - 1)
    cdt = np.complex64 if S.dtype == np.float32 else np.complex128
    if init == "random":
        theta = 2 * np.pi * _rng(fn, random_state).random(size=S.shape)
        angles = gp.asarray((np.cos(theta) + 1j * np.sin(theta)).astype(cdt))
    elif init is None:
        if random_state is not None:
            _rng(fn, random_state)  # still checked, as librosa does
        angles = gp.ones(S.shape, cdt)
    else:
        raise AudioValueError(f"{fn}: init must be None or 'random', got {init!r}")
    eps = float(np.finfo(S.dtype).tiny)
    frames = dict(hop_length=hop_length, win_length=win_length, n_fft=n_fft, window=window, center=center)
    angles = angles * S
    prev = None
    for _ in range(n_iter):
        inverse = istft(angles, length=length, **frames)
        rebuilt = stft(inverse, pad_mode=pad_mode, **frames)
        if rebuilt.shape != S.shape:
            raise AudioValueError(
                f"{fn}: the STFT of the reconstruction has shape {rebuilt.shape}, not S's {S.shape}: check length, hop_length and n_fft"
            )
        angles = rebuilt if prev is None else rebuilt - (momentum / (1 + momentum)) * prev
        angles = angles / (gp.abs(angles) + eps) * S
        prev = rebuilt
    return istft(angles, length=length, **frames)


def phase_vocoder(D: Any, rate: float, hop_length: int | None = None, n_fft: int | None = None) -> gp.GPUArray:
    """librosa.phase_vocoder: D (..., bins, frames) stretched in time by 1 / rate."""
    fn = "phase_vocoder"
    D = spectrogram(fn, D)
    rate = _dsp.positive(fn, "rate", rate)
    bins, n = D.shape[-2:]
    n_fft = 2 * (bins - 1) if n_fft is None else _dsp.integer(fn, "n_fft", n_fft, 1)
    hop = n_fft // 4 if hop_length is None else _dsp.integer(fn, "hop_length", hop_length, 1)
    steps = np.arange(0, n, rate, dtype=np.float64)
    first = np.floor(steps).astype(np.int64)
    alpha = gp.asarray(np.mod(steps, 1.0))
    padded = gp.pad(D.astype(np.complex128), [(0, 0)] * (D.ndim - 1) + [(0, 2)])
    c0 = gp.take(padded, gp.from_numpy(first), axis=-1)
    c1 = gp.take(padded, gp.from_numpy(first + 1), axis=-1)
    mag = (1.0 - alpha) * gp.abs(c0) + alpha * gp.abs(c1)
    advance = gp.asarray(np.linspace(0, np.pi * hop, bins).reshape(bins, 1))
    dphase = gp.angle(c1) - gp.angle(c0) - advance
    dphase = dphase - 2.0 * np.pi * gp.round(dphase / (2.0 * np.pi))
    step = advance + dphase  # the phase increment after each output frame
    start = gp.angle(D[..., :1].astype(np.complex128))
    acc = gp.cumsum(gp.concatenate([start, step[..., :-1]], axis=-1), axis=-1)
    out = mag * gp.cos(acc) + 1j * (mag * gp.sin(acc))
    return out.astype(D.dtype)


def _rng(fn: str, random_state: Any) -> Any:
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return np.random.RandomState(seed=int(random_state))
    if isinstance(random_state, (np.random.RandomState, np.random.Generator)):
        return random_state
    raise AudioTypeError(f"{fn}: random_state must be None, an int seed, a numpy Generator or RandomState, got {random_state!r}")
