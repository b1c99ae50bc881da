"""The plugin contract: everything a kernel plugin needs from core, in one module.

A plugin package imports ``pygpukit`` (the array API), ``pygpukit.plugins``
(its hooks) and this module, and nothing named ``pygpukit._*``. See
docs/plugins.md for a walk through a kernel plugin; in short::

    from pygpukit import ext

    SOURCE = ext.kernel_source(__name__, "scale")        # <package>/kernels/scale.cu
    _plans: ext.PlanCache[tuple, ext.Launch] = ext.PlanCache("mypkg.scale")

    def scale(x, a):
        key = (ext.layout_key(x), )
        launch = _plans.get(key) or _plans.put(key, _plan(x))
        y = ext.empty(x.shape, x.dtype)                   # on the current stream
        launch(x, y, a, x.size)                           # packed by the kernel's signature
        return y

    def _plan(x):
        k = ext.Kernel(SOURCE, "scale<float>")
        return k.launcher(-(-x.size // 256), 256)

What is here:

- kernels: ``kernel_source``, ``Kernel`` (``gp.jit``'s class), ``Launch``;
- plans: ``PlanCache``, ``layout_key``;
- arrays: ``empty`` (output allocation on the current stream), ``raw``
  (pointer, shape, strides, dtype of an array), ``accumulator_dtype``,
  ``compute_dtype``;
- the device and streams: ``device()``, ``current_stream()``;
- foreign libraries: ``launch_gate(stream)`` (so the scheduler sees launches
  made by cuBLASLt, cuFFT, NCCL, Triton), ``load_library`` (the NVIDIA wheel /
  system search of NVRTC, cuBLASLt, cuFFT), ``encode_tensor_map_2d`` (the
  driver's tensor-map encoder for TMA kernels);
- registration: ``register_family`` (one op's reference, CUDA and Triton
  implementations at once), ``op`` (an op's dispatcher). An implementation
  of an op that another plugin defines may be registered before that
  plugin loads: it waits for the definition.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes, _nvlibs, _runtime
from ._errors import BackendError, PluginError
from .array import GPUArray
from .jit.kernel import JitKernel as Kernel
from .jit.kernel import Launch
from .plans import PlanCache, layout_key
from .registry import REGISTRY
from .streams import current_stream_handle as current_stream

__all__ = [
    "DeviceInfo",
    "Kernel",
    "Launch",
    "PlanCache",
    "RawView",
    "accumulator_dtype",
    "compute_dtype",
    "current_stream",
    "device",
    "empty",
    "encode_tensor_map_2d",
    "kernel_source",
    "launch_gate",
    "layout_key",
    "library_candidates",
    "load_library",
    "op",
    "raw",
    "register_family",
]


# -- kernels ------------------------------------------------------------------------


@cache
def kernel_source(module: str, name: str) -> str:
    """The text of ``kernels/<name>.cu`` shipped as package data beside the
    package of ``module`` (pass ``__name__``). Its ``#include "pgk/..."``
    lines find core's device headers (types, math, mma, sm90, pdl)."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    package = module if hasattr(mod, "__path__") else (mod.__package__ or module.rpartition(".")[0])
    path = resources.files(package) / "kernels" / f"{name}.cu"
    try:
        return path.read_text()
    except FileNotFoundError:
        raise PluginError(f"kernel_source: package {package!r} ships no kernels/{name}.cu (looked at {path})") from None


# -- arrays -------------------------------------------------------------------------


def empty(shape: tuple[int, ...], dtype: np.dtype, stream: int | None = None) -> GPUArray:
    """A new C-contiguous array from the pool, ordered on ``stream`` (a handle;
    default the current stream): how an op allocates its output. ``shape`` is
    a tuple of ints and ``dtype`` a NumPy dtype (no conversion: the hot path)."""
    return GPUArray._empty(shape, dtype, stream)


class RawView(NamedTuple):
    """What a kernel sees of an array: its data pointer, shape, strides in bytes
    (as NumPy), dtype and whether it is C-contiguous."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype
    contiguous: bool


def raw(a: GPUArray) -> RawView:
    """The raw view of ``a``; a TypeError naming the type when ``a`` is not a GPUArray."""
    if not isinstance(a, GPUArray):
        raise TypeError(f"raw() expects a GPUArray, got {type(a).__name__}")
    return RawView(a._ptr, a._shape, a.strides, a._dtype, a._contig)


def accumulator_dtype(dtype: Any) -> np.dtype:
    """What sums and products of a result dtype accumulate in: float64 for
    float64, float32 for the other floats (float16, bfloat16, fp8), 64-bit
    integers for integers and bool, the complex dtype itself for complex."""
    return _dtypes.accumulator(_dtypes.as_dtype(dtype))


def compute_dtype(dtype: Any) -> np.dtype:
    """The float dtype a kernel or reference computes a float input in: float64
    stays float64, every other float (32, 16 and 8 bits) computes in float32.
    A TypeError for a dtype that is not a real float."""
    dt = _dtypes.as_dtype(dtype)
    if not _dtypes.is_float(dt):
        raise TypeError(f"compute_dtype: {dt} is not a real floating dtype")
    return _dtypes.compute_dtype(dt)


# -- the device ---------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceInfo:
    """The device ops run on: backend ("cuda" or "cpu"), ordinal, compute
    capability as major*10+minor (0 on the CPU backend), multiprocessors, and
    the driver's properties (empty on the CPU backend)."""

    backend: str
    ordinal: int
    sm: int
    multiprocessor_count: int
    properties: dict[str, Any]


