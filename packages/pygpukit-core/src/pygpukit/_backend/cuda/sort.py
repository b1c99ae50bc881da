"""kernels/sort.cu: stable LSD radix sort of rows (8-bit digits; rows that fit one
block sort in shared memory), radix select for topk, searchsorted and the
flags of unique, over the keys of pygpukit/_backend/sort.py."""

from __future__ import annotations

import struct
from typing import Any

from ..sort import KEYS, flip_bits, key_info
from .launch import THREADS, Base

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


class SortOps(Base):
    def sort_rows(self, src: Any, rows: int, n: int, descending: bool, indices: bool, out: Any, stream: int) -> None:
        """Each row of contiguous ``src`` viewed as (rows, n) sorted, stable, into contiguous
        ``out``: the values, or (``indices``) the int64 positions that sort it (order keys)."""
        if out._size == 0:
            return
        if n >= 1 << 31:
            raise ValueError(f"sort: rows of {n} elements are too long for the CUDA backend (at most 2^31 - 1)")
        key = key_info(src._dtype)
        code = UINT_CODE[key.uint.itemsize]
        flip = flip_bits(src._dtype, descending)
        idx = "true" if indices else "false"
        cfg = small_config(n, key.uint.itemsize)
        if cfg is not None:
            threads, items, rpt = cfg
            fn = self._fn("sort", SORT_BLOCK.format(key=key.trait, idx=idx, threads=threads, items=items))
            vals, ids = (0, out._ptr) if indices else (out._ptr, 0)
            args = struct.pack(f"@PPPqq{code}i", src._ptr, vals, ids, rows, n, flip, rpt)
            self.launch(fn, min(-(-rows // rpt), 65535 * 16), 1, 1, threads, 1, 1, 0, stream, args)
            return
        tile = radix_tile(key.uint.itemsize)
        g, per = row_grid(rows, n, tile, self.sms * 8)
        passes = key.uint.itemsize
        counts = self.pool.alloc(rows * 256 * g * 4, stream)
        row_tot = self.pool.alloc(passes * rows * 256 * 4, stream)
        self.native.memset_d8(row_tot.ptr, 0, passes * rows * 256 * 4, stream)
        two = 2 if passes > 2 else 1
        keys = [self.pool.alloc(rows * n * key.uint.itemsize, stream) for _ in range(two if passes > 1 else 0)]
        ids32 = [self.pool.alloc(rows * n * 4, stream) for _ in range(two if indices and passes > 1 else 0)]
        up = self._fn("sort", RADIX_UPSWEEP.format(key=key.trait, order=idx))
        scan = self._fn("sort", RADIX_SCAN)
        down = self._fn("sort", RADIX_DOWNSWEEP.format(key=key.trait, idx=idx))
        dpb = scan_digits_per_block(g)
        kin, iin = src._ptr, 0
        for p in range(passes):
            first, last = p == 0, p == passes - 1
            kout = (0 if indices else out._ptr) if last else keys[p % two].ptr
            iout = ids32[p % two].ptr if indices and not last else 0
            tot = row_tot.ptr + p * rows * 256 * 4
            args = struct.pack(f"@PPPqiqi{code}", kin, counts.ptr, tot, n, g, per * tile, 8 * p, flip)
            self.launch(up, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            self.launch(scan, rows * (256 // dpb), 1, 1, 256, 1, 1, 0, stream, struct.pack("@PPii", counts.ptr, tot, g, dpb))
            i64 = out._ptr if indices else 0
            args = struct.pack(f"@6Pqiii{code}ii", kin, kout, iin, iout, i64, counts.ptr, n, g, per, 8 * p, flip, first, last)
            self.launch(down, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            kin, iin = kout, iout

    def topk_select(self, src: Any, rows: int, n: int, k: int, largest: bool, out: Any, stream: int) -> None:
        """int64 ``out`` (rows, k) = the positions (increasing) of the first k elements of each
        row of ``src`` (rows, n) in the stable order sort (descending when ``largest``): radix select."""
        key = key_info(src._dtype)
        code = UINT_CODE[key.uint.itemsize]
        flip = flip_bits(src._dtype, largest)
        g, per = row_grid(rows, n, SELECT_TILE, self.sms * 8)
        chunk = per * SELECT_TILE
        state = self.pool.alloc(rows * 16, stream)
        hist = self.pool.alloc(rows * 256 * 4, stream)
        cnt = self.pool.alloc(rows * 2 * g * 4, stream)
        self.native.memset_d8(hist.ptr, 0, rows * 256 * 4, stream)
        fhist = self._fn("sort", SELECT_HIST.format(key=key.trait))
        pick = self._fn("sort", SELECT_PICK)
        bits = 8 * key.uint.itemsize
        for shift in range(bits - 8, -1, -8):
            first = shift == bits - 8
            args = struct.pack(f"@PPPqiqi{code}i", src._ptr, hist.ptr, state.ptr, n, g, chunk, shift, flip, first)
            self.launch(fhist, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
            self.launch(pick, rows, 1, 1, 256, 1, 1, 0, stream, struct.pack("@PPiii", hist.ptr, state.ptr, shift, k, first))
        count = self._fn("sort", SELECT_COUNT.format(key=key.trait))
        args = struct.pack(f"@PPPqiq{code}", src._ptr, state.ptr, cnt.ptr, n, g, chunk, flip)
        self.launch(count, rows * g, 1, 1, 256, 1, 1, 0, stream, args)
        self.launch(self._fn("sort", SELECT_OFFSETS), rows, 1, 1, 256, 1, 1, 0, stream, struct.pack("@Pi", cnt.ptr, g))
        write = self._fn("sort", SELECT_WRITE.format(key=key.trait))
        args = struct.pack(f"@PPPPqiqi{code}", src._ptr, state.ptr, cnt.ptr, out._ptr, n, g, chunk, k, flip)
        self.launch(write, rows * g, 1, 1, 256, 1, 1, 0, stream, args)

    def searchsorted(self, a: Any, v: Any, right: bool, out: Any, stream: int) -> None:
        """int64 ``out``: for each element of contiguous ``v``, its insertion position in the
        sorted 1-D contiguous ``a`` of the same dtype (binary search, one thread per element)."""
        key = key_info(a._dtype)
        fn = self._fn("sort", SEARCHSORTED.format(key=key.trait))
        code = UINT_CODE[key.uint.itemsize]
        args = struct.pack(f"@PqPqPi{code}", a._ptr, a.size, v._ptr, v.size, out._ptr, right, flip_bits(a._dtype, False))
        self.launch(fn, self._strided_grid(v.size), 1, 1, THREADS, 1, 1, 0, stream, args)

    def unique_flags(self, s: Any, out: Any, stream: int) -> None:
        """bool ``out``: element i of sorted ``s`` differs from element i - 1 (order keys)."""
        fn = self._fn("sort", UNIQUE_FLAGS.format(key=key_info(s._dtype).trait))
        self.launch(fn, self._strided_grid(s.size), 1, 1, THREADS, 1, 1, 0, stream, struct.pack("@PPq", s._ptr, out._ptr, s.size))


def instantiations() -> list[str]:
    """kernels/sort.cu: every kernel the CUDA backend launches, for every key type."""
    out = [RADIX_SCAN, SELECT_PICK, SELECT_OFFSETS]
    for info in dict.fromkeys(KEYS.values()):
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
