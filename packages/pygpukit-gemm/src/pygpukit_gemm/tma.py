"""TMA tensor maps for the SM 90 kernels that load through the tensor memory
accelerator (``WsTile``'s TMA producer in ``kernels/gemm_tc.cu``).

A map describes a 2-D row-major operand (``inner`` 16-bit elements a row,
``outer`` rows, ``row_bytes`` between rows) and the box one load moves (64
elements, 128 bytes, by ``box_rows``), with the 128-byte swizzle the wgmma
descriptors read; out-of-range elements load as zeros. Maps are encoded by the
driver's ``cuTensorMapEncodeTiled`` (loaded here with ctypes: a host-only
function of libcuda, no context needed) and uploaded to global memory, where
the kernel reads them; the last 64 are kept by operand pointer and geometry, so
a call with new operand addresses encodes and uploads its maps again. ``PYGPUKIT_GEMM_TMA=0``
turns the TMA kernels off.
"""

from __future__ import annotations

import ctypes
import os
from collections import OrderedDict
from functools import cache

import numpy as np

import pygpukit as gp

_UINT16, _SWIZZLE_128B, _L2_256B = 1, 3, 3  # CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion
_CACHED = 64


@cache
def _encoder() -> ctypes._CFuncPtr | None:
    if gp.backend() != "cuda":  # maps describe device memory: no driver is loaded for the CPU backend
        return None
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    except (OSError, AttributeError):
        return None
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]  # fmt: skip
    fn.restype = ctypes.c_int
    return fn


def available() -> bool:
    """Whether the TMA kernels may run: the driver encodes maps, and not turned off."""
    return os.environ.get("PYGPUKIT_GEMM_TMA", "1") != "0" and _encoder() is not None


def encode_2d(ptr: int, inner: int, outer: int, row_bytes: int, box_rows: int) -> bytes:
    """The 128 bytes of the map of a (outer, inner) 16-bit operand at ``ptr``."""
    fn = _encoder()
    if fn is None:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled is not available (backend {gp.backend()!r}; it needs the CUDA backend and a driver that has it)"
        )
    raw = (ctypes.c_uint8 * 192)()
    at = -ctypes.addressof(raw) % 64  # the map must be 64-byte aligned
    dims = (ctypes.c_uint64 * 2)(inner, outer)
    strides = (ctypes.c_uint64 * 1)(row_bytes)
    box = (ctypes.c_uint32 * 2)(64, box_rows)
    ones = (ctypes.c_uint32 * 2)(1, 1)
    rc = fn(ctypes.addressof(raw) + at, _UINT16, 2, ptr, dims, strides, box, ones, 0, _SWIZZLE_128B, _L2_256B, 0)
    if rc != 0:
        raise RuntimeError(
            f"cuTensorMapEncodeTiled failed with CUresult {rc} (inner {inner}, outer {outer}, row bytes {row_bytes}, box rows {box_rows})"
        )
    return bytes(raw)[at : at + 128]


_maps: OrderedDict[tuple, gp.GPUArray] = OrderedDict()


def maps(*operands: tuple[int, int, int, int, int]) -> gp.GPUArray:
    """The maps of ``operands`` ((ptr, inner, outer, row_bytes, box_rows) each)
    side by side in device memory, cached by pointer and geometry (the last 64)."""
    key = tuple(operands)
    got = _maps.get(key)
    if got is None:
        got = gp.from_numpy(np.frombuffer(b"".join(encode_2d(*op) for op in operands), np.uint8))
        _maps[key] = got
        if len(_maps) > _CACHED:
            _maps.popitem(last=False)
    else:
        _maps.move_to_end(key)
    return got
