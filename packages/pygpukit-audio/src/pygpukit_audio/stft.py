"""Short-time Fourier transform and its inverse, with librosa's semantics by
default and torch.stft / torch.istft's with ``torch_compat=True``.

stft(y) of a real signal (..., L) is (..., 1 + n_fft // 2, n_frames) complex
(complex64 for float32 input): frame t is the signal (padded by n_fft // 2 on
both sides with ``pad_mode`` when ``center``) from t * hop_length, times the
window (a name as scipy.signal.get_window with fftbins=True, or an array of
win_length values, zero-padded to n_fft in the centre), and
n_frames = 1 + (padded length - n_fft) // hop_length. The result is a
transposed view of a contiguous (..., n_frames, bins) array, as torch.stft's.

Defaults: librosa mode: window "hann", pad_mode "constant" (librosa >= 0.10),
hop_length win_length // 4. torch_compat: window all ones (torch's None),
pad_mode "reflect", hop_length n_fft // 4; ``normalized`` scales by
n_fft ** -0.5, ``onesided=False`` gives all n_fft bins, ``return_complex=False``
gives (..., bins, n_frames, 2) real. torch's "replicate" and "circular" pad
modes are accepted as "edge" and "wrap".

istft inverts with window-sum-square normalization (divided where the sum of
squared windows exceeds the dtype's tiny, as librosa); ``length`` gives the
exact output length (cropped or zero-padded). In torch_compat mode the window
envelope must be nonzero over the output (torch's NOLA check).

Two ops are registered: "stft" (framing, window and FFT of a signal padded
beforehand, but for constant padding: the CUDA kernel reads zeros outside
the signal, reads the frames straight from it and applies the window while
loading) and "istft" (inverse FFT of each frame,
then a gathered overlap-add over a range of output samples); the streaming
classes (streaming.py) reuse both.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _fft_launch
from . import _fft_plan as plan
from ._errors import AudioTypeError, AudioValueError
from .windows import get_window

PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")
_PAD_ALIASES = {"replicate": "edge", "circular": "wrap"}


# -- public API ----------------------------------------------------------------------


def stft(
    y: Any,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    pad_mode: str | None = None,
    *,
    torch_compat: bool = False,
    normalized: bool = False,
    onesided: bool = True,
    return_complex: bool = True,
) -> gp.GPUArray:
    """The STFT (..., bins, n_frames) of signals y (..., L); see the module docstring."""
    y = signal("stft", y)
    n_fft, hop, win = frame_params("stft", n_fft, hop_length, win_length, window, torch_compat)
    mode = pad_mode_of(pad_mode, torch_compat)
    length = y.shape[-1]
    zeros = 0  # constant padding is read virtually by the op; the other modes copy samples
    if center and mode == "constant":
        zeros = n_fft // 2
    elif center:
        y = pad_signal(y, n_fft // 2, n_fft // 2, mode)
    elif n_fft > length:
        raise AudioValueError(
            f"stft: n_fft={n_fft} is longer than the signal ({length} samples) with center=False; pad it or use center=True"
        )
    scale = n_fft**-0.5 if normalized else 1.0
    s = ext.op("stft")(y, n_fft, hop, device_window(win, y.dtype), bool(onesided), scale, zeros)
    return s if return_complex else gp.stack([s.real, s.imag], axis=-1)


def istft(
    stft_matrix: Any,
    hop_length: int | None = None,
    win_length: int | None = None,
    n_fft: int | None = None,
    window: Any = None,
    center: bool = True,
    length: int | None = None,
    *,
    torch_compat: bool = False,
    normalized: bool = False,
    onesided: bool = True,
) -> gp.GPUArray:
    """The signal (..., length) whose STFT is ``stft_matrix`` (..., bins, n_frames)."""
    s = spectrogram("istft", stft_matrix)
    bins, frames = s.shape[-2:]
    if n_fft is None:
        n_fft = 2 * (bins - 1) if onesided else bins
    n_fft, hop, win = frame_params("istft", n_fft, hop_length, win_length, window, torch_compat)
    if bins != (n_fft // 2 + 1 if onesided else n_fft):
        want = f"n_fft // 2 + 1 = {n_fft // 2 + 1}" if onesided else f"n_fft = {n_fft} (onesided=False)"
        raise AudioValueError(f"istft: the input has {bins} frequency bins; n_fft={n_fft} needs {want}")
    if not onesided:
        s = s[..., : n_fft // 2 + 1, :]
    pad = n_fft // 2 if center else 0
    if length is None:
        out_len = n_fft + hop * (frames - 1) - 2 * pad
    else:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise AudioValueError(f"istft: length must be a non-negative integer or None, got {length!r}")
        out_len = int(length)
        frames = max(1, min(frames, -(-(out_len + 2 * pad) // hop)))
        s = s[..., :frames]
    if torch_compat:
        _check_nola(win, hop, frames, pad, out_len)
    scale = n_fft**-0.5 if normalized else 1.0 / n_fft
    return ext.op("istft")(s, n_fft, hop, device_window(win, s.dtype.type(0).real.dtype), pad, out_len, scale)


# -- checks and shared steps ---------------------------------------------------------


def _int(op: str, name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise AudioValueError(f"{op}: {name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def signal(op: str, y: Any, empty: bool = False) -> gp.GPUArray:
    """y as a finite float32 / float64 GPUArray of at least one axis and sample
    (or none, with ``empty``: a streaming block)."""
    if not isinstance(y, gp.GPUArray):
        y = gp.asarray(np.asarray(y))
    if y.dtype.kind != "f":
        raise AudioTypeError(f"{op}: the signal must be floating point (float32 or float64), got {y.dtype}")
    cdt = ext.compute_dtype(y.dtype)
    if y.dtype != cdt:
        y = y.astype(cdt)
    if y.ndim == 0 or (y.shape[-1] == 0 and not empty):
        raise AudioValueError(f"{op}: the signal must have shape (..., samples) with at least one sample, got {y.shape}")
    if y.size and not bool(gp.all(gp.isfinite(y))):
        raise AudioValueError(f"{op}: the signal has non-finite samples (NaN or inf)")
    return y


def spectrogram(op: str, s: Any, empty: bool = False) -> gp.GPUArray:
    """s as a complex GPUArray (..., bins, frames) with at least one frame (or
    none, with ``empty``: a streaming block)."""
    if not isinstance(s, gp.GPUArray):
        s = gp.asarray(np.asarray(s))
    if s.dtype.kind != "c":
        raise AudioTypeError(f"{op}: the STFT matrix must be complex (complex64 or complex128), got {s.dtype}")
    if s.ndim < 2 or (s.shape[-1] == 0 and not empty) or s.shape[-2] == 0:
        raise AudioValueError(f"{op}: the STFT matrix must have shape (..., bins, frames) with at least one of each, got {s.shape}")
    return s


def frame_params(op: str, n_fft: Any, hop: Any, win_length: Any, window: Any, torch_compat: bool) -> tuple[int, int, np.ndarray]:
    """(n_fft, hop, the n_fft-point window in float64) of a call."""
    n_fft = _int(op, "n_fft", n_fft, 1)
    win_length = n_fft if win_length is None else _int(op, "win_length", win_length, 1)
    if win_length > n_fft:
        raise AudioValueError(f"{op}: win_length={win_length} must be at most n_fft={n_fft}")
    default_hop = n_fft // 4 if torch_compat else win_length // 4
    hop = max(default_hop, 1) if hop is None else _int(op, "hop_length", hop, 1)
    if window is None:
        window = "boxcar" if torch_compat else "hann"
    if isinstance(window, (str, tuple)):
        return n_fft, hop, _named_window(window, win_length, n_fft)
    return n_fft, hop, _centred(get_window(window, win_length), n_fft)


def _centred(w: np.ndarray, n_fft: int) -> np.ndarray:
    lpad = (n_fft - w.size) // 2
    return np.pad(w, (lpad, n_fft - w.size - lpad))


@functools.lru_cache(maxsize=64)
def _named_window(window: str | tuple, win_length: int, n_fft: int) -> np.ndarray:
    w = _centred(get_window(window, win_length), n_fft)
    w.flags.writeable = False  # shared between calls
    return w


def pad_mode_of(mode: Any, torch_compat: bool) -> str:
    if mode is None:
        return "reflect" if torch_compat else "constant"
    mode = _PAD_ALIASES.get(mode, mode)
    if mode not in PAD_MODES:
        raise AudioValueError(f"pad_mode must be one of {', '.join(PAD_MODES)} (or torch's replicate, circular), got {mode!r}")
    return mode


def pad_signal(y: gp.GPUArray, left: int, right: int, mode: str) -> gp.GPUArray:
    """y padded along its last axis as numpy.pad(mode) does: zeros, or a gather
    of the samples numpy.pad would copy (every mode here reads samples)."""
    if left == 0 and right == 0:
        return y
    widths = [(0, 0)] * (y.ndim - 1) + [(left, right)]
    if mode == "constant":
        return gp.pad(y, widths)
    idx = np.pad(np.arange(y.shape[-1], dtype=np.int64), (left, right), mode=mode)
    return gp.take(y, gp.from_numpy(idx), axis=-1)


def n_frames_of(length: int, n_fft: int, hop: int) -> int:
    return 1 + (length - n_fft) // hop


@functools.lru_cache(maxsize=64)
def _cached_window(data: bytes, dt: np.dtype, backend: str) -> gp.GPUArray:
    return gp.from_numpy(np.frombuffer(data, np.float64).astype(dt))


def device_window(win: np.ndarray, dt: np.dtype) -> gp.GPUArray:
    """The window on the device in dtype dt, kept for the next call with it."""
    return _cached_window(win.tobytes(), np.dtype(dt), gp.backend())


def window_sumsquare(win: np.ndarray, hop: int, frames: int) -> np.ndarray:
    """sum_t win[P - t hop]^2 for every P < n_fft + hop * (frames - 1), in float64."""
    n_fft = win.size
    k = -(-n_fft // hop)
    sq = np.zeros(k * hop)
    sq[:n_fft] = win * win
    out = np.zeros((frames + k) * hop)
    for i in range(k):
        out[i * hop : (i + frames) * hop] += np.tile(sq[i * hop : (i + 1) * hop], frames)
    return out[: n_fft + hop * (frames - 1)]


def _check_nola(win: np.ndarray, hop: int, frames: int, pad: int, out_len: int) -> None:
    env = window_sumsquare(win, hop, frames)[pad : pad + out_len]
    if env.size and env.min() < 1e-11:
        raise AudioValueError(
            f"istft: the window envelope (sum of squared windows at hop {hop}) is below 1e-11 at output sample {int(env.argmin())}; "
            "torch.istft's nonzero overlap-add condition fails"
        )


# -- op "stft": frames of a signal with ``zeros`` zeros on both sides, windowed, transformed --


def _check_stft(y: Any, n_fft: int, hop: int, win: Any, zeros: int) -> int:
    if not isinstance(y, gp.GPUArray) or y.dtype not in (np.float32, np.float64) or y.ndim == 0:
        raise AudioTypeError("stft op: y must be a float32 or float64 GPUArray (..., samples)")
    if y.shape[-1] + 2 * zeros < n_fft or hop < 1 or win.shape != (n_fft,) or zeros < 0:
        raise AudioValueError(f"stft op: needs n_fft={n_fft} padded samples, hop >= 1 and an n_fft window; got {y.shape}, hop {hop}")
    return n_frames_of(y.shape[-1] + 2 * zeros, n_fft, hop)


def reference_stft(y: gp.GPUArray, n_fft: int, hop: int, win: gp.GPUArray, onesided: bool, scale: float, zeros: int = 0) -> gp.GPUArray:
    _check_stft(y, n_fft, hop, win, zeros)
    x = np.pad(y.to_numpy().astype(np.float64), [(0, 0)] * (y.ndim - 1) + [(zeros, zeros)])
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft, axis=-1)[..., ::hop, :]
    spec = (np.fft.rfft if onesided else np.fft.fft)(frames * win.to_numpy().astype(np.float64), axis=-1) * scale
    return gp.from_numpy(np.ascontiguousarray(spec.astype(plan.complex_dtype(y.dtype)))).swapaxes(-1, -2)


def kernel_stft(y: gp.GPUArray, n_fft: int, hop: int, win: gp.GPUArray, onesided: bool, scale: float, zeros: int = 0) -> gp.GPUArray:
    frames = _check_stft(y, n_fft, hop, win, zeros)
    y = gp.ascontiguousarray(y)
    lead, length = y.shape[:-1], y.shape[-1]
    rows = math.prod(lead)
    cdt = plan.complex_dtype(y.dtype)
    bins = n_fft // 2 + 1 if onesided else n_fft
    kind = "rfft" if onesided else "fft"
    out = ext.empty((*lead, frames, bins), cdt)
    if out.size == 0:
        return out.swapaxes(-1, -2)
    irows, orows = (frames, length, hop, 1), (frames, frames * bins, bins, 1)
    clip = (length, zeros) if zeros else (0, 0)
    if not _fft_launch.block(kind, y, out, n_fft, cdt, rows * frames, irows, orows, scale, not onesided, win, clip):
        # n_fft too long for one block: gather the frames, then the multi-pass FFT
        y = pad_signal(y, zeros, zeros, "constant")
        idx = (np.arange(frames, dtype=np.int64)[:, None] * hop + np.arange(n_fft)).reshape(-1)
        framed = gp.take(y, gp.from_numpy(idx), axis=-1).reshape(*lead, frames, n_fft) * win
        out = _fft_launch.transform(kind, framed, n_fft, len(lead) + 1, scale)
    return out.swapaxes(-1, -2)


# -- op "istft": inverse transform of each frame, overlap-add of a sample range --------


def _check_istft(s: Any, n_fft: int, hop: int, win: Any, offset: int, out_len: int) -> None:
    if not isinstance(s, gp.GPUArray) or s.dtype.kind != "c" or s.ndim < 2:
        raise AudioTypeError("istft op: the STFT matrix must be a complex GPUArray (..., bins, frames)")
    if s.shape[-2] != n_fft // 2 + 1 or hop < 1 or win.shape != (n_fft,) or offset < 0 or out_len < 0:
        raise AudioValueError(
            f"istft op: bad arguments: bins {s.shape[-2]} for n_fft {n_fft}, hop {hop}, offset {offset}, length {out_len}"
        )


def overlap_add_numpy(frames: np.ndarray, win: np.ndarray, hop: int, offset: int, out_len: int, tiny: float) -> np.ndarray:
    """The gathered overlap-add (kernels/stft.cu) of frames (..., nb, n_fft) in float64."""
    nb, n_fft = frames.shape[-2:]
    lead = frames.shape[:-2]
    k = -(-n_fft // hop)
    padded = np.zeros((*lead, nb, k * hop))
    padded[..., :n_fft] = frames * win
    acc = np.zeros((*lead, (nb + k) * hop))
    for i in range(k):
        acc[..., i * hop : (i + nb) * hop] += padded[..., i * hop : (i + 1) * hop].reshape(*lead, nb * hop)
    wss = window_sumsquare(win, hop, nb)
    full = acc.shape[-1]
    wss = np.pad(wss, (0, full - wss.size))
    acc = np.where(wss > tiny, acc / np.where(wss > tiny, wss, 1.0), acc)
    out = np.zeros((*lead, out_len))
    stop = min(offset + out_len, full)
    if stop > offset:
        out[..., : stop - offset] = acc[..., offset:stop]
    return out


def reference_istft(s: gp.GPUArray, n_fft: int, hop: int, win: gp.GPUArray, offset: int, out_len: int, scale: float) -> gp.GPUArray:
    _check_istft(s, n_fft, hop, win, offset, out_len)
    rdt = s.dtype.type(0).real.dtype
    frames = np.swapaxes(np.fft.irfft(s.to_numpy().astype(np.complex128), n=n_fft, axis=-2) * (scale * n_fft), -1, -2)
    out = overlap_add_numpy(frames, win.to_numpy().astype(np.float64), hop, offset, out_len, float(np.finfo(rdt).tiny))
    return gp.from_numpy(out.astype(rdt))


_OLA_SIG = (
    "const void* frames, const void* win, void* out, long long rows, int n_frames, int n_fft, int hop, long long out_len, "
    "long long offset, double tiny"
)


@functools.cache
def _ola_kernel(rdt: np.dtype) -> Any:
    ctype = "float" if rdt == np.float32 else "double"
    return ext.Kernel(ext.kernel_source(__name__, "stft"), f"pgk_stft::overlap_add<{ctype}>", signature=_OLA_SIG, name="stft.cu")


def kernel_istft(s: gp.GPUArray, n_fft: int, hop: int, win: gp.GPUArray, offset: int, out_len: int, scale: float) -> gp.GPUArray:
    _check_istft(s, n_fft, hop, win, offset, out_len)
    cdt = s.dtype
    rdt = cdt.type(0).real.dtype
    lead, nb = s.shape[:-2], s.shape[-1]
    rows = math.prod(lead)
    out = ext.empty((*lead, out_len), rdt)
    if out.size == 0:
        return out
    frames = ext.empty((*lead, nb, n_fft), rdt)
    g = _fft_launch.groups(s, s.ndim - 2)
    if g is None:
        s = gp.ascontiguousarray(s)
        g = _fft_launch.groups(s, s.ndim - 2)
    _, inner, bs, is_, es = g
    if not _fft_launch.block("irfft", s, frames, n_fft, cdt, rows * nb, (inner, bs, is_, es), (nb, nb * n_fft, n_fft, 1), scale):
        frames = gp.ascontiguousarray(_fft_launch.transform("irfft", s, n_fft, s.ndim - 2, scale).swapaxes(-1, -2))
    total = rows * out_len
    tiny = float(np.finfo(rdt).tiny)
    _ola_kernel(rdt)(max(1, -(-total // 256)), 256, frames, win, out, rows, nb, n_fft, hop, out_len, offset, tiny)
    return out


def _takes_stft(y: Any, *args: Any) -> bool:
    return isinstance(y, gp.GPUArray) and y.dtype in (np.float32, np.float64)


def _takes_istft(s: Any, n_fft: Any, *args: Any) -> bool:
    return (
        isinstance(s, gp.GPUArray)
        and s.dtype in (np.complex64, np.complex128)
        and _fft_launch.supported(_fft_launch.modes("irfft", n_fft)[1])
    )


def register(registry: Any) -> None:
    for op, doc, ref, kern, takes, dts in (
        ("stft", "frames of a padded signal (..., L) times a window, transformed: (..., bins, frames)",
         reference_stft, kernel_stft, _takes_stft, ["float32", "float64"]),
        ("istft", "inverse transform of each frame, windowed overlap-add over a range of output samples",
         reference_istft, kernel_istft, _takes_istft, ["complex64", "complex128"]),
    ):  # fmt: skip
        ext.register_family(registry, op, nkey=1, doc=doc, reference=ref, cuda=kern, dtypes=dts, predicate=takes)
