"""The audio plugin's hooks: every module of the package that defines ops
registers them (a reference on every backend and, where it has one, its CUDA
kernel above the reference) through its register(registry); ``gp.fft`` is
the fft module; the benchmark suites audio_fft and audio_dsp."""

from __future__ import annotations

import importlib
from typing import Any

from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__

# The modules that define ops, in registration order; each has register(registry).
# Imported by name: the package exports functions named like some of them (stft).
MODULES = tuple(
    importlib.import_module(f"{__package__}.{name}")
    for name in ("fft", "cufft", "stft", "filters", "resampling", "mel", "decompose", "pitch", "mel_features")
)


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo(
        "pygpukit-audio", __version__, "FFT, STFT/ISTFT, filters, resampling, mel/MFCC/chroma/CQT, onsets and tempo, pitch, HPSS, phase"
    )


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    for module in MODULES:
        module.register(registry)


@hookimpl
def pygpukit_register_namespaces(registry: Any) -> None:
    registry.register("fft", f"{__package__}.fft", description="numpy.fft's transforms on GPUArrays (fft, ifft, rfft, irfft, helpers)")


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    from .benchmarks import dsp, fft

    registry.register("audio_fft", fft.bench_audio_fft, description="rfft, STFT and mel spectrogram against torch / torchaudio (cuFFT)")
    registry.register("audio_dsp", dsp.bench_audio_dsp, description="sosfilt and resample_poly against scipy.signal and torchaudio")
