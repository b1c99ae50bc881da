"""melspectrogram, mfcc and power_spectrogram against librosa.feature on noise, chirps,
tones and DC (float32 and float64, batched, short and odd lengths, a grid of STFT and
filterbank parameters); their argument checks; the |X|^power kernel's compilation
(its results on the GPU: test_gpu_features.py).

Tolerances (max |error| / max |librosa|): float32 1e-5 for mel spectrograms and MFCCs,
float64 1e-12 (the same steps: |X|^power, then the float32 filterbank as librosa's). Where
a signal's energy lies outside the filterbank (DC under fmin > 0) both results are FFT
rounding noise: the error is then measured against 1e-3 of the largest weighted input,
max|X|^power max(filterbank)."""

import numpy as np
import pytest
from audio_testing import rel_err
from feature_signals import signals

import pygpukit as gp
import pygpukit_audio as audio
from pygpukit_audio import mel_features
from pygpukit_audio._errors import AudioTypeError, AudioValueError

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


MEL_CASES = [
    dict(sr=22050),
    dict(sr=16000, n_fft=400, hop_length=160, n_mels=80, fmin=20.0, fmax=7600.0),
    dict(sr=8000, n_fft=255, hop_length=100, win_length=200, window="hamming", center=False, power=1.0, n_mels=40, htk=True),
    dict(sr=11025, n_fft=512, hop_length=128, pad_mode="reflect", power=1.5, n_mels=32, norm=None),
    dict(sr=16000, n_fft=1024, hop_length=333, pad_mode="edge", n_mels=64, norm=2.0, htk=True, fmin=100.0),
]


def test_melspectrogram_matches_librosa(rng, librosa):
    for k, case in enumerate(MEL_CASES):
        sr = case["sr"]
        for name, y in signals(rng, 3001 + 17 * k, sr).items():
            for dtype in (np.float32, np.float64):
                yy = y.astype(dtype)
                ref = librosa.feature.melspectrogram(y=yy, **case)
                got = audio.melspectrogram(gp.asarray(yy), **case)
                assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, (case, name)
                stft_kw = {k: case[k] for k in ("n_fft", "hop_length", "win_length", "window", "center", "pad_mode") if k in case}
                mel_kw = {"n_fft": 2048} | {k: case[k] for k in ("sr", "n_fft", "n_mels", "fmin", "fmax", "htk", "norm") if k in case}
                weighted = np.max(np.abs(librosa.stft(yy, **stft_kw)) ** case.get("power", 2.0)) * librosa.filters.mel(**mel_kw).max()
                scale = max(np.max(np.abs(ref)), 1e-3 * weighted)
                assert np.max(np.abs(got.to_numpy() - ref)) / scale < TOL[np.dtype(dtype)], (case, name, dtype)


def test_melspectrogram_batched_short_and_from_S(rng, librosa):
    y = rng.standard_normal((2, 3, 1999)).astype(np.float32)
    ref = librosa.feature.melspectrogram(y=y, sr=16000, n_fft=512, hop_length=128, n_mels=40)
    got = audio.melspectrogram(y, sr=16000, n_fft=512, hop_length=128, n_mels=40)  # a NumPy array is uploaded
    assert got.shape == ref.shape == (2, 3, 40, 16) and rel_err(got.to_numpy(), ref) < 1e-5
    for n in (1, 2, 7, 257):  # shorter than n_fft, centred: zero padding on both sides
        y = rng.standard_normal(n)
        ref = librosa.feature.melspectrogram(y=y, sr=8000, n_fft=256, hop_length=64, n_mels=20)
        assert rel_err(audio.melspectrogram(y, sr=8000, n_fft=256, hop_length=64, n_mels=20).to_numpy(), ref) < 1e-12, n
    S = np.abs(rng.standard_normal((2, 257, 11))) ** 2
    ref = librosa.feature.melspectrogram(S=S, sr=16000, n_mels=30)
    assert rel_err(audio.melspectrogram(S=gp.asarray(S), sr=16000, n_mels=30).to_numpy(), ref) < 1e-12


