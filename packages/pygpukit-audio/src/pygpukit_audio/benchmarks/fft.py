"""pygpukit-audio's transforms: rfft of batched power-of-two lengths (float32,
2^24 samples in all), the STFT of 16 signals of 60 s at 16 kHz (n_fft
1024, hop 256, Hann window, centred with zero padding: librosa's defaults)
and their 80-band mel power spectrogram (Slaney mel, as librosa's) against
torch.fft.rfft / torch.stft (cuFFT) and torchaudio.transforms.MelSpectrogram
(when torchaudio is installed; recorded as "torch") in the same run, NumPy
on the CPU backend at smaller sizes; on a GPU with cuFFT loadable, the rfft
cases also routed to pygpukit-audio's cuFFT implementation (impl
"pygpukit-cufft": the same library as torch's, through pygpukit). Milliseconds per call (lower is
better); the ratio to torch is what the issue's targets are stated in
(rfft >= 0.7x, stft >= 0.8x torch's speed, melspectrogram >= 1.0x
torchaudio's)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark import peers
from pygpukit.benchmark.harness import Recorder, median_time_ms

from .. import cufft
from .. import fft as gfft
from ..mel import mel_filters
from ..mel_features import melspectrogram
from ..stft import stft

N_FFT, HOP, N_MELS, SR = 1024, 256, 80, 16000


def _numpy_stft(y: np.ndarray, win: np.ndarray) -> np.ndarray:
    yp = np.pad(y, [(0, 0), (N_FFT // 2, N_FFT // 2)])
    frames = np.lib.stride_tricks.sliding_window_view(yp, N_FFT, axis=-1)[:, ::HOP]
    return np.fft.rfft(frames * win, axis=-1)


def _torchaudio_mel() -> Any:
    """torchaudio's MelSpectrogram on the GPU with librosa's settings, or None without torchaudio."""
    try:
        import torchaudio
    except ImportError:
        return None
    return torchaudio.transforms.MelSpectrogram(
        sample_rate=SR, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS, center=True, pad_mode="constant", norm="slaney", mel_scale="slaney"
    ).cuda()


def _cases(name: str, mod: Any, rffts: list[np.ndarray], y: np.ndarray) -> dict[str, Callable[[], object]]:
    """case -> call for implementation ``name``."""
    win = np.hanning(N_FFT + 1)[:N_FFT].astype(np.float32)  # periodic Hann
    stft_case = f"stft_{y.shape[0]}x{y.shape[1]}_n{N_FFT}_h{HOP}"
    mel_case = f"mel{N_MELS}_{y.shape[0]}x{y.shape[1]}_n{N_FFT}_h{HOP}"
    mel: Callable[[], object] | None
    if name == "pygpukit":
        args: list[Any] = [gp.from_numpy(x) for x in rffts]
        gy = gp.from_numpy(y)
        rfft, spec = gfft.rfft, (lambda: stft(gy, N_FFT, HOP))
        mel = lambda: melspectrogram(gy, sr=SR, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS)
    elif name == "torch":
        args = [mod.from_numpy(x).cuda() for x in rffts]
        ty, tw = mod.from_numpy(y).cuda(), mod.from_numpy(win).cuda()
        rfft = lambda a: mod.fft.rfft(a)
        spec = lambda: mod.stft(ty, N_FFT, HOP, window=tw, center=True, pad_mode="constant", return_complex=True)
        transform = _torchaudio_mel()
        mel = None if transform is None else (lambda: transform(ty))
    else:  # numpy
        basis = mel_filters(SR, N_FFT, N_MELS).to_numpy()
        args, rfft, spec = list(rffts), np.fft.rfft, (lambda: _numpy_stft(y, win))
        mel = lambda: np.abs(_numpy_stft(y, win)) ** 2 @ basis.T
    calls: dict[str, Callable[[], object]] = {}
    for x, a in zip(rffts, args):
        calls[f"rfft_f32_{x.shape[0]}x{x.shape[1]}"] = functools.partial(rfft, a)
    calls[stft_case] = spec
    if mel is not None:
        calls[mel_case] = mel
    return calls


def _impls() -> list[tuple[str, Any, Any]]:
    """(name, timer, module): pygpukit, then torch on the GPU (CuPy's cuFFT is
    the library torch calls) or NumPy on the CPU backend."""
    return [i for i in peers.impls() if i[0] != "cupy"]


def bench_audio_fft(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    total = (1 << (22 if quick else 24)) if gpu else 1 << 16
    sizes = (256, 1024, 4096, 16384, 65536) if gpu else (256, 4096)
    seconds, signals = (60, 16) if gpu else (2, 2)
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    rng = np.random.default_rng(11)
    rffts = [rng.standard_normal((total // n, n), dtype=np.float32) for n in sizes]
    y = rng.standard_normal((signals, 16000 * seconds), dtype=np.float32)
    for name, timer, mod in _impls():
        for case, fn in _cases(name, mod, rffts, y).items():
            rec.add(case, name, "ms", median_time_ms(fn, timer, warm, reps), False)
        peers.free(name, mod)
    if gpu:
        _cufft_rffts(rec, rffts, warm, reps)


def _cufft_rffts(rec: Recorder, rffts: list[np.ndarray], warm: int, reps: int) -> None:
    """The rfft cases routed to audio:cufft, when cuFFT loads here."""
    if not cufft.available():
        print("  audio_fft: cuFFT could not be loaded; the pygpukit-cufft rows are left out")
        return
    with gp.routing(rfft="audio:cufft"):
        for x in rffts:
            a = gp.from_numpy(x)
            try:
                ms = median_time_ms(functools.partial(gfft.rfft, a), peers.gp_timer(), warm, reps)
            except cufft.CufftError as e:  # a library that loads but cannot run here: say so, keep the other rows
                print(f"  audio_fft: cuFFT failed ({e}); the pygpukit-cufft rows are left out")
                return
            rec.add(f"rfft_f32_{x.shape[0]}x{x.shape[1]}", "pygpukit-cufft", "ms", ms, False)
            del a
