"""GPU audio DSP for PyGPUkit: FFT, STFT, mel, MFCC, resampling, filters.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops are registered with the core through the plugin
hooks (plugin.py). ``gp.fft`` is this package's fft module.
"""

__version__ = "0.1.0"

from . import fft
from ._errors import AudioTypeError, AudioValueError
from .chroma import chroma_filters, chroma_stft, estimate_tuning, piptrack
from .cqt import cqt, cqt_frequencies
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
from .resampling import resample, resample_poly
from .rhythm import tempo, tempogram
from .stft import istft, stft
from .streaming import StreamingISTFT, StreamingSTFT
from .windows import get_window

__all__ = [
    "AudioTypeError", "AudioValueError", "MissingDependencyError", "StreamingISTFT", "StreamingSTFT", "amplitude_to_db",
    "db_to_amplitude", "db_to_power", "fft", "fir_filter", "get_window", "hz_to_mel", "istft", "load", "mel_filters",
    "mel_frequencies", "mel_to_hz", "melspectrogram_from_power", "mfcc_from_mel", "power_to_db", "resample", "resample_poly",
    "sosfilt", "sosfilt_zi", "sosfiltfilt", "spectral_bandwidth", "spectral_centroid", "spectral_rolloff", "stft",
]  # fmt: skip
__all__ += ["chroma_filters", "chroma_stft", "cqt", "cqt_frequencies", "estimate_tuning", "melspectrogram", "mfcc", "onset_detect",
            "onset_strength", "piptrack", "power_spectrogram", "tempo", "tempogram"]  # fmt: skip
