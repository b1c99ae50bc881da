"""The CUDA kernels of the DSP modules run on the CPU (emulator/harness.cpp:
a std::thread per CUDA thread, std::barrier for __syncthreads) with the host
code's own tables, against scipy and librosa: the sosfilt scan over many
chunks and several tiles per chunk, with zi and zf, the FIR tiles, the
polyphase resampler at the edges, the decibel and |X|^power kernels. In CI this checks the
kernels' index math without a GPU; it skips where g++ with C++20 is missing."""

import ctypes

import numpy as np
import pytest
from emulation import build

from pygpukit_audio import filters
from pygpukit_audio import resampling as resample

ss = pytest.importorskip("scipy.signal", reason="the references are scipy.signal's (pip install scipy)")
LL, INT, DBL = ctypes.c_longlong, ctypes.c_int, ctypes.c_double


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return build(tmp_path_factory.mktemp("emu"), "harness.cpp", ("filters", "resample", "mel", "spectrum"))


def ptr(a):
    return ctypes.c_void_p(0) if a is None else a.ctypes.data_as(ctypes.c_void_p)


def rel_err(got, ref) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def emulated_sosfilt(emu, sos, x, zi, length):
    """kernel_sosfilt_rows's three launches with a chosen chunk length."""
    r, n = x.shape
    sections = sos.shape[0]
    d, dbl = 2 * sections, int(x.dtype == np.float64)
    flat = filters._flat_coef(sos)
    chunks = -(-n // length)
    y, zf = np.full((r, n), np.nan, x.dtype), np.full((r, d), np.nan)
    ends, starts = np.full((r, chunks, d), np.nan), np.full((r, chunks, d), np.nan)
    common = (ptr(x), LL(n), INT(n), INT(length), INT(chunks), ptr(flat))
    if chunks > 1:
        emu.chunks(dbl, sections, 0, *common, None, None, ptr(ends), None, None, INT(r))
        p, q, g = filters.scan_tables(flat, length, chunks)
        emu.scan(d, ptr(ends), ptr(starts), ptr(zi), ptr(p), ptr(np.ascontiguousarray(q)), INT(chunks), INT(g), INT(r))
    emu.chunks(dbl, sections, 1, *common, ptr(starts), ptr(zi), None, ptr(y), ptr(zf), INT(r))
    return y, zf


def test_sosfilt_kernels(emu, rng):
    cases = [
        (ss.ellip(6, 0.5, 60.0, 0.05, output="sos"), (2, 40_001), np.float64, 32, 1e-9),  # 1251 chunks: g = 5 per scan thread
        (ss.butter(8, 0.2, output="sos"), (3, 9_000), np.float32, 96, 1e-6),  # three tiles per chunk, a short last chunk
        (ss.cheby2(3, 40.0, 0.3, output="sos"), (1, 31), np.float64, 32, 1e-9),  # one chunk: no scan
        (ss.butter(1, 0.3, output="sos"), (2, 70), np.float32, 64, 1e-6),  # a first-order section (b2 = a2 = 0)
        # poles at radius ~1 - 1.6e-4: delays from 20k samples back still count, so every scan step matters;
        # the chunk boundaries' rounding is amplified there (measured 7.5e-10)
        (ss.butter(2, 5e-5, output="sos"), (1, 40_001), np.float64, 32, 1e-8),
    ]
    for sos, shape, dtype, length, tol in cases:
        x = rng.standard_normal(shape).astype(dtype)
        zi = rng.standard_normal((shape[0], 2 * sos.shape[0]))
        y, zf = emulated_sosfilt(emu, sos, x, zi, length)
        ry, rzf = ss.sosfilt(sos, x.astype(np.float64), zi=zi.reshape(shape[0], -1, 2).transpose(1, 0, 2))
        assert rel_err(y, ry) < tol, (shape, length)
        assert rel_err(zf.reshape(shape[0], -1, 2).transpose(1, 0, 2), rzf) < tol, (shape, length)


def test_fir_kernel(emu, rng):
    for k, n, dtype in [(1, 100, np.float64), (37, 3000, np.float64), (2048, 2500, np.float64), (300, 2100, np.float32)]:
        x = rng.standard_normal((2, n)).astype(dtype)
        b = rng.standard_normal(k)
        y = np.full_like(x, np.nan)
        emu.fir(int(dtype == np.float64), ptr(x), LL(n), INT(n), ptr(b.astype(dtype)), INT(k), ptr(y), INT(2))
        assert rel_err(y, ss.lfilter(b, [1.0], x.astype(np.float64))) < (1e-12 if dtype == np.float64 else 2e-6), k


def test_resample_kernel(emu, rng):
    for up, down in [(160, 441), (441, 160), (2, 3), (3, 1)]:
        for n in (1, 7, 1001):
            for dtype in (np.float64, np.float32):
                x = rng.standard_normal((2, n)).astype(dtype)
                h, half = resample.design_filter("test", up, down, ("kaiser", 5.0), np.dtype(dtype))
                table = np.ascontiguousarray(resample.polyphase_table(h, up))
                nout = -(-n * up // down)
                y = np.full((2, nout), np.nan, dtype)
                emu.rs(int(dtype == np.float64), ptr(x), LL(n), INT(n), ptr(table), INT(table.shape[0]), INT(up), INT(down), INT(half), DBL(0.25),
                       INT(nout), ptr(y), INT(2))  # fmt: skip
                ref = ss.resample_poly(x, up, down, axis=-1, cval=0.25)
                assert rel_err(y, ref) < (1e-12 if dtype == np.float64 else 2e-6), (up, down, n, dtype)


def test_db_kernel(emu, rng):
    librosa = pytest.importorskip("librosa", reason="the reference is librosa.power_to_db (pip install librosa)")
    S = (rng.uniform(0.0, 10.0, (3, 40, 7)) ** 3).astype(np.float32)
    for use_max, top_db in [(False, 80.0), (True, None), (True, 20.0)]:
        out = np.full_like(S, np.nan)
        smax = np.array([S.max()], np.float32)
        emu.db(0, ptr(S), LL(S.size), ptr(smax), ptr(smax if use_max else None), DBL(0.0), DBL(1e-10), DBL(top_db or 0.0),
               INT(top_db is not None), ptr(out), INT(2))  # fmt: skip
        ref = librosa.power_to_db(S, ref=np.max if use_max else 1.0, top_db=top_db)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-5)


def test_magnitude_power_kernel(emu, rng):
    for dbl, cdt in ((0, np.complex64), (1, np.complex128)):
        z = (rng.standard_normal(3001) + 1j * rng.standard_normal(3001)).astype(cdt)
        for power, mode in ((2.0, 2), (1.0, 1), (1.5, 0)):
            out = np.full(z.size, np.nan, np.float32 if dbl == 0 else np.float64)
            emu.magpow(INT(dbl), ptr(z), LL(z.size), DBL(power), INT(mode), ptr(out), INT(3))  # 3 blocks stride over 3001
            ref = np.abs(z.astype(np.complex128)) ** power
            assert rel_err(out, ref) < (1e-6 if dbl == 0 else 1e-14), (cdt, power)
