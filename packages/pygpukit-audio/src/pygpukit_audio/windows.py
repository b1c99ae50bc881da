"""Analysis windows as scipy.signal.get_window computes them, in float64 on the
host (they are small and cached by the transforms that use them).

``get_window(window, n, fftbins=True)`` takes a name ("hann", "hamming",
"blackman", "blackmanharris", "nuttall", "flattop", "bartlett", "triang",
"boxcar"/"rectangular"/"ones", "cosine"), a tuple with a parameter
(("kaiser", beta), ("gaussian", std), or a name alone), or an array of n
values (returned as float64). fftbins=True gives the periodic window (the
symmetric window of n + 1 points without its last), as librosa uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import AudioTypeError, AudioValueError

_COSINE = {
    "hann": (0.5, 0.5),
    "hamming": (0.54, 0.46),
    "blackman": (0.42, 0.50, 0.08),
    "blackmanharris": (0.35875, 0.48829, 0.14128, 0.01168),
    "nuttall": (0.3635819, 0.4891775, 0.1365995, 0.0106411),
    "flattop": (0.21557895, 0.41663158, 0.277263158, 0.083578947, 0.006947368),
}
_ALIASES = {"hanning": "hann", "rectangular": "boxcar", "ones": "boxcar", "rect": "boxcar", "triangle": "triang"}
NAMES = tuple(sorted({*_COSINE, "bartlett", "triang", "boxcar", "cosine", "kaiser", "gaussian", *_ALIASES}))


def _symmetric(name: str, m: int, param: float | None) -> np.ndarray:
    n = np.arange(m, dtype=np.float64)
    if name in _COSINE:
        fac = np.linspace(-np.pi, np.pi, m)
        return sum(a * np.cos(k * fac) for k, a in enumerate(_COSINE[name]))
    if name == "boxcar":
        return np.ones(m)
    if name == "bartlett":
        return np.where(n <= (m - 1) / 2, 2 * n / (m - 1), 2 - 2 * n / (m - 1))
    if name == "triang":
        k = np.arange(1, (m + 1) // 2 + 1, dtype=np.float64)
        if m % 2 == 0:
            w = (2 * k - 1) / m
            return np.concatenate([w, w[::-1]])
        w = 2 * k / (m + 1)
        return np.concatenate([w, w[-2::-1]])
    if name == "cosine":
        return np.sin(np.pi / m * (n + 0.5))
    if name == "kaiser":
        alpha = (m - 1) / 2
        return np.i0(param * np.sqrt(1 - ((n - alpha) / alpha) ** 2)) / np.i0(param)
    return np.exp(-((n - (m - 1) / 2) ** 2) / (2 * param * param))  # gaussian


def get_window(window: Any, n: int, fftbins: bool = True) -> np.ndarray:
    """The n-point window ``window`` (see the module docstring) as float64."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise AudioValueError(f"get_window: n must be a positive integer, got {n!r}")
    n = int(n)
    if isinstance(window, (str, tuple)):
        name, *args = (window,) if isinstance(window, str) else window
        if not isinstance(name, str):
            raise AudioTypeError(f"get_window: a window tuple starts with its name, got {window!r}")
        name = _ALIASES.get(name.lower(), name.lower())
        needs = name in ("kaiser", "gaussian")
        if name not in NAMES or len(args) != (1 if needs else 0):
            what = "needs one parameter" if needs else "takes no parameter" if name in NAMES else "is unknown"
            raise AudioValueError(f"get_window: window {window!r} {what}; names: {', '.join(NAMES)}")
        param = float(args[0]) if needs else None
        if n == 1:
            return np.ones(1)
        if not fftbins:
            return _symmetric(name, n, param)
        return _symmetric(name, n + 1, param)[:n]
    try:
        w = np.asarray(window, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise AudioTypeError(
            f"get_window: window must be a name, a (name, parameter) tuple or an array, got {type(window).__name__}"
        ) from e
    if w.shape != (n,):
        raise AudioValueError(f"get_window: a window array must have shape ({n},), got {w.shape}")
    if not np.isfinite(w).all():
        raise AudioValueError("get_window: the window array has non-finite values")
    return w
