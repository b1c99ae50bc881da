"""chroma_filters, chroma_stft, piptrack and estimate_tuning against librosa on noise,
chirps, detuned tones and DC, float32 and float64; their argument checks.

Tolerances (max |error| / max |librosa|): filterbanks 1e-7 (float32) / 1e-13 (float64);
chromagrams 2e-6 / 1e-12; piptrack's pitches and magnitudes 1e-6 / 1e-12. The tuning
estimate (a histogram bin of width ``resolution``) is equal on the CPU backend and in
float64; float32 on the GPU may land one bin away."""

import numpy as np
import pytest
from audio_testing import rel_err
from feature_signals import signals

import pygpukit as gp
import pygpukit_audio as audio
from pygpukit_audio._errors import AudioValueError

CHROMA_TOL = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-12}


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


def test_chroma_filters_match_librosa(librosa):
    cases = [dict(sr=22050, n_fft=2048), dict(sr=16000, n_fft=512, n_chroma=24, tuning=0.31, octwidth=None, norm=1, base_c=False),
             dict(sr=8000, n_fft=255, ctroct=4.0, octwidth=1.5, norm=np.inf), dict(sr=44100, n_fft=4096, n_chroma=36, tuning=-0.2, norm=None)]  # fmt: skip
    for case in cases:
        for dtype in (np.float32, np.float64):
            got = audio.chroma_filters(dtype=dtype, **case)
            ref = librosa.filters.chroma(dtype=dtype, **case)
            assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
            assert rel_err(got.to_numpy(), ref) < (1e-7 if dtype == np.float32 else 1e-13), (case, dtype)


def test_chroma_stft_matches_librosa(rng, librosa):
    sr = 22050
    cases = [dict(tuning=0.0), dict(tuning=0.17, norm=2, n_fft=1024, hop_length=256), dict(tuning=-0.3, n_chroma=24, norm=None),
             dict(tuning=0.0, norm=1, win_length=1500, window="hamming", center=False, octwidth=None), dict()]  # fmt: skip
    for k, (name, y) in enumerate(signals(rng, 2 * sr + 77, sr).items()):
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            for case in (cases[k], dict(tuning=0.25)):
                ref = librosa.feature.chroma_stft(y=yy, sr=sr, **case)
                got = audio.chroma_stft(gp.asarray(yy), sr=sr, **case)
                assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, (name, case)
                assert rel_err(got.to_numpy(), ref) < CHROMA_TOL[np.dtype(dtype)], (name, case, dtype)
    S = np.abs(rng.standard_normal((2, 1025, 9))) ** 2
    ref = librosa.feature.chroma_stft(S=S, sr=sr, tuning=0.1)
    assert rel_err(audio.chroma_stft(S=gp.asarray(S), sr=sr, tuning=0.1).to_numpy(), ref) < 1e-12


def test_piptrack_and_estimate_tuning_match_librosa(rng, librosa):
    sr = 22050
    t = np.arange(sr) / sr
    detune = rng.uniform(-0.4, 0.4)
    chord = sum(np.sin(2 * np.pi * 440.0 * 2 ** ((k + detune) / 12) * t) for k in (0, 4, 7))
    sigs = signals(rng, sr, sr) | {"chord": chord}
    for name, y in sigs.items():
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            pitch, mag = audio.piptrack(gp.asarray(yy), sr=sr)
            rp, rm = librosa.piptrack(y=yy, sr=sr)
            tol = 1e-6 if dtype == np.float32 else 1e-12
            if np.any(rm):
                assert rel_err(pitch.to_numpy(), rp) < tol and rel_err(mag.to_numpy(), rm) < tol, (name, dtype)
            got, ref = audio.estimate_tuning(gp.asarray(yy), sr=sr), librosa.estimate_tuning(y=yy, sr=sr)
            if dtype == np.float64 or gp.backend() == "cpu":
                assert got == ref, (name, dtype)
            else:  # float32 in the GPU's order: a deviation on a bin edge may move one histogram bin
                assert abs(got - ref) <= 0.0100001, (name, got, ref)
    est = audio.estimate_tuning(chord, sr=sr, resolution=0.05, bins_per_octave=24, fmin=200.0, threshold=0.2)
    assert est == librosa.estimate_tuning(y=chord, sr=sr, resolution=0.05, bins_per_octave=24, fmin=200.0, threshold=0.2)
    assert abs(audio.estimate_tuning(chord, sr=sr) - detune) <= 0.02  # the chord's own detuning, to the histogram's bin


def test_bad_input_raises(rng):
    y = rng.standard_normal(4000)
    with pytest.raises(AudioValueError, match="exactly one of"):
        audio.chroma_stft()
    with pytest.raises(AudioValueError, match="norm"):
        audio.chroma_stft(y, norm=-1)
    with pytest.raises(AudioValueError, match="octwidth"):
        audio.chroma_filters(22050, 2048, octwidth=0.0)
    with pytest.raises(AudioValueError, match="n_chroma"):
        audio.chroma_filters(22050, 2048, n_chroma=0)
    with pytest.raises(AudioValueError, match="sr must be positive"):
        audio.chroma_filters(-1.0, 2048)
    with pytest.raises(AudioValueError, match="non-finite"):
        audio.chroma_stft(np.full(4000, np.inf), tuning=0.0)
    with pytest.raises(AudioValueError, match="at least 3 bins"):
        audio.piptrack(S=np.ones((2, 5)))
    with pytest.raises(AudioValueError, match="resolution"):
        audio.estimate_tuning(y, resolution=0.0)
