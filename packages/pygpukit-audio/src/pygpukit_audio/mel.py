"""Mel scale, mel filterbanks, decibels and MFCC with librosa's numbers.

- ``hz_to_mel(f, htk=False)`` / ``mel_to_hz(m, htk=False)``: the HTK or
  Slaney scale (numbers and NumPy arrays give NumPy, GPUArrays give GPUArrays);
  ``mel_frequencies(n_mels=128, fmin=0.0, fmax=11025.0, htk=False)`` and
  ``fft_frequencies(sr, n_fft)`` as librosa's (NumPy float64).
- ``mel_filters(sr, n_fft, n_mels=128, fmin=0.0, fmax=None, htk=False, norm="slaney",
  dtype=float32)``: librosa.filters.mel as a GPUArray (n_mels, 1 + n_fft // 2);
  norm "slaney", None or a p-norm order (a number > 0 or inf). librosa returns
  float64 for a numeric norm; here the result always has ``dtype``.
- ``melspectrogram_from_power(S, mel_basis)``: mel_basis @ S for a power
  spectrogram S (..., 1 + n_fft // 2, frames) (a GEMM through gp.matmul).
- ``power_to_db(S, ref=1.0, amin=1e-10, top_db=80.0)``, ``amplitude_to_db(S, ref=1.0,
  amin=1e-5, top_db=80.0)``, ``db_to_power(S_db, ref=1.0)``, ``db_to_amplitude(S_db, ref=1.0)``:
  as librosa; ``ref`` a number, a GPUArray or a callable (np.max / np.amax /
  gp.max reduce on the device; any other callable is called with the GPUArray
  of magnitudes). top_db clips below the maximum of the whole array, as librosa.
- ``mfcc_from_mel(S_db, n_mfcc=20, dct_type=2, norm="ortho", lifter=0)``: the DCT
  along axis -2 of a log-mel spectrogram as librosa.feature.mfcc applies it
  (scipy.fft.dct types 1 to 4, norm None or "ortho", then liftering), as one
  GEMM with the DCT matrix (lifter folded into its rows).

power_to_db's CUDA kernel (kernels/mel.cu) does the whole transform in one pass
in double after one reduction for top_db (log10 is monotonic, so the maximum
of the decibels is the decibels of the maximum); its reference composes gp
ufuncs in S's dtype, as librosa computes.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _dsp
from ._errors import AudioTypeError, AudioValueError

_F_SP = 200.0 / 3  # Slaney: linear below 1 kHz, 200/3 Hz per mel
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0
_THREADS, _MAX_BLOCKS = 256, 4096  # kDbThreads; blocks of the grid-stride loop
_MAX_REFS = (np.max, np.amax, gp.max)


# -- mel scale -----------------------------------------------------------------------


def hz_to_mel(frequencies: Any, htk: bool = False) -> Any:
    """Hz to mels (HTK: 2595 log10(1 + f / 700); Slaney: linear below 1 kHz, logarithmic above)."""
    on_gpu = isinstance(frequencies, gp.GPUArray)
    f = frequencies if on_gpu else np.asarray(frequencies, dtype=np.float64)
    xp: Any = gp if on_gpu else np
    if htk:
        return 2595.0 * xp.log10(1.0 + f / 700.0)
    log_part = _MIN_LOG_MEL + xp.log(xp.maximum(f, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return xp.where(f >= _MIN_LOG_HZ, log_part, f / _F_SP)


def mel_to_hz(mels: Any, htk: bool = False) -> Any:
    """Mels to Hz, the inverse of hz_to_mel."""
    on_gpu = isinstance(mels, gp.GPUArray)
    m = mels if on_gpu else np.asarray(mels, dtype=np.float64)
    xp: Any = gp if on_gpu else np
    if htk:
        return 700.0 * (xp.power(10.0, m / 2595.0) - 1.0)
    log_part = _MIN_LOG_HZ * xp.exp(_LOGSTEP * (xp.maximum(m, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return xp.where(m >= _MIN_LOG_MEL, log_part, _F_SP * m)


def mel_frequencies(n_mels: int = 128, fmin: float = 0.0, fmax: float = 11025.0, htk: bool = False) -> np.ndarray:
    """``n_mels`` frequencies (Hz) evenly spaced on the mel scale from fmin to fmax."""
    n_mels = _dsp.integer("mel_frequencies", "n_mels", n_mels, 0)
    lo = hz_to_mel(_dsp.number("mel_frequencies", "fmin", fmin), htk)
    hi = hz_to_mel(_dsp.number("mel_frequencies", "fmax", fmax), htk)
    return mel_to_hz(np.linspace(lo, hi, n_mels), htk)


def fft_frequencies(sr: float = 22050, n_fft: int = 2048) -> np.ndarray:
    """The 1 + n_fft // 2 bin frequencies of an rfft of n_fft points at rate sr."""
    return np.fft.rfftfreq(n=_dsp.integer("fft_frequencies", "n_fft", n_fft, 1), d=1.0 / _dsp.positive("fft_frequencies", "sr", sr))


