"""Linear algebra entry points: matmul (``@``), linear, dot, vdot, outer, tril,
triu, and the float32 matmul precision setting.

``matmul`` and ``linear`` are registry ops: the core implementation here is a correct
reference (exact FP32: no TF32, no tensor cores) for every dtype, and plugins
(pygpukit-gemm) register faster ones for the dtypes and shapes they serve.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _dtypes, _env, _runtime
from .array import GPUArray, broadcast_to, from_parts
from .creation import arange, asarray, zeros
from .registry import builtin
from .streams import current_stream_handle, on_stream
from .ufuncs import greater_equal, less_equal, subtract, where


@dataclass(frozen=True)
class MatmulShapes:
    """``a @ b`` with NumPy's rules, checked: ``a`` and ``b`` broadcast (as views)
    to (*batch, m, k) and (*batch, k, n), the result dtype, and the axes that
    1-D operands added (removed from the (*batch, m, n) result by ``finish``)."""

    a: GPUArray
    b: GPUArray
    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    out_dtype: np.dtype
    squeeze: tuple[int, ...]

    def finish(self, out: GPUArray) -> GPUArray:
        """The (*batch, m, n) result, with the 1-D operands' axes removed."""
        return out.squeeze(self.squeeze) if self.squeeze else out


def matmul_shapes(a: Any, b: Any) -> MatmulShapes:
    """Check and broadcast the operands of ``matmul`` (shared by every implementation)."""
    if not isinstance(a, GPUArray) or not isinstance(b, GPUArray):
        raise TypeError(f"matmul expects two GPUArrays, got {type(a).__name__} and {type(b).__name__}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions (0-d arrays are not allowed; use *)")
    a2 = a.reshape(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.reshape(b.shape[0], 1) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature (n?,k),(k,m?)->(n?,m?) (size {k2} is different from {k})"
        )
    batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    nd = len(batch) + 2
    squeeze = (nd - 2,) * (a.ndim == 1) + (nd - 1,) * (b.ndim == 1)
    out_dt = _dtypes.result_type(a.dtype, b.dtype)
    return MatmulShapes(broadcast_to(a2, (*batch, m, k)), broadcast_to(b2, (*batch, k, n)), batch, m, n, k, out_dt, squeeze)


def _matmul(a: GPUArray, b: GPUArray) -> GPUArray:
    """Matrix product with NumPy's rules: 1-D operands are promoted and the added
    axis removed, leading axes broadcast as a batch; no 0-d operands. Core's
    implementation is exact (no TF32) whatever ``set_matmul_precision`` allows."""
    s = matmul_shapes(a, b)
    if _dtypes.is_complex(s.out_dtype):
        return _complex_matmul(a.astype(s.out_dtype, copy=False), b.astype(s.out_dtype, copy=False))
    A = s.a if s.a.is_contiguous else s.a.copy()
    B = s.b if s.b.is_contiguous else s.b.copy()
    stream = current_stream_handle()
    out = GPUArray._empty((*s.batch, s.m, s.n), s.out_dtype, stream)
    _runtime.get().ops.matmul(A, B, _dtypes.accumulator(s.out_dtype), math.prod(s.batch), s.m, s.n, s.k, out, stream)
    return s.finish(out)


matmul = builtin("matmul", _matmul, nkey=2)


def linear_shapes(x: Any, w: Any, bias: Any) -> int:
    """Check the operands of ``linear``; returns out_features."""
    if not isinstance(x, GPUArray) or not isinstance(w, GPUArray):
        raise TypeError(f"linear expects GPUArrays x and w, got {type(x).__name__} and {type(w).__name__}")
    if w.ndim != 2:
        raise ValueError(f"linear: w must be 2-D (out_features, in_features), got shape {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: x's last axis must have w's in_features ({w.shape[1]}), got x of shape {x.shape}")
    if bias is not None:
        if not isinstance(bias, GPUArray):
            raise TypeError(f"linear: bias must be a GPUArray or None, got {type(bias).__name__}")
        if bias.shape != (w.shape[0],):
            raise ValueError(f"linear: bias must have shape ({w.shape[0]},) (out_features), got {bias.shape}")
    return w.shape[0]


def _linear(x: GPUArray, w: GPUArray, bias: GPUArray | None = None) -> GPUArray:
    """``x @ w.T + bias``: w in the (out_features, in_features) layout of PyTorch's
    Linear; x of shape (..., in_features) gives (..., out_features)."""
    linear_shapes(x, w, bias)
    y = matmul(x, w.T)
    return y if bias is None else y + bias


