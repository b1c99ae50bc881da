"""Polyphase resampling with scipy.signal.resample_poly's numbers.

- ``resample_poly(x, up, down, axis=-1, window=("kaiser", 5.0), padtype="constant", cval=None)``:
  the same filter (firwin of 2 * 10 * max(up, down) + 1 taps, cutoff
  1 / max(up, down), the window by name or as an array, rounded to x's dtype
  and scaled by up), the same gcd reduction, output length ceil(n * up / down)
  and alignment; padtype "constant" (cval, default 0), "mean", "median",
  "minimum" or "maximum" (that background subtracted and added back).
  Windows by name: ("kaiser", beta), "hann", "hamming", "blackman", "boxcar".
  Note: the default axis is -1 (scipy's is 0).
- ``resample(x, orig_sr, target_sr, axis=-1)``: resample_poly with up / down =
  target_sr / orig_sr reduced (librosa's res_type="polyphase"), for the common
  rates 8k, 16k, 22.05k, 44.1k, 48k ... and any other pair of integer rates.

The CUDA kernel (kernels/resample.cu) computes only the kept outputs, each a
dot product of ceil(len(h) / up) taps of one phase of the filter; accumulation
in x's dtype, as scipy's. The reference gathers the same taps in NumPy float64.
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

PADTYPES = ("constant", "mean", "median", "minimum", "maximum")
_THREADS = 256  # kResampleThreads


# -- public API ----------------------------------------------------------------------


def resample_poly(
    x: Any, up: int, down: int, axis: int = -1, window: Any = ("kaiser", 5.0), padtype: str = "constant", cval: float | None = None
) -> gp.GPUArray:
    """Resample ``x`` along ``axis`` by up / down with a polyphase FIR filter, as
    ``scipy.signal.resample_poly`` (default axis -1)."""
    fn = "resample_poly"
    x = _dsp.signal(fn, x)
    up = _dsp.integer(fn, "up", up, 1)
    down = _dsp.integer(fn, "down", down, 1)
    axis = _dsp.axis_of(fn, axis, x.ndim)
    if padtype not in PADTYPES:
        raise AudioValueError(f"{fn}: padtype must be one of {', '.join(PADTYPES)}, got {padtype!r}")
    if cval is not None and padtype != "constant":
        raise AudioValueError(f"{fn}: cval has no effect when padtype is {padtype!r}")
    fill = 0.0 if cval is None else _dsp.number(fn, "cval", cval)
    g = math.gcd(up, down)
    up, down = up // g, down // g
    if up == down == 1:
        return x.copy()
    h, half = design_filter(fn, up, down, window, x.dtype)
    n = x.shape[axis]
    nout = -(-n * up // down)
    rows, moved = _dsp.to_rows(x, axis)
    background = None
    if padtype != "constant" and rows.size:
        background = _background(rows, padtype)
        rows = rows - background
    y = ext.op("resample_poly_rows")(rows, polyphase_table(h, up), up, down, half, nout, fill)
    if background is not None:
        y = y + background
    return _dsp.from_rows(y, moved, axis)


def resample(x: Any, orig_sr: Any, target_sr: Any, axis: int = -1) -> gp.GPUArray:
    """Resample from ``orig_sr`` to ``target_sr`` (integer rates) with resample_poly."""
    orig = rate("resample", "orig_sr", orig_sr)
    target = rate("resample", "target_sr", target_sr)
    g = math.gcd(orig, target)
    return resample_poly(x, target // g, orig // g, axis=axis)


# -- the filter --------------------------------------------------------------------


def rate(fn: str, name: str, v: Any) -> int:
    """A sampling rate: a positive integer (an integral float is taken)."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        v = int(v)
    return _dsp.integer(fn, name, v, 1)


def window_values(fn: str, window: Any, m: int) -> np.ndarray:
    """The symmetric window of ``m`` points by name (scipy's get_window(..., fftbins=False))."""
    name, args = (window[0], window[1:]) if isinstance(window, tuple) else (window, ())
    if not isinstance(name, str):
        raise AudioTypeError(f"{fn}: window must be a name, a (name, parameter) tuple or an array, got {window!r}")
    if name == "kaiser":
        if len(args) != 1:
            raise AudioValueError(f"{fn}: the kaiser window needs its beta: ('kaiser', beta), got {window!r}")
        return np.kaiser(m, _dsp.number(fn, "kaiser beta", args[0]))
    makers = {"hann": np.hanning, "hamming": np.hamming, "blackman": np.blackman, "boxcar": np.ones}
    if name not in makers or args:
        raise AudioValueError(f"{fn}: window must be ('kaiser', beta), 'hann', 'hamming', 'blackman', 'boxcar' or an array, got {window!r}")
    return makers[name](m)


