"""TMA tensor maps for the SM 90 kernels that load through the tensor memory
accelerator (``WsTile``'s TMA producer in ``kernels/gemm_tc.cu``).

A map describes a 2-D row-major operand (``inner`` 16-bit elements a row,
``outer`` rows, ``row_bytes`` between rows) and the box one load moves (64
elements, 128 bytes, by ``box_rows``), with the 128-byte swizzle the wgmma
descriptors read; out-of-range elements load as zeros. Maps are encoded by the
driver (``ext.encode_tensor_map_2d``, core's entry to ``cuTensorMapEncodeTiled``)
and uploaded to global memory, where the kernel reads them; the last 64 are
kept by operand pointer and geometry, so a call with new operand addresses
encodes and uploads its maps again. ``PYGPUKIT_GEMM_TMA=0`` turns the TMA
kernels off, and so does a driver without the encoder.
"""

from __future__ import annotations

import os

import numpy as np

import pygpukit as gp
from pygpukit import ext

BOX_INNER = 64  # elements of a box row: 128 bytes of 16-bit values, the swizzle's span
_CACHED = 64
_NOT_SUPPORTED = 801  # CUDA_ERROR_NOT_SUPPORTED: what core raises for a driver without the encoder
# the encoder is there unless the driver said otherwise (it has no cuTensorMapEncodeTiled)
_encoder = {"present": True}

Operand = tuple[int, int, int, int, int]  # (ptr, inner, outer, row_bytes, box_rows)


def available() -> bool:
    """Whether the TMA kernels may run: the CUDA backend, a driver that encodes maps, and not turned off."""
    return os.environ.get("PYGPUKIT_GEMM_TMA", "1") != "0" and _encoder["present"] and ext.device().backend == "cuda"


def encode_2d(ptr: int, inner: int, outer: int, row_bytes: int, box_rows: int) -> bytes:
    """The 128 bytes of the map of a (outer, inner) 16-bit operand at ``ptr``
    (a BackendError on the CPU backend, a CudaError naming the call and the
    geometry where the driver refuses it)."""
    return ext.encode_tensor_map_2d(ptr, inner, outer, row_bytes, BOX_INNER, box_rows, np.uint16)


_maps: ext.PlanCache[tuple[Operand, ...], gp.GPUArray] = ext.PlanCache("pygpukit_gemm.tma.maps", maxsize=_CACHED)


def maps(*operands: Operand) -> gp.GPUArray | None:
    """The maps of ``operands`` ((ptr, inner, outer, row_bytes, box_rows) each)
    side by side in device memory, cached by pointer and geometry (the last 64);
    None when the driver has no encoder (the kernels then load without TMA)."""
    got = _maps.get(operands)
    if got is None:
        try:
            encoded = b"".join(encode_2d(*op) for op in operands)
        except gp.CudaError as e:
            if e.code != _NOT_SUPPORTED:
                raise
            _encoder["present"] = False
            return None
        got = _maps.put(operands, gp.from_numpy(np.frombuffer(encoded, np.uint8)))
    return got
