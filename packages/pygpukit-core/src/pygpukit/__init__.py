"""PyGPUkit: a GPU runtime for Python that needs only the NVIDIA driver.

``import pygpukit as gp`` is cheap: the backend (CUDA, or the CPU simulation
backend when there is no usable GPU) is chosen on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

from . import memory
from ._dtypes import (
    bfloat16,
    bool_,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ._errors import BackendError, CompileError, CudaError, NVRTCError, OutOfMemoryError, PyGPUkitError
from .array import Device, GPUArray
from .creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    identity,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .info import Info, info
from .interop import from_dlpack
from .jit import JitKernel, jit
from .linalg import dot, matmul, outer, vdot
from .reductions import all, any, argmax, argmin, cumprod, cumsum, max, mean, min, prod, sum, var
from .selection import count_nonzero, nonzero, take, take_along_axis
from .shape import (
    ascontiguousarray,
    broadcast_to,
    concatenate,
    expand_dims,
    flip,
    pad,
    permute_dims,
    ravel,
    repeat,
    reshape,
    roll,
    split,
    squeeze,
    stack,
    swapaxes,
    tile,
    transpose,
)
from .streams import Event, Stream, current_stream, synchronize


def backend() -> str:
    """ "cuda" or "cpu" (choosing it now if not chosen yet)."""
    from . import _runtime

    return _runtime.get().backend


def to_numpy(a: GPUArray) -> object:
    """Copy a GPUArray to a new NumPy array (waits for the current stream)."""
    return a.to_numpy()


__all__ = [
    "BackendError",
    "CompileError",
    "CudaError",
    "Device",
    "Event",
    "GPUArray",
    "Info",
    "JitKernel",
    "NVRTCError",
    "OutOfMemoryError",
    "PyGPUkitError",
    "Stream",
    "all",
    "any",
    "arange",
    "argmax",
    "argmin",
    "asarray",
    "ascontiguousarray",
    "backend",
    "bfloat16",
    "bool_",
    "broadcast_to",
    "concatenate",
    "count_nonzero",
    "cumprod",
    "cumsum",
    "current_stream",
    "dot",
    "empty",
    "empty_like",
    "expand_dims",
    "eye",
    "flip",
    "float8_e4m3fn",
    "float8_e5m2",
    "float16",
    "float32",
    "float64",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "identity",
    "info",
    "int8",
    "int16",
    "int32",
    "int64",
    "jit",
    "linspace",
    "matmul",
    "max",
    "mean",
    "memory",
    "min",
    "nonzero",
    "ones",
    "ones_like",
    "outer",
    "pad",
    "permute_dims",
    "prod",
    "ravel",
    "repeat",
    "reshape",
    "result_type",
    "roll",
    "split",
    "squeeze",
    "stack",
    "sum",
    "swapaxes",
    "synchronize",
    "take",
    "take_along_axis",
    "tile",
    "to_numpy",
    "transpose",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "var",
    "vdot",
    "zeros",
    "zeros_like",
]  # fmt: skip
