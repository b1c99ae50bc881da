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
stream, like every op.
"""

from __future__ import annotations

import math
import operator
import os
import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from .array import GPUArray, normalize_shape
from .streams import on_stream

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_MASK128 = (1 << 128) - 1
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # Weyl key increments
BIT_GENERATOR = "Philox4x32-10"


# -- Philox in NumPy (the CPU backend, and the reference for the kernels) --------
def philox4x32(ctr: Any, key: int, rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` of counters ``ctr`` ((n, 4) uint32 words, word 0 the
    least significant) under the 64-bit ``key``: (n, 4) uint32. Products in uint64."""
    c = np.asarray(ctr, dtype=np.uint64).reshape(-1, 4)
    return _rounds([c[:, i] for i in range(4)], key, rounds)


def philox_blocks(key: int, offset: int, count: int) -> np.ndarray:
    """The (count, 4) uint32 words of blocks ``offset .. offset + count - 1`` (mod 2^128)."""
    off_lo, off_hi = offset & _MASK64, (offset >> 64) & _MASK64
    with np.errstate(over="ignore"):
        lo = np.arange(count, dtype=np.uint64) + np.uint64(off_lo)
        hi = (lo < np.uint64(off_lo)).astype(np.uint64) + np.uint64(off_hi)
    return _rounds([lo & _MASK32, lo >> 32, hi & _MASK32, hi >> 32], key, 10)


@lru_cache(maxsize=64)
def round_keys(key: int, rounds: int = 10) -> tuple[int, ...]:
    """(k0, k1) of every round, flat: the key's two words bumped by the Weyl constants."""
    out: list[int] = []
    for r in range(rounds):
        out += [(key + r * PHILOX_W[0]) & _MASK32, ((key >> 32) + r * PHILOX_W[1]) & _MASK32]
    return tuple(out)


def _rounds(c: list[np.ndarray], key: int, rounds: int) -> np.ndarray:
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    keys = round_keys(key, rounds)
    for r in range(rounds):
        k0, k1 = np.uint64(keys[2 * r]), np.uint64(keys[2 * r + 1])
        p0, p1 = c[0] * m0, c[2] * m1
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & _MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & _MASK32]
    return np.stack(c, axis=1).astype(np.uint32)


def _pairs(w: np.ndarray) -> np.ndarray:
    """(n, 2) uint64 draws of a block: words (1, 0) and (3, 2), high word first."""
    w64 = w.astype(np.uint64)
    return (w64[:, 1::2] << 32) | w64[:, 0::2]


def _mulhilo64(x: np.ndarray, y: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """High and low 64-bit halves of x * y, from 32-bit pieces."""
    x0, x1, y0, y1 = x & _MASK32, x >> 32, y & _MASK32, y >> 32
    p01, p10 = x0 * y1, x1 * y0
    mid = ((x0 * y0) >> 32) + (p01 & _MASK32) + (p10 & _MASK32)
    return x1 * y1 + (p01 >> 32) + (p10 >> 32) + (mid >> 32), x * y


# Each _np_* is the NumPy twin of the kernels/random.cu distribution of the same
# name: (blocks, 4) words -> (blocks, per_block) values of the compute type.
def _np_uniform_f(bits: int) -> Callable[..., np.ndarray]:
    scale = np.float32(2.0**-bits)

    def uniform(w: np.ndarray, a: np.float32, b: np.float32) -> np.ndarray:
        return a + b * ((w >> (32 - bits)).astype(np.float32) * scale)

    return uniform


def _np_uniform_d(w: np.ndarray, a: np.float64, b: np.float64) -> np.ndarray:
    return a + b * ((_pairs(w) >> 11).astype(np.float64) * 2.0**-53)


_ANGLE_F32 = np.float32(2 * np.pi) * np.float32(2.0**-24)


def _np_normal_f(w: np.ndarray, a: np.float32, b: np.float32) -> np.ndarray:
    # u1 and the angle exactly as the kernel makes them (float32); log, sqrt,
    # cos, sin in float64, rounded to float32 where the kernel rounds r * cos
    u1 = ((1 << 32) - w[:, 0::2].astype(np.int64)).astype(np.float32) * np.float32(2.0**-32)
    t = ((w[:, 1::2].view(np.int32) >> 8).astype(np.float32) * _ANGLE_F32).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1.astype(np.float64)))
    z = np.empty(w.shape, np.float64)
    z[:, 0::2], z[:, 1::2] = r * np.cos(t), r * np.sin(t)
    return a + b * z.astype(np.float32)


