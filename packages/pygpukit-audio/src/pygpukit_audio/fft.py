"""``gp.fft``: numpy.fft's discrete Fourier transforms on GPUArrays.

fft, ifft, rfft and irfft take one axis (default the last), ``n`` (the input
is cropped or zero-padded to n points along the axis, as NumPy does; irfft's
input to n // 2 + 1) and ``norm`` ("backward", "ortho", "forward"), and are
batched over the other axes. float32 and complex64 inputs give complex64
(float32 for irfft), float64 and complex128 give complex128 (float64);
float16/bfloat16 compute in float32 and integers in float64, as NumPy does.

Implementations are registered in the op registry: the CPU backend (and
any case the kernel does not take) runs numpy.fft on the host; the CUDA
backend runs the package's own NVRTC kernels (kernels/fft.cu, no cuFFT) for
every length, up to 2^24 points (7-smooth) or 2^23 (Bluestein).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _fft_launch
from ._errors import AudioTypeError, AudioValueError
from ._fft_plan import complex_dtype

NORMS = ("backward", "ortho", "forward")
KINDS = ("fft", "ifft", "rfft", "irfft")
KERNEL_DTYPES = ["float32", "float64", "complex64", "complex128"]


# -- public API ----------------------------------------------------------------------


def fft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> gp.GPUArray:
    """The one-dimensional discrete Fourier transform along ``axis`` (numpy.fft.fft)."""
    return ext.op("fft")(_prepare("fft", a), n, axis, norm)


def ifft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> gp.GPUArray:
    """The inverse discrete Fourier transform along ``axis`` (numpy.fft.ifft)."""
    return ext.op("ifft")(_prepare("ifft", a), n, axis, norm)


def rfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> gp.GPUArray:
    """The n // 2 + 1 non-negative frequency bins of a real input's DFT (numpy.fft.rfft)."""
    return ext.op("rfft")(_prepare("rfft", a), n, axis, norm)


def irfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> gp.GPUArray:
    """The real n-point signal whose rfft is ``a`` (numpy.fft.irfft; n defaults to
    2 * (m - 1) for m input bins; the imaginary parts of the DC and, for even n,
    Nyquist bins are ignored)."""
    return ext.op("irfft")(_prepare("irfft", a), n, axis, norm)


def fftfreq(n: int, d: float = 1.0) -> gp.GPUArray:
    """The sample frequencies of an n-point fft (float64), numpy.fft.fftfreq."""
    return gp.from_numpy(np.fft.fftfreq(_count("fftfreq", n), _spacing("fftfreq", d)))


def rfftfreq(n: int, d: float = 1.0) -> gp.GPUArray:
    """The n // 2 + 1 sample frequencies of an n-point rfft (float64), numpy.fft.rfftfreq."""
    return gp.from_numpy(np.fft.rfftfreq(_count("rfftfreq", n), _spacing("rfftfreq", d)))


def fftshift(x: Any, axes: int | tuple[int, ...] | None = None) -> gp.GPUArray:
    """The zero-frequency bin moved to the centre of ``axes`` (all by default)."""
    return _shift("fftshift", x, axes, 1)


def ifftshift(x: Any, axes: int | tuple[int, ...] | None = None) -> gp.GPUArray:
    """The inverse of fftshift (they differ for odd lengths)."""
    return _shift("ifftshift", x, axes, -1)


# -- checks --------------------------------------------------------------------------


def _prepare(kind: str, a: Any) -> gp.GPUArray:
    """``a`` as a GPUArray of the dtype the transform computes in."""
    if not isinstance(a, gp.GPUArray):
        host = np.asarray(a)
        if host.dtype.kind not in "biufc":
            raise AudioTypeError(f"{kind}: input must be numeric, got {host.dtype}")
        a = gp.asarray(host)
    dt = a.dtype
    if dt.kind == "c":
        if kind == "rfft":
            raise AudioTypeError(f"rfft: input must be real, got {dt}; use fft for complex input")
        return a
    if dt.kind not in "biuf":
        raise AudioTypeError(f"{kind}: input must be numeric, got {dt}")
    target = ext.compute_dtype(dt) if dt.kind == "f" else np.dtype(np.float64)  # integers and bool: float64, as NumPy
    if kind == "irfft":
        target = np.dtype(np.complex64 if target == np.float32 else np.complex128)
    return a if dt == target else a.astype(target)


