"""fftconvolve against scipy.signal.fftconvolve (float64 and float32, real and
complex, every mode, batches with a broadcast filter, lengths the FFT pads)."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_audio import AudioTypeError, AudioValueError, fftconvolve
from pygpukit_audio.convolve import fast_length

signal = pytest.importorskip("scipy.signal", reason="the reference is scipy.signal.fftconvolve (pip install scipy)")


def test_fast_length_is_the_next_7_smooth_number():
    def smooth(k):
        for p in (2, 3, 5, 7):
            while k % p == 0:
                k //= p
        return k == 1

    for n in [1, 2, 11, 13, 97, 1000, 1025, 4097, 65537]:
        f = fast_length(n)
        assert f >= n and smooth(f) and not any(smooth(k) for k in range(n, f))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n,m", [(1000, 31), (31, 1000), (257, 257), (1, 5), (4097, 1)])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5), (np.complex128, 1e-12)])
def test_matches_scipy(rng, mode, n, m, dtype, tol):
    x, h = rng.standard_normal(n), rng.standard_normal(m)
    if np.dtype(dtype).kind == "c":
        x, h = x + 1j * rng.standard_normal(n), h + 1j * rng.standard_normal(m)
    x, h = x.astype(dtype), h.astype(dtype)
    want = signal.fftconvolve(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64), h, mode=mode)
    got = fftconvolve(gp.from_numpy(x), gp.from_numpy(h), mode=mode)
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    assert np.abs(got.to_numpy() - want).max() <= tol * np.abs(want).max()


def test_batch_with_a_broadcast_filter_on_any_axis(rng):
    x = rng.standard_normal((3, 500, 2))
    h = rng.standard_normal(40)
    got = fftconvolve(gp.from_numpy(x), gp.from_numpy(h.reshape(40, 1)), mode="same", axis=1).to_numpy()
    want = signal.fftconvolve(x, h.reshape(1, 40, 1), mode="same", axes=1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_bad_input(rng):
    x = gp.from_numpy(rng.standard_normal(10))
    with pytest.raises(AudioValueError, match="mode must be"):
        fftconvolve(x, x, mode="circular")
    with pytest.raises(AudioTypeError, match="float or complex"):
        fftconvolve(gp.from_numpy(np.arange(4)), x)
    with pytest.raises(AudioValueError, match="non-empty"):
        fftconvolve(gp.zeros((0,)), x)
    with pytest.raises(AudioValueError, match="do not broadcast"):
        fftconvolve(gp.zeros((3, 10)), gp.zeros((2, 5)))
    with pytest.raises(AudioValueError, match="out of range"):
        fftconvolve(x, x, axis=1)
