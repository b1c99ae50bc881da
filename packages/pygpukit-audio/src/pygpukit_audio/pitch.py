"""Fundamental frequency estimation: YIN and probabilistic YIN with librosa's numbers.

- ``yin(y, fmin, fmax, sr=22050, frame_length=2048, hop_length=None,
  trough_threshold=0.1, center=True, pad_mode="constant")``: librosa.yin,
  f0 in Hz (..., n_frames) in y's dtype.
- ``pyin(y, fmin, fmax, sr=22050, frame_length=2048, hop_length=None, n_thresholds=100,
  beta_parameters=(2, 18), boltzmann_parameter=2, resolution=0.1, max_transition_rate=35.92,
  switch_prob=0.01, no_trough_prob=0.01, fill_na=nan, center=True, pad_mode="constant")``:
  librosa.pyin, (f0, voiced_flag, voiced_prob), each (..., n_frames).

Both frame the (centred, padded) signal and compute the cumulative mean
normalized difference function of every frame at once on the device, as
librosa: the autocorrelation through a real FFT of 2^ceil(log2(2 L - 1))
points, the energies by a cumulative sum, d(1) = 2 (r(0) - r(1)) and
d(k) = 2 (r(0) - r(k)) - sum_{m<k} y(m)^2 for k >= 2, each divided by the
running mean of d(1..k). YIN's trough search and parabolic refinement are
core ops too. pYIN's trough probabilities (a Boltzmann prior over the troughs
below each of the beta-distributed thresholds) are computed on the host from
the CMNDF, vectorized over frames (they are data-dependent gathers over a
few thousand troughs); the Viterbi decoding over 2 n_pitch_bins states
(voiced and unvoiced pitch bins, a dense transition matrix as librosa's,
~1200 states by default) is the op "viterbi": a CUDA kernel with one block per
signal, or NumPy on the CPU backend.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _dsp
from . import fft as gfft
from ._errors import AudioTypeError, AudioValueError
from .stft import PAD_MODES, pad_signal

_VITERBI_THREADS, _VITERBI_MAX_STATES = 512, 3072  # kViterbiThreads, kViterbiMaxStates
_PRIOR_CHUNK = 1 << 22  # (trough, threshold) pairs evaluated at once on the host


# -- public API ----------------------------------------------------------------------


def yin(
    y: Any,
    fmin: float,
    fmax: float,
    sr: float = 22050,
    frame_length: int = 2048,
    hop_length: int | None = None,
    trough_threshold: float = 0.1,
    center: bool = True,
    pad_mode: str = "constant",
) -> gp.GPUArray:
    """librosa.yin: the fundamental frequency (Hz) of every frame, (..., n_frames)."""
    fn = "yin"
    y, sr, min_period, max_period, hop = _setup(fn, y, fmin, fmax, sr, frame_length, hop_length, center, pad_mode)
    threshold = _dsp.number(fn, "trough_threshold", trough_threshold)
    cmndf = cumulative_mean_normalized_difference(y, frame_length, hop, min_period, max_period)
    shifts = parabolic_shifts(cmndf)
    below = trough_mask(cmndf) & (cmndf < threshold)
    first = gp.argmax(below.astype(cmndf.dtype), axis=-1, keepdims=True)  # the first trough below it
    period = gp.where(gp.any(below, axis=-1, keepdims=True), first, gp.argmin(cmndf, axis=-1, keepdims=True))
    refined = period.astype(cmndf.dtype) + min_period + gp.take_along_axis(shifts, period, axis=-1)
    return (sr / refined)[..., 0]


def pyin(
    y: Any,
    fmin: float,
    fmax: float,
    sr: float = 22050,
    frame_length: int = 2048,
    hop_length: int | None = None,
    n_thresholds: int = 100,
    beta_parameters: tuple[float, float] = (2, 18),
    boltzmann_parameter: float = 2,
    resolution: float = 0.1,
    max_transition_rate: float = 35.92,
    switch_prob: float = 0.01,
    no_trough_prob: float = 0.01,
    fill_na: float | None = np.nan,
    center: bool = True,
    pad_mode: str = "constant",
) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
    """librosa.pyin: (f0, voiced_flag, voiced_prob), each (..., n_frames)."""
    fn = "pyin"
    y, sr, min_period, max_period, hop = _setup(fn, y, fmin, fmax, sr, frame_length, hop_length, center, pad_mode)
    fmin, fmax = float(fmin), float(fmax)
    n_thresholds = _dsp.integer(fn, "n_thresholds", n_thresholds, 1)
    if not isinstance(beta_parameters, (tuple, list)) or len(beta_parameters) != 2:
        raise AudioValueError(f"{fn}: beta_parameters must be a pair (a, b), got {beta_parameters!r}")
    a, b = (_dsp.number(fn, "beta_parameters", v) for v in beta_parameters)
    lam = _dsp.number(fn, "boltzmann_parameter", boltzmann_parameter)
    resolution = _dsp.number(fn, "resolution", resolution)
    rate = _dsp.number(fn, "max_transition_rate", max_transition_rate)
    switch = _dsp.number(fn, "switch_prob", switch_prob)
    no_trough = _dsp.number(fn, "no_trough_prob", no_trough_prob)
    if a <= 0 or b <= 0 or lam <= 0 or not 0 < resolution < 1 or rate < 0:
        raise AudioValueError(
            f"{fn}: beta_parameters and boltzmann_parameter must be positive, resolution in (0, 1) and "
            f"max_transition_rate >= 0; got {beta_parameters!r}, {lam}, {resolution}, {rate}"
        )
    if not 0 <= switch <= 1 or not 0 <= no_trough <= 1:
        raise AudioValueError(f"{fn}: switch_prob and no_trough_prob must lie in [0, 1], got {switch}, {no_trough}")
    fill = fill_na if fill_na is None or _is_nan(fill_na) else _dsp.number(fn, "fill_na", fill_na)

    cmndf = cumulative_mean_normalized_difference(y, frame_length, hop, min_period, max_period)
    shifts = parabolic_shifts(cmndf)
    lead, n_frames = cmndf.shape[:-2], cmndf.shape[-2]
    yin_h = cmndf.to_numpy().astype(np.float64).reshape(-1, n_frames, cmndf.shape[-1])
    shift_h = shifts.to_numpy().astype(np.float64).reshape(yin_h.shape)
    thresholds = np.linspace(0, 1, n_thresholds + 1)
    beta_probs = np.diff(beta_cdf(thresholds, a, b))
    per_semitone = int(np.ceil(1.0 / resolution))
    n_bins = int(np.floor(12 * per_semitone * np.log2(fmax / fmin))) + 1
    obs = np.empty((yin_h.shape[0], n_frames, 2 * n_bins))
    voiced_prob = np.empty((yin_h.shape[0], n_frames))
    for s in range(yin_h.shape[0]):
        probs = trough_probabilities(yin_h[s], thresholds, beta_probs, lam, no_trough)
        obs[s], voiced_prob[s] = observation_probabilities(probs, shift_h[s], sr, min_period, fmin, n_bins, per_semitone)
    width = round(rate * 12 * hop / sr) * per_semitone + 1
    log_trans = _log_transition(n_bins, width, switch)
    tiny = np.finfo(np.float64).tiny
    log_init = np.log(np.full(2 * n_bins, 1.0 / (2 * n_bins)) + tiny)
    states = ext.op("viterbi")(gp.asarray(np.log(obs + tiny)), log_trans, gp.asarray(log_init)).to_numpy()
    freqs = fmin * 2 ** (np.arange(n_bins) / (12 * per_semitone))
    f0 = freqs[states % n_bins]
    voiced = states < n_bins
    if fill is not None:
        f0[~voiced] = fill
    dt = y.dtype
    shape = (*lead, n_frames)
    return (
        gp.asarray(f0.reshape(shape).astype(dt)),
        gp.asarray(voiced.reshape(shape)),
        gp.asarray(voiced_prob.reshape(shape).astype(dt)),
    )


# -- shared steps ----------------------------------------------------------------------


def _is_nan(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and math.isnan(v)


def _setup(
    fn: str, y: Any, fmin: Any, fmax: Any, sr: Any, frame_length: Any, hop_length: Any, center: Any, pad_mode: Any
) -> tuple[gp.GPUArray, float, int, int, int]:
    """Checked arguments as librosa's __check_yin_params; y padded when centred.
    Returns (y, sr, min_period, max_period, hop)."""
    y = _dsp.signal(fn, y, "y")
    sr = _dsp.number(fn, "sr", sr)
    fmin, fmax = _dsp.number(fn, "fmin", fmin), _dsp.number(fn, "fmax", fmax)
    frame_length = _dsp.integer(fn, "frame_length", frame_length, 3)
    hop = frame_length // 4 if hop_length is None else _dsp.integer(fn, "hop_length", hop_length, 1)
    hop = max(hop, 1)
    if sr <= 0:
        raise AudioValueError(f"{fn}: sr must be positive, got {sr}")
    if fmax > sr / 2:
        raise AudioValueError(f"{fn}: fmax={fmax:.3f} cannot exceed the Nyquist frequency {sr / 2}")
    if fmin >= fmax:
        raise AudioValueError(f"{fn}: fmin={fmin:.3f} must be less than fmax={fmax:.3f}")
    if fmin <= 0:
        raise AudioValueError(f"{fn}: fmin={fmin:.3f} must be strictly positive")
    if sr / fmin >= frame_length - 1:
        raise AudioValueError(
            f"{fn}: fmin={fmin:.3f} is too small for frame_length={frame_length} and sr={sr}: "
            f"raise fmin to {sr / (frame_length - 1):.3f} or frame_length to {int(np.ceil(sr / fmin) + 1)}"
        )
    if pad_mode not in PAD_MODES:
        raise AudioValueError(f"{fn}: pad_mode must be one of {', '.join(PAD_MODES)}, got {pad_mode!r}")
    if center:
        y = pad_signal(y, frame_length // 2, frame_length // 2, pad_mode)
    if y.shape[-1] < frame_length:
        raise AudioValueError(
            f"{fn}: the signal ({y.shape[-1]} samples{' after padding' if center else ''}) is shorter than frame_length={frame_length}"
        )
    return y, sr, int(np.floor(sr / fmax)), min(int(np.ceil(sr / fmin)), frame_length - 1), hop


def cumulative_mean_normalized_difference(y: gp.GPUArray, frame_length: int, hop: int, min_period: int, max_period: int) -> gp.GPUArray:
    """The CMNDF (..., n_frames, max_period - min_period + 1) of the frames of y (already padded)."""
    n_frames = 1 + (y.shape[-1] - frame_length) // hop
    idx = (np.arange(n_frames, dtype=np.int64)[:, None] * hop + np.arange(frame_length)).reshape(-1)
    frames = gp.take(y, gp.from_numpy(idx), axis=-1).reshape(*y.shape[:-1], n_frames, frame_length)
    n_fft = 1 << (2 * frame_length - 2).bit_length()
    spec = gfft.rfft(frames, n=n_fft, axis=-1)
    acf = gfft.irfft(spec.real * spec.real + spec.imag * spec.imag, n=n_fft, axis=-1)[..., : max_period + 1]
    energy = gp.cumsum(frames * frames, axis=-1)[..., :max_period]
    before = gp.concatenate([gp.zeros((*energy.shape[:-1], 1), y.dtype), energy[..., 1:]], axis=-1)
    diff = 2 * (acf[..., :1] - acf[..., 1:]) - before  # lags 1 .. max_period
    lags = gp.asarray(np.arange(1, max_period + 1, dtype=y.dtype))
    mean = gp.cumsum(diff, axis=-1) / lags
    den = mean[..., min_period - 1 :]
    return gp.ascontiguousarray(diff[..., min_period - 1 :] / (den + np.finfo(y.dtype).tiny))


def parabolic_shifts(x: gp.GPUArray) -> gp.GPUArray:
    """librosa's _parabolic_interpolation along the last axis: -b / a at interior points, 0 where
    |b| >= |a| (the optimum is more than a bin away) and at both ends."""
    if x.shape[-1] < 3:
        return gp.zeros(x.shape, x.dtype)
    left, mid, right = x[..., :-2], x[..., 1:-1], x[..., 2:]
    a = right + left - 2 * mid
    b = (right - left) / 2
    keep = gp.abs(b) < gp.abs(a)
    inner = gp.where(keep, -b / gp.where(keep, a, 1.0).astype(x.dtype), 0.0).astype(x.dtype)
    edge = gp.zeros((*x.shape[:-1], 1), x.dtype)
    return gp.concatenate([edge, inner, edge], axis=-1)


def trough_mask(x: gp.GPUArray) -> gp.GPUArray:
    """librosa's localmin along the last axis (edges padded by repetition), with the first
    element a trough when it is below the second."""
    if x.shape[-1] < 2:
        return gp.zeros(x.shape, gp.bool_)
    first = x[..., :1] < x[..., 1:2]
    inner = (x[..., 1:-1] < x[..., :-2]) & (x[..., 1:-1] <= x[..., 2:])
    last = x[..., -1:] < x[..., -2:-1]
    return gp.concatenate([first, inner, last], axis=-1)


def beta_cdf(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """The regularized incomplete beta function I_x(a, b) (scipy.stats.beta.cdf) by its
    continued fraction (modified Lentz), on the side where it converges fast."""
    out = np.empty(len(x))
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    for i, v in enumerate(np.asarray(x, np.float64)):
        if v <= 0 or v >= 1:
            out[i] = 0.0 if v <= 0 else 1.0
            continue
        if v < (a + 1) / (a + b + 2):
            out[i] = math.exp(a * math.log(v) + b * math.log1p(-v) - lbeta) * _beta_fraction(v, a, b) / a
        else:
            out[i] = 1.0 - math.exp(b * math.log1p(-v) + a * math.log(v) - lbeta) * _beta_fraction(1 - v, b, a) / b
    return out


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)), -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def trough_probabilities(yin: np.ndarray, thresholds: np.ndarray, beta_probs: np.ndarray, lam: float, no_trough: float) -> np.ndarray:
    """librosa's __pyin_helper up to the probabilities (n_frames, n_lags) of every trough being the period."""
    n_frames, n_lags = yin.shape
    is_trough = np.zeros(yin.shape, bool)
    if n_lags >= 2:
        is_trough[:, 0] = yin[:, 0] < yin[:, 1]
        is_trough[:, 1:-1] = (yin[:, 1:-1] < yin[:, :-2]) & (yin[:, 1:-1] <= yin[:, 2:])
        is_trough[:, -1] = yin[:, -1] < yin[:, -2]
    probs = np.zeros(yin.shape)
    counts = is_trough.sum(axis=1)
    width = int(counts.max()) if n_frames else 0
    if width == 0:
        return probs
    # troughs of each frame in lag order, padded to `width` with +inf heights (below no threshold)
    order = np.argsort(~is_trough, axis=1, kind="stable")[:, :width]
    valid = np.arange(width)[None, :] < counts[:, None]
    heights = np.where(valid, np.take_along_axis(yin, order, axis=1), np.inf)
    step = max(1, _PRIOR_CHUNK // (width * len(beta_probs)))
    no_trough_mass = np.array([np.sum(beta_probs[:k]) for k in range(len(beta_probs) + 1)])
    for s in range(0, n_frames, step):
        h = heights[s : s + step]
        below = h[:, :, None] < thresholds[None, None, 1:]  # (frames, troughs, thresholds)
        position = np.cumsum(below, axis=1) - 1
        n_below = below.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):  # scipy.stats.boltzmann.pmf's order of operations
            prior = (1 - np.exp(-lam)) / (1 - np.exp(-lam * n_below)) * np.exp(-lam * position)
        prior = np.where(below, prior, 0.0)
        p = prior @ beta_probs
        best = np.argmin(h, axis=1)
        n_above = np.count_nonzero(~below[np.arange(h.shape[0]), best], axis=1)
        p[np.arange(h.shape[0]), best] += no_trough * no_trough_mass[n_above]
        rows = np.arange(s, s + h.shape[0])[:, None]
        ok = valid[s : s + step]
        probs[np.broadcast_to(rows, ok.shape)[ok], order[s : s + step][ok]] = p[ok]
    return probs


