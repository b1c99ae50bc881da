"""On the GPU: the median-filter and Viterbi kernels against their NumPy
references (held to scipy and librosa by the CPU tests) at realistic sizes,
and, where librosa is installed, yin, pyin, hpss, griffinlim, phase_vocoder
and the effects end to end (FFT, STFT and core-op kernels included)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.registry import REGISTRY
from pygpukit_audio import decompose, effects, phase, pitch

pytestmark = pytest.mark.gpu


def rel(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got) - ref)) / max(np.max(np.abs(ref)), 1e-300))


def test_median_kernel_against_reference(rng):
    for shape, k, dtype in [((16, 1025, 400), 31, np.float32), ((2, 513, 2000), 31, np.float64), ((3, 7, 5), 4, np.float64),
                            ((1, 40000, 1), 255, np.float32), ((5, 3, 2), 31, np.float32)]:  # fmt: skip
        x = gp.asarray(rng.standard_normal(shape).astype(dtype))
        assert REGISTRY.which("median_filter_axis", x, k).endswith("kernel")
        got = decompose.kernel_median_filter_axis(x, k).to_numpy()
        assert np.array_equal(got, decompose.reference_median_filter_axis(x, k).to_numpy()), (shape, k)


def test_viterbi_kernel_against_reference(rng):
    for seqs, steps, states in [(4, 120, 1202), (1, 1, 3), (2, 50, 3000), (3, 300, 64)]:
        lp = np.log(rng.uniform(0, 1, (seqs, steps, states)) ** 3 + np.finfo(np.float64).tiny)
        lp[:, :, states // 2 :] = np.log(0.5 / states)  # equal observations: ties decided by the transitions
        trans = rng.uniform(0, 1, (states, states)) ** 6
        args = (
            gp.asarray(lp),
            gp.asarray(np.log(trans / trans.sum(axis=1, keepdims=True))),
            gp.asarray(np.log(np.full(states, 1 / states))),
        )
        assert REGISTRY.which("viterbi", *args).endswith("kernel")
        assert np.array_equal(pitch.kernel_viterbi(*args).to_numpy(), pitch.reference_viterbi(*args).to_numpy()), (seqs, steps, states)


def test_public_functions_match_librosa(rng):
    librosa = pytest.importorskip("librosa", reason="the end-to-end references are librosa's")
    sr = 22050
    t = np.arange(2 * sr) / sr
    y = np.sin(2 * np.pi * (110 * t + 150 * t**2)) + 0.05 * rng.standard_normal(t.size)
    assert rel(pitch.yin(y, 65, 2000, sr=sr).to_numpy(), librosa.yin(y, fmin=65, fmax=2000, sr=sr)) < 1e-9
    f0, flag, prob = librosa.pyin(y[:20000], fmin=65, fmax=2000, sr=sr)
    g0, gflag, gprob = (a.to_numpy() for a in pitch.pyin(y[:20000], 65, 2000, sr=sr))
    assert np.array_equal(gflag, flag) and np.allclose(g0, f0, rtol=1e-9, equal_nan=True) and np.allclose(gprob, prob, atol=1e-9)
    D = librosa.stft(y)
    for got, ref in zip(decompose.hpss(gp.asarray(D)), librosa.decompose.hpss(D)):
        assert rel(got.to_numpy(), ref) < 1e-9
    assert rel(phase.phase_vocoder(gp.asarray(D), 1.3).to_numpy(), librosa.phase_vocoder(D, rate=1.3)) < 1e-9
    S = np.abs(D)
    assert rel(phase.griffinlim(S, n_iter=10, random_state=0).to_numpy(), librosa.griffinlim(S, n_iter=10, random_state=0)) < 1e-9
    assert rel(effects.time_stretch(y, 0.7).to_numpy(), librosa.effects.time_stretch(y, rate=0.7)) < 1e-9
    assert rel(effects.pitch_shift(y, sr, 2).to_numpy(), librosa.effects.pitch_shift(y, sr=sr, n_steps=2, res_type="fft")) < 1e-9
    y32 = y.astype(np.float32)
    h, p = effects.hpss(y32)
    rh, rp = librosa.effects.hpss(y32)
    assert h.dtype == np.float32 and rel(h.to_numpy(), rh) < 2e-5 and rel(p.to_numpy(), rp) < 2e-5
