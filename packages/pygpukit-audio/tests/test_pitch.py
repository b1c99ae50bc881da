"""yin and pyin against librosa on tones, chirps, noise, silence with a DC
offset, short and odd lengths, batches, float32 and float64; pYIN's parts
(beta CDF, local transition matrix, Viterbi op) against scipy and librosa;
bad arguments; NVRTC compilation of the Viterbi kernel (run on the GPU:
test_gpu_pitch_decompose.py)."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import pitch
from pygpukit_audio._errors import AudioTypeError, AudioValueError

librosa = pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")
stats = pytest.importorskip("scipy.stats")
if tuple(int(v) for v in librosa.__version__.split(".")[:2]) < (0, 11):
    pytest.skip("yin / pyin follow librosa 0.11's difference function (0.10 windowed it)", allow_module_level=True)

SR = 22050


def signals(rng):
    t = np.arange(SR) / SR
    yield "tone", np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(SR)
    yield "chirp", np.sin(2 * np.pi * (100 * t + 300 * t**2))
    yield "noise", rng.standard_normal(7001)
    yield "dc", 0.3 + 1e-3 * rng.standard_normal(4097)
    yield "short", rng.standard_normal(1501)  # one frame's worth, odd


# float64: the same steps in the same precision as librosa; measured exact (0.0)
# on these signals. float32: the CMNDF's rounding differs (FFT sizes, order of
# sums) by ~1e-7 relative; f0 measured within 1e-6. A frame whose trough sits
# on the threshold could flip, so float32 allows a small share of such frames.
def test_yin_matches_librosa(rng):
    for name, y in signals(rng):
        for dtype in (np.float64, np.float32):
            x = y.astype(dtype)
            ref = librosa.yin(x, fmin=65, fmax=2000, sr=SR)
            got = pitch.yin(gp.asarray(x), 65, 2000, sr=SR)
            assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
            err = np.abs(got.to_numpy() - ref) / ref
            if dtype == np.float64:
                assert np.max(err) < 1e-10, name
            else:
                assert np.mean(err > 1e-4) <= 0.02, name


def test_yin_parameters_and_batches(rng):
    y = rng.standard_normal((2, 3, 5003))
    y[0, 1] = np.sin(2 * np.pi * 440 * np.arange(5003) / 16000)
    cases = [
        dict(fmin=80, fmax=1000, sr=16000, frame_length=1024, hop_length=100, trough_threshold=0.2),
        dict(fmin=100, fmax=4000, sr=16000, frame_length=512, center=False),
        dict(fmin=60, fmax=800, sr=16000, frame_length=2048, pad_mode="reflect", hop_length=333),
        dict(fmin=70, fmax=8000, sr=16000, frame_length=777, pad_mode="edge"),
    ]
    for kw in cases:
        ref = librosa.yin(y, **kw)
        got = pitch.yin(y, **kw).to_numpy()
        assert got.shape == ref.shape and np.max(np.abs(got - ref) / ref) < 1e-10, kw


def test_pyin_matches_librosa(rng):
    t = np.arange(9000) / SR
    voiced = np.sin(2 * np.pi * (150 * t + 200 * t**2))
    voiced[3000:5000] = 0.01 * rng.standard_normal(2000)  # an unvoiced stretch
    for y, kw in [
        (voiced, dict(fmin=65, fmax=2000, sr=SR)),
        (rng.standard_normal(6001), dict(fmin=100, fmax=1000, sr=SR, frame_length=1024, hop_length=200)),
        (np.stack([voiced[:6000], 0.2 + 1e-3 * rng.standard_normal(6000)]), dict(fmin=80, fmax=1500, sr=SR, fill_na=-1.0)),
        (voiced, dict(fmin=65, fmax=1000, sr=SR, n_thresholds=37, beta_parameters=(1.5, 9.0), boltzmann_parameter=1.3,
                      resolution=0.25, switch_prob=0.05, no_trough_prob=0.02, center=False, fill_na=None)),
    ]:  # fmt: skip
        f0, flag, prob = librosa.pyin(y, **kw)
        g0, gflag, gprob = (a.to_numpy() for a in pitch.pyin(y, **kw))
        assert g0.shape == f0.shape and gflag.dtype == np.bool_
        assert np.array_equal(gflag, flag), kw
        np.testing.assert_allclose(g0, f0, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(gprob, prob, rtol=0, atol=1e-12)
    # float32: the CMNDF rounds differently (~1e-7); measured identical voicing, f0 within 5e-8
    y32 = (voiced + 0.2 * rng.standard_normal(voiced.size)).astype(np.float32)
    f0, flag, prob = librosa.pyin(y32, fmin=65, fmax=2000, sr=SR)
    g0, gflag, gprob = pitch.pyin(y32, 65, 2000, sr=SR)
    assert g0.dtype == np.float32 and gprob.dtype == np.float32
    both = flag & gflag.to_numpy()
    assert np.mean(flag == gflag.to_numpy()) >= 0.95 and np.max(np.abs(gprob.to_numpy() - prob)) < 1e-4
    assert np.max(np.abs(g0.to_numpy()[both] - f0[both]) / f0[both]) < 1e-5


def test_pyin_parts():
    x = np.linspace(0, 1, 101)
    for a, b in [(2, 18), (1.5, 9.0), (0.5, 0.7), (30, 3)]:
        np.testing.assert_allclose(pitch.beta_cdf(x, a, b), stats.beta.cdf(x, a, b), rtol=1e-12, atol=1e-15)
    for n, width in [(601, 101), (50, 7), (40, 6), (5, 1)]:
        ref = librosa.sequence.transition_local(n, width, window="triangle", wrap=False)
        np.testing.assert_allclose(pitch.transition_local_triangle(n, width), ref, rtol=1e-14, atol=1e-15)
    # wider than the states (librosa refuses; pyin with a long hop and a narrow range needs it): the centre of the window
    wide = pitch.transition_local_triangle(10, 31)
    np.testing.assert_allclose(wide.sum(axis=1), 1.0, rtol=1e-14)
    assert np.all(np.argmax(wide, axis=1) == np.arange(10))


def test_viterbi_reference_matches_librosa(rng):
    for states, steps in [(6, 40), (33, 17), (2, 1)]:
        prob = rng.uniform(0, 1, (states, steps))
        prob[:, rng.uniform(size=steps) < 0.2] = 0.0  # impossible frames: log(tiny) everywhere
        trans = rng.uniform(0, 1, (states, states)) ** 4
        trans /= trans.sum(axis=1, keepdims=True)
        p_init = rng.uniform(0, 1, states)
        p_init /= p_init.sum()
        ref = librosa.sequence.viterbi(prob, trans, p_init=p_init)
        tiny = np.finfo(np.float64).tiny
        got = pitch.reference_viterbi(
            gp.asarray(np.log(prob.T + tiny)[None]), gp.asarray(np.log(trans + tiny)), gp.asarray(np.log(p_init + tiny))
        )
        assert np.array_equal(got.to_numpy()[0], ref)


def test_bad_arguments():
    y = np.random.default_rng(1).standard_normal(4000)
    with pytest.raises(AudioValueError, match="Nyquist"):
        pitch.yin(y, 100, 20000, sr=SR)
    with pytest.raises(AudioValueError, match="less than fmax"):
        pitch.yin(y, 500, 400, sr=SR)
    with pytest.raises(AudioValueError, match="too small for frame_length"):
        pitch.yin(y, 10, 400, sr=SR)
    with pytest.raises(AudioValueError, match="strictly positive"):
        pitch.pyin(y, -5, 400, sr=SR)
    with pytest.raises(AudioValueError, match="shorter than frame_length"):
        pitch.yin(y[:1000], 65, 400, sr=SR, center=False)
    with pytest.raises(AudioValueError, match="pad_mode"):
        pitch.yin(y, 65, 400, sr=SR, pad_mode="mirror")
    with pytest.raises(AudioValueError, match="NaN"):
        pitch.yin(np.full(4000, np.nan), 65, 400, sr=SR)
    with pytest.raises(AudioTypeError, match="float32 or float64"):
        pitch.yin(np.arange(4000), 65, 400, sr=SR)
    with pytest.raises(AudioTypeError, match="integer"):
        pitch.yin(y, 65, 400, sr=SR, hop_length=1.5)
    with pytest.raises(AudioValueError, match="switch_prob"):
        pitch.pyin(y, 65, 400, sr=SR, switch_prob=2.0)
    with pytest.raises(AudioValueError, match="beta_parameters"):
        pitch.pyin(y, 65, 400, sr=SR, beta_parameters=(1, 2, 3))
    with pytest.raises(AudioValueError, match="viterbi op"):
        pitch.reference_viterbi(gp.zeros((1, 3, 4), gp.float64), gp.zeros((3, 3), gp.float64), gp.zeros(4, gp.float64))


def test_viterbi_kernel_compiles(need_nvrtc):
    from pygpukit.jit import compiler

    k = pitch.viterbi_kernel()
    for sm in (80, 90):
        binary = compiler.compile_source(k.source, [k.func], sm, k.options, "pitch.cu")
        assert binary.image[:4] == b"\x7fELF" and k.func in binary.lowered
