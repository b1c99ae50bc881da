"""``gp.ops.fused_linear(x, w, bias=None, *, activation=None, residual=None)``:
``act(x @ w.T + bias) + residual`` in as few passes over the output as the
implementation allows.

- ``x`` (..., K) and ``w`` (N, K), PyTorch's Linear layout, as ``gp.linear``: the
  leading axes of x are one M dimension; float16, bfloat16, float32 or float64
  (mixed dtypes promote, as ``gp.linear``); the result is (..., N).
- ``bias``: None or (N,); ``residual``: None or exactly the result's shape (no
  broadcasting). Both are converted to the result's dtype.
- ``activation``: None, "relu", "gelu" (exact, erf), "gelu_tanh" (the tanh
  approximation, PyTorch's ``approximate="tanh"``) or "silu".

The reference (every backend) is ``gp.linear`` followed by core's elementwise
ops, each rounding to the result's dtype. cuBLASLt (``fused_linear`` below)
computes D = epilogue(alpha * A @ B + beta * C + bias), the activation applied
after C is added, so it fuses:

- the bias always (epilogue BIAS);
- "relu" and "gelu_tanh" (epilogues RELU / GELU, +BIAS): cuBLASLt's GELU is the
  tanh approximation, so "gelu" (exact) is never given to it;
- the residual as C with beta = 1, only when there is no activation (an
  activation would be applied to y + r).

What it cannot fuse (silu, exact gelu, the residual behind an activation) runs
after the product, in place on its output, with core's ops. One difference,
reported on NVIDIA's forum: cuBLASLt's RELU epilogue turns NaN into 0, where
``gp.relu`` keeps NaN.

Other implementations of the op take the same signature and validate their
arguments with ``check``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext
from pygpukit.linalg import get_matmul_precision

from . import cublaslt

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
DTYPES = (np.dtype(gp.float16), np.dtype(gp.bfloat16), np.dtype(gp.float32), np.dtype(gp.float64))


def check_operand(op: str, name: str, a: Any, optional: bool = False) -> None:
    """TypeError unless ``a`` is a float GPUArray (or None when ``optional``)."""
    if a is None and optional:
        return
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray{' or None' if optional else ''}, got {type(a).__name__}")
    if a.dtype not in DTYPES:
        raise TypeError(f"{op}: {name} must be float16, bfloat16, float32 or float64, got {a.dtype}")


_UFUNC: dict[str, Callable[..., gp.GPUArray]] = {"relu": gp.relu, "gelu": gp.gelu, "gelu_tanh": gp.gelu_tanh, "silu": gp.silu}
# the activations cuBLASLt computes, and its epilogue for each
LT_EPILOGUE = {None: cublaslt.EPILOGUE_DEFAULT, "relu": cublaslt.EPILOGUE_RELU, "gelu_tanh": cublaslt.EPILOGUE_GELU}


def check(x: Any, w: Any, bias: Any = None, activation: Any = None, residual: Any = None) -> str | None:
    """Validate the arguments of fused_linear (TypeError / ValueError naming the
    argument); returns the activation, one of ACTIVATIONS."""
    for name, a, optional in (("x", x, False), ("w", w, False), ("bias", bias, True), ("residual", residual, True)):
        check_operand("fused_linear", name, a, optional)
    if w.ndim != 2:
        raise ValueError(f"fused_linear: w must be 2-D (out_features, in_features), got shape {w.shape}")
    if x.ndim == 0 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"fused_linear: x's last axis must have w's in_features ({w.shape[1]}), got x of shape {x.shape}")
    if bias is not None and bias.shape != (w.shape[0],):
        raise ValueError(f"fused_linear: bias must have shape ({w.shape[0]},) (out_features), got {bias.shape}")
    out_shape = (*x.shape[:-1], w.shape[0])
    if residual is not None and residual.shape != out_shape:
        raise ValueError(f"fused_linear: residual must have the output's shape {out_shape}, got {residual.shape}")
    if not (activation is None or isinstance(activation, str)) or activation not in ACTIVATIONS:
        raise ValueError(f"fused_linear: activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    return activation


def reference(x: Any, w: Any, bias: Any = None, *, activation: str | None = None, residual: Any = None) -> gp.GPUArray:
    """``gp.linear`` then the activation and the residual with core's ops, in place."""
    act = check(x, w, bias, activation, residual)
    dt = gp.result_type(x.dtype, w.dtype)
    y = gp.linear(x.astype(dt, copy=False), w.astype(dt, copy=False), None if bias is None else bias.astype(dt, copy=False))
    return finish(y, act, residual)


def finish(y: gp.GPUArray, act: str | None, residual: Any) -> gp.GPUArray:
    """The activation and the residual, in place on y (the parts no kernel fused)."""
    if act is not None:
        _UFUNC[act](y, out=y)
    if residual is not None:
        gp.add(y, residual.astype(y.dtype, copy=False), out=y)
    return y


@dataclass(frozen=True)
class Fusion:
    """What cuBLASLt's epilogue does and what runs after it."""

    epilogue: int  # cublaslt.EPILOGUE_DEFAULT / _RELU / _GELU (the bias joins it when there is one)
    c: bool  # the residual is cuBLASLt's C (beta = 1)
    after: str | None  # the activation left to core's ufunc
    add_residual: bool  # the residual left to gp.add


