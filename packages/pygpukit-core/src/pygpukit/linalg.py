"""Linear algebra entry points: matmul (``@``), dot, vdot, outer.

``matmul`` is a registry op: the core implementation here is a correct
reference (exact FP32: no TF32, no tensor cores) for every dtype, and plugins
(pygpukit-gemm) register faster ones for the dtypes and shapes they serve.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _dtypes, _runtime
from .array import GPUArray, broadcast_to, from_parts
from .registry import builtin
from .streams import on_stream


def _matmul(a: GPUArray, b: GPUArray) -> GPUArray:
    """Matrix product with NumPy's rules: 1-D operands are promoted and the added
    axis removed, leading axes broadcast as a batch; no 0-d operands."""
    if not isinstance(a, GPUArray) or not isinstance(b, GPUArray):
        raise TypeError("matmul expects two GPUArrays")
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
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    out_dt = _dtypes.result_type(a.dtype, b.dtype)
    if _dtypes.is_complex(out_dt):
        return _complex_matmul(a.astype(out_dt, copy=False), b.astype(out_dt, copy=False))
    A = broadcast_to(a2, (*batch, m, k))
    B = broadcast_to(b2, (*batch, k, n))
    A = A if A.is_contiguous else A.copy()
    B = B if B.is_contiguous else B.copy()
    nb = math.prod(batch)
    out = _runtime.get().ops.matmul(A, B, out_dt, _dtypes.accumulator(out_dt), nb, m, n, k).reshape((*batch, m, n))
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


matmul = builtin("matmul", _matmul, nkey=2)


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
        from .creation import asarray

        return asarray(other)
    return None


def _matmul_operator(self: GPUArray, other: Any) -> GPUArray:
    o = _operand(other)
    return NotImplemented if o is None else matmul(self, o)


def _rmatmul_operator(self: GPUArray, other: Any) -> GPUArray:
    o = _operand(other)
    return NotImplemented if o is None else matmul(o, self)
