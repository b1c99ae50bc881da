"""Spectral centroid, bandwidth and rolloff against librosa (and by hand);
load() of WAV and FLAC files written with soundfile, against librosa.load
and the written samples; the error for a missing soundfile."""

import sys

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import features
from pygpukit_audio._errors import AudioValueError


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


@pytest.fixture
def soundfile():
    return pytest.importorskip("soundfile", reason="load reads files with soundfile (pip install soundfile)")


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def test_features_by_hand():
    # one frame with all energy in bin 2 of 5 (0, 1k, 2k, 3k, 4k Hz at sr 8000), one with bins 1 and 3 equal
    S = np.zeros((5, 2))
    S[2, 0] = 3.0
    S[1, 1] = S[3, 1] = 1.0
    gs = gp.asarray(S)
    np.testing.assert_allclose(features.spectral_centroid(gs, sr=8000).to_numpy(), [[2000.0, 2000.0]])
    np.testing.assert_allclose(features.spectral_bandwidth(gs, sr=8000).to_numpy(), [[0.0, 1000.0]], atol=1e-9)
    np.testing.assert_allclose(features.spectral_rolloff(gs, sr=8000, roll_percent=0.4).to_numpy(), [[2000.0, 1000.0]])


def test_features_match_librosa(rng, librosa):
    for dtype in (np.float64, np.float32):
        S = np.abs(rng.standard_normal((2, 257, 30))).astype(dtype)
        S[0, :, 3] = 0.0  # a silent frame
        gs = gp.asarray(S)
        tol = 1e-12 if dtype == np.float64 else 2e-6
        got = features.spectral_centroid(gs, sr=16000)
        assert got.shape == (2, 1, 30) and got.dtype == np.dtype(dtype)
        assert rel_err(got.to_numpy(), librosa.feature.spectral_centroid(S=S, sr=16000)) < tol
        for p, norm in ((2, True), (3, False), (1.5, True)):
            ref = librosa.feature.spectral_bandwidth(S=S, sr=16000, p=p, norm=norm)
            assert rel_err(features.spectral_bandwidth(gs, sr=16000, p=p, norm=norm).to_numpy(), ref) < tol * 10, (p, norm)
        for roll in (0.85, 0.3, 0.99):
            ref = librosa.feature.spectral_rolloff(S=S, sr=16000, roll_percent=roll)
            assert rel_err(features.spectral_rolloff(gs, sr=16000, roll_percent=roll).to_numpy(), ref) < 1e-12, roll
    freq = np.linspace(0.0, 5000.0, 257)
    S = np.abs(rng.standard_normal((257, 12)))
    cent = features.spectral_centroid(gp.asarray(S), freq=freq)
    assert rel_err(cent.to_numpy(), librosa.feature.spectral_centroid(S=S, freq=freq)) < 1e-12
    ref = librosa.feature.spectral_bandwidth(S=S, freq=freq, centroid=cent.to_numpy())
    assert rel_err(features.spectral_bandwidth(gp.asarray(S), freq=gp.asarray(freq), centroid=cent).to_numpy(), ref) < 1e-12


def test_feature_errors():
    S = gp.asarray(np.abs(np.linspace(-1.0, 1.0, 30)).reshape(5, 6))
    cases = [
        (lambda: features.spectral_centroid(S - 0.5), "non-negative energies"),
        (lambda: features.spectral_centroid(gp.asarray(np.ones(5))), r"\(..., n_freq, frames\)"),
        (lambda: features.spectral_centroid(S, freq=np.ones(4)), "one frequency per bin"),
        (lambda: features.spectral_rolloff(S, roll_percent=1.0), "between 0 and 1"),
        (lambda: features.spectral_bandwidth(S, p=0), "p must be positive"),
        (lambda: features.spectral_bandwidth(S, centroid=gp.ones((2, 6))), r"centroid must have shape \(1, 6\)"),
        (lambda: features.spectral_centroid(gp.asarray(np.full((3, 2), np.nan))), "NaN or infinite"),
    ]
    for call, match in cases:
        with pytest.raises(AudioValueError, match=match):
            call()


def test_load_matches_librosa(rng, tmp_path, soundfile, librosa):
    x = (rng.standard_normal((22050, 2)) * 0.3).astype(np.float32)
    wav = tmp_path / "stereo.wav"
    soundfile.write(wav, x, 22050, subtype="FLOAT")
    for kw in ({}, {"mono": False}, {"sr": 16000}, {"offset": 0.1, "duration": 0.5}, {"sr": 44100, "mono": False}):
        got, rate = features.load(wav, **kw)
        ref, ref_rate = librosa.load(wav, **{"sr": None, **kw, "res_type": "polyphase"})
        assert rate == ref_rate and got.shape == ref.shape and got.dtype == np.float32, kw
        assert np.max(np.abs(got.to_numpy() - ref)) < 1e-6, kw


def test_load_flac_mono_float64(rng, tmp_path, soundfile):
    pcm = rng.integers(-30000, 30000, 1234).astype(np.int16)
    flac = tmp_path / "mono.flac"
    soundfile.write(flac, pcm, 8000)
    got, rate = features.load(flac, dtype=np.float64)
    assert rate == 8000 and got.dtype == np.float64
    np.testing.assert_array_equal(got.to_numpy(), pcm / 32768.0)  # lossless, exact
    got, _ = features.load(flac, mono=False)
    assert got.shape == (1234,)  # one channel stays 1-d, as librosa
    with pytest.raises(AudioValueError, match="cannot read"):
        features.load(tmp_path / "missing.wav")
    with pytest.raises(AudioValueError, match="offset must be non-negative"):
        features.load(flac, offset=-1.0)
    with pytest.raises(AudioValueError, match="duration must be positive"):
        features.load(flac, duration=0.0)


def test_load_without_soundfile(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "soundfile", None)  # import soundfile now raises ImportError
    with pytest.raises(features.MissingDependencyError, match="pip install soundfile"):
        features.load(tmp_path / "x.wav")
    assert issubclass(features.MissingDependencyError, ImportError)
