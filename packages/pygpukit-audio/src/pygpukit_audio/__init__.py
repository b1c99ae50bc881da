"""GPU audio DSP for PyGPUkit: FFT, STFT, mel, MFCC, resampling, filters.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops and models are registered with the core
through the plugin hooks once the op registry exists.
"""

__version__ = "0.1.0"