# -- filterbank ------------------------------------------------------------------------


def mel_filters(
    sr: float,
    n_fft: int,
    n_mels: int = 128,
    fmin: float = 0.0,
    fmax: float | None = None,
    htk: bool = False,
    norm: Any = "slaney",
    dtype: Any = gp.float32,
) -> gp.GPUArray:
    """librosa.filters.mel: triangular filters (n_mels, 1 + n_fft // 2) on the mel scale."""
    fn = "mel_filters"
    sr = _dsp.positive(fn, "sr", sr)
    n_fft = _dsp.integer(fn, "n_fft", n_fft, 1)
    n_mels = _dsp.integer(fn, "n_mels", n_mels, 1)
    fmin = _dsp.number(fn, "fmin", fmin)
    fmax = sr / 2 if fmax is None else _dsp.number(fn, "fmax", fmax)
    if not 0 <= fmin < fmax:
        raise AudioValueError(f"{fn}: need 0 <= fmin < fmax, got fmin={fmin}, fmax={fmax}")
    dt = np.dtype(dtype)
    if dt not in _dsp.FLOATS:
        raise AudioTypeError(f"{fn}: dtype must be float32 or float64, got {dt}")
    if not (norm is None or norm == "slaney" or (_is_number(norm) and float(norm) > 0)):
        raise AudioValueError(f"{fn}: norm must be 'slaney', None or a number > 0 (a p-norm order, inf included), got {norm!r}")
    return gp.asarray(_mel_weights(sr, n_fft, n_mels, fmin, fmax, bool(htk), norm if norm is None or norm == "slaney" else float(norm), dt))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@functools.lru_cache(maxsize=64)
def _mel_weights(sr: float, n_fft: int, n_mels: int, fmin: float, fmax: float, htk: bool, norm: Any, dt: np.dtype) -> np.ndarray:
    """librosa's steps in its order (rows rounded to dt, then the Slaney scale in dt)."""
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=dt)
    mel_f = mel_frequencies(n_mels + 2, fmin, fmax, htk)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, np.fft.rfftfreq(n=n_fft, d=1.0 / sr))
    for i in range(n_mels):
        weights[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    if norm == "slaney":
        weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, np.newaxis]
    elif norm is not None:
        mag = np.abs(weights).astype(np.float64)
        length = np.max(mag, axis=-1, keepdims=True) if np.isinf(norm) else np.sum(mag**norm, axis=-1, keepdims=True) ** (1.0 / norm)
        length[length < np.finfo(dt).tiny] = 1.0  # an empty filter stays zero
        weights = (weights / length).astype(dt)
    return weights


def melspectrogram_from_power(S: Any, mel_basis: Any) -> gp.GPUArray:
    """mel_basis (n_mels, n_freq) @ S (..., n_freq, frames): a mel power spectrogram."""
    fn = "melspectrogram_from_power"
    S = _dsp.signal(fn, S, "S", finite=False)
    if isinstance(mel_basis, np.ndarray):
        mel_basis = gp.asarray(mel_basis)
    if not isinstance(mel_basis, gp.GPUArray) or mel_basis.ndim != 2:
        raise AudioTypeError(f"{fn}: mel_basis must be a 2-d GPUArray or NumPy array (n_mels, n_freq), got {type(mel_basis).__name__}")
    if S.ndim < 2 or S.shape[-2] != mel_basis.shape[1]:
        raise AudioValueError(f"{fn}: S must be (..., n_freq={mel_basis.shape[1]}, frames) for mel_basis {mel_basis.shape}, got {S.shape}")
    return gp.matmul(mel_basis.astype(S.dtype), S)


# -- decibels --------------------------------------------------------------------------


def _magnitudes(fn: str, S: Any) -> gp.GPUArray:
    if isinstance(S, np.ndarray):
        S = gp.asarray(S)
    if not isinstance(S, gp.GPUArray):
        raise AudioTypeError(f"{fn}: S must be a GPUArray or a NumPy array, got {type(S).__name__}")
    if S.dtype.kind == "c":
        return gp.abs(S)
    if S.dtype not in _dsp.FLOATS:
        raise AudioTypeError(f"{fn}: S must be float32, float64 or complex, got {S.dtype}")
    return S


