"""rms_norm, layer_norm and the fused add_rms_norm / add_layer_norm of
pygpukit-nn, on Triton's ``norm_rows``: statistics in float32, each output
rounded once; the fused forms return ``(normed, h)`` with ``h = x +
residual`` rounded to the dtype and normalized as rounded. Arguments are
checked by pygpukit-nn's own checks (same errors as the native op)."""

from __future__ import annotations

from typing import Any

import pygpukit as gp

from ._common import contiguous, get, launch, row_blocks, rows_of, takes_rows


def _check(op: str, x: Any, residual: Any, weight: Any, bias: Any, eps: Any) -> float:
    from pygpukit_nn.checks import check_rows

    return check_rows(op, x, residual, weight, bias, eps)


def _run(x: Any, res: Any, weight: Any, bias: Any, eps: float, layer: bool) -> tuple[gp.GPUArray, Any]:
    xv, xs = rows_of(x)
    rv, rs = rows_of(res) if res is not None else (None, 0)
    n = x.shape[-1]
    rows = x.size // n
    y = gp.empty(x.shape, x.dtype)
    h = None if res is None else gp.empty(x.shape, x.dtype)
    bm, bn, warps = row_blocks(rows, n)
    launch(get("rows").norm_rows, (-(-rows // bm),), xv, xs, rv, rs, h, contiguous(weight), contiguous(bias), y, rows, n, eps,
           LAYER=layer, HAS_RES=res is not None, HAS_W=weight is not None, HAS_B=bias is not None, BLOCK_M=bm, BLOCK_N=bn,
           num_warps=warps)  # fmt: skip
    return y, h


def rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> gp.GPUArray:
    """``x * rsqrt(mean(x**2, axis=-1) + eps) * weight``."""
    return _run(x, None, weight, None, _check("rms_norm", x, None, weight, None, eps), False)[0]


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> gp.GPUArray:
    """``(x - mean) * rsqrt(var + eps) * weight + bias`` over the last axis."""
    return _run(x, None, weight, bias, _check("layer_norm", x, None, weight, bias, eps), True)[0]


def add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; ``(rms_norm(h, weight, eps), h)``."""
    return _run(x, residual, weight, None, _check("add_rms_norm", x, residual, weight, None, eps), False)


def add_layer_norm(x: Any, residual: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> tuple[gp.GPUArray, gp.GPUArray]:
    """``h = x + residual``; ``(layer_norm(h, weight, bias, eps), h)``."""
    return _run(x, residual, weight, bias, _check("add_layer_norm", x, residual, weight, bias, eps), True)


def applies(x: Any, *rest: Any, **kwargs: Any) -> bool:
    """Predicate: float16 / bfloat16 / float32 rows of at most MAX_ROW elements."""
    return takes_rows(x)
