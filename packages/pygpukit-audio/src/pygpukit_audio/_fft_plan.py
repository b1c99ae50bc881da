"""How a GPU FFT of a given length is done: the radices of a Stockham
transform in one block, the split of a four-step transform, Bluestein's
padded length; and the tables the kernels read (twiddles, chirps), computed
in float64 on the host once per (length, dtype) and kept on the device."""

from __future__ import annotations

import functools
import math

import numpy as np

import pygpukit as gp

ODD_RADICES = (3, 5, 7)
MAX_BLOCK = 4096  # the longest factor of a four-step pass, and Bluestein's longest block
MAX_LENGTH = MAX_BLOCK * MAX_BLOCK  # two four-step passes at most


@functools.cache
def radices(m: int) -> tuple[int, ...] | None:
    """The Stockham stages of an m-point transform, or None when m has a prime
    factor above 7: the power of two 2^e in as few radix-16/8/4/2 stages as
    possible (ceil(e / 4), the larger radices first: one shared-memory round
    trip each), then the odd radices."""
    e = (m & -m).bit_length() - 1 if m else 0
    m >>= e
    stages = -(-e // 4)
    out = [1 << (e // stages + (i < e % stages)) for i in range(stages)]
    for r in ODD_RADICES:
        while m % r == 0:
            out.append(r)
            m //= r
    return tuple(out) if m == 1 else None


@functools.cache
def split(m: int) -> tuple[int, int] | None:
    """(n1, n2) with n1 * n2 = m, both 7-smooth and at most MAX_BLOCK, n1 as
    close to sqrt(m) as possible (balanced passes); None if there is none."""
    if radices(m) is None or m > MAX_LENGTH:
        return None
    best = None
    for n1 in range(2, MAX_BLOCK + 1):
        if m % n1 == 0 and m // n1 <= MAX_BLOCK and radices(n1) is not None:
            if best is None or abs(math.log(n1 / math.sqrt(m))) < abs(math.log(best / math.sqrt(m))):
                best = n1
    return None if best is None else (best, m // best)


def bluestein_length(n: int) -> int:
    """The power of two M >= 2n - 1 that Bluestein's convolution runs at."""
    return 1 << (2 * n - 2).bit_length() if n > 1 else 1


def complex_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.complex128) if dt in (np.float64, np.complex128) else np.dtype(np.complex64)


@functools.lru_cache(maxsize=64)  # device memory: the tables of the recent lengths only
def _table(kind: str, n: int, m: int, dt: np.dtype) -> gp.GPUArray:
    """A device table of complex ``dt``, built in float64 (see table())."""
    if kind == "tw":  # exp(-2 pi i t / n), t < n
        v = np.exp(-2j * np.pi * np.arange(n) / n)
    elif kind == "rtw":  # exp(-2 pi i k / 2n), k <= n: the even real transforms of 2n points
        v = np.exp(-1j * np.pi * np.arange(n + 1) / n)
    elif kind == "chirp":
        v = _host_chirp(n)
    else:  # "bhat": FFT_m of the conjugate chirp wrapped around m, divided by m
        c = np.conj(_host_chirp(n))
        b = np.zeros(m, np.complex128)
        b[:n] = c
        b[m - n + 1 :] = c[1:][::-1]
        v = np.fft.fft(b) / m
    return gp.from_numpy(v.astype(dt))


@functools.cache
def _host_chirp(n: int) -> np.ndarray:
    """exp(-pi i k^2 / n), k < n, with k^2 reduced mod 2n so that the angle stays exact."""
    k = np.arange(n, dtype=np.int64)
    return np.exp(-1j * np.pi * ((k * k) % (2 * n)) / n)


def table(kind: str, n: int, dt: np.dtype, m: int = 0) -> gp.GPUArray:
    """Device table ``kind`` ("tw", "rtw", "chirp", "bhat") for length n (and
    Bluestein length m for "bhat") in complex dtype ``dt``."""
    return _table(kind, n, m, np.dtype(dt))