def _np_normal_d(w: np.ndarray, a: np.float64, b: np.float64) -> np.ndarray:
    x = _pairs(w) >> 11
    u1 = ((1 << 53) - x[:, 0]).astype(np.float64) * 2.0**-53
    t = np.pi * (2.0 * (x[:, 1].astype(np.float64) * 2.0**-53))
    r = np.sqrt(-2.0 * np.log(u1))
    return a + b * np.stack([r * np.cos(t), r * np.sin(t)], axis=1)


def _np_int_small(w: np.ndarray, a: np.uint64, b: np.uint64) -> np.ndarray:
    return a + _mulhilo64(_pairs(w), b)[0]


def _np_int_large(w: np.ndarray, a: np.uint64, b: np.uint64) -> np.ndarray:
    x = _pairs(w)
    lo, hi = x[:, 0], x[:, 1]
    if b == 0:  # a range of 2^64
        return (a + hi)[:, None]
    h, mid = _mulhilo64(hi, b)
    s = mid + _mulhilo64(lo, b)[0]
    return (a + h + (s < mid).astype(np.uint64))[:, None]


def _np_bernoulli(w: np.ndarray, a: np.uint64, b: np.uint64) -> np.ndarray:
    return (w.astype(np.uint64) < a).astype(np.uint64)


