"""``matmul`` (core's op, NumPy's rules) and ``linear`` for bfloat16 / float16 operands of
one dtype on Triton's autotuned tiled kernel: leading axes broadcast as a
batch (stride 0, no copy) over the grid's second axis, float32
accumulation, the result rounded once. Under Triton's interpreter the
kernel runs with one small fixed tile (autotuning needs a GPU)."""

from __future__ import annotations

import math
from typing import Any

import pygpukit as gp
from pygpukit.linalg import linear_shapes, matmul_shapes

from ._common import HALF, get, interpreting, launch

MAX_BATCH = 65535  # the grid's second axis


def _batched(x: gp.GPUArray, batch: tuple[int, ...]) -> tuple[gp.GPUArray, int]:
    """x (*batch, r, c) as (nb, r, c) with one batch stride in elements (a copy only when
    several batch axes do not collapse to one stride)."""
    item = x.itemsize
    if len(batch) == 0:
        return x.reshape(1, *x.shape), 0
    if len(batch) == 1:
        return x, x.strides[0] // item
    s = x.strides[: len(batch)]
    if all(s[i] == s[i + 1] * batch[i + 1] for i in range(len(batch) - 1)) or all(v == 0 for v in s):
        return x, s[-1] // item
    y = gp.ascontiguousarray(x).reshape(math.prod(batch), *x.shape[-2:])
    return y, y.strides[0] // item


def matmul(a: Any, b: Any) -> gp.GPUArray:
    """``a @ b`` with NumPy's rules (bfloat16 / float16, one dtype)."""
    s = matmul_shapes(a, b)
    if a.dtype != b.dtype or a.dtype not in HALF:
        raise TypeError(f"matmul (triton): takes two bfloat16 or two float16 arrays, got {a.dtype} and {b.dtype}")
    nb = math.prod(s.batch)
    out = gp.empty((*s.batch, s.m, s.n), a.dtype)
    if out.size == 0:
        return s.finish(out)
    if s.k == 0:
        return s.finish(gp.zeros((*s.batch, s.m, s.n), a.dtype))
    if nb > MAX_BATCH:
        raise ValueError(f"matmul (triton): at most {MAX_BATCH} products in a batch, got {nb}")
    x, sab = _batched(s.a, s.batch)
    y, sbb = _batched(s.b, s.batch)
    item = a.itemsize
    sam, sak = (st // item for st in x.strides[-2:])
    sbk, sbn = (st // item for st in y.strides[-2:])
    m, n, k = s.m, s.n, s.k
    args = (x, y, out, m, n, k, sab, sam, sak, sbb, sbk, sbn, m * n, n, 1)
    kernels = get("matmul")
    if interpreting():
        launch(kernels.matmul, (-(-m // 16) * -(-n // 16), nb), *args, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=4)
    else:
        grid = lambda meta: (-(-m // meta["BLOCK_M"]) * -(-n // meta["BLOCK_N"]), nb)
        launch(kernels.matmul_tuned, grid, *args)
    return s.finish(out)


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias`` (core's op ``linear``): w (out_features, in_features) read
    through its transposed view (no copy); the leading axes of x are one M."""
    n = linear_shapes(x, w, bias)
    y = matmul(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), w.T).reshape(*x.shape[:-1], n)
    return y if bias is None else (y + bias).astype(y.dtype, copy=False)


def applies(a: Any, b: Any, *rest: Any) -> bool:
    """Predicate: two bfloat16 or two float16 arrays (mixed dtypes promote elsewhere)."""
    return isinstance(a, gp.GPUArray) and isinstance(b, gp.GPUArray) and a.dtype == b.dtype and a.dtype in HALF
