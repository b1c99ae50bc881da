"""cuFFT as an alternative implementation of ``fft`` / ``ifft`` / ``rfft`` /
``irfft`` (``audio:cufft``), for comparing it with the package's own kernels
or for routing to it: ``gp.route("rfft", "audio:cufft")``.

The library is loaded at run time with ctypes from the ``nvidia-cufft``
wheel (CUDA 13 layout ``nvidia/cu13/lib``, CUDA 12 ``nvidia/cufft/lib``), a
file named by ``PYGPUKIT_CUFFT_PATH``, or the system; nothing is required:
without it the implementation says it does not apply and the own kernels
serve. It ranks below them (priority 5 against 10), so it runs only where
routed.

A call transforms contiguous rows along the last axis (another axis is
swapped there and copied; irfft's input is always copied, as cuFFT's
complex-to-real transform overwrites it). A plan is made once per (kind,
length, rows, dtype) and kept (the 64 made last); its work area comes
from pygpukit's pool on the call's stream, set before each execution, and
the execution passes the scheduler's launch gate. cuFFT computes
unnormalized transforms; ``norm`` is applied after, in place.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import PyGPUkitError, ext

from ._fft_plan import complex_dtype
from .fft import check, fit, input_length

_ENV = "PYGPUKIT_CUFFT_PATH"
_WHEEL_LIBS = (("cu13", "lib", "libcufft.so.12"), ("cufft", "lib", "libcufft.so.11"))
_SYSTEM_SONAMES = ("libcufft.so.12", "libcufft.so.11")
MAX_PLANS = 64
# cufftType (cufft.h) by (kind, complex dtype) and the execution function each takes
_TYPES = {
    ("fft", np.dtype(np.complex64)): (0x29, "cufftExecC2C"),
    ("ifft", np.dtype(np.complex64)): (0x29, "cufftExecC2C"),
    ("rfft", np.dtype(np.complex64)): (0x2A, "cufftExecR2C"),
    ("irfft", np.dtype(np.complex64)): (0x2C, "cufftExecC2R"),
    ("fft", np.dtype(np.complex128)): (0x69, "cufftExecZ2Z"),
    ("ifft", np.dtype(np.complex128)): (0x69, "cufftExecZ2Z"),
    ("rfft", np.dtype(np.complex128)): (0x6A, "cufftExecD2Z"),
    ("irfft", np.dtype(np.complex128)): (0x6C, "cufftExecZ2D"),
}
FORWARD, INVERSE = -1, 1
_RESULTS = (
    "SUCCESS INVALID_PLAN ALLOC_FAILED INVALID_TYPE INVALID_VALUE INTERNAL_ERROR EXEC_FAILED SETUP_FAILED INVALID_SIZE "
    "UNALIGNED_DATA INCOMPLETE_PARAMETER_LIST INVALID_DEVICE PARSE_ERROR NO_WORKSPACE NOT_IMPLEMENTED LICENSE_ERROR NOT_SUPPORTED"
).split()
_UINT8 = np.dtype(np.uint8)


class CufftError(PyGPUkitError, RuntimeError):
    """cuFFT could not be loaded, or one of its calls failed (the call and its status named)."""


def candidates() -> list[str]:
    """Paths and sonames to try, in order."""
    return [c for c, _ in ext.library_candidates(_ENV, _WHEEL_LIBS, _SYSTEM_SONAMES)]


class _Lib:
    """The loaded library, its functions typed."""

    def __init__(self) -> None:
        try:
            self.dll, self.path = ext.load_library(_ENV, _WHEEL_LIBS, _SYSTEM_SONAMES)
        except OSError as e:
            raise CufftError(f"cuFFT could not be loaded (pip install nvidia-cufft); {e}") from None
        d, vp, i32, i64 = self.dll, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        p64 = ctypes.POINTER(i64)
        signatures: dict[str, list[Any]] = {
            "cufftGetVersion": [ctypes.POINTER(i32)],
            "cufftCreate": [ctypes.POINTER(i32)],
            "cufftSetAutoAllocation": [i32, i32],
            "cufftMakePlanMany64": [i32, i32, p64, p64, i64, i64, p64, i64, i64, i32, i64, ctypes.POINTER(ctypes.c_size_t)],
            "cufftSetWorkArea": [i32, vp],
            "cufftSetStream": [i32, vp],
            "cufftDestroy": [i32],
            "cufftExecC2C": [i32, vp, vp, i32],
            "cufftExecZ2Z": [i32, vp, vp, i32],
        }
        for name in ("cufftExecR2C", "cufftExecC2R", "cufftExecD2Z", "cufftExecZ2D"):
            signatures[name] = [i32, vp, vp]
        for name, args in signatures.items():
            fn = getattr(d, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        version = i32()
        self.check(d.cufftGetVersion(ctypes.byref(version)), "cufftGetVersion")
        self.version = version.value

    @staticmethod
    def check(status: int, call: str) -> None:
        if status != 0:
            name = _RESULTS[status] if 0 <= status < len(_RESULTS) else "unknown"
            raise CufftError(f"{call} failed: CUFFT_{name} (cufftResult {status})")


_lib: _Lib | None = None
_lib_error: CufftError | None = None
_lock = threading.Lock()


def library() -> _Lib:
    """cuFFT, loaded once per process (CufftError saying what was tried)."""
    global _lib, _lib_error
    with _lock:
        if _lib is None:
            if _lib_error is not None:
                raise _lib_error
            try:
                _lib = _Lib()
            except CufftError as e:
                _lib_error = e
                raise
        return _lib


def available() -> bool:
    try:
        library()
    except CufftError:
        return False
    return True


class _Plan:
    """A cuFFT plan with its own work-area size; destroyed when dropped from the cache."""

    def __init__(self, lib: _Lib, cufft_type: int, n: int, rows: int) -> None:
        handle = ctypes.c_int()
        lib.check(lib.dll.cufftCreate(ctypes.byref(handle)), "cufftCreate")
        self.lib, self.handle = lib, handle.value
        try:
            lib.check(lib.dll.cufftSetAutoAllocation(self.handle, 0), "cufftSetAutoAllocation")
            size, work = (ctypes.c_longlong * 1)(n), ctypes.c_size_t()
            none = ctypes.POINTER(ctypes.c_longlong)()  # NULL embeds: the basic layout, rows one after another
            status = lib.dll.cufftMakePlanMany64(self.handle, 1, size, none, 1, 0, none, 1, 0, cufft_type, rows, ctypes.byref(work))
            lib.check(status, f"cufftMakePlanMany64 (n={n}, batch={rows})")
        except CufftError:
            lib.dll.cufftDestroy(self.handle)
            raise
        self.work = int(work.value)

    def __del__(self) -> None:
        try:
            self.lib.dll.cufftDestroy(self.handle)
        except Exception:  # interpreter shutdown: the library may be gone
            pass


# (kind, n, rows, complex dtype) -> its plan; a plan dropped from the cache is destroyed
_plans: ext.PlanCache[tuple[str, int, int, np.dtype], _Plan] = ext.PlanCache("pygpukit_audio.cufft", maxsize=MAX_PLANS)


def _plan(kind: str, n: int, rows: int, cdt: np.dtype) -> _Plan:
    key = (kind, n, rows, cdt)
    with _lock:
        plan = _plans.get(key)
    if plan is None:
        plan = _Plan(library(), _TYPES[kind, cdt][0], n, rows)
        with _lock:
            _plans.put(key, plan)
    return plan


def execute(kind: str, x: gp.GPUArray, n: int) -> gp.GPUArray:
    """The unnormalized ``kind`` transform of n points of each row of the
    contiguous x (..., input_length(kind, n)); returns a new contiguous array."""
    cdt = complex_dtype(x.dtype)
    rows = x.size // x.shape[-1]
    out_len = n // 2 + 1 if kind == "rfft" else n
    out_dtype = cdt.type(0).real.dtype if kind == "irfft" else cdt
    stream = ext.current_stream()
    out = ext.empty((*x.shape[:-1], out_len), out_dtype, stream)
    if rows == 0:
        return out
    plan = _plan(kind, n, rows, cdt)
    lib, fn_name = plan.lib, _TYPES[kind, cdt][1]
    work = ext.empty((plan.work,), _UINT8, stream) if plan.work else None
    lib.check(lib.dll.cufftSetWorkArea(plan.handle, ctypes.c_void_p(work.data_ptr if work is not None else None)), "cufftSetWorkArea")
    lib.check(lib.dll.cufftSetStream(plan.handle, ctypes.c_void_p(stream or None)), "cufftSetStream")
    args: list[Any] = [plan.handle, ctypes.c_void_p(x.data_ptr), ctypes.c_void_p(out.data_ptr)]
    if kind in ("fft", "ifft"):
        args.append(FORWARD if kind == "fft" else INVERSE)
    with ext.launch_gate(stream):  # cuFFT launches its kernels itself; a failed call is not counted
        lib.check(int(getattr(lib.dll, fn_name)(*args)), fn_name)
    return out


def _implementation(kind: str) -> Any:
    def cufft(a: gp.GPUArray, n: Any = None, axis: Any = -1, norm: Any = None) -> gp.GPUArray:
        n, axis, scale = check(kind, a, n, axis, norm)
        x = fit(a, input_length(kind, n), axis)
        last = axis == x.ndim - 1
        if not last:
            x = x.swapaxes(axis, -1)
        if kind == "fft" and x.dtype.kind != "c":
            x = x.astype(complex_dtype(x.dtype))
        if kind == "irfft" or not x.is_contiguous:
            x = x.copy()  # irfft: cuFFT's complex-to-real transform overwrites its input
        y = execute(kind, x, n)
        if scale != 1.0:
            gp.multiply(y, scale, out=y)
        return y if last else y.swapaxes(axis, -1)

    def takes(a: Any, n: Any = None, axis: Any = -1, norm: Any = None) -> bool:
        try:
            check(kind, a, n, axis, norm)
        except ValueError:
            return False  # the reference raises the error
        return a.dtype.kind in "fc" and available()

    cufft.__name__ = f"cufft_{kind}"
    return cufft, takes


def register(registry: Any) -> None:
    """After fft.register: cuFFT under each transform, below the own kernels."""
    for kind in ("fft", "ifft", "rfft", "irfft"):
        fn, takes = _implementation(kind)
        registry.register(
            kind, fn, backend="cuda", dtypes=["float32", "float64", "complex64", "complex128"], priority=5, predicate=takes, name="cufft"
        )
