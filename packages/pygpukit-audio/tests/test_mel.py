"""The mel scale, mel filterbanks, decibels and MFCC against librosa (and
scipy.fft.dct for the DCT types), with a few values worked by hand where
librosa is missing; the power_to_db kernel's compilation anywhere (its
results on the GPU: test_gpu_kernels.py)."""

import math

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import mel
from pygpukit_audio._errors import AudioTypeError, AudioValueError


@pytest.fixture
def librosa():
    return pytest.importorskip("librosa", reason="the references are librosa's (pip install librosa)")


def rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def test_mel_scale_by_hand(rng):
    assert mel.hz_to_mel(1000.0) == pytest.approx(15.0)  # Slaney: 200/3 Hz per mel up to 1 kHz
    assert mel.hz_to_mel(6400.0) == pytest.approx(42.0)  # then 27 mels per factor 6.4
    assert mel.hz_to_mel(1000.0, htk=True) == pytest.approx(2595 * math.log10(1 + 1000 / 700))
    f = rng.uniform(0.0, 20000.0, 100)
    for htk in (False, True):
        np.testing.assert_allclose(mel.mel_to_hz(mel.hz_to_mel(f, htk), htk), f, rtol=1e-12)
        on_gpu = mel.hz_to_mel(gp.asarray(f), htk)
        assert isinstance(on_gpu, gp.GPUArray)
        np.testing.assert_allclose(on_gpu.to_numpy(), mel.hz_to_mel(f, htk), rtol=1e-13)
        np.testing.assert_allclose(mel.mel_to_hz(on_gpu, htk).to_numpy(), f, rtol=1e-12)
    np.testing.assert_allclose(mel.fft_frequencies(16000, 8), [0, 2000, 4000, 6000, 8000])


def test_mel_scale_matches_librosa(rng, librosa):
    f = rng.uniform(0.0, 20000.0, 200)
    for htk in (False, True):
        np.testing.assert_allclose(mel.hz_to_mel(f, htk), librosa.hz_to_mel(f, htk=htk), rtol=1e-14)
        m = rng.uniform(0.0, 60.0 if not htk else 4000.0, 200)
        np.testing.assert_allclose(mel.mel_to_hz(m, htk), librosa.mel_to_hz(m, htk=htk), rtol=1e-14)
        np.testing.assert_allclose(
            mel.mel_frequencies(40, 30.0, 8000.0, htk), librosa.mel_frequencies(40, fmin=30.0, fmax=8000.0, htk=htk), rtol=1e-14
        )
    np.testing.assert_allclose(mel.fft_frequencies(22050, 2048), librosa.fft_frequencies(sr=22050, n_fft=2048))


def test_mel_filters_match_librosa(librosa):
    for sr, n_fft, n_mels, fmin, fmax in [(22050, 2048, 128, 0.0, None), (16000, 400, 80, 0.0, 8000.0), (44100, 1024, 64, 30.0, 16000.0)]:
        for htk in (False, True):
            for norm in ("slaney", None, 1, 2.0, np.inf):
                for dtype in (np.float32, np.float64):
                    got = mel.mel_filters(sr, n_fft, n_mels, fmin, fmax, htk, norm, dtype)
                    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk, norm=norm, dtype=dtype)
                    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
                    # librosa's steps in its order; a numeric norm rounds once more there (it returns float64)
                    assert rel_err(got.to_numpy(), ref) < (1e-7 if dtype == np.float32 else 1e-14), (sr, htk, norm, dtype)


def test_melspectrogram_from_power(rng, librosa):
    S = rng.uniform(0.0, 4.0, (2, 201, 30)).astype(np.float32) ** 2
    basis = mel.mel_filters(16000, 400, 40)
    got = mel.melspectrogram_from_power(gp.asarray(S), basis)
    ref = librosa.feature.melspectrogram(S=S, sr=16000, n_fft=400, n_mels=40)
    assert got.shape == (2, 40, 30) and rel_err(got.to_numpy(), ref) < 1e-6
    assert rel_err(mel.melspectrogram_from_power(S[0], basis.to_numpy()).to_numpy(), ref[0]) < 1e-6