def observation_probabilities(
    probs: np.ndarray, shifts: np.ndarray, sr: float, min_period: int, fmin: float, n_bins: int, per_semitone: int
) -> tuple[np.ndarray, np.ndarray]:
    """librosa's pYIN observations (n_frames, 2 n_bins) and voiced probabilities (n_frames,)."""
    n_frames = probs.shape[0]
    lag, frame = np.nonzero(probs.T)  # librosa's order: by lag, then frame (later writes win)
    period = min_period + lag + shifts[frame, lag]
    bins = 12 * per_semitone * np.log2(sr / period / fmin)
    bins = np.clip(np.round(bins), 0, n_bins).astype(int)
    obs = np.zeros((n_frames, 2 * n_bins))
    obs[frame, bins] = probs[frame, lag]
    voiced = np.clip(np.sum(obs[:, :n_bins], axis=1), 0, 1)
    obs[:, n_bins:] = ((1 - voiced) / n_bins)[:, None]
    return obs, voiced


def transition_local_triangle(n_states: int, width: int) -> np.ndarray:
    """librosa.sequence.transition_local(n_states, width, window="triangle", wrap=False)."""
    m = np.arange(1, (width + 1) // 2 + 1)
    if width % 2:
        half = 2.0 * m / (width + 1.0)
        tri = np.concatenate([half, half[-2::-1]])
    else:
        half = (2.0 * m - 1.0) / width
        tri = np.concatenate([half, half[::-1]])
    # librosa centres the window in n_states (pad_center), rolls row i by n_states // 2 + i + 1
    # (circularly) and keeps columns i - width // 2 .. i + width // 2. The same index formula
    # extends it to width > n_states (the window's centre; librosa's pad_center refuses those).
    d = np.arange(n_states)[None, :] - np.arange(n_states)[:, None]
    idx = np.mod(d + (-(-n_states // 2)) - 1, n_states) - (n_states - width) // 2
    keep = (idx >= 0) & (idx < width) & (d <= width // 2) & (d >= -(width // 2))
    trans = np.where(keep, tri[np.clip(idx, 0, width - 1)], 0.0)
    return trans / trans.sum(axis=1, keepdims=True)


@functools.lru_cache(maxsize=8)
def _log_transition(n_bins: int, width: int, switch: float) -> gp.GPUArray:
    """log(transition + tiny) of pYIN's HMM: kron([[1 - p, p], [p, 1 - p]], local), uploaded once."""
    local = transition_local_triangle(n_bins, width)
    loop = np.array([[1 - switch, switch], [switch, 1 - switch]])
    return gp.asarray(np.log(np.kron(loop, local) + np.finfo(np.float64).tiny))


# -- op "viterbi": most likely state paths of (sequences, steps, states) log probabilities --


def _check_viterbi(log_prob: Any, log_trans: Any, log_init: Any) -> None:
    if not all(isinstance(a, gp.GPUArray) and a.dtype == np.float64 for a in (log_prob, log_trans, log_init)):
        raise AudioTypeError("viterbi op: log_prob, log_trans and log_init must be float64 GPUArrays")
    s = log_prob.shape[-1]
    if log_prob.ndim != 3 or log_trans.shape != (s, s) or log_init.shape != (s,) or log_prob.shape[1] < 1:
        raise AudioValueError(
            f"viterbi op: needs (sequences, steps >= 1, S), (S, S), (S,); got {log_prob.shape}, {log_trans.shape}, {log_init.shape}"
        )


def reference_viterbi(log_prob: gp.GPUArray, log_trans: gp.GPUArray, log_init: gp.GPUArray) -> gp.GPUArray:
    _check_viterbi(log_prob, log_trans, log_init)
    lp, lt = log_prob.to_numpy(), log_trans.to_numpy()
    n_seq, n_steps, n_states = lp.shape
    states = np.empty((n_seq, n_steps), np.int32)
    for q in range(n_seq):
        value = lp[q, 0] + log_init.to_numpy()
        ptr = np.empty((n_steps, n_states), np.int32)
        for t in range(1, n_steps):
            scores = value[:, None] + lt  # (from i, to j)
            ptr[t] = np.argmax(scores, axis=0)
            value = lp[q, t] + scores[ptr[t], np.arange(n_states)]
        s = int(np.argmax(value))
        states[q, -1] = s
        for t in range(n_steps - 1, 0, -1):
            s = int(ptr[t, s])
            states[q, t - 1] = s
    return gp.asarray(states)


@functools.cache
def viterbi_kernel() -> Any:
    return _dsp.kernel(
        "pitch",
        "pgk_audio::viterbi_decode",
        "const void* log_prob, const void* log_trans, const void* log_init, int n_steps, int n_states, void* ptr, void* states",
    )


def kernel_viterbi(log_prob: gp.GPUArray, log_trans: gp.GPUArray, log_init: gp.GPUArray) -> gp.GPUArray:
    _check_viterbi(log_prob, log_trans, log_init)
    n_seq, n_steps, n_states = log_prob.shape
    log_prob, log_trans = gp.ascontiguousarray(log_prob), gp.ascontiguousarray(log_trans)
    ptr = ext.empty((n_seq, n_steps, n_states), gp.int32)
    states = ext.empty((n_seq, n_steps), gp.int32)
    viterbi_kernel()(n_seq, _VITERBI_THREADS, log_prob, log_trans, log_init, n_steps, n_states, ptr, states, shared_mem=16 * n_states)
    return states


def _viterbi_takes(log_prob: Any, log_trans: Any, log_init: Any) -> bool:
    """Both value rows fit shared memory; sequences on grid x; int offsets of ptr per sequence fit."""
    n_seq, n_steps, n_states = log_prob.shape
    return 0 < n_seq < 1 << 31 and n_states <= _VITERBI_MAX_STATES and n_steps * n_states < 1 << 31


def register(registry: Any) -> None:
    ext.register_family(
        registry, "viterbi", nkey=1, doc="Viterbi paths (sequences, steps) of float64 log probabilities (sequences, steps, states)",
        reference=reference_viterbi, cuda=kernel_viterbi, dtypes=["float64"], predicate=_viterbi_takes,
    )  # fmt: skip