def _ref_value(fn: str, ref: Any, mag: gp.GPUArray) -> tuple[gp.GPUArray | None, float]:
    """(the reference on the device, or None; the reference as a number when it is one)."""
    if callable(ref):
        value = gp.max(mag) if any(ref is r for r in _MAX_REFS) else ref(mag)
    else:
        value = ref
    if isinstance(value, np.ndarray):
        value = gp.asarray(value)
    if isinstance(value, gp.GPUArray):
        return gp.abs(value).astype(mag.dtype), 1.0
    if not _is_number(value):
        raise AudioTypeError(f"{fn}: ref must be a number, an array or a callable giving one, got {type(value).__name__}")
    return None, abs(float(value))


def _checks(fn: str, amin: Any, top_db: Any) -> tuple[float, float | None]:
    amin = _dsp.number(fn, "amin", amin)
    if amin <= 0:
        raise AudioValueError(f"{fn}: amin must be strictly positive, got {amin}")
    if top_db is not None:
        top_db = _dsp.number(fn, "top_db", top_db)
        if top_db < 0:
            raise AudioValueError(f"{fn}: top_db must be non-negative, got {top_db}")
    return amin, top_db


def power_to_db(S: Any, ref: Any = 1.0, amin: float = 1e-10, top_db: float | None = 80.0) -> gp.GPUArray:
    """10 log10(S / ref), S floored at amin, clipped at top_db below the maximum (librosa)."""
    fn = "power_to_db"
    mag = _magnitudes(fn, S)
    amin, top_db = _checks(fn, amin, top_db)
    ref_dev, ref_host = _ref_value(fn, ref, mag)
    return ext.op("power_to_db_core")(mag, ref_dev, ref_host, amin, top_db)


def amplitude_to_db(S: Any, ref: Any = 1.0, amin: float = 1e-5, top_db: float | None = 80.0) -> gp.GPUArray:
    """20 log10(|S| / ref), |S| floored at amin, clipped at top_db below the maximum (librosa)."""
    fn = "amplitude_to_db"
    mag = gp.abs(_magnitudes(fn, S))
    amin, top_db = _checks(fn, amin, top_db)
    ref_dev, ref_host = _ref_value(fn, ref, mag)
    power = mag * mag
    ref_dev = None if ref_dev is None else ref_dev * ref_dev
    return ext.op("power_to_db_core")(power, ref_dev, ref_host * ref_host, amin * amin, top_db)


def db_to_power(S_db: Any, ref: float = 1.0) -> gp.GPUArray:
    """ref * 10^(S_db / 10), the inverse of power_to_db (without its clipping)."""
    S = _dsp.signal("db_to_power", S_db, "S_db", finite=False)
    return _dsp.number("db_to_power", "ref", ref) * gp.power(10.0, 0.1 * S)


def db_to_amplitude(S_db: Any, ref: float = 1.0) -> gp.GPUArray:
    """ref * 10^(S_db / 20), the inverse of amplitude_to_db (without its clipping)."""
    r = _dsp.number("db_to_amplitude", "ref", ref)
    return gp.sqrt(db_to_power(S_db, r * r))


def reference_power_to_db(S: gp.GPUArray, ref_dev: gp.GPUArray | None, ref_host: float, amin: float, top_db: float | None) -> gp.GPUArray:
    log_spec = 10.0 * gp.log10(gp.maximum(amin, S))
    if ref_dev is None:
        log_spec = log_spec - 10.0 * math.log10(max(amin, ref_host))
    else:
        log_spec = log_spec - 10.0 * gp.log10(gp.maximum(amin, ref_dev))
    if top_db is not None and log_spec.size:
        log_spec = gp.maximum(log_spec, gp.max(log_spec) - top_db)
    return log_spec.astype(S.dtype)


@functools.cache
def db_kernel(ct: str) -> Any:
    return _dsp.kernel(
        "mel",
        f"pgk_audio::power_to_db<{ct}>",
        "const void* s, long long n, const void* smax, const void* ref, double ref_db_host, double amin, double top_db, int has_top, void* out",
    )