def fusion(activation: str | None, residual: bool) -> Fusion:
    """The most of act(x @ w.T + bias) + residual that cuBLASLt computes exactly."""
    if activation not in LT_EPILOGUE:
        return Fusion(cublaslt.EPILOGUE_DEFAULT, False, activation, residual)
    if activation is None:
        return Fusion(cublaslt.EPILOGUE_DEFAULT, residual, None, False)
    return Fusion(LT_EPILOGUE[activation], False, None, residual)  # C would be added before the activation


class _Fused:
    """One call signature's cuBLASLt product and what follows it: ``direct`` when
    the operands are read as they are (the hot path: one library call), else the
    operands are converted per call."""

    __slots__ = ("direct", "dt", "fusion", "k", "m", "n", "out_shape")

    def __init__(self, x: gp.GPUArray, w: gp.GPUArray, bias: Any, act: str | None, residual: Any) -> None:
        self.dt = gp.result_type(x.dtype, w.dtype)
        self.k, self.n = x.shape[-1], w.shape[0]
        self.m = math.prod(x.shape[:-1])
        self.out_shape = (*x.shape[:-1], self.n)
        self.fusion = fusion(act, residual is not None)
        ops = self._operands(x, w, bias, residual)
        try:
            call = self._prepare(*ops)
        except cublaslt.CublasLtError:  # no algorithm with this epilogue here: the plain product, the rest after it
            self.fusion = Fusion(cublaslt.EPILOGUE_DEFAULT, False, act, residual is not None)
            ops = self._operands(x, w, bias, residual)
            call = self._prepare(*ops)
        x2, wt, b, r = ops
        same = x2.data_ptr == x.data_ptr and wt.data_ptr == w.data_ptr and (bias is None or b is bias)
        self.direct = call if same and (r is None or r.data_ptr == residual.data_ptr) else None

    def _operands(self, x: gp.GPUArray, w: gp.GPUArray, bias: Any, residual: Any) -> tuple[Any, Any, Any, Any]:
        """x as (m, k) and w.T in the result's dtype, readable by cuBLASLt (copied
        where they are not), the bias contiguous, and the residual as C (or None)."""
        x2 = x.reshape(self.m, self.k).astype(self.dt, copy=False)
        wt = w.astype(self.dt, copy=False).T
        x2 = x2 if cublaslt.operand_layout(x2.shape, x2.strides, x2.itemsize) else x2.copy()
        wt = wt if cublaslt.operand_layout(wt.shape, wt.strides, wt.itemsize) else wt.copy()
        b = None if bias is None else bias.astype(self.dt, copy=False)
        b = b if b is None or b.is_contiguous else b.copy()
        r = None
        if self.fusion.c:
            r = residual.astype(self.dt, copy=False)
            r = r if r.is_contiguous else r.copy()
        return x2, wt, b, r

    def _prepare(self, x2: Any, wt: Any, b: Any, r: Any) -> cublaslt.Prepared:
        f = self.fusion
        call = cublaslt.prepare(x2, wt, (), self.m, self.n, self.k, self.out_shape, b is not None, epilogue=f.epilogue, c=r)
        assert call is not None  # the operands were made readable; empty products do not come here
        return call

    def __call__(self, x: gp.GPUArray, w: gp.GPUArray, bias: Any, residual: Any) -> gp.GPUArray:
        f = self.fusion
        if self.direct is not None:
            bias_ptr = 0 if bias is None else bias.data_ptr
            out = self.direct(x.data_ptr, w.data_ptr, bias_ptr, c_ptr=residual.data_ptr if f.c else 0)
        else:
            x2, wt, b, r = self._operands(x, w, bias, residual)
            out = self._prepare(x2, wt, b, r)(
                x2.data_ptr, wt.data_ptr, 0 if b is None else b.data_ptr, c_ptr=0 if r is None else r.data_ptr
            )
        return finish(out, f.after, residual if f.add_residual else None)


# by call signature: the layouts of the arrays (shapes, strides, dtypes, pointer
# alignments: cuBLASLt's heuristic takes them), the activation, the matmul precision
_Key = tuple[Any, Any, Any, Any, Any, str]
_prepared: ext.PlanCache[_Key, _Fused] = ext.PlanCache("pygpukit_gemm.epilogue.prepared")


def _key(x: Any, w: Any, bias: Any, activation: Any, residual: Any) -> _Key:
    lay = ext.layout_key
    return (lay(x, 256), lay(w, 256), lay(bias, 256), lay(residual, 256), activation, get_matmul_precision())


def fused_linear(x: Any, w: Any, bias: Any = None, *, activation: str | None = None, residual: Any = None) -> gp.GPUArray:
    """act(x @ w.T + bias) + residual on cuBLASLt, its epilogue fusing what it can
    (see the module docstring); a repeated signature makes one library call (plus
    the in-place ops it cannot fuse)."""
    try:
        fused = _prepared.get(_key(x, w, bias, activation, residual))
    except (AttributeError, TypeError):  # not arrays, or an unhashable activation: check() reports them
        fused = None
    if fused is None:
        return _first(x, w, bias, activation, residual)
    return fused(x, w, bias, residual)


def _first(x: Any, w: Any, bias: Any, activation: Any, residual: Any) -> gp.GPUArray:
    act = check(x, w, bias, activation, residual)
    if x.size == 0 or w.shape[0] == 0:  # an empty product or sum: nothing for cuBLASLt to do
        return reference(x, w, bias, activation=act, residual=residual)
    fused = _prepared.put(_key(x, w, bias, act, residual), _Fused(x, w, bias, act, residual))
    return fused(x, w, bias, residual)