def test_decibels_match_librosa(rng, librosa):
    S = rng.uniform(0.0, 10.0, (2, 64, 50)) ** 3
    S[0, 0, 0] = 0.0  # floored at amin
    for dtype in (np.float32, np.float64):
        s = S.astype(dtype)
        for ref in (1.0, np.max, 3.5, lambda m: gp.mean(m)):
            lref = (lambda m: np.mean(m)) if getattr(ref, "__name__", "") == "<lambda>" else ref
            for top_db in (80.0, None, 20.0):
                got = mel.power_to_db(gp.asarray(s), ref=ref, top_db=top_db)
                assert got.dtype == np.dtype(dtype)
                np.testing.assert_allclose(got.to_numpy(), librosa.power_to_db(s, ref=lref, top_db=top_db), rtol=1e-5, atol=2e-5)
                got = mel.amplitude_to_db(gp.asarray(s), ref=ref, top_db=top_db)
                np.testing.assert_allclose(got.to_numpy(), librosa.amplitude_to_db(s, ref=lref, top_db=top_db), rtol=1e-5, atol=4e-5)
        db = librosa.power_to_db(s, top_db=None)
        np.testing.assert_allclose(mel.db_to_power(gp.asarray(db), 2.0).to_numpy(), librosa.db_to_power(db, ref=2.0), rtol=2e-6)
        np.testing.assert_allclose(mel.db_to_amplitude(gp.asarray(db), 2.0).to_numpy(), librosa.db_to_amplitude(db, ref=2.0), rtol=2e-6)
    c = (rng.standard_normal((8, 9)) + 1j * rng.standard_normal((8, 9))).astype(np.complex64)
    with pytest.warns(UserWarning):
        ref = librosa.power_to_db(c)
    np.testing.assert_allclose(mel.power_to_db(gp.asarray(c)).to_numpy(), ref, rtol=1e-5, atol=2e-5)


def test_dct_matrices_match_scipy(rng):
    fft = pytest.importorskip("scipy.fft", reason="the DCT reference is scipy.fft.dct (pip install scipy)")
    s = rng.standard_normal((3, 40, 30)) * 20
    for dct_type in (1, 2, 3, 4):
        for norm in (None, "ortho"):
            got = mel.mfcc_from_mel(gp.asarray(s), 13, dct_type, norm)
            assert rel_err(got.to_numpy(), fft.dct(s, axis=-2, type=dct_type, norm=norm)[..., :13, :]) < 1e-13, (dct_type, norm)


def test_mfcc_matches_librosa(rng, librosa):
    y = rng.standard_normal(8000).astype(np.float32)
    s_db = librosa.power_to_db(librosa.feature.melspectrogram(y=y, sr=16000, n_mels=40))
    for n_mfcc, lifter in ((20, 0), (13, 22), (40, 5.5)):
        got = mel.mfcc_from_mel(gp.asarray(s_db), n_mfcc, lifter=lifter)
        ref = librosa.feature.mfcc(S=s_db, n_mfcc=n_mfcc, lifter=lifter)
        assert got.dtype == np.float32 and rel_err(got.to_numpy(), ref) < 2e-6, (n_mfcc, lifter)


def test_errors():
    s = gp.asarray(np.abs(np.linspace(-1.0, 1.0, 24)).reshape(4, 6))
    cases = [
        (lambda: mel.mel_filters(16000, 512, fmin=9000.0), AudioValueError, "fmin < fmax"),
        (lambda: mel.mel_filters(-1, 512), AudioValueError, "sr must be positive"),
        (lambda: mel.mel_filters(16000, 0), AudioValueError, r"n_fft must be in \[1,"),
        (lambda: mel.mel_filters(16000, 512, norm="l2"), AudioValueError, "norm must be 'slaney'"),
        (lambda: mel.mel_filters(16000, 512, norm=-1), AudioValueError, "norm must be 'slaney'"),
        (lambda: mel.mel_filters(16000, 512, dtype=np.int32), AudioTypeError, "dtype must be float32"),
        (lambda: mel.power_to_db(s, amin=0.0), AudioValueError, "amin must be strictly positive"),
        (lambda: mel.power_to_db(s, top_db=-1.0), AudioValueError, "top_db must be non-negative"),
        (lambda: mel.power_to_db(s, ref="max"), AudioTypeError, "ref must be a number"),
        (lambda: mel.power_to_db([1.0]), AudioTypeError, "S must be a GPUArray"),
        (lambda: mel.power_to_db(gp.asarray(np.arange(3))), AudioTypeError, "float32, float64 or complex"),
        (lambda: mel.amplitude_to_db(s, amin=-1e-5), AudioValueError, "amin must be strictly positive"),
        (lambda: mel.mfcc_from_mel(s, n_mfcc=5), AudioValueError, r"n_mfcc must be in \[1, 4\]"),
        (lambda: mel.mfcc_from_mel(s, 2, dct_type=5), AudioValueError, "dct_type must be 1, 2, 3 or 4"),
        (lambda: mel.mfcc_from_mel(s, 2, norm="forward"), AudioValueError, "norm must be None or 'ortho'"),
        (lambda: mel.mfcc_from_mel(s, 2, lifter=-2), AudioValueError, "lifter=-2.0 must be a non-negative number"),
        (lambda: mel.mfcc_from_mel(gp.asarray(np.ones(4)), 2), AudioValueError, "n_mels, frames"),
        (lambda: mel.melspectrogram_from_power(s, mel.mel_filters(16000, 16, 3)), AudioValueError, "n_freq=9"),
        (lambda: mel.melspectrogram_from_power(s, [[1.0]]), AudioTypeError, "mel_basis must be a 2-d"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_kernel_compiles(need_nvrtc):
    from pygpukit.jit import compiler

    kernels = [mel.db_kernel(ct) for ct in ("float", "double")]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "mel.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)