def kernel_power_to_db(S: gp.GPUArray, ref_dev: gp.GPUArray | None, ref_host: float, amin: float, top_db: float | None) -> gp.GPUArray:
    s = gp.ascontiguousarray(S)
    out = ext.empty(S.shape, S.dtype)
    smax = gp.max(s) if top_db is not None else None
    ref = None if ref_dev is None else gp.ascontiguousarray(ref_dev.reshape(1))
    blocks = max(1, min(_MAX_BLOCKS, -(-s.size // _THREADS)))
    ref_db = 10.0 * math.log10(max(amin, ref_host))
    db_kernel(_dsp.CTYPES[S.dtype])(blocks, _THREADS, s, s.size, smax, ref, ref_db, amin, 0.0 if top_db is None else top_db,
                                    int(top_db is not None), out)  # fmt: skip
    return out


def _db_kernel_takes(S: Any, ref_dev: Any, *rest: Any) -> bool:
    return S.size > 0 and (ref_dev is None or ref_dev.size == 1)


# -- MFCC ------------------------------------------------------------------------------


def dct_matrix(n_out: int, n: int, dct_type: int, norm: str | None) -> np.ndarray:
    """The first n_out rows of scipy.fft.dct's matrix of size n (float64)."""
    k = np.arange(n_out)[:, None]
    j = np.arange(n)[None, :]
    if dct_type == 1:
        if n < 2:
            raise AudioValueError("mfcc_from_mel: DCT type 1 needs at least 2 mel bands")
        m = 2.0 * np.cos(np.pi * k * j / (n - 1))
        m[:, 0] /= 2.0
        m[:, -1] /= 2.0
        if norm == "ortho":
            m[:, [0, -1]] *= math.sqrt(2.0)
            m *= math.sqrt(1.0 / (2.0 * (n - 1)))
            m[k[:, 0] == 0] /= math.sqrt(2.0)
            m[k[:, 0] == n - 1] /= math.sqrt(2.0)
        return m
    if dct_type == 2:
        m = 2.0 * np.cos(np.pi * k * (2 * j + 1) / (2.0 * n))
        if norm == "ortho":
            m *= math.sqrt(1.0 / (2.0 * n))
            m[0] /= math.sqrt(2.0)
        return m
    if dct_type == 3:
        m = 2.0 * np.cos(np.pi * j * (2 * k + 1) / (2.0 * n))
        m[:, 0] = 1.0
        if norm == "ortho":
            m *= math.sqrt(1.0 / (2.0 * n))
            m[:, 0] *= math.sqrt(2.0)
        return m
    m = 2.0 * np.cos(np.pi * (2 * k + 1) * (2 * j + 1) / (4.0 * n))
    return m * math.sqrt(1.0 / (2.0 * n)) if norm == "ortho" else m


def mfcc_from_mel(S_db: Any, n_mfcc: int = 20, dct_type: int = 2, norm: str | None = "ortho", lifter: float = 0) -> gp.GPUArray:
    """MFCCs (..., n_mfcc, frames) of a log-mel spectrogram (..., n_mels, frames), as
    librosa.feature.mfcc(S=S_db, ...)."""
    fn = "mfcc_from_mel"
    S = _dsp.signal(fn, S_db, "S_db", finite=False)
    if S.ndim < 2:
        raise AudioValueError(f"{fn}: S_db must be (..., n_mels, frames), got shape {S.shape}")
    n_mels = S.shape[-2]
    n_mfcc = _dsp.integer(fn, "n_mfcc", n_mfcc, 1, max(n_mels, 1))
    if dct_type not in (1, 2, 3, 4) or isinstance(dct_type, bool):
        raise AudioValueError(f"{fn}: dct_type must be 1, 2, 3 or 4, got {dct_type!r}")
    if norm not in (None, "ortho"):
        raise AudioValueError(f"{fn}: norm must be None or 'ortho', got {norm!r}")
    lifter = _dsp.number(fn, "lifter", lifter)
    if lifter < 0:
        raise AudioValueError(f"{fn}: lifter={lifter} must be a non-negative number")
    m = dct_matrix(n_mfcc, n_mels, dct_type, norm)
    if lifter > 0:
        m *= (1 + (lifter / 2) * np.sin(np.pi * np.arange(1, 1 + n_mfcc) / lifter))[:, None]
    return gp.matmul(gp.asarray(m.astype(S.dtype)), S)


def register(registry: Any) -> None:
    ext.register_family(
        registry, "power_to_db_core", nkey=1, doc="power_to_db of magnitudes with a resolved reference (the layout power_to_db passes)",
        reference=reference_power_to_db, cuda=kernel_power_to_db, dtypes=["float32", "float64"], predicate=_db_kernel_takes,
    )  # fmt: skip
