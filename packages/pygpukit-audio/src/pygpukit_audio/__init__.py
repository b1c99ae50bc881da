"""GPU audio DSP for PyGPUkit: FFT, STFT, mel, MFCC, resampling, filters.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops are registered with the core through the plugin
hooks (plugin.py). ``gp.fft`` is this package's fft module.
"""

__version__ = "0.1.0"

from . import effects, fft
from ._errors import AudioTypeError, AudioValueError
from .convolve import fftconvolve
from .decompose import hpss, median_filter, softmask
from .features import MissingDependencyError, load, spectral_bandwidth, spectral_centroid, spectral_rolloff
from .filters import fir_filter, sosfilt, sosfilt_zi, sosfiltfilt
from .mel import (
    amplitude_to_db,
    db_to_amplitude,
    db_to_power,
    hz_to_mel,
    mel_filters,
    mel_frequencies,
    mel_to_hz,
    melspectrogram_from_power,
    mfcc_from_mel,
    power_to_db,
)  # fmt: skip
from .phase import griffinlim, phase_vocoder
from .pitch import pyin, yin
from .resampling import resample, resample_poly
from .stft import istft, stft
from .streaming import StreamingISTFT, StreamingSTFT
from .windows import get_window

__all__ = [
    "AudioTypeError", "AudioValueError", "MissingDependencyError", "StreamingISTFT", "StreamingSTFT", "amplitude_to_db",
    "db_to_amplitude", "db_to_power", "fft", "fftconvolve", "fir_filter", "get_window", "hz_to_mel", "istft", "load", "mel_filters",
    "mel_frequencies", "mel_to_hz", "melspectrogram_from_power", "mfcc_from_mel", "power_to_db", "resample", "resample_poly",
    "sosfilt", "sosfilt_zi", "sosfiltfilt", "spectral_bandwidth", "spectral_centroid", "spectral_rolloff", "stft",
]  # fmt: skip
__all__ += ["effects", "griffinlim", "hpss", "median_filter", "phase_vocoder", "pyin", "softmask", "yin"]
