"""Philox4x32-10 in NumPy and the distributions of kernels/random.cu: what both
backends share so that they draw the same numbers (pygpukit.random explains the
generator and the conversions). The CUDA backend launches a distribution's
functor with its packed parameters; the CPU backend runs its NumPy twin.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from .. import _dtypes

MASK32 = (1 << 32) - 1
MASK64 = (1 << 64) - 1
MASK128 = (1 << 128) - 1
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # Weyl key increments


# -- Philox in NumPy (the CPU backend, and the reference for the kernels) --------
def philox4x32(ctr: Any, key: int, rounds: int = 10) -> np.ndarray:
    """Philox4x32-``rounds`` of counters ``ctr`` ((n, 4) uint32 words, word 0 the
    least significant) under the 64-bit ``key``: (n, 4) uint32. Products in uint64."""
    c = np.asarray(ctr, dtype=np.uint64).reshape(-1, 4)
    return _rounds([c[:, i] for i in range(4)], key, rounds)


def philox_blocks(key: int, offset: int, count: int) -> np.ndarray:
    """The (count, 4) uint32 words of blocks ``offset .. offset + count - 1`` (mod 2^128)."""
    off_lo, off_hi = offset & MASK64, (offset >> 64) & MASK64
    with np.errstate(over="ignore"):
        lo = np.arange(count, dtype=np.uint64) + np.uint64(off_lo)
        hi = (lo < np.uint64(off_lo)).astype(np.uint64) + np.uint64(off_hi)
    return _rounds([lo & MASK32, lo >> 32, hi & MASK32, hi >> 32], key, 10)


@lru_cache(maxsize=64)
def round_keys(key: int, rounds: int = 10) -> tuple[int, ...]:
    """(k0, k1) of every round, flat: the key's two words bumped by the Weyl constants."""
    out: list[int] = []
    for r in range(rounds):
        out += [(key + r * PHILOX_W[0]) & MASK32, ((key >> 32) + r * PHILOX_W[1]) & MASK32]
    return tuple(out)


def _rounds(c: list[np.ndarray], key: int, rounds: int) -> np.ndarray:
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    keys = round_keys(key, rounds)
    for r in range(rounds):
        k0, k1 = np.uint64(keys[2 * r]), np.uint64(keys[2 * r + 1])
        p0, p1 = c[0] * m0, c[2] * m1
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & MASK32, (p0 >> 32) ^ c[3] ^ k1, p0 & MASK32]
    return np.stack(c, axis=1).astype(np.uint32)


def _pairs(w: np.ndarray) -> np.ndarray:
    """(n, 2) uint64 draws of a block: words (1, 0) and (3, 2), high word first."""
    w64 = w.astype(np.uint64)
    return (w64[:, 1::2] << 32) | w64[:, 0::2]


def _mulhilo64(x: np.ndarray, y: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """High and low 64-bit halves of x * y, from 32-bit pieces."""
    x0, x1, y0, y1 = x & MASK32, x >> 32, y & MASK32, y >> 32
    p01, p10 = x0 * y1, x1 * y0
    mid = ((x0 * y0) >> 32) + (p01 & MASK32) + (p10 & MASK32)
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
        return self.packer.pack(ptr, n, offset & MASK64, offset >> 64, *round_keys(key), a, b)

    def expr(self, dt: np.dtype) -> str:
        return f"pgk::random_fill<{self.functor}, {_dtypes.C_TYPES[dt]}>"

    def values(self, key: int, offset: int, n: int, a: Any, b: Any) -> np.ndarray:
        """The first ``n`` values, flat, in the compute type (the CPU backend)."""
        words = philox_blocks(key, offset, -(-n // self.per_block))
        with np.errstate(all="ignore"):
            return self.numpy(words, self.ctype(a), self.ctype(b)).reshape(-1)[:n]


UNIFORM_F = {bits: Dist(f"pgk::UniformF<{bits}>", 4, np.float32, _np_uniform_f(bits)) for bits in (3, 4, 8, 11, 24)}
UNIFORM_D = Dist("pgk::UniformD", 2, np.float64, _np_uniform_d)
NORMAL_F = Dist("pgk::NormalF", 4, np.float32, _np_normal_f)
NORMAL_D = Dist("pgk::NormalD", 2, np.float64, _np_normal_d)
INT_SMALL = Dist("pgk::IntSmall", 2, np.uint64, _np_int_small)
INT_LARGE = Dist("pgk::IntLarge", 1, np.uint64, _np_int_large)
BERNOULLI = Dist("pgk::Bernoulli", 4, np.uint64, _np_bernoulli)


def uniform_dist(dt: np.dtype) -> Dist:
    return UNIFORM_D if dt == _dtypes.float64 else UNIFORM_F[int(_dtypes.finfo(dt).nmant) + 1]


def normal_dist(dt: np.dtype) -> Dist:
    return NORMAL_D if dt == _dtypes.float64 else NORMAL_F
