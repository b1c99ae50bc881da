"""cqt and cqt_frequencies against librosa.cqt(..., res_type="polyphase" / "fft" / "scipy") on tones, chirps,
noise and DC, float32 and float64, batched, with early decimation, partial octaves, odd
hops, an estimated tuning and short signals; the argument checks.

Tolerances: norm-wise max |error| / max |librosa| below 2e-5 (float32; 1e-6 and below but
where a tone lies above the decimated band and the response is float32 noise of the
resampling filters) and 5e-7 (float64: librosa builds every filter in complex64 and
transforms it with scipy.fft; here numpy.fft transforms the same complex64 filters, so
both bases carry float32 rounding); the magnitude of every bin above 1e-3 (float64) or
1e-2 (float32) of the maximum within 1e-3 relative."""

import numpy as np
import pytest
from audio_testing import rel_err
from feature_signals import signals

import pygpukit as gp
import pygpukit_audio as audio
from pygpukit_audio._errors import AudioTypeError, AudioValueError

TOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 5e-7}


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


def check(got, ref, dtype, what, leakage=False):
    """``leakage``: the response is only the filters' leakage at DC (a constant signal), which
    in librosa's complex64 basis is float32 rounding: 1e-4 norm-wise, no per-bin check."""
    assert got.dtype == np.dtype(np.complex64 if dtype == np.float32 else np.complex128), what
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    got = got.to_numpy()
    assert rel_err(got, ref) < (1e-4 if leakage else TOL[np.dtype(dtype)]), (what, rel_err(got, ref))
    if leakage:
        return
    big = np.abs(ref) > (1e-2 if dtype == np.float32 else 1e-3) * np.abs(ref).max()
    assert np.max(np.abs(np.abs(got[big]) - np.abs(ref[big])) / np.abs(ref[big])) < 1e-3, what


def test_cqt_frequencies_match_librosa(librosa):
    for n_bins, fmin, bpo, tuning in [(84, 32.7, 12, 0.0), (30, 40.0, 12, 0.2), (50, 100.0, 36, -0.4), (1, 55.0, 12, 0.0)]:
        ref = librosa.cqt_frequencies(n_bins, fmin=fmin, bins_per_octave=bpo, tuning=tuning)
        np.testing.assert_allclose(audio.cqt_frequencies(n_bins, fmin, bpo, tuning), ref, rtol=1e-15)


def test_cqt_matches_librosa(rng, librosa):
    cases = [
        dict(sr=22050),  # 7 octaves from C1, hop 512
        dict(sr=44100, n_bins=30, hop_length=256, fmin=60.0, tuning=0.1, scale=False),  # early decimation by 2^5
        dict(
            sr=22050,
            n_bins=100,
            bins_per_octave=24,
            hop_length=128,
            filter_scale=2,
            norm=2,
            sparsity=0.0,
            window="hamming",
            pad_mode="reflect",
        ),
        dict(sr=16000, n_bins=40, fmin=50.0, hop_length=300, norm=np.inf, window="blackman", tuning=None),  # hop 300, 150, then 75
        dict(sr=8000, n_bins=20, fmin=80.0, hop_length=75, sparsity=0.05),  # an odd hop: no decimation
        dict(sr=44100, n_bins=36, hop_length=512, fmin=55.0, res_type="fft"),  # scipy.signal.resample's spectrum cropping
        dict(sr=16000, n_bins=48, hop_length=256, fmin=40.0, res_type="scipy", scale=False),
    ]
    for k, case in enumerate(cases):
        sr = case["sr"]
        for name, y in signals(rng, int(0.8 * sr) + k, sr).items():
            for dtype in (np.float32, np.float64):
                yy = y.astype(dtype)
                ref = librosa.cqt(yy, **({"res_type": "polyphase"} | case))
                check(audio.cqt(gp.asarray(yy), **case), ref, dtype, (case, name, dtype), name == "silence_dc")


def test_cqt_batched_and_short(rng, librosa):
    y = rng.standard_normal((2, 3, 5000)).astype(np.float32)
    ref = librosa.cqt(y, sr=16000, n_bins=48, fmin=60.0, hop_length=256, res_type="polyphase")
    check(audio.cqt(y, sr=16000, n_bins=48, fmin=60.0, hop_length=256), ref, np.float32, "batched")
    for n in (8, 31, 700):  # librosa needs at least the early decimation factor (4) of samples
        y = rng.standard_normal(n)
        ref = librosa.cqt(y, sr=8000, n_bins=24, fmin=100.0, hop_length=64, res_type="polyphase")
        check(audio.cqt(y, sr=8000, n_bins=24, fmin=100.0, hop_length=64), ref, np.float64, n)


def test_bad_input_raises(rng):
    y = rng.standard_normal(8000)
    with pytest.raises(AudioValueError, match="res_type must be one of"):
        audio.cqt(y, res_type="soxr_hq")
    with pytest.raises(AudioValueError, match="Nyquist"):
        audio.cqt(y, sr=8000, n_bins=84)
    with pytest.raises(AudioValueError, match="sparsity"):
        audio.cqt(y, sparsity=1.0)
    with pytest.raises(AudioValueError, match="hop_length"):
        audio.cqt(y, hop_length=0)
    with pytest.raises(AudioValueError, match="n_bins"):
        audio.cqt(y, n_bins=0)
    with pytest.raises(AudioTypeError, match="window"):
        audio.cqt(y, window=np.ones(5))
    with pytest.raises(AudioValueError, match="NaN"):
        audio.cqt(np.full(100, np.nan))
    with pytest.raises(AudioValueError, match="at least one axis"):
        audio.cqt(np.zeros(()))
    with pytest.raises(AudioValueError, match="too short"):
        audio.cqt(y[:8], sr=44100, n_bins=30, hop_length=256, fmin=60.0)