def _count(name: str, n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise AudioValueError(f"{name}: n must be a positive integer, got {n!r}")
    return int(n)


def _spacing(name: str, d: Any) -> float:
    if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or not (math.isfinite(d) and d != 0):
        raise AudioValueError(f"{name}: d must be a finite non-zero number, got {d!r}")
    return float(d)


def check(kind: str, a: gp.GPUArray, n: Any, axis: Any, norm: Any) -> tuple[int, int, float]:
    """(n, axis >= 0, output scale) of a call, or a clear error."""
    if a.ndim == 0:
        raise AudioValueError(f"{kind}: input must have at least one axis, got a 0-d array")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -a.ndim <= axis < a.ndim:
        raise AudioValueError(f"{kind}: axis {axis!r} is out of bounds for an array of {a.ndim} dimensions")
    axis = int(axis) % a.ndim
    m = a.shape[axis]
    if n is None:
        n = 2 * (m - 1) if kind == "irfft" else m
        if n < 1:
            raise AudioValueError(f"{kind}: {m} input points along axis {axis} give n = {n}; pass n >= 1")
    n = _count(kind, n)
    if norm is None:
        norm = "backward"
    if norm not in NORMS:
        raise AudioValueError(f"{kind}: norm must be one of {', '.join(NORMS)} or None, got {norm!r}")
    inverse = kind in ("ifft", "irfft")
    scale = {"backward": 1.0 / n if inverse else 1.0, "ortho": 1.0 / math.sqrt(n), "forward": 1.0 if inverse else 1.0 / n}[norm]
    return n, axis, scale


def input_length(kind: str, n: int) -> int:
    return n // 2 + 1 if kind == "irfft" else n


def fit(a: gp.GPUArray, length: int, axis: int) -> gp.GPUArray:
    """``a`` cropped (a view) or zero-padded to ``length`` points along ``axis``."""
    m = a.shape[axis]
    if m > length:
        return a[(slice(None),) * axis + (slice(0, length),)]
    if m < length:
        widths = [(0, 0)] * a.ndim
        widths[axis] = (0, length - m)
        return gp.pad(a, widths)
    return a


def _shift(name: str, x: Any, axes: Any, sign: int) -> gp.GPUArray:
    x = x if isinstance(x, gp.GPUArray) else gp.asarray(np.asarray(x))
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (axes,)
    for ax in axes:
        if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)) or not -x.ndim <= ax < x.ndim:
            raise AudioValueError(f"{name}: axis {ax!r} is out of bounds for an array of {x.ndim} dimensions")
        k = x.shape[ax] // 2
        x = gp.roll(x, sign * k, int(ax))
    return x


# -- reference (any backend): numpy.fft on the host ----------------------------------


def _out_dtype(kind: str, dt: np.dtype) -> np.dtype:
    c = complex_dtype(dt)
    return c.type(0).real.dtype if kind == "irfft" else c


def _reference(kind: str) -> Any:
    def reference(a: gp.GPUArray, n: Any = None, axis: Any = -1, norm: Any = None) -> gp.GPUArray:
        n, axis, _ = check(kind, a, n, axis, norm)
        y = getattr(np.fft, kind)(a.to_numpy(), n=n, axis=axis, norm=norm)
        return gp.from_numpy(np.ascontiguousarray(y.astype(_out_dtype(kind, a.dtype), copy=False)))

    reference.__name__ = f"reference_{kind}"
    return reference


# -- CUDA kernel ------------------------------------------------------------------------


def _kernel(kind: str) -> Any:
    def kernel(a: gp.GPUArray, n: Any = None, axis: Any = -1, norm: Any = None) -> gp.GPUArray:
        n, axis, scale = check(kind, a, n, axis, norm)
        return _fft_launch.transform(kind, fit(a, input_length(kind, n), axis), n, axis, scale)

    def takes(a: Any, n: Any = None, axis: Any = -1, norm: Any = None) -> bool:
        try:
            n, _, _ = check(kind, a, n, axis, norm)
        except ValueError:
            return False  # the reference raises the error
        return _fft_launch.supported(_fft_launch.modes(kind, n)[1])

    kernel.__name__ = f"kernel_{kind}"
    return kernel, takes


def register(registry: Any) -> None:
    docs = {"fft": fft.__doc__, "ifft": ifft.__doc__, "rfft": rfft.__doc__, "irfft": irfft.__doc__}
    for kind in KINDS:
        kern, takes = _kernel(kind)
        ext.register_family(
            registry, kind, nkey=1, doc=docs[kind] or "", reference=_reference(kind), cuda=kern, dtypes=KERNEL_DTYPES, predicate=takes
        )
