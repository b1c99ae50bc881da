"""GPU audio DSP for PyGPUkit: FFT, STFT, mel, MFCC, resampling, filters.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops are registered with the core through the plugin
hooks (plugin.py). ``gp.fft`` is this package's fft module.
"""

__version__ = "0.1.0"

from . import effects, fft
from ._errors import AudioTypeError, AudioValueError
from .chroma import chroma_filters, chroma_stft, estimate_tuning, piptrack
from .convolve import fftconvolve
from .cqt import cqt, cqt_frequencies
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
from .mel_features import melspectrogram, mfcc, power_spectrogram
from .onsets import onset_detect, onset_strength
from .phase import griffinlim, phase_vocoder
from .pitch import pyin, yin
from .resampling import resample, resample_poly
from .rhythm import tempo, tempogram
from .stft import istft, stft
from .streaming import StreamingISTFT, StreamingSTFT
from .windows import get_window

__all__ = [
    "AudioTypeError",
    "AudioValueError",
    "MissingDependencyError",
    "StreamingISTFT",
    "StreamingSTFT",
    "amplitude_to_db",
    "chroma_filters",
    "chroma_stft",
    "cqt",
    "cqt_frequencies",
    "db_to_amplitude",
    "db_to_power",
    "effects",
    "estimate_tuning",
    "fft",
    "fftconvolve",
    "fir_filter",
    "get_window",
    "griffinlim",
    "hpss",
    "hz_to_mel",
    "istft",
    "load",
    "median_filter",
    "mel_filters",
    "mel_frequencies",
    "mel_to_hz",
    "melspectrogram",
    "melspectrogram_from_power",
    "mfcc",
    "mfcc_from_mel",
    "onset_detect",
    "onset_strength",
    "phase_vocoder",
    "piptrack",
    "power_spectrogram",
    "power_to_db",
    "pyin",
    "resample",
    "resample_poly",
    "softmask",
    "sosfilt",
    "sosfilt_zi",
    "sosfiltfilt",
    "spectral_bandwidth",
    "spectral_centroid",
    "spectral_rolloff",
    "stft",
    "tempo",
    "tempogram",
    "yin",
]
