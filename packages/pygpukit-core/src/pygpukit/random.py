"""Random numbers: ``gp.random.default_rng(seed).normal(size=...)``, ``gp.random.rand(3, 4)``...

The generator is Philox4x32-10 (Salmon et al., SC11), counter-based: the key is
the 64-bit seed, and a request of n values reads the 128-bit counter blocks
``offset, offset + 1, ...`` (value i from block ``offset + i // per_block``),
then advances ``offset`` past them. Results therefore depend only on the seed
and the sequence of calls, never on the launch geometry, and the CPU backend
runs the same Philox in NumPy: both backends give the same bits for uniform
floats, integers and bernoulli, and normal values that agree as closely as
the math libraries allow (float64: a few ulp; float32: within 2.5e-6, as the
kernel takes the GPU's fast sin/cos, error 2^-21.4, times a radius <= 6.7).

Conversions: float32 in [0, 1) from the top 24 bits of a word (x * 2^-24), the
8/16-bit floats from their own precision (so they never round up to 1),
float64 from 53 bits of two words; ``uniform`` is low + (high - low) * u and
``normal`` is Box-Muller on pairs with u1 = 1 - u in (0, 1]. ``integers`` maps a
64-bit draw x onto a range r <= 2^32 as floor(x * r / 2^64) (no modulo; every
value's probability is within r / 2^64 <= 2^-32, relative, of 1/r) and a
larger range onto a 128-bit draw (within 2^-64).

Differences from NumPy: floats default to float32 (the GPU's native width;
pass ``dtype=gp.float64`` for NumPy's default); ``size=None`` gives a 0-d
GPUArray; ``integers`` bounds are scalars. Draws are queued on the current
stream, like every op. The Philox rounds, the distributions' kernels and
their NumPy twins are in pygpukit/_backend/random.py.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from ._backend.random import BERNOULLI, INT_LARGE, INT_SMALL, MASK64, MASK128, Dist, normal_dist, uniform_dist
from .array import GPUArray, normalize_shape
from .creation import asarray
from .reductions import all as _all
from .streams import current_stream_handle, on_stream

BIT_GENERATOR = "Philox4x32-10"


# -- argument checks -----------------------------------------------------------
def _seed_key(seed: Any) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(8), "little")
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be None or an integer, got {type(seed).__name__}") from None
    if not 0 <= s <= MASK64:
        raise ValueError(f"seed must be in [0, 2**64), got {s}")
    return s


def _shape(size: Any) -> tuple[int, ...]:
    return () if size is None else normalize_shape(size)


def _float_dtype(dtype: Any, name: str) -> np.dtype:
    dt = _dtypes.as_dtype(dtype)
    if not _dtypes.is_float(dt):
        raise TypeError(f"{name}: unsupported dtype {dt}; expected a floating-point dtype")
    return dt


def _is_scalar(x: Any) -> bool:
    return not isinstance(x, GPUArray) and np.ndim(x) == 0


def _real(x: Any, name: str) -> float:
    try:
        v = np.asarray(x)
        if v.ndim or v.dtype.kind not in "biufV":
            raise TypeError
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}") from None


def _int(x: Any, name: str) -> int:
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"integers: {name} must be an integer scalar, got {type(x).__name__}") from None


class Generator:
    """Random numbers from Philox4x32-10 (see the module docstring): the same seed
    and sequence of calls give the same arrays, on either backend."""

    __slots__ = ("_key", "_offset")

    def __init__(self, seed: Any = None) -> None:
        """``seed``: an integer in [0, 2**64), or None for one from ``os.urandom``."""
        self._key = _seed_key(seed)
        self._offset = 0

    def __repr__(self) -> str:
        return f"Generator({BIT_GENERATOR}, key={self._key:#x}, offset={self._offset})"

    @property
    def state(self) -> dict[str, Any]:
        """``{"bit_generator", "key", "offset"}``: assign it back to replay from here."""
        return {"bit_generator": BIT_GENERATOR, "key": self._key, "offset": self._offset}

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        if not isinstance(value, dict) or value.get("bit_generator") != BIT_GENERATOR:
            raise ValueError(f"state must be a dict from Generator.state with bit_generator {BIT_GENERATOR!r}")
        key, offset = value.get("key"), value.get("offset")
        if type(key) is not int or type(offset) is not int or not 0 <= key <= MASK64 or not 0 <= offset <= MASK128:
            raise ValueError(f"state needs an integer key in [0, 2**64) and offset in [0, 2**128), got {key!r}, {offset!r}")
        self._key, self._offset = key, offset

    @on_stream
    def random(self, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """Floats in [0, 1)."""
        dt = _float_dtype(dtype, "random")
        return self._draw(uniform_dist(dt), _shape(size), dt, 0.0, 1.0)

    @on_stream
    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """low + (high - low) * u, u in [0, 1) (rounding can give ``high``, as in NumPy).
        ``low`` and ``high`` may be arrays: they broadcast with each other and ``size``."""
        dt = _float_dtype(dtype, "uniform")
        if not (_is_scalar(low) and _is_scalar(high)):
            return self._affine(self.random, low, high, size, dt, "uniform")
        lo, span = _real(low, "low"), _real(high, "high") - _real(low, "low")
        with np.errstate(over="ignore"):
            finite = math.isfinite(np.asarray(span, _dtypes.compute_dtype(dt)).item())
        if not finite:
            raise OverflowError(f"uniform: high - low = {span} is out of range for {dt}")
        return self._draw(uniform_dist(dt), _shape(size), dt, lo, span)

    @on_stream
    def standard_normal(self, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """Normal values with mean 0 and standard deviation 1."""
        dt = _float_dtype(dtype, "standard_normal")
        return self._draw(normal_dist(dt), _shape(size), dt, 0.0, 1.0)

    @on_stream
    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """loc + scale * z, z standard normal; ``scale`` >= 0. ``loc`` and ``scale`` may
        be arrays (then checking scale reads it back: one synchronization)."""
        dt = _float_dtype(dtype, "normal")
        if not (_is_scalar(loc) and _is_scalar(scale)):
            return self._affine(self.standard_normal, loc, scale, size, dt, "normal")
        a, b = _real(loc, "loc"), _real(scale, "scale")
        if not b >= 0:
            raise ValueError(f"normal: scale < 0 (got {b})")
        return self._draw(normal_dist(dt), _shape(size), dt, a, b)

    @on_stream
    def integers(self, low: Any, high: Any = None, size: Any = None, dtype: Any = _dtypes.int64, endpoint: bool = False) -> GPUArray:
        """Integers in [low, high) ([low, high] with ``endpoint``); [0, low) when high is None."""
        dt = _dtypes.as_dtype(dtype)
        if dt.kind not in "biu":
            raise TypeError(f"integers: unsupported dtype {dt}; expected an integer or bool dtype")
        if high is None:
            low, high = 0, low
        lo, hi = _int(low, "low"), _int(high, "high")
        if not endpoint:
            hi -= 1
        if lo > hi:
            raise ValueError("integers: low > high" if endpoint else "integers: low >= high")
        dmin, dmax = (0, 1) if dt == _dtypes.bool_ else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        if lo < dmin:
            raise ValueError(f"integers: low is out of bounds for {dt}")
        if hi > dmax:
            raise ValueError(f"integers: high is out of bounds for {dt}")
        r = hi - lo + 1
        return self._draw(INT_SMALL if r <= 1 << 32 else INT_LARGE, _shape(size), dt, lo & MASK64, r & MASK64)

    @on_stream
    def bernoulli(self, p: Any = 0.5, size: Any = None, dtype: Any = _dtypes.bool_) -> GPUArray:
        """1 (True) with probability ``p`` (rounded to a multiple of 2^-32), else 0."""
        dt = _dtypes.as_dtype(dtype)
        if _dtypes.is_complex(dt):
            raise TypeError(f"bernoulli: unsupported dtype {dt}")
        q = _real(p, "p")
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {q}")
        return self._draw(BERNOULLI, _shape(size), dt, round(q * 2.0**32), 0)

    def _draw(self, dist: Dist, shape: tuple[int, ...], dt: np.dtype, a: Any, b: Any) -> GPUArray:
        stream = current_stream_handle()
        out = GPUArray._empty(shape, dt, stream)
        n = out._size
        if n:
            if dist.ctype is not np.uint64:  # parameters rounded once, as both backends use them
                with np.errstate(over="ignore"):
                    a, b = float(dist.ctype(a)), float(dist.ctype(b))
            (_runtime._runtime or _runtime.get()).ops.random_fill(out, dist, self._key, self._offset, a, b, stream)
            self._offset = (self._offset + -(-n // dist.per_block)) & MASK128
        return out

    def _affine(self, base: Callable[..., GPUArray], x: Any, y: Any, size: Any, dt: np.dtype, name: str) -> GPUArray:
        """x + y * base() for array parameters (y = high - low for uniform, scale for
        normal), in the compute dtype, with NumPy's broadcasting rules."""
        cdt = _dtypes.compute_dtype(dt)
        xa, ya = asarray(x).astype(cdt), asarray(y).astype(cdt)
        if name == "uniform":
            ya = ya - xa
        elif not bool(_all(ya >= 0).item()):
            raise ValueError("normal: scale < 0")
        shape = np.broadcast_shapes(xa.shape, ya.shape)
        if size is not None:
            shape, want = _shape(size), shape
            if np.broadcast_shapes(shape, want) != shape:
                raise ValueError(f"{name}: size {shape} does not fit the broadcast shape {want} of the parameters")
        out = xa + ya * base(shape, cdt)
        return out if cdt == dt else out.astype(dt)


