"""The constant-Q transform with librosa's algorithm (librosa.cqt, i.e. vqt with gamma 0).

- ``cqt_frequencies(n_bins, fmin, bins_per_octave=12, tuning=0.0)``: the bins' centre
  frequencies (NumPy float64), as librosa.cqt_frequencies.
- ``cqt(y, sr=22050, hop_length=512, fmin=None, n_bins=84, bins_per_octave=12, tuning=0.0,
  filter_scale=1, norm=1, sparsity=0.01, window="hann", scale=True, pad_mode="constant",
  res_type="polyphase")``: complex (..., n_bins, frames), complex64 for float32 input.

librosa's steps: the top octave's filters (windowed complex exponentials of
filter_scale / alpha periods, L-``norm``-normalized, zero-padded to a power of two
and transformed; in each row the smallest coefficients holding ``sparsity`` of its
L1 mass are dropped) applied to an STFT with a rectangular window; then the signal
is halved in rate (while the hop is even) and the next octave down uses the same
construction at the new rate; the octaves are stacked and cropped to the shortest.
A signal whose filters reach far below Nyquist is first decimated by 2^k as
librosa does. fmin=None is C1 (32.70 Hz).

Resampling: librosa's default res_type "soxr_hq" (libsoxr) is not reproduced;
the methods here are res_type="polyphase" (the default: librosa's
scipy.signal.resample_poly path, with this package's resample_poly, which
matches scipy) and "fft" / "scipy" (librosa's scipy.signal.resample path: the
spectrum cropped to the new length, with gp.fft). Compare with
librosa.cqt(..., res_type=<the same>). tuning=None estimates the tuning
with estimate_tuning(y, sr, bins_per_octave=bins_per_octave), as librosa.

The filter bases are built on the host in librosa's dtypes (complex64 for float32
input, cached per octave); each octave's response is one real GEMM of the STFT
frames [re | im] with the basis [[Br^T, Bi^T], [-Bi^T, Br^T]] on the device.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp

from . import _dsp, _normalize
from . import fft as gfft
from ._errors import AudioTypeError, AudioValueError
from .chroma import estimate_tuning
from .resampling import resample_poly
from .stft import stft
from .windows import get_window

RES_TYPES = ("polyphase", "fft", "scipy")
C1_HZ = 440.0 * 2.0 ** ((24 - 69) / 12)  # MIDI note 24
# librosa.filters.WINDOW_BANDWIDTHS: n sum(w^2) / sum(w)^2 of the 1000-point windows
_BANDWIDTHS = {"hann": 1.50018310546875, "hamming": 1.3629455320350348, "blackman": 1.7269681554262326,
               "blackmanharris": 2.0045975283585014, "nuttall": 1.9763500280946082, "flattop": 2.7762255046484143,
               "bartlett": 1.3334961334912805, "triang": 1.333170652355585, "boxcar": 1.0, "ones": 1.0, "rectangular": 1.0,
               "cosine": 1.2337005350199792}  # fmt: skip


def cqt_frequencies(n_bins: int, fmin: float, bins_per_octave: int = 12, tuning: float = 0.0) -> np.ndarray:
    """fmin 2^((k + tuning) / bins_per_octave) for k < n_bins, as librosa computes them."""
    fn = "cqt_frequencies"
    n_bins = _dsp.integer(fn, "n_bins", n_bins, 1)
    bpo = _dsp.integer(fn, "bins_per_octave", bins_per_octave, 1)
    fmin = _dsp.positive(fn, "fmin", fmin)
    ratios = 2.0 ** ((_dsp.number(fn, "tuning", tuning) + np.arange(bpo, dtype=np.float64)) / bpo)
    octaves = 2.0 ** np.arange(math.ceil(n_bins / bpo))
    return np.sort(np.multiply.outer(octaves, ratios).reshape(-1)[:n_bins]) * fmin


def _window_bandwidth(window: Any) -> float:
    key = window if isinstance(window, str) else None
    if key in _BANDWIDTHS:
        return _BANDWIDTHS[key]
    w = get_window(window, 1000)
    return 1000 * float(np.sum(w**2)) / (float(np.sum(w)) ** 2 + np.finfo(np.float64).tiny)


def _relative_bandwidth(freqs: np.ndarray, bpo: int) -> np.ndarray:
    """alpha of each bin: (r^2 - 1) / (r^2 + 1) for the ratio r spanned around it (librosa's)."""
    if freqs.size == 1:
        r2 = 2.0 ** (2.0 / bpo)
        return np.array([(r2 - 1) / (r2 + 1)])
    logf = np.log2(freqs)
    per_octave = np.empty_like(freqs)
    per_octave[0] = 1 / (logf[1] - logf[0])
    per_octave[-1] = 1 / (logf[-1] - logf[-2])
    per_octave[1:-1] = 2 / (logf[2:] - logf[:-2])
    r2 = 2.0 ** (2 / per_octave)
    return (r2 - 1) / (r2 + 1)


@functools.lru_cache(maxsize=64)
def _octave_basis(
    sr: float, freqs: tuple[float, ...], alpha: tuple[float, ...], filter_scale: float, norm: float | None, sparsity: float,
    window: Any, cdt: np.dtype, gain: float,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """(the sparsified FFT of one octave's filters (n_filters, 1 + n_fft // 2) in cdt, times gain; n_fft)."""
    f, a = np.asarray(freqs), np.asarray(alpha)
    lengths = filter_scale / a * sr / f
    n_fft = int(2.0 ** np.ceil(np.log2(lengths.max())))
    basis = np.zeros((f.size, n_fft), dtype=np.complex128)
    for row, (ilen, freq) in enumerate(zip(lengths, f)):
        t = np.arange(-ilen // 2, ilen // 2, dtype=np.float64)
        sig = np.exp(1j * t * 2 * np.pi * freq / sr) * get_window(window, t.size)
        if norm is not None:
            sig = np.asarray(_normalize_host(sig, norm))
        lpad = (n_fft - t.size) // 2
        basis[row, lpad : lpad + t.size] = sig
    basis = basis.astype(np.complex64)  # librosa builds the filters in complex64 whatever the input's dtype
    basis *= lengths[:, None] / float(n_fft)
    spec = np.fft.fft(basis, n=n_fft, axis=1)[:, : n_fft // 2 + 1]
    mags = np.abs(spec)
    ordered = np.sort(mags, axis=1)
    cumulative = np.cumsum(ordered / np.sum(mags, axis=1, keepdims=True), axis=1)
    cut = ordered[np.arange(f.size), np.argmin(cumulative < sparsity, axis=1)][:, None]
    kept = np.where(mags >= cut, spec, 0).astype(cdt)
    kept *= gain
    return kept, n_fft


def _normalize_host(sig: np.ndarray, norm: float) -> np.ndarray:
    mag = np.abs(sig)
    if norm == np.inf:
        length = mag.max()
    elif norm == -np.inf:
        length = mag.min()
    elif norm == 0:
        length = float(np.sum(mag > 0))
    else:
        length = np.sum(mag**norm) ** (1.0 / norm)
    return sig / (1.0 if length < np.finfo(np.float64).tiny else length)


@functools.lru_cache(maxsize=64)
def _device_basis(backend: str, *octave: Any) -> tuple[gp.GPUArray, int, int]:
    """(the octave's basis as the real [[Br^T, Bi^T], [-Bi^T, Br^T]] (2 bins, 2 n_filters) on the
    device, n_fft, n_filters): [re | im] of the STFT frames @ it gives [Re | Im] of frames @ B^T."""
    basis, n_fft = _octave_basis(*octave)
    b = basis.T
    top = np.concatenate([b.real, b.imag], axis=1)
    bottom = np.concatenate([-b.imag, b.real], axis=1)
    return gp.asarray(np.ascontiguousarray(np.concatenate([top, bottom], axis=0))), n_fft, basis.shape[0]


def _response(y: gp.GPUArray, n_fft: int, hop: int, m: gp.GPUArray, k: int, pad_mode: str) -> tuple[gp.GPUArray, gp.GPUArray]:
    """(Re, Im) of the k filters' basis (as _device_basis's m) @ stft(y, rectangular window), each (..., frames, k)."""
    D = stft(y, n_fft, hop, None, "ones", True, pad_mode).swapaxes(-1, -2)  # (..., frames, bins), contiguous
    lead, (frames, bins) = D.shape[:-2], D.shape[-2:]
    rows = gp.concatenate([D.real, D.imag], axis=-1).reshape(math.prod(lead) * frames, 2 * bins)
    out = gp.matmul(rows, m).reshape(*lead, frames, 2 * k)
    return out[..., :k], out[..., k:]


def _decimate(y: gp.GPUArray, factor: int, res_type: str) -> gp.GPUArray:
    """librosa.resample(y, orig_sr=factor, target_sr=1, res_type=res_type, scale=True)."""
    if res_type == "polyphase":
        return resample_poly(y, 1, factor, axis=-1) / math.sqrt(1.0 / factor)
    # "fft" / "scipy": scipy.signal.resample to ceil(n / factor) samples, the spectrum cropped
    n = y.shape[-1]
    num = -(-n // factor)
    X = gfft.rfft(y, axis=-1)[..., : num // 2 + 1]
    if num % 2 == 0 and num != n:  # the new Nyquist bin takes both halves' share
        gain = np.ones(num // 2 + 1)
        gain[num // 2] = 2.0
        X = X * gp.asarray(gain.astype(y.dtype))
    return gfft.irfft(X / (n / num), n=num, axis=-1) / math.sqrt(1.0 / factor)


def cqt(
    y: Any,
    sr: float = 22050,
    hop_length: int = 512,
    fmin: float | None = None,
    n_bins: int = 84,
    bins_per_octave: int = 12,
    tuning: float = 0.0,
    filter_scale: float = 1,
    norm: Any = 1,
    sparsity: float = 0.01,
    window: Any = "hann",
    scale: bool = True,
    pad_mode: str = "constant",
    res_type: str = "polyphase",
) -> gp.GPUArray:
    """librosa.cqt with the same res_type: (..., n_bins, frames) complex."""
    fn = "cqt"
    y = _dsp.signal(fn, y, "y")
    if y.shape[-1] == 0:
        raise AudioValueError(f"{fn}: y must have at least one sample")
    sr = _dsp.number(fn, "sr", sr)
    hop = _dsp.integer(fn, "hop_length", hop_length, 1)
    n_bins = _dsp.integer(fn, "n_bins", n_bins, 1)
    bpo = _dsp.integer(fn, "bins_per_octave", bins_per_octave, 1)
    filter_scale = _dsp.number(fn, "filter_scale", filter_scale)
    sparsity = _dsp.number(fn, "sparsity", sparsity)
    norm = _normalize.check_norm(fn, norm)
    if sr <= 0 or filter_scale <= 0:
        raise AudioValueError(f"{fn}: sr and filter_scale must be positive, got {sr}, {filter_scale}")
    if not 0 <= sparsity < 1:
        raise AudioValueError(f"{fn}: sparsity must lie in [0, 1), got {sparsity}")
    if res_type not in RES_TYPES:
        raise AudioValueError(
            f"{fn}: res_type must be one of {', '.join(RES_TYPES)} (soxr and resampy are not reproduced), got {res_type!r}"
        )
    if not isinstance(window, (str, tuple)):
        raise AudioTypeError(f"{fn}: window must be a name or a (name, parameter) tuple, got {type(window).__name__}")
    get_window(window, 8)  # an unknown name fails here, with its message
    tuning = estimate_tuning(y, sr, bins_per_octave=bpo) if tuning is None else _dsp.number(fn, "tuning", tuning)
    fmin = C1_HZ if fmin is None else _dsp.number(fn, "fmin", fmin)
    freqs = cqt_frequencies(n_bins, fmin * 2.0 ** (tuning / bpo), bpo)  # librosa tunes fmin, then spaces the bins
    alpha = _relative_bandwidth(freqs, bpo)
    cutoff = float(np.max(freqs * (1 + 0.5 * _window_bandwidth(window) / (filter_scale / alpha))))
    if cutoff > sr / 2:
        raise AudioValueError(f"{fn}: the filters reach {cutoff:.1f} Hz, above the Nyquist frequency {sr / 2}; use fewer bins")
    n_octaves = math.ceil(n_bins / bpo)
    n_filters = min(bpo, n_bins)
    cdt = np.dtype(np.complex64 if y.dtype == np.float32 else np.complex128)

    # librosa's early decimation: while the filters stay below a quarter of Nyquist and the hop allows
    twos = (hop & -hop).bit_length() - 1
    early = min(max(0, int(np.ceil(np.log2(sr / 2 / cutoff)) - 1) - 1), max(0, twos - n_octaves + 1))
    my_y, my_sr, my_hop = y, sr, hop
    if early > 0:
        factor = 2**early
        if y.shape[-1] < factor:
            raise AudioValueError(f"{fn}: the signal ({y.shape[-1]} samples) is too short for a {n_octaves}-octave CQT")
        my_y = _decimate(y, factor, res_type)
        if not scale:
            my_y = my_y * math.sqrt(factor)
        my_hop //= factor
        my_sr = sr / factor
    base_sr = my_sr  # librosa's gains and length scaling refer to the rate after the early decimation

    re_parts, im_parts = [], []
    for i in range(n_octaves):
        hi = n_bins - n_filters * i
        lo = max(hi - n_filters, 0)  # a partial lowest octave has fewer filters
        m, n_fft, k = _device_basis(gp.backend(), my_sr, tuple(freqs[lo:hi]), tuple(alpha[lo:hi]), filter_scale, norm, sparsity,
                                    window, cdt, math.sqrt(base_sr / my_sr))  # fmt: skip
        re, im = _response(my_y, n_fft, my_hop, m, k, pad_mode)
        re_parts.insert(0, re)
        im_parts.insert(0, im)
        if my_hop % 2 == 0 and i + 1 < n_octaves:
            my_hop //= 2
            my_sr /= 2.0
            my_y = _decimate(my_y, 2, res_type)
    frames = min(r.shape[-2] for r in re_parts)
    re = gp.concatenate([r[..., :frames, :] for r in re_parts], axis=-1)
    im = gp.concatenate([r[..., :frames, :] for r in im_parts], axis=-1)
    out = (re + 1j * im).astype(cdt)
    if scale:
        lengths = filter_scale / alpha * base_sr / freqs
        out = out * gp.asarray((1.0 / np.sqrt(lengths)).astype(out.real.dtype))
    return gp.ascontiguousarray(out.swapaxes(-1, -2))
