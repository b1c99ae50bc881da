"""STFT / ISTFT against librosa (and torch.stft / torch.istft where installed,
else torch's conventions written out in NumPy) on chirps, tones, noise, DC
over silence, short and odd-length signals, over a grid of n_fft, hop,
window, center and pad_mode; round trips; streaming == offline; windows
against scipy.signal.get_window; bad input. On the CPU backend (CI) and the GPU.

Tolerances (max|got - ref| / max|ref|): float32 1e-5, float64 1e-12. librosa
runs in the input's precision, so float32 istft is compared where the window
sum-square is not tiny (dividing by it amplifies float32 rounding near the
edges of center=False signals); float64 everywhere."""

import importlib
import warnings

import numpy as np
import pytest
from audio_testing import rel_err

import pygpukit as gp
import pygpukit_audio as A
from pygpukit_audio import AudioTypeError, AudioValueError

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}
S = importlib.import_module("pygpukit_audio.stft")


def _signals(rng, length, sr=16000):
    t = np.arange(length) / sr
    return {
        "chirp": np.sin(2 * np.pi * (100 * t + 2000 * t * t)),
        "tones": 0.5 * np.sin(2 * np.pi * 440 * t) + 0.25 * np.cos(2 * np.pi * 3000 * t + 0.3),
        "noise": rng.standard_normal(length),
        "dc_silence": np.where(np.arange(length) < length // 2, 0.0, 1.0) + 0.25,
    }


def _librosa():
    lib = pytest.importorskip("librosa", reason="librosa is not installed (pip install librosa)")
    warnings.filterwarnings("ignore", message="n_fft=.* is too large", category=UserWarning)
    return lib


GRID = [
    dict(n_fft=256, hop_length=64),
    dict(n_fft=512, hop_length=128, window="hamming", pad_mode="reflect"),
    dict(n_fft=511, hop_length=100, win_length=300, window="blackman", pad_mode="edge"),
    dict(n_fft=1024, hop_length=256, center=False),
    dict(n_fft=400, hop_length=160, win_length=400, pad_mode="symmetric"),
    dict(n_fft=64, hop_length=1, window=("kaiser", 8.0), pad_mode="reflect"),
    dict(n_fft=2048),
]


@pytest.mark.parametrize("kw", GRID, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stft_matches_librosa(rng, kw, dtype):
    librosa = _librosa()
    for length in (4099, 1000, 257):
        for name, y in _signals(rng, length).items():
            if not kw.get("center", True) and length < kw["n_fft"]:
                continue
            y = y.astype(dtype)
            got = A.stft(gp.from_numpy(y), **kw)
            ref = librosa.stft(y, **kw)
            assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
            assert rel_err(got.to_numpy(), ref) < TOL[np.dtype(dtype)], (name, length, kw)


def test_stft_batched_and_short_signals(rng):
    librosa = _librosa()
    y = rng.standard_normal((2, 3, 777)).astype(np.float32)
    got = A.stft(gp.from_numpy(y), n_fft=256, hop_length=50)
    assert rel_err(got.to_numpy(), librosa.stft(y, n_fft=256, hop_length=50)) < 1e-5
    for length in (1, 2, 5, 31):  # shorter than n_fft: only the centre padding makes frames
        y = rng.standard_normal(length)
        for mode in ("constant", "reflect", "edge"):
            if mode == "reflect" and length < 2:
                continue
            got = A.stft(gp.from_numpy(y), n_fft=64, hop_length=16, pad_mode=mode)
            ref = librosa.stft(y, n_fft=64, hop_length=16, pad_mode=mode)
            assert rel_err(got.to_numpy(), ref) < 1e-12, (length, mode)


def test_wrap_padding(rng):
    """torch's "circular" (numpy's "wrap"), which librosa does not take."""
    y = rng.standard_normal(500)
    got = A.stft(gp.from_numpy(y), 64, 16, pad_mode="circular")
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(y, 32, mode="wrap"), 64)[::16] * A.get_window("hann", 64)
    assert rel_err(got.to_numpy(), np.fft.rfft(frames, axis=-1).T) < 1e-12


def test_stft_window_array(rng):
    librosa = _librosa()
    y = rng.standard_normal(3000)
    w = rng.uniform(0.1, 1.0, 200)
    got = A.stft(gp.from_numpy(y), n_fft=256, hop_length=64, win_length=200, window=w)
    assert rel_err(got.to_numpy(), librosa.stft(y, n_fft=256, hop_length=64, win_length=200, window=w)) < 1e-12


@pytest.mark.parametrize("kw", [GRID[0], GRID[1], GRID[2], GRID[3], dict(n_fft=255, hop_length=60)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_istft_matches_librosa(rng, kw, dtype):
    librosa = _librosa()
    kw = {k: v for k, v in kw.items() if k != "pad_mode"}
    y = rng.standard_normal((2, 3001)).astype(dtype)
    spec = librosa.stft(y, **kw)
    for length in (None, 3001, 2500, 3500):
        got = A.istft(gp.asarray(spec), length=length, **kw).to_numpy()
        ref = librosa.istft(spec, length=length, **kw)
        assert got.shape == ref.shape and got.dtype == ref.dtype
        if dtype == np.float32:  # where the window sum-square is not tiny (see the module docstring)
            n_fft, hop = kw["n_fft"], kw.get("hop_length", kw["n_fft"] // 4)
            w = S.frame_params("istft", n_fft, hop, kw.get("win_length"), kw.get("window"), False)[2]
            wss = S.window_sumsquare(w, hop, spec.shape[-1])[(n_fft // 2 if kw.get("center", True) else 0) :][: ref.shape[-1]]
            ok = np.pad(wss > 1e-3, (0, ref.shape[-1] - wss.size))
            got, ref = got[..., ok], ref[..., ok]
        assert rel_err(got, ref) < TOL[np.dtype(dtype)], (kw, length)


@pytest.mark.parametrize("n_fft, hop, window", [(512, 128, "hann"), (511, 100, "hamming"), (256, 64, "blackman"), (64, 16, "boxcar")])
def test_round_trip(rng, n_fft, hop, window):
    for length in (5000, 4097, 300):
        y = rng.standard_normal((2, length))
        back = A.istft(
            A.stft(gp.from_numpy(y), n_fft=n_fft, hop_length=hop, window=window), n_fft=n_fft, hop_length=hop, window=window, length=length
        )
        assert rel_err(back.to_numpy(), y) < 1e-12, (n_fft, hop, window, length)
    y32 = rng.standard_normal(5000).astype(np.float32)
    back = A.istft(
        A.stft(gp.from_numpy(y32), n_fft=n_fft, hop_length=hop, window=window), n_fft=n_fft, hop_length=hop, window=window, length=5000
    )
    assert back.dtype == np.float32 and rel_err(back.to_numpy(), y32) < 1e-5


def _torch_stft_numpy(y, n_fft, hop, win, normalized, onesided):
    """torch.stft's definition: reflect padding, the window padded in the centre."""
    w = np.ones(n_fft) if win is None else np.pad(win, ((n_fft - win.size) // 2, n_fft - win.size - (n_fft - win.size) // 2))
    yp = np.pad(y, [(0, 0)] * (y.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(yp, n_fft, axis=-1)[..., ::hop, :] * w
    spec = (np.fft.rfft if onesided else np.fft.fft)(frames, axis=-1) * (n_fft**-0.5 if normalized else 1.0)
    return np.swapaxes(spec, -1, -2)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("onesided", [True, False])
def test_torch_compat(rng, normalized, onesided):
    y = rng.standard_normal((2, 2000))
    win = np.hanning(300)
    for n_fft, hop, w in ((400, None, None), (512, 100, win)):
        kw = dict(
            hop_length=hop, win_length=None if w is None else w.size, window=w, torch_compat=True, normalized=normalized, onesided=onesided
        )
        got = A.stft(gp.from_numpy(y), n_fft, **kw)
        ref = _torch_stft_numpy(y, n_fft, hop or n_fft // 4, w, normalized, onesided)
        assert rel_err(got.to_numpy(), ref) < 1e-12
        pair = A.stft(gp.from_numpy(y), n_fft, return_complex=False, **kw).to_numpy()
        assert pair.shape == ref.shape + (2,) and rel_err(pair[..., 0] + 1j * pair[..., 1], ref) < 1e-12
        back = A.istft(got, n_fft=n_fft, length=2000, **kw)
        assert rel_err(back.to_numpy(), y) < 1e-12
    try:
        import torch
    except ImportError:
        return
    ty = torch.from_numpy(y)
    tw = torch.from_numpy(win)
    ref = torch.stft(ty, 512, 100, 300, tw, normalized=normalized, onesided=onesided, return_complex=True).numpy()
    got = A.stft(gp.from_numpy(y), 512, 100, 300, win, torch_compat=True, normalized=normalized, onesided=onesided)
    assert rel_err(got.to_numpy(), ref) < 1e-12
    tback = torch.istft(torch.from_numpy(got.to_numpy()), 512, 100, 300, tw, normalized=normalized, onesided=onesided, length=2000)
    back = A.istft(got, 100, 300, 512, win, length=2000, torch_compat=True, normalized=normalized, onesided=onesided)
    assert rel_err(back.to_numpy(), tback.numpy()) < 1e-12


def test_torch_compat_nola_check(rng):
    spec = A.stft(gp.from_numpy(rng.standard_normal(1000)), 64, hop_length=64, window="hann", torch_compat=True)
    with pytest.raises(AudioValueError, match="envelope"):
        A.istft(spec, n_fft=64, hop_length=64, window="hann", torch_compat=True)


def _blocks(rng, total):
    cuts = np.sort(rng.choice(np.arange(1, total), size=min(12, total - 1), replace=False))
    return np.split(np.arange(total), cuts)


@pytest.mark.parametrize(
    "kw",
    [
        dict(n_fft=256, hop_length=64),
        dict(n_fft=256, hop_length=64, pad_mode="reflect"),
        dict(n_fft=255, hop_length=100, pad_mode="symmetric", window="hamming"),
        dict(n_fft=128, hop_length=48, pad_mode="edge", win_length=100),
        dict(n_fft=200, hop_length=50, center=False),
        dict(n_fft=64, hop_length=128),
    ],
    ids=str,
)
def test_streaming_equals_offline(rng, kw):
    for total in (3000, 130, 257):
        y = rng.standard_normal((2, total))
        if not kw.get("center", True) and total < kw["n_fft"]:
            continue
        st = A.StreamingSTFT(**kw)
        parts = [st.push(gp.from_numpy(np.ascontiguousarray(y[:, idx]))) for idx in _blocks(rng, total)] + [st.flush()]
        got = np.concatenate([p.to_numpy() for p in parts], axis=-1)
        ref = A.stft(gp.from_numpy(y), **kw).to_numpy()
        assert got.shape == ref.shape and rel_err(got, ref) < 1e-12, (kw, total)
        ikw = {k: v for k, v in kw.items() if k != "pad_mode"}
        ist = A.StreamingISTFT(**ikw)
        frames = ref.shape[-1]
        outs = [ist.push(gp.asarray(np.ascontiguousarray(ref[..., idx]))) for idx in _blocks(rng, frames)] if frames > 1 else []
        if frames == 1:
            outs.append(ist.push(gp.asarray(ref)))
        outs.append(ist.flush())
        back = np.concatenate([o.to_numpy() for o in outs], axis=-1)
        ref_back = A.istft(gp.asarray(ref), **ikw).to_numpy()
        assert back.shape == ref_back.shape and rel_err(back, ref_back) < 1e-12, (kw, total)


def test_streaming_errors(rng):
    with pytest.raises(AudioValueError, match="wrap"):
        A.StreamingSTFT(256, pad_mode="wrap")
    st = A.StreamingSTFT(64, 16)
    st.push(gp.from_numpy(rng.standard_normal((2, 100))))
    with pytest.raises(AudioValueError, match="shape"):
        st.push(gp.from_numpy(rng.standard_normal((3, 100))))
    st.flush()
    with pytest.raises(AudioValueError, match="flushed"):
        st.push(gp.from_numpy(rng.standard_normal((2, 100))))
    with pytest.raises(AudioValueError, match="no samples"):
        A.StreamingSTFT(64).flush()
    with pytest.raises(AudioValueError, match="no frames"):
        A.StreamingISTFT(64).flush()


def test_streaming_empty_blocks(rng):
    """Empty pushes (a real-time callback with nothing new) return empty outputs."""
    y = rng.standard_normal((2, 900))
    st = A.StreamingSTFT(128, 32)
    parts = [st.push(gp.from_numpy(np.zeros((2, 0)))), st.push(gp.asarray(y[:, :400])), st.push(gp.from_numpy(np.zeros((2, 0))))]
    parts += [st.push(gp.from_numpy(np.ascontiguousarray(y[:, 400:]))), st.flush()]
    assert parts[0].shape == (2, 65, 0)
    spec = np.concatenate([p.to_numpy() for p in parts], axis=-1)
    assert rel_err(spec, A.stft(gp.from_numpy(y), 128, 32).to_numpy()) < 1e-12
    ist = A.StreamingISTFT(128, 32)
    outs = [ist.push(gp.asarray(np.zeros((2, 65, 0), np.complex128))), ist.push(gp.asarray(spec)), ist.flush()]
    assert outs[0].shape == (2, 0)
    back = np.concatenate([o.to_numpy() for o in outs], axis=-1)
    assert rel_err(back, A.istft(gp.asarray(spec), 32).to_numpy()) < 1e-12
    with pytest.raises(AudioValueError, match="bins"):
        A.StreamingISTFT(64).push(gp.asarray(np.ones((10, 3), np.complex64) * (1 + 1j)))


def test_windows_match_scipy():
    signal = pytest.importorskip("scipy.signal", reason="scipy is not installed")
    for w in ("hann", "hamming", "blackman", "blackmanharris", "nuttall", "flattop", "bartlett", "triang", "boxcar", "cosine",
              ("kaiser", 8.0), ("gaussian", 3.0)):  # fmt: skip
        for n in (1, 2, 7, 16, 33, 400):
            for fftbins in (True, False):
                np.testing.assert_allclose(A.get_window(w, n, fftbins), signal.get_window(w, n, fftbins=fftbins), rtol=0, atol=1e-13)


def test_bad_input_raises_clear_errors(rng):
    y = gp.from_numpy(rng.standard_normal(1000))
    spec = A.stft(y, 256)
    bad = rng.standard_normal(1000)
    bad[500] = np.nan
    cases = [
        (lambda: A.stft(y, 2048, center=False), AudioValueError, "longer than the signal"),
        (lambda: A.stft(y, 256, hop_length=0), AudioValueError, "hop_length"),
        (lambda: A.stft(gp.from_numpy(bad), 256), AudioValueError, "non-finite"),
        (lambda: A.stft(gp.from_numpy(np.array([1.0, np.inf, 2.0])), 4), AudioValueError, "non-finite"),
        (lambda: A.stft(gp.asarray(np.array(1.0)), 4), AudioValueError, "at least one sample"),
        (lambda: A.stft(gp.from_numpy(np.arange(10)), 4), AudioTypeError, "floating point"),
        (lambda: A.stft(y, 256, win_length=300), AudioValueError, "win_length"),
        (lambda: A.stft(y, 0), AudioValueError, "n_fft"),
        (lambda: A.stft(y, 256, pad_mode="linear_ramp"), AudioValueError, "pad_mode"),
        (lambda: A.stft(y, 256, window="nope"), AudioValueError, "unknown"),
        (lambda: A.stft(y, 256, window=np.ones(100)), AudioValueError, "shape"),
        (lambda: A.istft(y), AudioTypeError, "complex"),
        (lambda: A.istft(spec[0]), AudioValueError, "bins, frames"),
        (lambda: A.istft(spec, n_fft=300), AudioValueError, "frequency bins"),
        (lambda: A.istft(spec, hop_length=0), AudioValueError, "hop_length"),
        (lambda: A.istft(spec, length=-1), AudioValueError, "length"),
    ]
    for call, err, msg in cases:
        with pytest.raises(err, match=msg):
            call()


# -- the kernels (GPU) -----------------------------------------------------------------


def test_overlap_add_kernel_compiles(need_nvrtc):
    for dt in (np.float32, np.float64):
        S._ola_kernel(np.dtype(dt)).compile(sm=90)


@pytest.mark.gpu
def test_kernels_are_chosen_on_the_gpu():
    y = gp.zeros((2, 4096), np.float32)
    w = gp.zeros((256,), np.float32)
    assert gp.ops.which("stft", y, 256, 64, w, True, 1.0, 128) == "audio:kernel"
    s = gp.zeros((2, 129, 10), np.complex64)
    assert gp.ops.which("istft", s, 256, 64, w, 128, 1000, 1.0 / 256) == "audio:kernel"


@pytest.mark.gpu
@pytest.mark.parametrize("n_fft, hop", [(1024, 256), (4096, 1024), (8192, 2048), (16384, 4096), (1023, 300), (97, 13)])
def test_kernel_stft_istft_long_signals(rng, n_fft, hop):
    """A batch of 60 s signals at 16 kHz (the benchmark's shape) and n_fft beyond one block."""
    y = rng.standard_normal((4, 16000 * 20)).astype(np.float32)
    got = A.stft(gp.from_numpy(y), n_fft, hop)
    win = S.device_window(S.frame_params("stft", n_fft, hop, None, None, False)[2], np.float32)
    ref = S.reference_stft(gp.from_numpy(y), n_fft, hop, win, True, 1.0, n_fft // 2)
    assert rel_err(got.to_numpy(), ref.to_numpy()) < 1e-5
    back = A.istft(got, hop_length=hop, n_fft=n_fft, length=y.shape[-1])
    assert rel_err(back.to_numpy(), y) < 1e-5


def test_kernel_frame_addressing(rng):
    """kernel_stft's rows (frames of the unpadded signal, shifted by the centre
    padding and read as zeros outside it) are librosa's frames."""
    em = importlib.import_module("fft_emulation")
    for length, n_fft, hop in ((1000, 256, 64), (100, 256, 50), (777, 64, 1), (5, 16, 3)):
        y = rng.standard_normal((2, length))
        zeros = n_fft // 2
        frames = S.n_frames_of(length + 2 * zeros, n_fft, hop)
        got = em.rows(y.reshape(-1), 2 * frames, (frames, length, hop, 1), n_fft, clip=(length, zeros))
        padded = np.pad(y, [(0, 0), (zeros, zeros)])
        want = np.lib.stride_tricks.sliding_window_view(padded, n_fft, axis=-1)[:, ::hop].reshape(2 * frames, n_fft)
        np.testing.assert_array_equal(got, want)
