"""Zero-copy interop: DLPack (both ways) and ``__cuda_array_interface__`` (v3).

DLPack structs are built and read with ctypes: a producer capsule owns a
``DLManagedTensorVersioned`` (or the legacy ``DLManagedTensor``) whose deleter
releases the exported array; a consumed foreign tensor is wrapped as a
GPUArray whose memory owner calls the foreign deleter when the last view goes.
Streams: ``__dlpack__(stream=s)`` makes stream ``s`` wait (an event, no host
sync) for the work queued on pygpukit's current stream; ``from_dlpack`` passes
pygpukit's current stream to the producer, which does the same for its work.
This module installs GPUArray's ``__dlpack__``, ``__dlpack_device__`` and
``__cuda_array_interface__``.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from .array import GPUArray
from .streams import current_stream_handle

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST = 1, 2, 3
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_ML_CODES = {_dtypes.bfloat16: 4, _dtypes.float8_e4m3fn: 10, _dtypes.float8_e5m2: 12}
_FROM_CODE = {(4, 16): _dtypes.bfloat16, (10, 8): _dtypes.float8_e4m3fn, (12, 8): _dtypes.float8_e5m2, (6, 8): _dtypes.bool_}
DLPACK_VERSION = (1, 1)
_FLAG_READ_ONLY = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Raw-pointer variants for the capsule destructor, which must not create new
# references to a capsule that is being destroyed.
_raw_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

# Capsule names must outlive the capsules: module-level bytes.
_NAME_V, _NAME, _USED_V, _USED = b"dltensor_versioned", b"dltensor", b"used_dltensor_versioned", b"used_dltensor"

# Exported tensors alive on the consumer side: struct address -> (struct, arrays, owner).
_exported: dict[int, tuple[Any, ...]] = {}
_lock = threading.Lock()


@_Deleter
def _release(address: int) -> None:
    with _lock:
        _exported.pop(address, None)


def _capsule_destructor(address: int) -> None:
    # Called when a capsule dies: if nobody consumed it (name unchanged), free the tensor.
    name = _raw_get_name(address)
    if name in (_NAME_V, _NAME):
        _release(_raw_get_pointer(address, name))


_destructor = _CapsuleDestructor(_capsule_destructor)


def _dl_dtype(dt: np.dtype) -> DLDataType:
    code = _ML_CODES.get(dt, _CODES.get(dt.kind))
    if code is None:
        raise TypeError(f"dtype {dt} has no DLPack type code")
    return DLDataType(code, dt.itemsize * 8, 1)


def _np_dtype(t: DLDataType) -> np.dtype:
    if t.lanes != 1:
        raise TypeError(f"DLPack tensors with {t.lanes} lanes are not supported")
    if (t.code, t.bits) in _FROM_CODE:
        return _FROM_CODE[(t.code, t.bits)]
    kind = {0: "i", 1: "u", 2: "f", 5: "c"}.get(t.code)
    if kind is None or t.bits % 8:
        raise TypeError(f"DLPack dtype (code {t.code}, {t.bits} bits) is not supported by pygpukit")
    return _dtypes.as_dtype(np.dtype(f"{kind}{t.bits // 8}"))


def dlpack_device(a: GPUArray) -> tuple[int, int]:
    rt = _runtime.get()
    return (KDL_CUDA, rt.device) if rt.backend == "cuda" else (KDL_CPU, 0)


def _sync_consumer(stream: Any) -> None:
    """Make the consumer's ``stream`` wait for the work queued on our current stream."""
    rt = _runtime.get()
    if rt.backend != "cuda" or stream is None:
        return
    if not isinstance(stream, int) or isinstance(stream, bool) or stream == 0:
        raise ValueError(f"__dlpack__: stream must be None, -1 or a CUDA stream handle (1 = legacy default), got {stream!r}")
    if stream == -1:  # the consumer asks for no synchronization
        return
    ours = current_stream_handle()
    if stream == ours:
        return
    ev = rt.native.event_create(False)
    try:
        rt.native.event_record(ev, ours)
        rt.native.stream_wait_event(stream, ev)
    finally:
        rt.native.event_destroy(ev)


