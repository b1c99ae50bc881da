"""The features of mel_features, chroma, cqt, onsets and rhythm on the GPU: the |X|^power
kernel against its reference, melspectrogram and MFCC against float64 NumPy (no librosa
needed), at the benchmark's size too; chroma, CQT, onsets and tempo against librosa where
it is installed on the GPU machine (skipped otherwise), with the CPU tests' tolerances
(float64 onsets equal; float32 onsets may differ by one decision that sits on a float32
tie, since the GPU sums in another order; the tempo of a clear click track equal)."""

import numpy as np
import pytest
from audio_testing import rel_err
from feature_signals import signals

import pygpukit as gp
import pygpukit_audio as audio
from pygpukit.registry import REGISTRY
from pygpukit_audio import mel, mel_features

pytestmark = pytest.mark.gpu


def numpy_melspectrogram(y: np.ndarray, sr: float, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """librosa's defaults in float64: centred zero padding, periodic Hann, power 2, Slaney mel."""
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    yp = np.pad(y.astype(np.float64), [(0, 0)] * (y.ndim - 1) + [(n_fft // 2, n_fft // 2)])
    frames = np.lib.stride_tricks.sliding_window_view(yp, n_fft, axis=-1)[..., ::hop, :]
    power = np.abs(np.fft.rfft(frames * win, axis=-1)) ** 2
    basis = mel.mel_filters(sr, n_fft, n_mels).to_numpy().astype(np.float64)
    return np.swapaxes(power @ basis.T, -1, -2)


def test_magnitude_power_kernel(rng):
    for dtype in (np.complex64, np.complex128):
        z = gp.asarray((rng.standard_normal((7, 1000, 33)) + 1j * rng.standard_normal((7, 1000, 33))).astype(dtype))
        assert REGISTRY.which("magnitude_power", z, 2.0).endswith("kernel")
        for power in (2.0, 1.0, 1.5):
            got = mel_features.kernel_magnitude_power(z, power)
            ref = np.abs(z.to_numpy().astype(np.complex128)) ** power
            assert got.dtype == np.dtype(np.float32 if dtype == np.complex64 else np.float64)
            assert rel_err(got.to_numpy(), ref) < (1e-6 if dtype == np.complex64 else 1e-14), (dtype, power)
        view = z.swapaxes(-1, -2)  # strided: copied to contiguous first
        assert rel_err(mel_features.kernel_magnitude_power(view, 2.0).to_numpy(), np.abs(view.to_numpy()) ** 2) < 1e-6


def test_melspectrogram_and_mfcc_against_numpy(rng):
    for dtype in (np.float32, np.float64):
        y = rng.standard_normal((3, 40_001)).astype(dtype)
        got = audio.melspectrogram(gp.asarray(y), sr=16000, n_fft=1024, hop_length=256, n_mels=80)
        ref = numpy_melspectrogram(y, 16000, 1024, 256, 80)
        assert got.dtype == np.dtype(dtype) and rel_err(got.to_numpy(), ref) < (1e-5 if dtype == np.float32 else 1e-12)
        m = audio.mfcc(gp.asarray(y), sr=16000, n_fft=1024, hop_length=256, n_mels=80, n_mfcc=13, lifter=22)
        db = 10 * np.log10(np.maximum(ref, 1e-10))
        db = np.maximum(db, db.max() - 80.0)
        dct = mel.dct_matrix(13, 80, 2, "ortho") * (1 + 11 * np.sin(np.pi * np.arange(1, 14) / 22))[:, None]
        assert rel_err(m.to_numpy(), dct @ db) < (1e-4 if dtype == np.float32 else 1e-10)
    y = rng.standard_normal((16, 16000 * 60)).astype(np.float32)  # the benchmark's batch
    got = audio.melspectrogram(gp.asarray(y), sr=16000, n_fft=1024, hop_length=256, n_mels=80)
    assert got.shape == (16, 80, 3751)
    assert rel_err(got.to_numpy()[5], numpy_melspectrogram(y[5], 16000, 1024, 256, 80)) < 1e-5


def test_chroma_cqt_onsets_tempo_against_librosa(rng):
    librosa = pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")
    sr = 22050
    for name, y in signals(rng, 3 * sr, sr).items():
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            gy = gp.asarray(yy)
            tol = 2e-5 if dtype == np.float32 else 1e-10
            assert rel_err(audio.chroma_stft(gy, sr=sr, tuning=0.0).to_numpy(), librosa.feature.chroma_stft(y=yy, sr=sr, tuning=0.0)) < tol
            ref = librosa.cqt(yy, sr=sr, res_type="polyphase")
            assert rel_err(audio.cqt(gy, sr=sr).to_numpy(), ref) < (1e-4 if name == "silence_dc" else max(tol, 5e-7)), name
            ref = librosa.onset.onset_strength(y=yy, sr=sr)
            if np.any(ref):
                assert rel_err(audio.onset_strength(gy, sr=sr).to_numpy(), ref) < tol, name
            got, ref = audio.onset_detect(gy, sr=sr), librosa.onset.onset_detect(y=yy, sr=sr)
            if dtype == np.float64:
                np.testing.assert_array_equal(got, ref, err_msg=name)
            else:  # a float32 tie at a threshold may move one decision
                assert len(np.setxor1d(got, ref)) <= 1, (name, got, ref)
    y = np.zeros(8 * sr)
    for t0 in np.arange(0.2, 7.8, 0.5):  # 120 bpm clicks
        y[int(t0 * sr) : int(t0 * sr) + 300] += np.hanning(300)
    assert float(audio.tempo(gp.asarray(y), sr=sr).to_numpy()[0]) == float(librosa.feature.tempo(y=y, sr=sr)[0])
