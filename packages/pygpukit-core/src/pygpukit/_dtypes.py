"""The dtypes pygpukit knows, their C names in kernels and their promotion rules.

NumPy dtypes are the currency (``gp.float32 is numpy.float32``); bfloat16 and
the float8 formats come from ml_dtypes so that the CPU backend computes with
them too.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

# dtype -> the type name used by kernels in pygpukit/kernels/include/pgk/types.cuh
C_TYPES: dict[np.dtype, str] = {
    bool_: "bool",
    int8: "signed char",
    int16: "short",
    int32: "int",
    int64: "long long",
    uint8: "unsigned char",
    uint16: "unsigned short",
    uint32: "unsigned int",
    uint64: "unsigned long long",
    float16: "pgk::half",
    bfloat16: "pgk::bfloat16",
    float32: "float",
    float64: "double",
    float8_e4m3fn: "pgk::float8_e4m3",
    float8_e5m2: "pgk::float8_e5m2",
    complex64: "pgk::complex64",
    complex128: "pgk::complex128",
}

SUPPORTED = tuple(C_TYPES)
REAL = tuple(dt for dt in SUPPORTED if dt.kind != "c")  # what the ordering and most reducing kernels take
_FLOAT8 = (float8_e4m3fn, float8_e5m2)
_ML_FLOATS = (bfloat16, *_FLOAT8)


_known: dict[Any, np.dtype] = {}


def as_dtype(dtype: Any) -> np.dtype:
    """Normalize anything NumPy accepts as a dtype and check that pygpukit supports it."""
    try:
        return _known[dtype]
    except (KeyError, TypeError):
        pass
    dt = _as_dtype(dtype)
    try:
        _known[dtype] = dt
    except TypeError:  # unhashable spelling of a dtype
        pass
    return dt


def _as_dtype(dtype: Any) -> np.dtype:
    if isinstance(dtype, str) and dtype in _BY_NAME:
        dt = _BY_NAME[dtype]
    else:
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"data type {dtype!r} not understood") from exc
    if dt.byteorder == ">":
        raise TypeError(f"big-endian dtype {dt} is not supported; use {dt.newbyteorder('=')}")
    if dt not in C_TYPES:
        names = ", ".join(sorted(d.name for d in SUPPORTED))
        raise TypeError(f"dtype {dt} is not supported by pygpukit; supported: {names}")
    return dt


_BY_NAME = {dt.name: dt for dt in C_TYPES}


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt in _ML_FLOATS


def is_complex(dt: np.dtype) -> bool:
    return dt.kind == "c"


def complex_part(dt: np.dtype) -> np.dtype:
    """The float dtype of each part of complex ``dt`` (complex64 -> float32)."""
    return np.dtype(f"f{dt.itemsize // 2}")


def _float_rank(dt: np.dtype) -> int:
    return {float8_e4m3fn: 0, float8_e5m2: 0, float16: 1, bfloat16: 1, float32: 2, float64: 3}[dt]


def _promote_pair(a: np.dtype, b: np.dtype) -> np.dtype:
    if a == b:
        return a
    if a not in _ML_FLOATS and b not in _ML_FLOATS:
        return np.result_type(a, b)
    # bfloat16 / float8 with another dtype, where NumPy has no rule: a float
    # wins over integers and bool; between floats the wider one wins, and two
    # different formats of the same width meet in float32 (as PyTorch does);
    # with a complex dtype they count as float16 (complex64 at least).
    if is_complex(a) or is_complex(b):
        return np.result_type(*(float16 if d in _ML_FLOATS else d for d in (a, b)))
    a_float, b_float = is_float(a), is_float(b)
    if a_float and not b_float:
        return a
    if b_float and not a_float:
        return b
    ra, rb = _float_rank(a), _float_rank(b)
    if ra == rb:
        return float32
    return a if ra > rb else b


def result_type(*operands: Any) -> np.dtype:
    """The dtype of an elementwise result, by NumPy 2 rules (Python scalars are weak).

    Operands are dtypes, objects with a ``dtype`` attribute, or Python scalars.
    """
    dtypes = []
    scalars = []
    for op in operands:
        if isinstance(op, (bool, int, float, complex)) and not isinstance(op, np.generic):
            scalars.append(op)
        elif hasattr(op, "dtype") and not isinstance(op, type):  # arrays; not scalar types like np.float32
            dtypes.append(as_dtype(op.dtype))
        else:
            dtypes.append(as_dtype(op))
    if not dtypes:
        return as_dtype(np.result_type(*scalars))
    out = dtypes[0]
    for dt in dtypes[1:]:
        out = _promote_pair(out, dt)
    for s in scalars:
        out = _promote_weak(out, s)
    return out


def _promote_weak(dt: np.dtype, scalar: bool | int | float | complex) -> np.dtype:
    if isinstance(scalar, bool):
        return dt
    if isinstance(scalar, int):
        if dt == bool_:
            return int64
        if dt.kind in "iu":
            info = np.iinfo(dt)
            if not info.min <= scalar <= info.max:
                raise OverflowError(f"Python integer {scalar} out of bounds for {dt}")
        return dt
    if isinstance(scalar, complex):  # complex64 for float32 and narrower, else complex128
        if is_complex(dt):
            return dt
        return complex128 if dt == float64 or not is_float(dt) else complex64
    # float scalar
    return dt if is_float(dt) or is_complex(dt) else float64


def accumulator(out_dt: np.dtype) -> np.dtype:
    """What kernels accumulate sums and products in for a result dtype: float64 for
    float64, float32 for the other floats, 64-bit integers for integers and bool,
    the complex dtype itself for complex (as NumPy)."""
    if out_dt == float64 or is_complex(out_dt):
        return out_dt
    if is_float(out_dt):
        return float32
    return uint64 if out_dt.kind == "u" else int64


def compute_dtype(dt: np.dtype) -> np.dtype:
    """What kernels (and the CPU backend, alike) do arithmetic in for operands of
    ``dt``: float32 for the 8/16-bit floats (pgk::compute_t), else ``dt`` itself."""
    return float32 if dt.itemsize < 4 and is_float(dt) else dt


def compare_dtype(dt: np.dtype) -> np.dtype:
    """The dtype max/min/argmax compare in: float32 for the 8/16-bit floats, int32
    for bool and 8/16-bit integers (warp shuffles move 32 or 64 bits), else dt."""
    if dt.itemsize >= 4:
        return dt
    return float32 if is_float(dt) else int32


def reduction_dtypes(op: str, dt: np.dtype, out: np.dtype | None = None) -> tuple[np.dtype, np.dtype]:
    """(result, accumulator) dtypes of reduction ``op`` (sum, prod, max, min, all,
    any) over ``dt``; ``out`` replaces the result dtype of sum and prod."""
    if op in ("sum", "prod"):
        res = sum_dtype(dt) if out is None else out
        return res, accumulator(res)
    if op in ("all", "any"):
        return bool_, int32
    return dt, compare_dtype(dt)


def sum_dtype(dt: np.dtype) -> np.dtype:
    """NumPy's default accumulator/result dtype of ``sum`` for an input dtype."""
    if dt == bool_ or dt.kind == "i":
        return int64
    if dt.kind == "u":
        return uint64
    return dt


def scalar_bytes(value: Any, dt: np.dtype) -> bytes:
    """``value`` converted to ``dt`` (NumPy casting) as raw bytes, for a kernel parameter."""
    return np.asarray(value).astype(dt).tobytes()


def finfo(dtype: Any) -> Any:
    """Machine limits of a floating-point dtype (``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal``...), as ``numpy.finfo``; ml_dtypes' for bfloat16 and float8."""
    dt = as_dtype(getattr(dtype, "dtype", dtype))
    if not is_float(dt):
        raise ValueError(f"finfo: {dt} is not a floating-point dtype")
    return ml_dtypes.finfo(dt) if dt in _ML_FLOATS else np.finfo(dt)


def iinfo(dtype: Any) -> np.iinfo:
    """Machine limits of an integer dtype (``bits``, ``min``, ``max``), as ``numpy.iinfo``."""
    dt = as_dtype(getattr(dtype, "dtype", dtype))
    if dt.kind not in "iu":
        raise ValueError(f"iinfo: {dt} is not an integer dtype")
    return np.iinfo(dt)