def firwin_lowpass(numtaps: int, cutoff: float, window: Any, fn: str = "firwin") -> np.ndarray:
    """scipy.signal.firwin(numtaps, cutoff, window=window): a windowed sinc scaled to
    unit gain at DC; cutoff relative to Nyquist."""
    m = np.arange(numtaps) - 0.5 * (numtaps - 1)
    h = cutoff * np.sinc(cutoff * m) * window_values(fn, window, numtaps)
    return h / np.sum(h)


def design_filter(fn: str, up: int, down: int, window: Any, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """scipy's filter (in ``dtype``, scaled by up) and its half length."""
    if isinstance(window, (list, np.ndarray, gp.GPUArray)):
        h = _dsp.host_array(fn, "window", window)
        if h.ndim != 1 or h.size == 0:
            raise AudioValueError(f"{fn}: a window array must be 1-d and non-empty, got shape {h.shape}")
        half = (h.size - 1) // 2
    else:
        rate = max(up, down)
        half = 10 * rate
        h = firwin_lowpass(2 * half + 1, 1.0 / rate, window, fn)
    h = h.astype(dtype)
    h *= dtype.type(up)
    return h, half


def polyphase_table(h: np.ndarray, up: int) -> np.ndarray:
    """(ceil(len(h) / up), up): row i holds h[ph + i * up] of each phase ph (zero past the end)."""
    ntaps = -(-h.size // up)
    padded = np.zeros(ntaps * up, dtype=h.dtype)
    padded[: h.size] = h
    return padded.reshape(ntaps, up)


def _background(rows: gp.GPUArray, padtype: str) -> gp.GPUArray:
    """Each row's mean / median / minimum / maximum, (R, 1)."""
    if padtype == "mean":
        return gp.mean(rows, axis=1, keepdims=True)
    if padtype == "minimum":
        return gp.min(rows, axis=1, keepdims=True)
    if padtype == "maximum":
        return gp.max(rows, axis=1, keepdims=True)
    s = gp.sort(rows, axis=1)
    n = rows.shape[1]
    return (s[:, (n - 1) // 2 : (n - 1) // 2 + 1] + s[:, n // 2 : n // 2 + 1]) * rows.dtype.type(0.5)


# -- reference (any backend) ---------------------------------------------------------------


def reference_resample_poly_rows(
    rows: gp.GPUArray, table: np.ndarray, up: int, down: int, half: int, nout: int, cval: float
) -> gp.GPUArray:
    x = rows.to_numpy().astype(np.float64)
    r, n = x.shape
    ntaps = table.shape[0]
    t = np.arange(nout, dtype=np.int64) * down + half
    ph, jhi = t % up, t // up
    right = max(0, int(jhi[-1]) + 1 - n) if nout else 0
    xe = np.full((r, ntaps - 1 + n + right), cval)
    xe[:, ntaps - 1 : ntaps - 1 + n] = x
    acc = np.zeros((r, nout))
    tab = table.astype(np.float64)
    for i in range(ntaps):
        acc += tab[i, ph] * xe[:, jhi - i + ntaps - 1]
    return gp.asarray(acc.astype(rows.dtype))


# -- CUDA kernel --------------------------------------------------------------------------


@functools.cache
def polyphase_kernel(ct: str) -> Any:
    return _dsp.kernel(
        "resample",
        f"pgk_audio::resample_polyphase<{ct}>",
        f"const void* x, long long xr, int n, const void* table, int ntaps, int up, int down, int half, {ct} cval, int nout, void* y",
    )


def kernel_resample_poly_rows(rows: gp.GPUArray, table: np.ndarray, up: int, down: int, half: int, nout: int, cval: float) -> gp.GPUArray:
    r, n = rows.shape
    y = ext.empty((r, nout), rows.dtype)
    tab = gp.asarray(np.ascontiguousarray(table))
    polyphase_kernel(_dsp.CTYPES[rows.dtype])(
        (-(-nout // _THREADS), r), _THREADS, rows, n, n, tab, table.shape[0], up, down, half, cval, nout, y
    )
    return y


def _kernel_takes(rows: Any, table: Any, up: Any, down: Any, half: Any, nout: int, cval: Any) -> bool:
    """Rows on grid y (< 2^16), int lengths; empty inputs go to the reference."""
    r, n = rows.shape
    return 0 < r < 1 << 16 and 0 < n < 1 << 31 and 0 < nout < 1 << 31 and half < 1 << 30


def register(registry: Any) -> None:
    ext.register_family(
        registry, "resample_poly_rows", nkey=1,
        doc="resample_poly of contiguous (rows, n) with its polyphase table (the layout resample_poly passes)",
        reference=reference_resample_poly_rows, cuda=kernel_resample_poly_rows, dtypes=["float32", "float64"], predicate=_kernel_takes,
    )  # fmt: skip