def default_rng(seed: Any = None) -> Generator:
    """A new Generator (``seed`` None: from os.urandom); a Generator is returned as is."""
    return seed if isinstance(seed, Generator) else Generator(seed)


# -- module-level functions on a default generator -----------------------------
_default: Generator | None = None


def default_generator() -> Generator:
    """The generator behind the module-level functions (``seed`` replaces it);
    plugins that draw random numbers (sampling) use it when given none."""
    global _default
    if _default is None:
        _default = Generator()
    return _default


def seed(seed: Any = None) -> None:
    """Reseed the generator behind the module-level functions."""
    global _default
    _default = Generator(seed)


@on_stream
def rand(*shape: int, dtype: Any = _dtypes.float32) -> GPUArray:
    """Floats in [0, 1) of the given shape: ``rand(2, 3)``; ``rand()`` is 0-d."""
    return default_generator().random(shape, dtype)


@on_stream
def randn(*shape: int, dtype: Any = _dtypes.float32) -> GPUArray:
    """Standard normal values of the given shape: ``randn(2, 3)``."""
    return default_generator().standard_normal(shape, dtype)


@on_stream
def randint(low: Any, high: Any = None, size: Any = None, dtype: Any = _dtypes.int64) -> GPUArray:
    """Integers in [low, high), or [0, low) when high is None."""
    return default_generator().integers(low, high, size, dtype)


@on_stream
def random(size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
    """Floats in [0, 1)."""
    return default_generator().random(size, dtype)


@on_stream
def uniform(low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
    return default_generator().uniform(low, high, size, dtype)


@on_stream
def standard_normal(size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
    return default_generator().standard_normal(size, dtype)


@on_stream
def normal(loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
    return default_generator().normal(loc, scale, size, dtype)


@on_stream
def bernoulli(p: Any = 0.5, size: Any = None, dtype: Any = _dtypes.bool_) -> GPUArray:
    return default_generator().bernoulli(p, size, dtype)


__all__ = [
    "Generator",
    "bernoulli",
    "default_generator",
    "default_rng",
    "normal",
    "rand",
    "randint",
    "randn",
    "random",
    "seed",
    "standard_normal",
    "uniform",
]
