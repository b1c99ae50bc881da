"""``TritonArray``: a GPUArray as Triton's launcher and specializer read a tensor.

Triton 3.6 reads from a tensor argument only ``data_ptr()`` (a method: the
address, also checked for 16-byte alignment) and ``dtype``, whose ``str``
ends in a Triton type name after the last dot ("float16", "bfloat16",
"float8_e4m3fn", ...): NumPy's dtypes print exactly those names, so the
GPUArray's own dtype serves. The autotuner keys on ``str(arg.dtype)`` and
its reset/restore hooks call ``zero_``, ``clone`` and ``copy_``; the
interpreter (TRITON_INTERPRET=1) moves "storages" to the host and back,
which for pygpukit's CPU backend (host memory already) is the identity.
Shape, strides (in elements, torch's ``stride()``) and ``numel`` are there for
grid functions and user code written against torch tensors. No copy is made.
"""

from __future__ import annotations

import math
from typing import Any

import pygpukit as gp
from pygpukit import ext


class TritonArray:
    """A view of ``array`` that Triton kernels accept as a tensor argument."""

    __slots__ = ("array",)

    def __init__(self, array: gp.GPUArray) -> None:
        if not isinstance(array, gp.GPUArray):
            raise TypeError(f"TritonArray wraps a pygpukit GPUArray, got {type(array).__name__}")
        self.array = array

    # -- what Triton's specializer and launcher read ---------------------------------
    def data_ptr(self) -> int:
        return self.array.data_ptr

    @property
    def dtype(self) -> Any:
        return self.array.dtype

    # -- torch-like metadata ----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def size(self, dim: int | None = None) -> Any:
        return self.array.shape if dim is None else self.array.shape[dim]

    def stride(self, dim: int | None = None) -> Any:
        item = self.array.dtype.itemsize
        s = tuple(b // item for b in self.array.strides)
        return s if dim is None else s[dim]

    def dim(self) -> int:
        return len(self.array.shape)

    def numel(self) -> int:
        return math.prod(self.array.shape)

    def element_size(self) -> int:
        return self.array.dtype.itemsize

    def is_contiguous(self) -> bool:
        return self.array.is_contiguous

    @property
    def device(self) -> str:
        d = ext.device()
        return f"cuda:{d.ordinal}" if d.backend == "cuda" else "cpu"

    # -- the autotuner's reset_to_zero / restore_value hooks --------------------------
    def zero_(self) -> TritonArray:
        self.array[...] = 0
        return self

    def clone(self) -> TritonArray:
        return TritonArray(self.array.copy())

    def copy_(self, other: Any) -> TritonArray:
        src = other.array if isinstance(other, TritonArray) else other
        if not (isinstance(src, gp.GPUArray) and src.data_ptr == self.array.data_ptr and src.shape == self.array.shape):
            self.array[...] = src
        return self

    # -- Triton's interpreter: "move to the host" is the identity on host memory ------
    def untyped_storage(self) -> TritonArray:
        return self

    def cpu(self) -> TritonArray:
        return self

    def new_empty(self, *shape: Any, **kwargs: Any) -> TritonArray:
        return self

    def set_(self, *args: Any) -> TritonArray:
        return self

    def storage_offset(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"TritonArray(shape={self.array.shape}, dtype={self.array.dtype}, ptr=0x{self.array.data_ptr:x})"
