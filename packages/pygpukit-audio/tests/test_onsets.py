"""onset_strength, onset_detect, tempogram and tempo against librosa on noise, chirps, tones,
click tracks and DC, float32 and float64; the argument checks.

Tolerances: onset envelopes and tempograms max |error| / max |librosa| below 5e-6 (float32:
a steady tone's envelope is the float32 rounding of dB differences) and 1e-12 (float64);
onset frames, samples and times, and tempi, equal on the CPU backend, but for per-frame
float32 tempi (aggregate=None), where up to 5% of the frames may pick another lag: there
the scores of two lags tie to float32 rounding (the picking and the argmax compare values,
so another summation order can move a decision that sits on a tie). On the GPU, float32
onsets may differ by one moved decision and float32 tempi by a tie as well."""

import numpy as np
import pytest
from audio_testing import rel_err
from feature_signals import signals

import pygpukit as gp
import pygpukit_audio as audio
from pygpukit_audio import onsets
from pygpukit_audio._errors import AudioTypeError, AudioValueError

TOL = {np.dtype(np.float32): 5e-6, np.dtype(np.float64): 1e-12}
SR = 22050


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


def clicks(rng, bpm: float, seconds: float, sr: int = SR) -> np.ndarray:
    """Decaying bursts every 60 / bpm s (with a random start), over faint noise."""
    y = 0.01 * rng.standard_normal(int(seconds * sr))
    burst = np.hanning(400) * np.sin(np.arange(400) * rng.uniform(0.2, 0.6))
    for t0 in np.arange(rng.uniform(0.05, 0.3), seconds - 0.1, 60.0 / bpm):
        i = int(t0 * sr)
        y[i : i + 400] += burst
    return y


def test_onset_strength_matches_librosa(rng, librosa):
    cases = [dict(), dict(lag=2, max_size=3), dict(detrend=True, center=False, n_mels=64), dict(aggregate=np.max, fmax=5000.0),
             dict(hop_length=256, n_fft=1024, max_size=4, aggregate=np.sum)]  # fmt: skip
    sigs = signals(rng, 3 * SR + 5, SR) | {"clicks": clicks(rng, 110.0, 3.0)}
    for k, (name, y) in enumerate(sigs.items()):
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            for case in (dict(), cases[k % len(cases)]):
                ref = librosa.onset.onset_strength(y=yy, sr=SR, **case)
                got = audio.onset_strength(gp.asarray(yy), sr=SR, **case)
                assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, (name, case)
                if np.any(ref):
                    assert rel_err(got.to_numpy(), ref) < TOL[np.dtype(dtype)], (name, case, dtype)
                else:  # DC: no flux at all
                    assert not np.any(got.to_numpy()), (name, case)
    y = rng.standard_normal((2, 20000))
    ref = librosa.onset.onset_strength(y=y, sr=SR)
    assert rel_err(audio.onset_strength(y, sr=SR).to_numpy(), ref) < 1e-12
    S = rng.standard_normal((2, 30, 40))
    ref = librosa.onset.onset_strength(S=S, sr=SR, lag=3)
    assert rel_err(audio.onset_strength(S=S, sr=SR, lag=3).to_numpy(), ref) < 1e-12


def test_onset_detect_matches_librosa(rng, librosa):
    sigs = signals(rng, 4 * SR, SR) | {"clicks": clicks(rng, 140.0, 4.0)}
    cases = [dict(), dict(backtrack=True), dict(units="time"), dict(units="samples", backtrack=True, normalize=False),
             dict(pre_max=5, post_max=3, pre_avg=10, post_avg=4, delta=0.2, wait=8, hop_length=256)]  # fmt: skip
    for name, y in sigs.items():
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            for case in cases:
                got = audio.onset_detect(gp.asarray(yy), sr=SR, **case)
                try:
                    ref = librosa.onset.onset_detect(y=yy, sr=SR, **case)
                except librosa.util.exceptions.ParameterError:  # librosa cannot backtrack no onsets; here: none
                    assert case.get("backtrack") and got.size == 0, (name, case)
                    continue
                assert isinstance(got, np.ndarray) and got.shape == ref.shape, (name, case, got, ref)
                if dtype == np.float64 or gp.backend() == "cpu":
                    np.testing.assert_array_equal(got, ref, err_msg=f"{name} {case}")
                else:  # float32 sums in the GPU's order: one decision on a tie may move
                    assert len(np.setxor1d(got, ref)) <= 2, (name, case, got, ref)
    env = librosa.onset.onset_strength(y=clicks(rng, 90.0, 4.0), sr=SR)
    energy = np.abs(rng.standard_normal(env.size))
    ref = librosa.onset.onset_detect(onset_envelope=env, sr=SR, backtrack=True, energy=energy)
    np.testing.assert_array_equal(audio.onset_detect(onset_envelope=env, sr=SR, backtrack=True, energy=energy), ref)
    dc = np.full(SR, 0.3)  # DC: one onset where the signal starts after the zero padding
    np.testing.assert_array_equal(audio.onset_detect(dc, sr=SR), librosa.onset.onset_detect(y=dc, sr=SR))


