"""phase_vocoder, griffinlim and the waveform effects (hpss, harmonic,
percussive, time_stretch, pitch_shift, resample_fft) against librosa and
scipy.signal.resample on noise, tones, chirps, silence with a DC offset and
odd lengths; bad arguments."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import effects, phase
from pygpukit_audio._errors import AudioTypeError, AudioValueError

librosa = pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")
ss = pytest.importorskip("scipy.signal")

SR = 22050


def rel(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got) - ref)) / max(np.max(np.abs(ref)), 1e-300))


def signals(rng, n=9001):
    t = np.arange(n) / SR
    yield "noise", rng.standard_normal(n)
    yield "tone", np.sin(2 * np.pi * 330 * t) + 0.01 * rng.standard_normal(n)
    yield "chirp", np.sin(2 * np.pi * (80 * t + 2000 * t**2))
    yield "dc", 0.5 + 1e-3 * rng.standard_normal(n)


def test_phase_vocoder_matches_librosa(rng):
    for name, y in signals(rng):
        D = librosa.stft(y, n_fft=512)
        for rate, kw in [(0.5, {}), (0.73, {}), (1.0, {}), (1.6, dict(hop_length=100)), (3.0, dict(n_fft=512, hop_length=128))]:
            ref = librosa.phase_vocoder(D, rate=rate, **kw)
            got = phase.phase_vocoder(gp.asarray(D), rate, **kw).to_numpy()
            assert got.shape == ref.shape and rel(got, ref) < 1e-10, (name, rate)
            # complex64: librosa accumulates the phase in float32, which drifts with time; this
            # accumulates in float64, so compare with librosa's complex128 numbers
            got32 = phase.phase_vocoder(gp.asarray(D.astype(np.complex64)), rate, **kw)
            assert got32.dtype == np.complex64 and rel(got32.to_numpy(), ref) < 1e-5, (name, rate)


# Griffin-Lim repeats istft / stft, whose float64 results differ from librosa's
# by ~1e-15; the iteration keeps them at ~1e-13 over 8 iterations.
def test_griffinlim_matches_librosa(rng):
    y = rng.standard_normal(6001)
    S = np.abs(librosa.stft(y, n_fft=512))
    cases = [
        dict(init=None, momentum=0.99),
        dict(init=None, momentum=0.0, hop_length=100, length=6001),
        dict(init="random", random_state=3),
        dict(init="random", random_state=np.random.RandomState(7), window="hamming", win_length=400),
        dict(init="random", random_state=np.random.default_rng(5), center=False, momentum=0.5),
    ]
    for kw in cases:
        if kw.get("center") is False:
            S_in = np.abs(librosa.stft(y, n_fft=512, center=False))
        elif "hop_length" in kw or "win_length" in kw:
            S_in = np.abs(librosa.stft(y, n_fft=512, **{k: kw[k] for k in ("hop_length", "win_length", "window") if k in kw}))
        else:
            S_in = S
        ref_kw = dict(kw)
        if isinstance(kw.get("random_state"), np.random.RandomState):  # each side draws from its own copy
            ref_kw["random_state"], kw["random_state"] = np.random.RandomState(7), np.random.RandomState(7)
        if isinstance(kw.get("random_state"), np.random.Generator):
            ref_kw["random_state"], kw["random_state"] = np.random.default_rng(5), np.random.default_rng(5)
        ref = librosa.griffinlim(S_in, n_iter=8, n_fft=512, **ref_kw)
        got = phase.griffinlim(gp.asarray(S_in), n_iter=8, n_fft=512, **kw)
        assert got.shape == ref.shape and rel(got.to_numpy(), ref) < 1e-11, kw
    got32 = phase.griffinlim(S.astype(np.float32), n_iter=4, init=None)
    ref = librosa.griffinlim(S, n_iter=4, init=None)
    assert got32.dtype == np.float32 and rel(got32.to_numpy(), ref) < 1e-4
    # the unseeded default runs (fresh phases) and returns a signal of the expected length
    assert phase.griffinlim(S, n_iter=1).shape == ((S.shape[-1] - 1) * 128,)


def test_resample_fft_matches_scipy(rng):
    for n in (9001, 9000, 17, 2):
        x = rng.standard_normal((2, n))
        for num in (n, n // 2 + 1, 2 * n, 3 * n + 1, max(1, n // 3), 1):
            got = effects.resample_fft(gp.asarray(x), num).to_numpy()
            ref = ss.resample(x, num, axis=-1)
            assert got.shape == ref.shape and rel(got, ref) < 1e-12, (n, num)
    x32 = rng.standard_normal(1000).astype(np.float32)
    got = effects.resample_fft(x32, 1500)
    assert got.dtype == np.float32 and rel(got.to_numpy(), ss.resample(x32.astype(np.float64), 1500)) < 1e-5


def test_time_stretch_and_pitch_shift_match_librosa(rng):
    for name, y in signals(rng):
        for rate in (0.8, 1.25, 2.0):
            ref = librosa.effects.time_stretch(y, rate=rate)
            got = effects.time_stretch(y, rate).to_numpy()
            assert got.shape == ref.shape and rel(got, ref) < 1e-10, (name, rate)
        for steps in (3, -2.5):
            ref = librosa.effects.pitch_shift(y, sr=SR, n_steps=steps, res_type="fft")
            got = effects.pitch_shift(y, SR, steps).to_numpy()
            assert got.shape == ref.shape and rel(got, ref) < 1e-10, (name, steps)
    y = rng.standard_normal(4001)
    kw = dict(n_fft=1024, hop_length=200)
    ref = librosa.effects.time_stretch(y, rate=0.9, **kw)
    assert rel(effects.time_stretch(y, 0.9, **kw).to_numpy(), ref) < 1e-10
    ref = librosa.effects.pitch_shift(y, sr=SR, n_steps=-12, res_type="polyphase")
    assert rel(effects.pitch_shift(y, SR, -12, res_type="polyphase").to_numpy(), ref) < 1e-10
    ref = librosa.effects.pitch_shift(y, sr=16000, n_steps=4, bins_per_octave=24, res_type="scipy", **kw)
    assert rel(effects.pitch_shift(y, 16000, 4, bins_per_octave=24, res_type="scipy", **kw).to_numpy(), ref) < 1e-10
    got = effects.time_stretch(y.astype(np.float32), 1.1)
    assert got.dtype == np.float32 and rel(got.to_numpy(), librosa.effects.time_stretch(y, rate=1.1)) < 1e-4
    batch = rng.standard_normal((2, 3001))
    assert rel(effects.pitch_shift(batch, SR, 1).to_numpy(), librosa.effects.pitch_shift(batch, sr=SR, n_steps=1, res_type="fft")) < 1e-10


def test_effects_hpss_matches_librosa(rng):
    for name, y in signals(rng, 8001):
        for dtype, tol in ((np.float64, 1e-10), (np.float32, 2e-5)):
            x = y.astype(dtype)
            rh, rp = librosa.effects.hpss(x, kernel_size=(15, 9), margin=(1.0, 2.0))
            h, p = effects.hpss(x, kernel_size=(15, 9), margin=(1.0, 2.0))
            assert h.dtype == np.dtype(dtype) and h.shape == rh.shape
            assert rel(h.to_numpy(), rh) < tol and rel(p.to_numpy(), rp) < tol, (name, dtype)
    y = rng.standard_normal((2, 3001))
    kw = dict(n_fft=512, hop_length=100)
    assert rel(effects.harmonic(y, **kw).to_numpy(), librosa.effects.harmonic(y, **kw)) < 1e-10
    assert rel(effects.percussive(y, margin=3.0, **kw).to_numpy(), librosa.effects.percussive(y, margin=3.0, **kw)) < 1e-10


def test_bad_arguments(rng):
    y = rng.standard_normal(3000)
    S = np.abs(librosa.stft(y, n_fft=256))
    with pytest.raises(AudioValueError, match="negative"):
        phase.griffinlim(-S)
    with pytest.raises(AudioValueError, match="momentum"):
        phase.griffinlim(S, momentum=-0.1)
    with pytest.raises(AudioValueError, match="init"):
        phase.griffinlim(S, init="zeros")
    with pytest.raises(AudioTypeError, match="random_state"):
        phase.griffinlim(S, random_state="seed")
    with pytest.warns(UserWarning, match="unstable"):
        phase.griffinlim(S, n_iter=1, momentum=1.5, init=None)
    with pytest.raises(AudioValueError, match="STFT of the reconstruction"):
        phase.griffinlim(S, n_iter=1, length=1000)
    with pytest.raises(AudioTypeError, match="complex"):
        phase.phase_vocoder(S, 1.5)
    with pytest.raises(AudioValueError, match="rate must be positive"):
        phase.phase_vocoder(librosa.stft(y, n_fft=256), 0.0)
    with pytest.raises(AudioValueError, match="rate must be a positive"):
        effects.time_stretch(y, -1.0)
    with pytest.raises(AudioValueError, match="res_type"):
        effects.pitch_shift(y, SR, 2, res_type="soxr_hq")
    with pytest.raises(AudioValueError, match="integer rates"):
        effects.pitch_shift(y, SR, 1, res_type="polyphase")
    with pytest.raises(AudioTypeError, match="integer"):
        effects.pitch_shift(y, SR, 1, bins_per_octave=12.5)
    with pytest.raises(AudioValueError, match="non-finite"):
        effects.hpss(np.full(3000, np.inf))
    with pytest.raises(AudioValueError, match="num"):
        effects.resample_fft(y, 0)