def test_mfcc_matches_librosa(rng, librosa):
    sr = 16000
    for k, (name, y) in enumerate(signals(rng, 4001, sr).items()):
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            kw = [dict(), dict(n_mfcc=13, lifter=22, n_mels=40), dict(dct_type=3, norm=None, n_fft=512, hop_length=160),
                  dict(dct_type=2, n_mfcc=30, lifter=5, htk=True, fmax=6000.0), dict(dct_type=1, norm=None, n_mfcc=10, mel_norm=None)][k]  # fmt: skip
            ref = librosa.feature.mfcc(y=yy, sr=sr, **kw)
            got = audio.mfcc(gp.asarray(yy), sr=sr, **kw)
            assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, (name, kw)
            assert rel_err(got.to_numpy(), ref) < TOL[np.dtype(dtype)], (name, kw, dtype)
    S_db = librosa.power_to_db(librosa.feature.melspectrogram(y=rng.standard_normal(3000), sr=sr))
    ref = librosa.feature.mfcc(S=S_db, n_mfcc=20, lifter=10)
    assert rel_err(audio.mfcc(S=S_db, n_mfcc=20, lifter=10).to_numpy(), ref) < 1e-12


def test_power_spectrogram_matches_librosa(rng, librosa):
    y = rng.standard_normal((2, 2501))
    for power in (1.0, 2.0, 0.5, 3.0):
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            ref = np.abs(librosa.stft(yy, n_fft=300, hop_length=75)) ** power
            got = audio.power_spectrogram(gp.asarray(yy), n_fft=300, hop_length=75, power=power)
            assert got.dtype == np.dtype(dtype) and rel_err(got.to_numpy(), ref) < TOL[np.dtype(dtype)] / 10, (power, dtype)
    z = gp.asarray((rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(np.complex64))
    assert rel_err(mel_features.reference_magnitude_power(z, 2.0).to_numpy(), np.abs(z.to_numpy()) ** 2) < 1e-6


def test_bad_input_raises(rng):
    y = rng.standard_normal(1000)
    with pytest.raises(AudioValueError, match="exactly one of"):
        audio.melspectrogram()
    with pytest.raises(AudioValueError, match="exactly one of"):
        audio.melspectrogram(y, S=np.ones((5, 3)))
    with pytest.raises(AudioValueError, match="longer than the signal"):
        audio.melspectrogram(y[:100], n_fft=256, center=False)
    with pytest.raises(AudioValueError, match="hop_length"):
        audio.melspectrogram(y, hop_length=0)
    with pytest.raises(AudioValueError, match="non-finite"):
        audio.melspectrogram(np.array([0.0, np.nan, 1.0] * 100))
    with pytest.raises(AudioValueError, match="at least one sample"):
        audio.melspectrogram(np.zeros(()))
    with pytest.raises(AudioTypeError, match="floating point"):
        audio.melspectrogram(np.arange(1000))
    with pytest.raises(AudioValueError, match="power must be positive"):
        audio.melspectrogram(y, power=0.0)
    with pytest.raises(AudioValueError, match="fmin < fmax"):
        audio.melspectrogram(y, sr=8000, fmin=5000.0)
    with pytest.raises(AudioValueError, match="at least 2 bins"):
        audio.melspectrogram(S=np.ones(10))
    with pytest.raises(AudioValueError, match="give y"):
        audio.mfcc()
    with pytest.raises(AudioValueError, match="neither y nor"):
        audio.mfcc(y, S=np.ones((40, 5)))
    with pytest.raises(AudioValueError, match="dct_type"):
        audio.mfcc(y, dct_type=5)
    with pytest.raises(AudioTypeError, match="unexpected arguments"):
        audio.mfcc(y, n_mel=40)
    with pytest.raises(AudioValueError, match="n_mfcc"):
        audio.mfcc(y, n_mels=10, n_mfcc=11)


def test_power_kernel_compiles(need_nvrtc):
    from pygpukit.jit import compiler

    kernels = [mel_features.power_kernel(ct) for ct in ("float", "double")]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "spectrum.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)