def test_onset_peak_picking_by_hand():
    x = np.array([0.0, 1.0, 0.0, 0.0, 0.9, 0.0, 0.95, 0.0, 0.0, 0.0])
    # peaks at 1, 4 and 6 over a 1-frame neighbourhood; wait=2 drops 6 (within 2 frames of 4)
    np.testing.assert_array_equal(onsets.peak_pick(x, 1, 2, 1, 2, 0.1, 0), [1, 4, 6])
    np.testing.assert_array_equal(onsets.peak_pick(x, 1, 2, 1, 2, 0.1, 2), [1, 4])
    np.testing.assert_array_equal(onsets.onset_backtrack(np.array([4, 6]), np.array([3, 2, 1, 2, 3, 1, 4])), [2, 5])


def test_tempogram_and_tempo_match_librosa(rng, librosa):
    sigs = signals(rng, 5 * SR, SR) | {"clicks": clicks(rng, rng.uniform(70.0, 160.0), 8.0)}
    for name, y in sigs.items():
        for dtype in (np.float32, np.float64):
            yy = y.astype(dtype)
            env = librosa.onset.onset_strength(y=yy, sr=SR)
            for kw in (dict(), dict(win_length=100, window="hamming", norm=2), dict(win_length=64, center=False, norm=None)):
                ref = librosa.feature.tempogram(onset_envelope=env, sr=SR, **kw)
                got = audio.tempogram(onset_envelope=gp.asarray(env), sr=SR, **kw)
                assert got.dtype == np.dtype(dtype) and got.shape == ref.shape, (name, kw)
                if np.any(ref):
                    assert rel_err(got.to_numpy(), ref) < TOL[np.dtype(dtype)], (name, kw, dtype)
            for kw in (dict(), dict(aggregate=None), dict(start_bpm=90.0, std_bpm=0.5, max_tempo=200.0, ac_size=4.0)):
                ref = librosa.feature.tempo(y=yy, sr=SR, **kw)
                got = audio.tempo(gp.asarray(yy), sr=SR, **kw)
                assert got.shape == ref.shape, (name, kw)
                if dtype == np.float32 and ("aggregate" in kw or gp.backend() != "cpu"):
                    assert np.mean(got.to_numpy() != ref) <= 0.05, (name, kw)
                else:
                    np.testing.assert_array_equal(got.to_numpy(), ref, err_msg=f"{name} {kw} {dtype}")
    y = clicks(rng, 120.0, 10.0)
    assert abs(float(audio.tempo(y, sr=SR).to_numpy()[0]) - 120.0) < 3.0  # the click track's own tempo, to a lag step
    y2 = np.stack([clicks(rng, 100.0, 6.0), clicks(rng, 150.0, 6.0)])
    np.testing.assert_array_equal(audio.tempo(y2, sr=SR).to_numpy(), librosa.feature.tempo(y=y2, sr=SR))


def test_bad_input_raises(rng):
    y = rng.standard_normal(SR)
    with pytest.raises(AudioValueError, match="exactly one of"):
        audio.onset_strength()
    with pytest.raises(AudioTypeError, match="unexpected arguments"):
        audio.onset_strength(y, center_frames=True)
    with pytest.raises(AudioValueError, match="lag"):
        audio.onset_strength(y, lag=0)
    with pytest.raises(AudioValueError, match="aggregate"):
        audio.onset_strength(y, aggregate=np.median)
    with pytest.raises(AudioValueError, match="frames; lag"):
        audio.onset_strength(y[:100], lag=5)
    with pytest.raises(AudioValueError, match="ref must have"):
        audio.onset_strength(S=np.ones((4, 10)), ref=np.ones((4, 9)))
    with pytest.raises(AudioValueError, match="non-finite"):
        audio.onset_strength(np.full(SR, np.nan))
    with pytest.raises(AudioValueError, match="units"):
        audio.onset_detect(y, units="beats")
    with pytest.raises(AudioValueError, match="NaN"):  # librosa returns no onsets here
        audio.onset_detect(onset_envelope=np.array([0.0, 1.0, np.inf, 0.5]))
    with pytest.raises(AudioValueError, match="1-d"):
        audio.onset_detect(onset_envelope=np.ones((2, 50)))
    with pytest.raises(AudioValueError, match="give y"):
        audio.onset_detect()
    with pytest.raises(AudioValueError, match="post_max"):
        audio.onset_detect(y, post_max=0)
    with pytest.raises(AudioValueError, match="win_length"):
        audio.tempogram(onset_envelope=np.ones(10), win_length=20, center=False)
    with pytest.raises(AudioValueError, match="start_bpm"):
        audio.tempo(y, start_bpm=0.0)
    with pytest.raises(AudioValueError, match="aggregate"):
        audio.tempo(y, aggregate=np.max)
    with pytest.raises(AudioValueError, match="tg must be"):
        audio.tempo(tg=np.ones(5))
