"""Mel spectrograms and MFCCs of signals, as librosa.feature.melspectrogram / mfcc.

- ``melspectrogram(y=None, sr=22050, S=None, n_fft=2048, hop_length=512, win_length=None,
  window="hann", center=True, pad_mode="constant", power=2.0, n_mels=128, fmin=0.0,
  fmax=None, htk=False, norm="slaney")``: mel_filters @ |stft(y)|^power, (..., n_mels,
  frames) in y's dtype; with ``S`` (a power spectrogram (..., 1 + n_fft // 2, frames))
  the filterbank is applied to S as given, n_fft = 2 (bins - 1). As librosa, the
  filterbank is computed in float32 (its default dtype) also for float64 input.
- ``mfcc(y=None, sr=22050, S=None, n_mfcc=20, dct_type=2, norm="ortho", lifter=0, mel_norm="slaney", **mel)``:
  mfcc_from_mel(power_to_db(melspectrogram(y, sr, **mel))), or of a log-mel ``S``.
- ``power_spectrogram(y, n_fft, hop_length, win_length, window, center, pad_mode, power)``:
  |stft(y)|^power, the step the features share.

|X|^power is one op ("magnitude_power"): its CUDA kernel (kernels/spectrum.cu)
reads the complex STFT once (power 2 as re^2 + im^2); the mel GEMM runs on the
STFT's contiguous (..., frames, bins) layout as one (rows, bins) @ (bins, n_mels)
product and the result is its transposed view, as stft's output is.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _dsp, mel
from ._errors import AudioTypeError, AudioValueError
from .stft import stft

_THREADS, _MAX_BLOCKS = 256, 4096  # kPowThreads; blocks of the grid-stride loop


def power_spectrogram(
    y: Any,
    n_fft: int = 2048,
    hop_length: int = 512,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
    power: float = 2.0,
) -> gp.GPUArray:
    """|stft(y)|^power, (..., 1 + n_fft // 2, frames) in y's dtype (a transposed view)."""
    power = _dsp.positive("power_spectrogram", "power", power)
    D = stft(y, n_fft, hop_length, win_length, window, center, pad_mode)
    return ext.op("magnitude_power")(D.swapaxes(-1, -2), power).swapaxes(-1, -2)


def melspectrogram(
    y: Any = None,
    sr: float = 22050,
    S: Any = None,
    n_fft: int = 2048,
    hop_length: int = 512,
    win_length: int | None = None,
    window: Any = "hann",
    center: bool = True,
    pad_mode: str = "constant",
    power: float = 2.0,
    n_mels: int = 128,
    fmin: float = 0.0,
    fmax: float | None = None,
    htk: bool = False,
    norm: Any = "slaney",
) -> gp.GPUArray:
    """librosa.feature.melspectrogram: (..., n_mels, frames)."""
    fn = "melspectrogram"
    if (y is None) == (S is None):
        raise AudioValueError(f"{fn}: give exactly one of y (a signal) and S (a power spectrogram)")
    if S is None:
        S = power_spectrogram(y, n_fft, hop_length, win_length, window, center, pad_mode, power)
    else:
        S = _dsp.signal(fn, S, "S")
        if S.ndim < 2 or S.shape[-2] < 2:
            raise AudioValueError(f"{fn}: S must be (..., 1 + n_fft // 2, frames) with at least 2 bins, got {S.shape}")
        n_fft = 2 * (S.shape[-2] - 1)
    basis = mel.mel_filters(sr, n_fft, n_mels, fmin, fmax, htk, norm, gp.float32).astype(S.dtype)
    lead, (bins, frames) = S.shape[:-2], S.shape[-2:]
    rows = gp.ascontiguousarray(S.swapaxes(-1, -2)).reshape(math.prod(lead) * frames, bins)
    out = gp.matmul(rows, basis.swapaxes(0, 1))  # (rows, n_mels): one GEMM for the whole batch
    return out.reshape(*lead, frames, basis.shape[0]).swapaxes(-1, -2)


_MEL_ARGS = ("n_fft", "hop_length", "win_length", "window", "center", "pad_mode", "power", "n_mels", "fmin", "fmax", "htk", "norm")


def check_mel_kwargs(fn: str, kwargs: dict[str, Any], allowed: tuple[str, ...] = _MEL_ARGS) -> None:
    """Extra keyword arguments passed on to melspectrogram must be some of its own."""
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise AudioTypeError(f"{fn}: unexpected arguments {unknown}; melspectrogram takes {', '.join(allowed)}")


def mfcc(
    y: Any = None,
    sr: float = 22050,
    S: Any = None,
    n_mfcc: int = 20,
    dct_type: int = 2,
    norm: str | None = "ortho",
    lifter: float = 0,
    mel_norm: Any = "slaney",
    **kwargs: Any,
) -> gp.GPUArray:
    """librosa.feature.mfcc: (..., n_mfcc, frames); ``mel_norm`` is the filterbank's norm,
    ``kwargs`` go to melspectrogram."""
    check_mel_kwargs("mfcc", kwargs, _MEL_ARGS[:-1])  # norm is the DCT's here
    if S is None:
        if y is None:
            raise AudioValueError("mfcc: give y (a signal) or S (a log-mel spectrogram)")
        S = mel.power_to_db(melspectrogram(y, sr, norm=mel_norm, **kwargs))
    elif y is not None or kwargs:
        raise AudioValueError("mfcc: with S (a log-mel spectrogram) give neither y nor melspectrogram arguments")
    return mel.mfcc_from_mel(S, n_mfcc, dct_type, norm, lifter)


# -- op "magnitude_power": |z|^power of a complex array ---------------------------------


def reference_magnitude_power(z: gp.GPUArray, power: float) -> gp.GPUArray:
    m = gp.abs(z)
    if power == 1.0:
        return m
    return m * m if power == 2.0 else gp.power(m, power)


@functools.cache
def power_kernel(ct: str) -> Any:
    return _dsp.kernel("spectrum", f"pgk_audio::magnitude_power<{ct}>", "const void* z, long long n, double power, int mode, void* out")


def kernel_magnitude_power(z: gp.GPUArray, power: float) -> gp.GPUArray:
    z = gp.ascontiguousarray(z)
    rdt = np.dtype(np.float32 if z.dtype == np.complex64 else np.float64)
    out = ext.empty(z.shape, rdt)
    mode = 2 if power == 2.0 else (1 if power == 1.0 else 0)
    blocks = max(1, min(_MAX_BLOCKS, -(-z.size // _THREADS)))
    power_kernel(_dsp.CTYPES[rdt])(blocks, _THREADS, z, z.size, float(power), mode, out)
    return out


def _power_kernel_takes(z: Any, power: Any) -> bool:
    return z.size > 0


def register(registry: Any) -> None:
    ext.register_family(
        registry, "magnitude_power", nkey=1, doc="|z|^power of a complex array (power 2 as re^2 + im^2)",
        reference=reference_magnitude_power, cuda=kernel_magnitude_power, dtypes=["complex64", "complex128"], predicate=_power_kernel_takes,
    )  # fmt: skip
