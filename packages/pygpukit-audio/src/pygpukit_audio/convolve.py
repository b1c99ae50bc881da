"""FFT convolution (scipy.signal.fftconvolve along one axis) on the package's FFTs.

The full linear convolution of n and m samples has n + m - 1; both sides are
zero-padded to the next 7-smooth length at or above it (the FFT kernels'
mixed-radix fast path: radices 2, 3, 5, 7), transformed (rfft for real
inputs, fft for complex), multiplied, transformed back and cut to ``mode``:
"full", "same" (centred on ``x``, as scipy) or "valid". Leading axes
broadcast, so one filter runs over a batch of signals in one transform each.
Direct convolution of short filters is ``filters.fir_filter``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pygpukit as gp

from . import fft as _fft
from ._errors import AudioTypeError, AudioValueError

MODES = ("full", "same", "valid")


def fast_length(n: int) -> int:
    """The smallest 7-smooth integer >= n (n >= 1)."""
    best = 1 << max(n - 1, 0).bit_length()
    p7 = 1
    while p7 < best:
        p5 = p7
        while p5 < best:
            p3 = p5
            while p3 < best:
                p2 = p3
                while p2 < n:
                    p2 *= 2
                best = min(best, p2)
                p3 *= 3
            p5 *= 5
        p7 *= 7
    return best


def _operand(name: str, a: Any) -> gp.GPUArray:
    a = a if isinstance(a, gp.GPUArray) else gp.asarray(np.asarray(a))
    if a.dtype.kind not in "fc" and a.dtype not in (np.dtype(gp.bfloat16),):
        raise AudioTypeError(f"fftconvolve: {name} must be a float or complex array, got {a.dtype}")
    if a.ndim == 0 or a.size == 0:
        raise AudioValueError(f"fftconvolve: {name} must be a non-empty array with at least one axis, got shape {a.shape}")
    return a


def fftconvolve(x: Any, h: Any, mode: str = "full", axis: int = -1) -> gp.GPUArray:
    """Linear convolution of ``x`` and ``h`` along ``axis`` through FFTs (see the module doc).

    The other axes broadcast (NumPy rules). Real inputs give float32 (from
    float32 / float16 / bfloat16) or float64; complex inputs complex64 or
    complex128. "valid" keeps the |n - m| + 1 samples where the shorter
    operand lies wholly inside the longer one."""
    if mode not in MODES:
        raise AudioValueError(f"fftconvolve: mode must be one of {', '.join(MODES)}, got {mode!r}")
    a, b = _operand("x", x), _operand("h", h)
    if a.ndim != b.ndim:
        if b.ndim < a.ndim:
            b = b.reshape((1,) * (a.ndim - b.ndim) + b.shape)
        else:
            a = a.reshape((1,) * (b.ndim - a.ndim) + a.shape)
    if not -a.ndim <= axis < a.ndim:
        raise AudioValueError(f"fftconvolve: axis {axis} is out of range for {a.ndim}-D inputs")
    ax = axis % a.ndim
    n, m = a.shape[ax], b.shape[ax]
    try:
        np.broadcast_shapes(a.shape[:ax] + a.shape[ax + 1 :], b.shape[:ax] + b.shape[ax + 1 :])
    except ValueError:
        raise AudioValueError(f"fftconvolve: x {a.shape} and h {b.shape} do not broadcast outside axis {axis}") from None
    full = n + m - 1
    size = fast_length(full)
    complex_ = a.dtype.kind == "c" or b.dtype.kind == "c"
    wide = np.float64 in (a.dtype, b.dtype) or np.complex128 in (a.dtype, b.dtype)
    if complex_:
        ct = gp.complex128 if wide else gp.complex64
        y = _fft.ifft(_fft.fft(a.astype(ct), size, ax) * _fft.fft(b.astype(ct), size, ax), size, ax)
    else:
        rt = gp.float64 if wide else gp.float32
        y = _fft.irfft(_fft.rfft(a.astype(rt), size, ax) * _fft.rfft(b.astype(rt), size, ax), size, ax)
    if mode == "full":
        start, length = 0, full
    elif mode == "same":  # the middle n samples of the full result
        start, length = (full - n) // 2, n
    else:
        length = abs(n - m) + 1
        start = min(n, m) - 1
    index = [slice(None)] * y.ndim
    index[ax] = slice(start, start + length)
    return gp.ascontiguousarray(y[tuple(index)])
