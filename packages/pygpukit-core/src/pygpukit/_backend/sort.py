"""The sort keys of every dtype: the order-preserving transforms of
kernels/sort.cu (its KeyInt / KeyFloat traits) and their NumPy twins, which
the CPU backend sorts with. pygpukit.sorting explains the two float keys.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _dtypes


class KeyInfo(NamedTuple):
    trait: str  # the key traits struct in kernels/sort.cu
    uint: np.dtype  # the unsigned dtype the keys are sorted as
    abs_max: int | None  # floats: the largest magnitude (bits, sign cleared) that is not NaN


def _key(trait: str, bits: int, abs_max: int | None = None) -> KeyInfo:
    return KeyInfo(trait, np.dtype(f"uint{bits}"), abs_max)


KEYS: dict[np.dtype, KeyInfo] = {
    _dtypes.bool_: _key("pgk::KeyU8", 8),
    _dtypes.int8: _key("pgk::KeyU8", 8),
    _dtypes.uint8: _key("pgk::KeyU8", 8),
    _dtypes.int16: _key("pgk::KeyU16", 16),
    _dtypes.uint16: _key("pgk::KeyU16", 16),
    _dtypes.int32: _key("pgk::KeyU32", 32),
    _dtypes.uint32: _key("pgk::KeyU32", 32),
    _dtypes.int64: _key("pgk::KeyU64", 64),
    _dtypes.uint64: _key("pgk::KeyU64", 64),
    _dtypes.float16: _key("pgk::KeyF16", 16, 0x7C00),
    _dtypes.bfloat16: _key("pgk::KeyBF16", 16, 0x7F80),
    _dtypes.float32: _key("pgk::KeyF32", 32, 0x7F800000),
    _dtypes.float64: _key("pgk::KeyF64", 64, 0x7FF0000000000000),
    _dtypes.float8_e4m3fn: _key("pgk::KeyE4M3", 8, 0x7E),  # no inf: 0x7e is 448, 0x7f is NaN
    _dtypes.float8_e5m2: _key("pgk::KeyE5M2", 8, 0x7C),
}


def key_info(dt: np.dtype) -> KeyInfo:
    return KEYS[dt]


def flip_bits(dt: np.dtype, descending: bool) -> int:
    """What the kernels XOR into the transformed keys: the sign bit of signed
    integers, and every bit for a descending sort."""
    info = KEYS[dt]
    bits = info.uint.itemsize * 8
    flip = 1 << (bits - 1) if dt.kind == "i" else 0
    return flip ^ ((1 << bits) - 1) if descending else flip


# -- the key transforms in NumPy (the CPU backend; sort.cu's KeyInt / KeyFloat) -------------


def encode_keys(x: np.ndarray, order: bool, descending: bool = False) -> np.ndarray:
    """The unsigned keys of ``x`` (any pygpukit dtype): ``order`` keys (NaN on top, -0.0 == +0.0)
    or the bijective value keys."""
    info = KEYS[x.dtype]
    u = info.uint.type
    b = np.ascontiguousarray(x).view(info.uint)
    if x.dtype == _dtypes.bool_:
        b = (b != 0).astype(info.uint)
    flip = u(flip_bits(x.dtype, descending))
    if info.abs_max is None:
        return b ^ flip
    sign = u(1 << (8 * info.uint.itemsize - 1))
    ones = u(~u(0))
    flipped = b ^ np.where(b & sign, ones, sign)
    if order:
        mag = b & u(sign - u(1))
        keys = np.where(mag > u(info.abs_max), ones, np.where(mag == 0, sign, flipped))
    else:
        keys = flipped - u(sign - u(1) - u(info.abs_max))
    return keys.astype(info.uint, copy=False) ^ flip


def decode_keys(keys: np.ndarray, dt: np.dtype, descending: bool = False) -> np.ndarray:
    """The values of dtype ``dt`` whose value keys are ``keys`` (inverse of encode_keys(order=False))."""
    info = KEYS[dt]
    u = info.uint.type
    k = np.ascontiguousarray(keys, dtype=info.uint) ^ u(flip_bits(dt, descending))
    if info.abs_max is not None:
        sign = u(1 << (8 * info.uint.itemsize - 1))
        k = k + u(sign - u(1) - u(info.abs_max))
        k = np.where(k & sign, k ^ sign, ~k).astype(info.uint, copy=False)
    return k.view(dt)


def host_sort_rows(x: np.ndarray, descending: bool, indices: bool) -> np.ndarray:
    """The CPU backend's sort of each row of the 2-D ``x``: sorted values or int64 positions."""
    if indices:
        return np.argsort(encode_keys(x, True, descending), axis=1, kind="stable").astype(np.int64)
    return decode_keys(np.sort(encode_keys(x, False, descending), axis=1, kind="stable"), x.dtype, descending)


def host_topk_select(x: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Positions of the first k elements of each row's stable sort, in increasing position order."""
    # kind="stable": NumPy 2.4's default (SIMD) sort misorders float16 rows on AVX-512 machines
    return np.sort(host_sort_rows(x, largest, True)[:, :k], axis=1, kind="stable")


def host_searchsorted(a: np.ndarray, v: np.ndarray, right: bool) -> np.ndarray:
    return np.searchsorted(encode_keys(a, True), encode_keys(v, True), side="right" if right else "left").astype(np.int64)


def host_unique_flags(s: np.ndarray) -> np.ndarray:
    k = encode_keys(s, True)
    flags = np.ones(k.shape, dtype=bool)
    flags[1:] = k[1:] != k[:-1]
    return flags