linear = builtin("linear", _linear, nkey=2)

_PRECISIONS = {"highest": "highest", "ieee": "highest", "tf32": "tf32", "high": "tf32"}
_precision = ["tf32" if _env.flag("PYGPUKIT_ALLOW_TF32", False) else "highest"]


def set_matmul_precision(precision: str) -> None:
    """What float32 matrix products may round to: "highest" (exact FP32, the
    default) or "tf32" (inputs rounded to TF32 on tensor cores; "high" is the same,
    as in PyTorch). Implementations that have no TF32 path stay exact.
    ``PYGPUKIT_ALLOW_TF32=1`` starts the process with "tf32"."""
    if precision not in _PRECISIONS:
        raise ValueError(f"matmul precision must be one of {', '.join(map(repr, _PRECISIONS))}, got {precision!r}")
    _precision[0] = _PRECISIONS[precision]


def get_matmul_precision() -> str:
    """ "highest" or "tf32" (see ``set_matmul_precision``)."""
    return _precision[0]


def _complex_matmul(a: GPUArray, b: GPUArray) -> GPUArray:
    """(ar + i ai) @ (br + i bi) as four real products of the parts (views)."""
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    re = matmul(ar, br) - matmul(ai, bi)
    im = matmul(ar, bi) + matmul(ai, br)
    return from_parts(re, im, a.dtype)


@on_stream
def dot(a: GPUArray, b: GPUArray) -> GPUArray:
    """NumPy's dot for 1-D and 2-D operands (inner product; matrix product)."""
    if a.ndim > 2 or b.ndim > 2:
        raise ValueError("dot supports 1-D and 2-D operands; use matmul for batches")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return matmul(a, b)


@on_stream
def vdot(a: GPUArray, b: GPUArray) -> GPUArray:
    """Dot product of the flattened operands; a complex ``a`` is conjugated first (as NumPy)."""
    if a.size != b.size:
        raise ValueError(f"vdot: cannot take the dot product of sizes {a.size} and {b.size}")
    if _dtypes.is_complex(a.dtype):
        a = a.conj()
    return matmul(a.reshape(-1), b.reshape(-1))


@on_stream
def outer(a: GPUArray, b: GPUArray) -> GPUArray:
    """Outer product of the flattened operands (an elementwise product with broadcasting)."""
    return a.reshape(-1, 1) * b.reshape(1, -1)


def _operand(other: Any) -> GPUArray | None:
    """A NumPy operand is copied over (as for + - * /); anything else is not ours."""
    if isinstance(other, GPUArray):
        return other
    if isinstance(other, np.ndarray):
        return asarray(other)
    return None


def _matmul_operator(self: GPUArray, other: Any) -> GPUArray:
    o = _operand(other)
    return NotImplemented if o is None else matmul(self, o)


def _rmatmul_operator(self: GPUArray, other: Any) -> GPUArray:
    o = _operand(other)
    return NotImplemented if o is None else matmul(o, self)


GPUArray.__matmul__ = _matmul_operator  # type: ignore[method-assign]
GPUArray.__rmatmul__ = _rmatmul_operator  # type: ignore[method-assign]


def _triangle(a: GPUArray, k: int, lower: bool, name: str) -> GPUArray:
    if not isinstance(a, GPUArray):
        raise TypeError(f"{name} expects a GPUArray, got {type(a).__name__}")
    if a.ndim < 2:
        raise ValueError(f"{name} needs an array of at least 2 dimensions, got shape {a.shape}")
    k = operator.index(k)
    rows, cols = a.shape[-2:]
    offset = subtract(arange(cols, dtype=_dtypes.int64), arange(rows, dtype=_dtypes.int64).reshape((rows, 1)))  # j - i
    keep = less_equal(offset, k) if lower else greater_equal(offset, k)
    return where(keep, a, zeros((), a.dtype))


@on_stream
def tril(a: GPUArray, k: int = 0) -> GPUArray:
    """A copy of ``a`` with the elements above diagonal ``k`` of its last two axes zeroed."""
    return _triangle(a, k, True, "tril")


@on_stream
def triu(a: GPUArray, k: int = 0) -> GPUArray:
    """A copy of ``a`` with the elements below diagonal ``k`` of its last two axes zeroed."""
    return _triangle(a, k, False, "triu")
