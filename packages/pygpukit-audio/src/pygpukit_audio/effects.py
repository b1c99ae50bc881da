"""Waveform effects with librosa.effects' numbers: ``gp_audio.effects.<name>``.

- ``hpss(y, kernel_size=31, power=2.0, mask=False, margin=1.0, n_fft=2048, hop_length=None,
  win_length=None, window="hann", center=True, pad_mode="constant")``: (harmonic, percussive)
  signals: stft, decompose.hpss, istft to y's length; ``harmonic(...)`` and
  ``percussive(...)`` return one of them. (librosa ignores ``window`` here and
  always uses hann; this passes it to both transforms.)
- ``time_stretch(y, rate, n_fft=2048, hop_length=None, win_length=None, window="hann",
  center=True, pad_mode="constant")``: stft, phase_vocoder(rate), istft to
  round(len / rate) samples.
- ``pitch_shift(y, sr, n_steps, bins_per_octave=12, res_type="fft", ...)``: time_stretch
  by 2^(-n_steps / bins_per_octave), resampled from sr / rate back to sr,
  cut or zero-padded to y's length. librosa's default res_type "soxr_hq"
  (the soxr library) is not available here: "fft" (also "scipy") is
  scipy.signal.resample's Fourier method, i.e. librosa's res_type="fft";
  "polyphase" (resample_poly through ``resample``) needs sr / rate to be an
  integer, as librosa's (so it only suits whole-octave shifts).
- ``resample_fft(x, num)``: scipy.signal.resample(x, num, axis=-1) of real x.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, decompose, resampling
from . import fft as gfft
from ._errors import AudioValueError
from .phase import phase_vocoder
from .stft import istft, signal, stft

RES_TYPES = ("fft", "scipy", "polyphase")


def hpss(
    y: Any,
    kernel_size: Any = 31,
    power: float = 2.0,
    mask: bool = False,
    margin: Any = 1.0,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
) -> tuple[gp.GPUArray, gp.GPUArray]:
    """librosa.effects.hpss: the harmonic and percussive parts of y (..., n), each (..., n)."""
    y = signal("hpss", y)
    spec = stft(y, n_fft, hop_length, win_length, window, center, pad_mode)
    parts = decompose.hpss(spec, kernel_size=kernel_size, power=power, mask=mask, margin=margin)
    return tuple(  # type: ignore[return-value]
        istft(p, hop_length, win_length, n_fft, window, center, length=y.shape[-1]).astype(y.dtype) for p in parts
    )


def harmonic(y: Any, kernel_size: Any = 31, power: float = 2.0, mask: bool = False, margin: Any = 1.0, **stft_args: Any) -> gp.GPUArray:
    """librosa.effects.harmonic: the harmonic part of y."""
    return hpss(y, kernel_size, power, mask, margin, **stft_args)[0]


def percussive(y: Any, kernel_size: Any = 31, power: float = 2.0, mask: bool = False, margin: Any = 1.0, **stft_args: Any) -> gp.GPUArray:
    """librosa.effects.percussive: the percussive part of y."""
    return hpss(y, kernel_size, power, mask, margin, **stft_args)[1]


def time_stretch(
    y: Any,
    rate: float,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
) -> gp.GPUArray:
    """librosa.effects.time_stretch: y played ``rate`` times faster, round(n / rate) samples."""
    fn = "time_stretch"
    y = signal(fn, y)
    rate = _dsp.number(fn, "rate", rate)
    if rate <= 0:
        raise AudioValueError(f"{fn}: rate must be a positive number, got {rate}")
    spec = stft(y, n_fft, hop_length, win_length, window, center, pad_mode)
    stretched = phase_vocoder(spec, rate, hop_length=hop_length, n_fft=n_fft)
    length = round(y.shape[-1] / rate)
    return istft(stretched, hop_length, win_length, n_fft, window, center, length=length).astype(y.dtype)


def pitch_shift(
    y: Any,
    sr: float,
    n_steps: float,
    bins_per_octave: int = 12,
    res_type: str = "fft",
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
) -> gp.GPUArray:
    """librosa.effects.pitch_shift (with res_type "fft" or "polyphase"): y shifted by n_steps
    steps of 1 / bins_per_octave octave, same length."""
    fn = "pitch_shift"
    y = signal(fn, y)
    sr = _dsp.positive(fn, "sr", sr)
    n_steps = _dsp.number(fn, "n_steps", n_steps)
    bins_per_octave = _dsp.integer(fn, "bins_per_octave", bins_per_octave, 1)
    if res_type not in RES_TYPES:
        raise AudioValueError(
            f"{fn}: res_type must be one of {', '.join(RES_TYPES)} (librosa's soxr and resampy types are not available), got {res_type!r}"
        )
    rate = 2.0 ** (-n_steps / bins_per_octave)
    orig_sr = sr / rate
    if res_type == "polyphase" and (orig_sr != int(orig_sr) or sr != int(sr)):
        raise AudioValueError(
            f"{fn}: res_type='polyphase' needs integer rates, but the stretched signal's rate is sr / rate = {orig_sr!r}; use res_type='fft'"
        )
    stretched = time_stretch(y, rate, n_fft, hop_length, win_length, window, center, pad_mode)
    n_samples = int(np.ceil(stretched.shape[-1] * (sr / orig_sr)))
    if res_type == "polyphase":
        shifted = resampling.resample(stretched, int(orig_sr), int(sr))
    else:
        shifted = resample_fft(stretched, n_samples)
    return fix_length(shifted, y.shape[-1])


def resample_fft(x: Any, num: int) -> gp.GPUArray:
    """scipy.signal.resample(x, num, axis=-1) of real x (..., n): Fourier truncation or zero
    padding, the unpaired Nyquist bin doubled (down) or halved (up) as scipy does."""
    fn = "resample_fft"
    x = _dsp.signal(fn, x)
    num = _dsp.integer(fn, "num", num, 1)
    n = x.shape[-1]
    if n == 0:
        raise AudioValueError(f"{fn}: x must have at least one sample along its last axis")
    m = min(num, n)
    m2 = m // 2 + 1
    scale = np.full(m2, num / n)
    if m % 2 == 0 and num != n:
        scale[m // 2] *= 2.0 if num < n else 0.5
    spec = gfft.rfft(x, axis=-1)[..., :m2] * gp.asarray(scale.astype(x.dtype))
    return gfft.irfft(spec, n=num, axis=-1)


def fix_length(y: gp.GPUArray, size: int) -> gp.GPUArray:
    """librosa.util.fix_length: y cut to, or zero-padded at the end to, ``size`` samples."""
    n = y.shape[-1]
    if n >= size:
        return gp.ascontiguousarray(y[..., :size])
    return gp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, size - n)])