class Dist:
    """A distribution of kernels/random.cu: its functor, values per Philox block,
    the type of its two parameters, and its NumPy twin."""

    __slots__ = ("ctype", "functor", "numpy", "packer", "per_block")

    def __init__(self, functor: str, per_block: int, ctype: type, numpy_fn: Callable[..., np.ndarray]) -> None:
        self.functor = functor
        self.per_block = per_block
        self.ctype = ctype
        self.numpy = numpy_fn
        # random_fill(out, n, off_lo, off_hi, RoundKeys, a, b)
        self.packer = struct.Struct(f"@PqQQ20I2{np.dtype(ctype).char.replace('L', 'Q')}")

    def pack(self, ptr: int, n: int, key: int, offset: int, a: Any, b: Any) -> bytes:
        """The kernel's parameters (the CUDA backend)."""
        return self.packer.pack(ptr, n, offset & _MASK64, offset >> 64, *round_keys(key), a, b)

    def expr(self, dt: np.dtype) -> str:
        return f"pgk::random_fill<{self.functor}, {_dtypes.C_TYPES[dt]}>"

    def values(self, key: int, offset: int, n: int, a: Any, b: Any) -> np.ndarray:
        """The first ``n`` values, flat, in the compute type (the CPU backend)."""
        words = philox_blocks(key, offset, -(-n // self.per_block))
        with np.errstate(all="ignore"):
            return self.numpy(words, self.ctype(a), self.ctype(b)).reshape(-1)[:n]


_UNIFORM_F = {bits: Dist(f"pgk::UniformF<{bits}>", 4, np.float32, _np_uniform_f(bits)) for bits in (3, 4, 8, 11, 24)}
_UNIFORM_D = Dist("pgk::UniformD", 2, np.float64, _np_uniform_d)
_NORMAL_F = Dist("pgk::NormalF", 4, np.float32, _np_normal_f)
_NORMAL_D = Dist("pgk::NormalD", 2, np.float64, _np_normal_d)
_INT_SMALL = Dist("pgk::IntSmall", 2, np.uint64, _np_int_small)
_INT_LARGE = Dist("pgk::IntLarge", 1, np.uint64, _np_int_large)
_BERNOULLI = Dist("pgk::Bernoulli", 4, np.uint64, _np_bernoulli)


def _uniform_dist(dt: np.dtype) -> Dist:
    return _UNIFORM_D if dt == _dtypes.float64 else _UNIFORM_F[int(_dtypes.finfo(dt).nmant) + 1]


def _normal_dist(dt: np.dtype) -> Dist:
    return _NORMAL_D if dt == _dtypes.float64 else _NORMAL_F


def instantiations() -> list[str]:
    """Every (distribution, output dtype) pair that a Generator can launch."""
    floats = [dt for dt in _dtypes.SUPPORTED if _dtypes.is_float(dt)]
    out = [d.expr(dt) for dt in floats for d in (_uniform_dist(dt), _normal_dist(dt))]
    out += [_INT_SMALL.expr(dt) for dt in _dtypes.SUPPORTED if dt.kind in "biu"]
    out += [_INT_LARGE.expr(dt) for dt in (_dtypes.int64, _dtypes.uint64)]
    out += [_BERNOULLI.expr(dt) for dt in _dtypes.REAL]
    return sorted(out)


# -- argument checks -----------------------------------------------------------
def _seed_key(seed: Any) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(8), "little")
    try:
        s = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed must be None or an integer, got {type(seed).__name__}") from None
    if not 0 <= s <= _MASK64:
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


def _compute(dt: np.dtype) -> np.dtype:
    """What a float dtype is generated in: float64 for float64, else float32."""
    return _dtypes.float64 if dt == _dtypes.float64 else _dtypes.float32


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
        if type(key) is not int or type(offset) is not int or not 0 <= key <= _MASK64 or not 0 <= offset <= _MASK128:
            raise ValueError(f"state needs an integer key in [0, 2**64) and offset in [0, 2**128), got {key!r}, {offset!r}")
        self._key, self._offset = key, offset

    @on_stream
    def random(self, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """Floats in [0, 1)."""
        dt = _float_dtype(dtype, "random")
        return self._draw(_uniform_dist(dt), _shape(size), dt, 0.0, 1.0)

    @on_stream
    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """low + (high - low) * u, u in [0, 1) (rounding can give ``high``, as in NumPy).
        ``low`` and ``high`` may be arrays: they broadcast with each other and ``size``."""
        dt = _float_dtype(dtype, "uniform")
        if not (_is_scalar(low) and _is_scalar(high)):
            return self._affine(self.random, low, high, size, dt, "uniform")
        lo, span = _real(low, "low"), _real(high, "high") - _real(low, "low")
        with np.errstate(over="ignore"):
            finite = math.isfinite(np.asarray(span, _compute(dt)).item())
        if not finite:
            raise OverflowError(f"uniform: high - low = {span} is out of range for {dt}")
        return self._draw(_uniform_dist(dt), _shape(size), dt, lo, span)

    @on_stream
    def standard_normal(self, size: Any = None, dtype: Any = _dtypes.float32) -> GPUArray:
        """Normal values with mean 0 and standard deviation 1."""
        dt = _float_dtype(dtype, "standard_normal")
        return self._draw(_normal_dist(dt), _shape(size), dt, 0.0, 1.0)

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
        return self._draw(_normal_dist(dt), _shape(size), dt, a, b)

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
        return self._draw(_INT_SMALL if r <= 1 << 32 else _INT_LARGE, _shape(size), dt, lo & _MASK64, r & _MASK64)

    @on_stream
    def bernoulli(self, p: Any = 0.5, size: Any = None, dtype: Any = _dtypes.bool_) -> GPUArray:
        """1 (True) with probability ``p`` (rounded to a multiple of 2^-32), else 0."""
        dt = _dtypes.as_dtype(dtype)
        if _dtypes.is_complex(dt):
            raise TypeError(f"bernoulli: unsupported dtype {dt}")
        q = _real(p, "p")
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {q}")
        return self._draw(_BERNOULLI, _shape(size), dt, round(q * 2.0**32), 0)

    def _draw(self, dist: Dist, shape: tuple[int, ...], dt: np.dtype, a: Any, b: Any) -> GPUArray:
        out = GPUArray._empty(shape, dt)
        n = out._size
        if n:
            if dist.ctype is not np.uint64:  # parameters rounded once, as both backends use them
                with np.errstate(over="ignore"):
                    a, b = float(dist.ctype(a)), float(dist.ctype(b))
            (_runtime._runtime or _runtime.get()).ops.random_fill(out, dist, self._key, self._offset, a, b)
            self._offset = (self._offset + -(-n // dist.per_block)) & _MASK128
        return out

    def _affine(self, base: Callable[..., GPUArray], x: Any, y: Any, size: Any, dt: np.dtype, name: str) -> GPUArray:
        """x + y * base() for array parameters (y = high - low for uniform, scale for
        normal), in the compute dtype, with NumPy's broadcasting rules."""
        from .creation import asarray
        from .reductions import all as _all

        cdt = _compute(dt)
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