def to_dlpack(a: GPUArray, stream: Any = None, max_version: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """The capsule behind ``a.__dlpack__``: versioned when the consumer accepts DLPack >= 1.0."""
    if copy:
        a = a.copy()
    _sync_consumer(stream)
    ndim = a.ndim
    shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // a.itemsize for s in a.strides))
    device = DLDevice(*dlpack_device(a))
    tensor = DLTensor(a.data_ptr, device, ndim, _dl_dtype(a.dtype), shape, strides, 0)
    versioned = max_version is not None and max_version[0] >= 1
    if versioned:
        managed: Any = DLManagedTensorVersioned(DLPackVersion(*DLPACK_VERSION), None, _release, 0, tensor)
        name = _NAME_V
    else:
        managed = DLManagedTensor(tensor, None, _release)
        name = _NAME
    address = ctypes.addressof(managed)
    with _lock:
        _exported[address] = (managed, shape, strides, a)
    return _api.PyCapsule_New(address, name, ctypes.cast(_destructor, ctypes.c_void_p))


class _ForeignMemory:
    """Keeps a consumed DLPack tensor alive; calls its producer's deleter when collected."""

    def __init__(self, managed_address: int, deleter: Any) -> None:
        self.ptr = managed_address
        self._deleter = deleter

    def __del__(self) -> None:
        if self._deleter:
            self._deleter(self.ptr)


def from_dlpack(obj: Any, copy: bool | None = None) -> GPUArray:
    """A GPUArray over the memory of any object with ``__dlpack__`` (PyTorch, CuPy,
    JAX, NumPy on the CPU backend), without a copy. The producer's pending work is
    ordered before pygpukit's current stream."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__, got {type(obj).__name__}")
    rt = _runtime.get()
    want = KDL_CUDA if rt.backend == "cuda" else KDL_CPU
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type != want or (want == KDL_CUDA and dev_id != rt.device):
        where = "cuda:%d" % rt.device if want == KDL_CUDA else "the CPU"
        raise ValueError(f"from_dlpack: the tensor is on DLPack device ({dev_type}, {dev_id}); pygpukit works on {where}")
    kwargs: dict[str, Any] = {"max_version": DLPACK_VERSION}
    if want == KDL_CUDA:
        kwargs["stream"] = current_stream_handle()
    try:
        capsule = obj.__dlpack__(**kwargs)
    except TypeError:  # a producer that predates max_version
        kwargs.pop("max_version")
        capsule = obj.__dlpack__(**kwargs)
    if _api.PyCapsule_IsValid(capsule, _NAME_V):
        address = _api.PyCapsule_GetPointer(capsule, _NAME_V)
        managed: Any = DLManagedTensorVersioned.from_address(address)
        if managed.version.major > DLPACK_VERSION[0]:
            raise ValueError(f"from_dlpack: DLPack {managed.version.major}.{managed.version.minor} is newer than pygpukit understands")
        _api.PyCapsule_SetName(capsule, _USED_V)
    elif _api.PyCapsule_IsValid(capsule, _NAME):
        address = _api.PyCapsule_GetPointer(capsule, _NAME)
        managed = DLManagedTensor.from_address(address)
        _api.PyCapsule_SetName(capsule, _USED)
    else:
        raise TypeError("__dlpack__ did not return a DLPack capsule")
    t = managed.dl_tensor
    dt = _np_dtype(t.dtype)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] * dt.itemsize for i in range(t.ndim))
    else:
        strides = None
    owner = _ForeignMemory(address, managed.deleter if managed.deleter else None)
    out = GPUArray._new(shape, dt, owner, (t.data or 0) + t.byte_offset, strides)
    return out.copy() if copy else out


def cuda_array_interface(a: GPUArray) -> dict[str, Any]:
    """``__cuda_array_interface__`` version 3 (CUDA backend only).

    ``stream`` is pygpukit's current stream, which a v3 consumer must wait for
    (Numba and CuPy do). PyTorch's ``torch.as_tensor`` ignores it: synchronize
    first, or use DLPack, which orders the two streams.
    """
    rt = _runtime.get()
    if rt.backend != "cuda":
        raise AttributeError("__cuda_array_interface__ exists only on the CUDA backend; use DLPack (np.from_dlpack) on the CPU")
    if a.dtype in _ML_CODES:
        raise TypeError(f"__cuda_array_interface__ has no type string for {a.dtype}; use DLPack (__dlpack__) instead")
    return {
        "shape": a.shape,
        "typestr": a.dtype.str,
        "data": (a.data_ptr, False),
        "strides": None if a.is_contiguous else a.strides,
        "version": 3,
        "stream": current_stream_handle(),
    }


def _dlpack(
    self: GPUArray, *, stream: Any = None, max_version: tuple[int, int] | None = None, dl_device: Any = None, copy: bool | None = None
) -> Any:
    """DLPack export (zero-copy). ``stream``: the consumer's stream, made to wait for ours."""
    if dl_device is not None and tuple(dl_device) != dlpack_device(self):
        raise BufferError(f"__dlpack__: cannot export to device {dl_device}; the array is on {dlpack_device(self)}")
    return to_dlpack(self, stream, max_version, copy)


GPUArray.__dlpack__ = _dlpack  # type: ignore[method-assign]
GPUArray.__dlpack_device__ = dlpack_device  # type: ignore[method-assign, assignment]
GPUArray.__cuda_array_interface__ = property(cuda_array_interface)  # type: ignore[assignment]
