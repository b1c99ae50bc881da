"""GPU audio DSP for PyGPUkit: FFT, STFT, mel, MFCC, resampling, filters.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops are registered with the core through the plugin
hooks (plugin.py). ``gp.fft`` is this package's fft module.
"""

__version__ = "0.1.0"

from . import fft
from ._errors import AudioTypeError, AudioValueError
from .stft import istft, stft
from .streaming import StreamingISTFT, StreamingSTFT
from .windows import get_window

__all__ = ["AudioTypeError", "AudioValueError", "StreamingISTFT", "StreamingSTFT", "fft", "get_window", "istft", "stft"]
