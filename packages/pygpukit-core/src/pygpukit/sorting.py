"""Sorting and searching: sort, argsort, topk, unique, searchsorted.

Every dtype is sorted as the unsigned integer of its width, through an
order-preserving key transform (kernels/sort.cu has the same transforms):
signed integers flip their sign bit, floats flip the sign bit of positives and
every bit of negatives. Two float keys:

- the *order* key (argsort, topk, unique, searchsorted): every NaN maps to
  the top key and -0.0 to +0.0's, so NaNs sort last and equal values keep
  their input order, as NumPy's stable sort;
- the *value* key (sort): a bijection (the flipped bits rotated down by the
  number of negative NaN codes, which moves those NaNs to the top), so sorted
  keys decode to the input's bits. The only difference from NumPy is within
  runs that compare equal: -0.0 comes before +0.0 and NaNs are ordered by
  their bit patterns, which only their sign bits and payloads show.

``descending=True`` inverts the keys: NaN first (it is the largest value, as
in ``torch.sort``), and still stable: equal elements keep their input order
(not the reverse of an ascending sort). That is what the array API's
reference wrapper over NumPy does (``flip(argsort(flip(x)))``); the standard
itself leaves the place of NaNs and of -0.0 vs +0.0 to the implementation.

The GPU sort is an LSD radix sort, 8-bit digits (kernels/sort.cu); the CPU
backend sorts the same keys with NumPy's stable sort, so both give the same
results bit for bit. The GPU path sorts rows of fewer than 2^31 elements.
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes, _indexing, _runtime
from .array import GPUArray, _normalize_axis
from .streams import on_stream


class KeyInfo(NamedTuple):
    trait: str  # the key traits struct in kernels/sort.cu
    uint: np.dtype  # the unsigned dtype the keys are sorted as
    abs_max: int | None  # floats: the largest magnitude (bits, sign cleared) that is not NaN


def _key(trait: str, bits: int, abs_max: int | None = None) -> KeyInfo:
    return KeyInfo(trait, np.dtype(f"uint{bits}"), abs_max)


_KEYS: dict[np.dtype, KeyInfo] = {
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
    return _KEYS[dt]


def flip_bits(dt: np.dtype, descending: bool) -> int:
    """What the kernels XOR into the transformed keys: the sign bit of signed
    integers, and every bit for a descending sort."""
    info = _KEYS[dt]
    bits = info.uint.itemsize * 8
    flip = 1 << (bits - 1) if dt.kind == "i" else 0
    return flip ^ ((1 << bits) - 1) if descending else flip


# -- the key transforms in NumPy (the CPU backend; sort.cu's KeyInt / KeyFloat) -------------


def encode_keys(x: np.ndarray, order: bool, descending: bool = False) -> np.ndarray:
    """The unsigned keys of ``x`` (any pygpukit dtype): ``order`` keys (NaN on top, -0.0 == +0.0)
    or the bijective value keys."""
    info = _KEYS[x.dtype]
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
    info = _KEYS[dt]
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


# -- the public functions -----------------------------------------------------------


def _check(a: Any, name: str) -> None:
    if not isinstance(a, GPUArray):
        raise TypeError(f"{name} expects a GPUArray, got {type(a).__name__}")
    if _dtypes.is_complex(a.dtype):
        raise TypeError(f"{name} is not supported for complex input (complex numbers have no order)")


def _rows(a: GPUArray, axis: Any) -> tuple[GPUArray, int, int, Any]:
    """(contiguous rows, number of rows, row length, restore): ``axis`` moved last (the
    flattened array when None); restore(flat, length) puts a result of ``length`` per row back."""
    if axis is None:
        flat = a.reshape(-1)
        return (flat if flat.is_contiguous else flat.copy()), 1, a.size, lambda out, k: out.reshape((k,))
    ax = _normalize_axis(axis, a.ndim)
    kept = [i for i in range(a.ndim) if i != ax]
    moved = a.transpose([*kept, ax])
    src = moved if moved.is_contiguous else moved.copy()
    lead = moved.shape[:-1]
    inverse = _indexing.inverse_permutation([*kept, ax])

    def restore(out: GPUArray, k: int) -> GPUArray:
        res = out.reshape((*lead, k))
        return res if ax == a.ndim - 1 else res.transpose(inverse).copy()

    return src, math.prod(lead), a.shape[ax], restore


def _sort(a: Any, axis: Any, descending: bool, indices: bool, name: str) -> GPUArray:
    _check(a, name)
    src, rows, n, restore = _rows(a, axis)
    if rows * n == 0:
        return restore(GPUArray._empty((0,), _dtypes.int64 if indices else a.dtype), n)
    return restore(_runtime.get().ops.sort_rows(src, rows, n, bool(descending), indices), n)


@on_stream
def sort(a: GPUArray, axis: int | None = -1, *, descending: bool = False, stable: bool = True) -> GPUArray:
    """A sorted copy along ``axis`` (the flattened array when None). Always stable;
    NaN last (first when ``descending``), see the module docstring for -0.0 and NaN bits."""
    return _sort(a, axis, descending, False, "sort")


@on_stream
def argsort(a: GPUArray, axis: int | None = -1, *, descending: bool = False, stable: bool = True) -> GPUArray:
    """The int64 indices that sort ``a`` along ``axis``; stable (ties keep index order, also
    when ``descending``), NaN last (first when ``descending``), -0.0 equal to +0.0."""
    return _sort(a, axis, descending, True, "argsort")


# Rows at least this long with k at most 1/8 of them take the radix select (topk_select);
# others sort the whole row.
_SELECT_MIN_ROW = 8192


def _gather_rows(x: GPUArray, idx: GPUArray) -> GPUArray:
    """out[r, j] = x[r, idx[r, j]] for contiguous 2-D x and idx whose indices are known to be in
    range (they come from our kernels): no bounds check (which would synchronize), no copy of x."""
    rows, k = idx.shape
    return _runtime.get().ops.gather(x, idx, (rows, k), x.shape[1], k, 1, True)


def _gather(x: GPUArray, idx: GPUArray) -> GPUArray:
    """x[idx] for contiguous 1-D x and in-range indices idx (see _gather_rows)."""
    return _runtime.get().ops.gather(x, idx, idx.shape, x.size, max(idx.size, 1), 1, False)


@on_stream
def topk(a: GPUArray, k: int, axis: int = -1, *, largest: bool = True, sorted: bool = True) -> tuple[GPUArray, GPUArray]:
    """(values, int64 indices) of the ``k`` largest (smallest) elements along ``axis``, as
    ``torch.topk``. NaN counts as the largest value; among equal values the lower indices win.
    ``sorted=True``: in sorted order (ties by index); otherwise in an unspecified order."""
    _check(a, "topk")
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"topk: k must be an integer, got {type(k).__name__}") from None
    if axis is None:
        raise TypeError("topk: axis must be an integer")
    src, rows, n, restore = _rows(a, axis)
    if not 0 <= k <= n:
        raise ValueError(f"topk: k={k} is out of range for a dimension of size {n}")
    if rows * k == 0:
        return restore(GPUArray._empty((0,), a.dtype), k), restore(GPUArray._empty((0,), _dtypes.int64), k)
    ops = _runtime.get().ops
    x = src.reshape((rows, n))
    if n >= _SELECT_MIN_ROW and k * 8 <= n:
        idx = ops.topk_select(src, rows, n, k, bool(largest)).reshape((rows, k))
        vals = _gather_rows(x, idx)
        if sorted:
            perm = ops.sort_rows(vals, rows, k, bool(largest), True).reshape((rows, k))
            idx = _gather_rows(idx, perm)
            vals = _gather_rows(vals, perm)
    else:
        perm = ops.sort_rows(src, rows, n, bool(largest), True).reshape((rows, n))
        idx = perm[:, :k].copy()
        vals = _gather_rows(x, idx)
    return restore(vals.reshape(-1), k), restore(idx.reshape(-1), k)


@on_stream
def unique(
    a: GPUArray, *, return_index: bool = False, return_inverse: bool = False, return_counts: bool = False, axis: int | None = None
) -> Any:
    """The sorted unique elements of the flattened array, as ``numpy.unique`` (NumPy 2:
    NaNs collapse into one, -0.0 equals +0.0; ``inverse`` has ``a``'s shape). Reads the
    number of unique elements back to the host (one synchronization)."""
    from .creation import full
    from .selection import nonzero
    from .shape import concatenate

    _check(a, "unique")
    if axis is not None:
        raise ValueError(f"unique: only axis=None (the flattened array) is supported, got axis={axis!r}")
    ops = _runtime.get().ops
    flat = a.reshape(-1)
    flat = flat if flat.is_contiguous else flat.copy()
    n = flat.size
    empty = GPUArray._empty((0,), _dtypes.int64)
    if n == 0:
        uniq, index, inverse, counts = flat, empty, GPUArray._empty(a.shape, _dtypes.int64), empty
    else:
        perm = ops.sort_rows(flat, 1, n, False, True) if return_index else None
        s = _gather(flat, perm) if perm is not None else ops.sort_rows(flat, 1, n, False, False)
        (pos,) = nonzero(ops.unique_flags(s))
        uniq = _gather(s, pos)
        index = _gather(perm, pos) if perm is not None else empty
        inverse = ops.searchsorted(uniq, flat, False).reshape(a.shape) if return_inverse else empty
        counts = empty
        if return_counts:  # the distance from each run's start to the next one's
            counts = concatenate([pos[1:], full((1,), n, _dtypes.int64)]) - pos
    extra = [x for x, want in ((index, return_index), (inverse, return_inverse), (counts, return_counts)) if want]
    return (uniq, *extra) if extra else uniq


@on_stream
def searchsorted(a: GPUArray, v: Any, side: str = "left", sorter: Any = None) -> GPUArray:
    """Indices where the elements of ``v`` would be inserted into the sorted 1-D ``a``
    to keep it sorted (``side="right"``: after equal elements), int64 of ``v``'s shape, as
    ``numpy.searchsorted``; NaN sorts last. Both are compared in their common dtype."""
    from .creation import asarray, from_numpy
    from .selection import take

    _check(a, "searchsorted")
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got {a.ndim} dimensions")
    if side not in ("left", "right"):
        raise ValueError(f"search side must be 'left' or 'right' (got {side!r})")
    if sorter is not None:
        order = sorter if isinstance(sorter, GPUArray) else asarray(np.asarray(sorter))
        if order.dtype.kind not in "iu":
            raise TypeError("sorter must only contain integers")
        if order.shape != a.shape:
            raise ValueError("sorter.size must equal a.size")
        if a.size and not (0 <= int(order.min().item()) and int(order.max().item()) < a.size):
            raise ValueError("Sorter index out of range.")
        a = take(a, order)
    if isinstance(v, GPUArray):
        dt = _dtypes.result_type(a, v)
    else:
        host = np.asarray(v)
        try:
            dt = _dtypes.result_type(a, v if isinstance(v, (bool, int, float)) else host)
        except OverflowError:  # a Python int outside a's range: compare in a wider integer type
            dt = _dtypes.result_type(a, host)
        v = from_numpy(np.array(host, order="C"))  # (asarray would make a 0-d value 1-D)
    shape = v.shape
    hay = a.astype(dt, copy=False)
    needles = v.astype(dt, copy=False).reshape(-1)
    needles = needles if needles.is_contiguous else needles.copy()
    if needles.size == 0:
        return GPUArray._empty(shape, _dtypes.int64)
    return _runtime.get().ops.searchsorted(hay if hay.is_contiguous else hay.copy(), needles, side == "right").reshape(shape)


# -- GPU plans (used by _backend/cuda.py) ----------------------------------------------------

SMALL_CONFIGS = ((128, 4), (256, 4), (256, 8), (512, 8))  # (threads, items per thread) of sort_block
RADIX_THREADS = 256  # sort.cu kRadixThreads
UINT_CODE = {1: "B", 2: "H", 4: "I", 8: "Q"}  # struct codes of the key types (kernel parameter `flip`)
SORT_BLOCK = "pgk::sort_block<{key}, {idx}, {threads}, {items}>"
RADIX_UPSWEEP = "pgk::radix_upsweep<{key}, {order}>"
RADIX_SCAN = "pgk::radix_scan"
RADIX_DOWNSWEEP = "pgk::radix_downsweep<{key}, {idx}>"
SEARCHSORTED = "pgk::searchsorted<{key}>"
UNIQUE_FLAGS = "pgk::unique_flags<{key}>"
SELECT_HIST = "pgk::select_hist<{key}>"
SELECT_PICK = "pgk::select_pick"
SELECT_COUNT = "pgk::select_count<{key}>"
SELECT_OFFSETS = "pgk::select_offsets"
SELECT_WRITE = "pgk::select_write<{key}>"
SELECT_TILE = 256 * 8  # sort.cu kSelectItems


def small_config(n: int, key_bytes: int) -> tuple[int, int, int] | None:
    """(threads, items per thread, rows per block) of sort_block: the smallest tile that
    holds a row of ``n`` keys, filled with up to 256 rows; None for the radix passes.
    8-byte keys stop at 2048 (shared memory)."""
    for threads, items in SMALL_CONFIGS:
        tile = threads * items
        if key_bytes == 8 and tile > 2048:
            break
        if n <= tile:
            return threads, items, min(256, tile // n)
    return None


def radix_tile(key_bytes: int) -> int:
    """Keys per tile of radix_downsweep (sort.cu LargeItems)."""
    return RADIX_THREADS * (8 if key_bytes == 8 else 16)


def row_grid(rows: int, n: int, tile: int, target_blocks: int) -> tuple[int, int]:
    """(blocks per row G, tiles per block): about ``target_blocks`` blocks over all rows,
    each taking a contiguous run of whole tiles of its row; none empty."""
    tiles = -(-n // tile)
    g = min(max(1, -(-target_blocks // rows)), tiles)
    per = -(-tiles // g)
    return -(-tiles // per), per


def scan_digits_per_block(g: int) -> int:
    """Digits per radix_scan block: a power of two, up to 8192 counts per block."""
    dpb = 256
    while dpb > 1 and dpb * g > 8192:
        dpb //= 2
    return dpb


def sort_instantiations() -> list[str]:
    """kernels/sort.cu: every kernel the CUDA backend launches, for every key type."""
    out = [RADIX_SCAN, SELECT_PICK, SELECT_OFFSETS]
    for info in dict.fromkeys(_KEYS.values()):
        key = info.trait
        for idx in ("true", "false"):
            for threads, items in SMALL_CONFIGS:
                if info.uint.itemsize < 8 or threads * items <= 2048:
                    out.append(SORT_BLOCK.format(key=key, idx=idx, threads=threads, items=items))
            out.append(RADIX_UPSWEEP.format(key=key, order=idx))
            out.append(RADIX_DOWNSWEEP.format(key=key, idx=idx))
        out += [SEARCHSORTED.format(key=key), UNIQUE_FLAGS.format(key=key)]
        out += [f.format(key=key) for f in (SELECT_HIST, SELECT_COUNT, SELECT_WRITE)]
    return out