_device: list[tuple[Any, DeviceInfo]] = []  # (runtime, its DeviceInfo), made once


def device() -> DeviceInfo:
    """The current device (the backend is chosen on first use)."""
    rt = _runtime.get()
    if not _device or _device[0][0] is not rt:
        props = dict(rt.props)
        _device[:] = [(rt, DeviceInfo(rt.backend, rt.device, rt.sm, int(props.get("multiprocessor_count", 0)), props))]
    return _device[0][1]


# -- foreign libraries --------------------------------------------------------------


class launch_gate:
    """``with launch_gate(stream): lib.launch(...)``: a launch made by a library
    outside pygpukit (cuBLASLt, cuFFT, NCCL, Triton) passes the scheduler's
    launch gate as pygpukit's own do (admission, pacing, per-task accounting).
    The launch counts only when the block finishes without an exception; on
    the CPU backend this does nothing."""

    __slots__ = ("_stream", "_token")

    def __init__(self, stream: int) -> None:
        self._stream = stream
        self._token = 0

    def __enter__(self) -> launch_gate:
        rt = _runtime._runtime or _runtime.get()
        if rt.native is not None:
            self._token = rt.native.launch_gate_enter(self._stream)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._token and exc_type is None:
            _runtime.get().native.launch_gate_exit(self._stream, self._token)


def load_library(env_var: str, wheel_libs: Sequence[tuple[str, ...]], sonames: Sequence[str]) -> tuple[ctypes.CDLL, str]:
    """Load an NVIDIA library at run time the way core loads NVRTC: the file
    named by ``env_var`` if set, then the ``nvidia-*`` wheels' files
    (``wheel_libs``: path parts under the ``nvidia`` namespace package, e.g.
    ``("cu13", "lib", "libcublasLt.so.13")``), then ``sonames`` through the
    system loader. Returns (the library, the name it loaded from); an OSError
    listing every attempt when none loads."""
    return _nvlibs.load_first([c for c, _ in _nvlibs.candidates(env_var, wheel_libs, sonames)])


def library_candidates(env_var: str, wheel_libs: Sequence[tuple[str, ...]], sonames: Sequence[str]) -> list[tuple[str, str]]:
    """Where ``load_library`` looks, in order: (path or soname, "env" / "wheel" / "system")."""
    return _nvlibs.candidates(env_var, wheel_libs, sonames)


def encode_tensor_map_2d(ptr: int, inner: int, outer: int, row_bytes: int, box_inner: int, box_rows: int, dtype: Any) -> bytes:
    """The 128-byte CUtensorMap of a row-major 2-D operand at device address
    ``ptr`` (``outer`` rows of ``inner`` elements of ``dtype``, ``row_bytes``
    apart) for TMA loads of ``box_rows`` x ``box_inner`` boxes with the 128-byte
    swizzle that wgmma descriptors read; out-of-range elements load as zeros.
    Encoded by the driver (cuTensorMapEncodeTiled); needs the CUDA backend."""
    rt = _runtime.get()
    if rt.backend != "cuda":
        raise BackendError(f"encode_tensor_map_2d needs the CUDA backend ({rt.reason})")
    dt = _dtypes.as_dtype(dtype)
    return bytes(rt.native.tensor_map_encode_2d(ptr, inner, outer, row_bytes, box_inner, box_rows, dt.itemsize))


# -- registration -------------------------------------------------------------------


def op(name: str) -> Callable[..., Any]:
    """The registry's dispatcher of op ``name`` (what ``gp.ops.<name>`` is), for
    a plugin's public functions to call with their arguments positionally
    (the dispatch's fast path). Loads the plugins on first use."""
    return REGISTRY.dispatcher(name)


def register_family(
    registry: Any,
    op: str,
    *,
    nkey: int,
    reference: Callable[..., Any] | None = None,
    cuda: Callable[..., Any] | None = None,
    triton: Callable[..., Any] | None = None,
    doc: str = "",
    define: bool = True,
    dtypes: Sequence[Any] | None = None,
    min_sm: int = 0,
    priority: int = 10,
    predicate: Callable[..., bool] | None = None,
    cuda_name: str = "kernel",
    triton_priority: int = 5,
    triton_predicate: Callable[..., bool] | None = None,
) -> None:
    """Register one op's family through a plugin's ``registry`` (the
    ``pygpukit_register_ops`` argument): defines ``op`` (unless ``define`` is
    False: the op is someone else's), ``reference`` on every backend (the
    definition of the op, any dtype), ``cuda`` above it on the CUDA backend
    for ``dtypes`` from SM ``min_sm`` where ``predicate(*args)`` holds (named
    ``cuda_name`` in routes and ``gp.ops.table()``), and
    ``triton`` (backend "triton", below the CUDA kernel unless routed). A
    plugin that adds a kernel to another's op passes ``define=False`` and no
    ``reference``."""
    if define and not callable(reference):
        raise PluginError(f"register_family({op!r}): an op defined here needs a callable reference, got {type(reference).__name__}")
    if define:
        registry.define(op, nkey=nkey, doc=doc)
    if reference is not None:
        for backend in ("cuda", "cpu"):
            registry.register(op, reference, backend=backend, name="reference")
    if cuda is not None:
        registry.register(op, cuda, backend="cuda", dtypes=dtypes, min_sm=min_sm, priority=priority, predicate=predicate, name=cuda_name)
    if triton is not None:
        registry.register(op, triton, backend="triton", dtypes=dtypes, priority=triton_priority, predicate=triton_predicate, name="triton")
