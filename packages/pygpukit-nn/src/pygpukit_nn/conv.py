"""Conv1d and 1-d pooling (audio encoders: Whisper's two input convolutions),
with torch.nn.functional's signatures and semantics.

- ``conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1)``:
  x (N, C_in, L) or (C_in, L), weight (C_out, C_in / groups, K), bias (C_out,)
  or None, all of one float dtype; ``padding`` an int or "valid" / "same"
  ("same" needs stride 1; an odd total puts the extra element on the right,
  as torch). Returns (N, C_out, L_out) (or (C_out, L_out)).
- ``avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
  count_include_pad=True)``, ``max_pool1d(x, kernel_size, stride=None,
  padding=0, dilation=1, ceil_mode=False, return_indices=False)`` and
  ``adaptive_avg_pool1d(x, output_size)`` on (N, C, L) or (C, L).
  max_pool1d propagates NaN; its int64 indices point at the first maximum
  (with NaN in the window, the first NaN: torch points at the last one).

Precision: float32 accumulation for float16 / bfloat16 / float32, one
rounding of the output, except conv1d's bias, added to the product's
rounded output (a second rounding for float16 / bfloat16). float32
convolutions are exact FP32 products unless ``gp.set_matmul_precision("tf32")``
allows TF32.

The CUDA path (kernels/conv.cu): im2col on the GPU, then ``gp.matmul`` of the
(C_out, C_in * K) weight and the (C_in * K, L_out) columns (tensor cores
through pygpukit-gemm where installed, exact FP32 for float32), which gives
the (C_out, L_out) layout directly; grouped convolutions are a batch of
those; depthwise convolutions (one input channel per group) and the pooling
ops are direct kernels. The references (every backend, float64 too) stack
strided views of the padded input and use ``gp.matmul`` / reductions.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from ._kernels import rows_of
from .checks import INT32_MAX, check_float, integer

KERNEL_DTYPES = ["float32", "float16", "bfloat16"]
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
THREADS = 256  # kConvThreads
_POOL_MODES = {"avg_pool1d": 0, "max_pool1d": 1, "adaptive_avg_pool1d": 2}


# -- public API ----------------------------------------------------------------------


def conv1d(
    x: gp.GPUArray,
    weight: gp.GPUArray,
    bias: gp.GPUArray | None = None,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
) -> gp.GPUArray:
    """1-d convolution (cross-correlation) as ``torch.nn.functional.conv1d``: x (N, C_in, L)
    or (C_in, L), weight (C_out, C_in / groups, K), bias (C_out,) or None; ``padding`` an int,
    "valid" or "same"."""
    return ext.op("conv1d")(x, weight, bias, stride, padding, dilation, groups)


def avg_pool1d(
    x: gp.GPUArray, kernel_size: int, stride: int | None = None, padding: int = 0, ceil_mode: bool = False, count_include_pad: bool = True
) -> gp.GPUArray:
    """Average over windows of ``kernel_size`` along the last axis of (N, C, L) or (C, L), as torch's."""
    return ext.op("avg_pool1d")(x, kernel_size, stride, padding, ceil_mode, count_include_pad)


def max_pool1d(
    x: gp.GPUArray,
    kernel_size: int,
    stride: int | None = None,
    padding: int = 0,
    dilation: int = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> gp.GPUArray | tuple[gp.GPUArray, gp.GPUArray]:
    """Maximum over windows along the last axis of (N, C, L) or (C, L), as torch's; with
    ``return_indices`` also the int64 positions of the maxima (the first one, or the first NaN)."""
    return ext.op("max_pool1d")(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def adaptive_avg_pool1d(x: gp.GPUArray, output_size: int) -> gp.GPUArray:
    """Average over ``output_size`` windows covering the last axis of (N, C, L) or (C, L):
    window l is [floor(l * L / out), ceil((l + 1) * L / out)), as torch's."""
    return ext.op("adaptive_avg_pool1d")(x, output_size)


# -- checks --------------------------------------------------------------------------


def _bool(op: str, name: str, v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, got {type(v).__name__}")
    return bool(v)


def _input(op: str, x: Any) -> None:
    check_float(op, "x", x)
    if x.ndim not in (2, 3) or x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(f"{op}: x must be (N, C, L) or (C, L) with C, L >= 1, got shape {x.shape}")
    if x.shape[-1] > INT32_MAX // 2:
        raise ValueError(f"{op}: the length {x.shape[-1]} is too long (at most {INT32_MAX // 2})")


class Conv:
    """A checked conv1d call: x as (N, C_in, L), the output's shape, and the parameters."""

    def __init__(self, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any) -> None:
        op = "conv1d"
        _input(op, x)
        check_float(op, "weight", weight)
        if weight.dtype != x.dtype:
            raise TypeError(f"conv1d: weight must have x's dtype {x.dtype}, got {weight.dtype}")
        if bias is not None:
            check_float(op, "bias", bias)
            if bias.dtype != x.dtype:
                raise TypeError(f"conv1d: bias must have x's dtype {x.dtype}, got {bias.dtype}")
        self.s = integer(op, "stride", stride, 1)
        self.d = integer(op, "dilation", dilation, 1)
        self.g = integer(op, "groups", groups, 1)
        self.x = x if x.ndim == 3 else x.reshape(1, *x.shape)
        self.n, self.c, self.length = self.x.shape
        if weight.ndim != 3 or weight.shape[0] == 0 or weight.shape[2] == 0:
            raise ValueError(f"conv1d: weight must be (C_out, C_in / groups, K), got shape {weight.shape}")
        self.cout, cg, self.k = weight.shape
        if self.c % self.g or self.cout % self.g:
            raise ValueError(f"conv1d: groups={self.g} must divide C_in={self.c} and C_out={self.cout}")
        if cg != self.c // self.g:
            raise ValueError(f"conv1d: weight must have C_in / groups = {self.c // self.g} input channels, got shape {weight.shape}")
        if bias is not None and bias.shape != (self.cout,):
            raise ValueError(f"conv1d: bias must have shape ({self.cout},), got {bias.shape}")
        span = self.d * (self.k - 1)
        if padding == "valid":
            self.left = self.right = 0
        elif padding == "same":
            if self.s != 1:
                raise ValueError(f"conv1d: padding='same' needs stride 1, got stride {self.s}")
            self.left, self.right = span // 2, span - span // 2
        elif isinstance(padding, str):
            raise ValueError(f"conv1d: padding must be an int, 'valid' or 'same', got {padding!r}")
        else:
            self.left = self.right = integer(op, "padding", padding, 0)
        self.lout = (self.length + self.left + self.right - span - 1) // self.s + 1
        if self.lout < 1:
            raise ValueError(
                f"conv1d: the input of length {self.length} (padded {self.length + self.left + self.right}) "
                f"is shorter than the kernel's span {span + 1}"
            )
        self.weight, self.bias, self.squeeze = weight, bias, x.ndim == 2

    def finish(self, out: gp.GPUArray) -> gp.GPUArray:
        return out.reshape(self.cout, self.lout) if self.squeeze else out


class Pool:
    """A checked pooling call: x as rows (R, L), the output length and the parameters."""

    def __init__(self, op: str, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: Any) -> None:
        _input(op, x)
        self.op, self.shape = op, x.shape
        self.length = x.shape[-1]
        self.rows = x.size // max(self.length, 1)
        self.k = integer(op, "kernel_size", kernel_size, 1)
        self.s = self.k if stride is None else integer(op, "stride", stride, 1)
        self.p = integer(op, "padding", padding, 0)
        self.d = integer(op, "dilation", dilation, 1)
        ceil = _bool(op, "ceil_mode", ceil_mode)
        span = self.d * (self.k - 1) + 1
        limit = span // 2 if op == "max_pool1d" else self.k // 2
        if self.p > limit:
            raise ValueError(f"{op}: padding must be at most half the kernel's span ({limit}), got {self.p}")
        lout = (self.length + 2 * self.p - span + (self.s - 1 if ceil else 0)) // self.s + 1
        if ceil and (lout - 1) * self.s >= self.length + self.p:
            lout -= 1  # the last window must start inside the row or its left padding
        if lout < 1:
            raise ValueError(f"{op}: the input of length {self.length} is too short for kernel_size {self.k} (padding {self.p})")
        self.lout = lout

    def out_shape(self) -> tuple[int, ...]:
        return self.shape[:-1] + (self.lout,)


def _check_adaptive(x: Any, output_size: Any) -> int:
    _input("adaptive_avg_pool1d", x)
    if x.shape[-1] == 0:
        raise ValueError("adaptive_avg_pool1d: x must have a non-empty last axis")
    return integer("adaptive_avg_pool1d", "output_size", output_size, 1)


# -- references (any backend, any float dtype) -----------------------------------------


def _windows(xp: gp.GPUArray, k: int, start: int, d: int, s: int, lout: int) -> list[gp.GPUArray]:
    """The k strided views xp[..., start + j * d :: s] of lout elements each."""
    span = s * (lout - 1) + 1
    return [xp[..., start + j * d : start + j * d + span : s] for j in range(k)]


def reference_conv1d(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: Any = 1
) -> gp.GPUArray:
    c = Conv(x, weight, bias, stride, padding, dilation, groups)
    cdt = ext.compute_dtype(x.dtype)
    if c.n == 0:
        return c.finish(gp.zeros((0, c.cout, c.lout), x.dtype))
    xp = gp.pad(c.x.astype(cdt), ((0, 0), (0, 0), (c.left, c.right)))
    cols = gp.stack(_windows(xp, c.k, 0, c.d, c.s, c.lout), axis=2)  # (N, C_in, K, L_out)
    cols = cols.reshape(c.n, c.g, (c.c // c.g) * c.k, c.lout)
    w = weight.astype(cdt).reshape(c.g, c.cout // c.g, (c.c // c.g) * c.k)
    out = gp.matmul(w, cols).reshape(c.n, c.cout, c.lout)
    if bias is not None:
        out = out + bias.astype(cdt).reshape(c.cout, 1)
    return c.finish(out.astype(x.dtype))


def _avg_divisors(p: Pool, include_pad: bool) -> np.ndarray:
    """torch's avg_pool1d divisor of each window."""
    start = np.arange(p.lout) * p.s - p.p
    end = np.minimum(start + p.k, p.length + p.p)
    if include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, p.length) - np.maximum(start, 0)).astype(np.float64)


def _right_pad(p: Pool) -> int:
    """Padding on the right that every window's positions fit in."""
    return max(p.p, (p.lout - 1) * p.s + p.d * (p.k - 1) + 1 - p.p - p.length)


def reference_avg_pool1d(
    x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: Any = False, count_include_pad: Any = True
) -> gp.GPUArray:
    p = Pool("avg_pool1d", x, kernel_size, stride, padding, 1, ceil_mode)
    include = _bool("avg_pool1d", "count_include_pad", count_include_pad)
    cdt = ext.compute_dtype(x.dtype)
    if x.size == 0:
        return gp.zeros(p.out_shape(), x.dtype)
    xp = gp.pad(x.astype(cdt), ((0, 0),) * (x.ndim - 1) + ((p.p, _right_pad(p)),))
    total = functools.reduce(operator.add, _windows(xp, p.k, 0, 1, p.s, p.lout))
    return (total / gp.asarray(_avg_divisors(p, include), dtype=cdt)).astype(x.dtype)


def reference_max_pool1d(
    x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: Any = False, return_indices: Any = False
) -> Any:
    p = Pool("max_pool1d", x, kernel_size, stride, padding, dilation, ceil_mode)
    want = _bool("max_pool1d", "return_indices", return_indices)
    if x.size == 0:
        out = gp.zeros(p.out_shape(), x.dtype)
        return (out, gp.zeros(p.out_shape(), gp.int64)) if want else out
    cdt = ext.compute_dtype(x.dtype)
    xp = gp.pad(x.astype(cdt), ((0, 0),) * (x.ndim - 1) + ((p.p, _right_pad(p)),), constant_values=-np.inf)
    win = gp.stack(_windows(xp, p.k, 0, p.d, p.s, p.lout), axis=-1)  # (..., L_out, K)
    m = gp.max(win, axis=-1)
    if not want:
        return m.astype(x.dtype)
    pos = (np.arange(p.lout) * p.s - p.p)[:, None] + np.arange(p.k)[None, :] * p.d  # (L_out, K) positions in x
    inside = gp.asarray((pos >= 0) & (pos < p.length))
    hit = ((win == gp.expand_dims(m, -1)) | gp.isnan(win)) & inside  # the maximum (or a NaN) inside the row
    first = gp.argmax(hit.astype(gp.int8), axis=-1)
    idx = first * p.d + gp.asarray(np.arange(p.lout) * p.s - p.p, dtype=gp.int64)
    return m.astype(x.dtype), idx


def reference_adaptive_avg_pool1d(x: Any, output_size: Any) -> gp.GPUArray:
    out = _check_adaptive(x, output_size)
    length = x.shape[-1]
    cdt = ext.compute_dtype(x.dtype)
    starts = np.arange(out) * length // out
    ends = -(-(np.arange(out) + 1) * length // out)
    cols = np.arange(length)[:, None]
    avg = ((cols >= starts) & (cols < ends)) / (ends - starts)  # (L, out): each column averages its window
    return gp.matmul(x.astype(cdt), gp.asarray(avg, dtype=cdt)).astype(x.dtype)


# -- CUDA kernels ----------------------------------------------------------------------


def _jit(expr: str, signature: str) -> Any:
    return ext.Kernel(ext.kernel_source(__name__, "conv"), expr, signature=signature, name="conv.cu")


@functools.cache
def _im2col_kernel(ct: str) -> Any:
    return _jit(
        f"pgk::im2col<{ct}>",
        "const void* x, long long xn, long long xc, int C, int L, int K, int stride, int pad, int dil, int Lout, void* cols",
    )


@functools.cache
def _depthwise_kernel(ct: str, bias: bool) -> Any:
    return _jit(
        f"pgk::conv1d_depthwise<{ct}, {'true' if bias else 'false'}>",
        "const void* x, long long xn, long long xc, const void* w, const void* bias, int Cout, int mult, int L, int K, "
        "int stride, int pad, int dil, int Lout, void* out",
    )


@functools.cache
def _pool_kernel(ct: str, mode: int) -> Any:
    return _jit(
        f"pgk::pool1d<{ct}, {mode}>",
        "const void* x, long long xr, int L, int Lout, int K, int stride, int pad, int dil, int include_pad, void* out, void* idx",
    )


def _launch(kernel: Any, rows: int, lout: int, *args: Any) -> None:
    """One block row per output row, THREADS outputs per block: the grid follows
    each call's shape, so the kernel is called directly (no plan to keep)."""
    kernel((rows, -(-lout // THREADS)), THREADS, *args)


def _channels_view(x3: gp.GPUArray) -> tuple[gp.GPUArray, int, int]:
    """(x, batch stride, channel stride) in elements, with the last axis contiguous
    (a copy where it is not)."""
    item = x3.dtype.itemsize
    s = x3.strides
    if (x3.shape[-1] > 1 and s[-1] != item) or any(v < 0 or v % item for v in s[:2]):
        x3 = x3.copy()
        s = x3.strides
    return x3, s[0] // item, s[1] // item


def kernel_conv1d(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: Any = 1
) -> gp.GPUArray:
    c = Conv(x, weight, bias, stride, padding, dilation, groups)
    ct = _CTYPES[x.dtype]
    if c.n == 0:
        return c.finish(gp.empty((0, c.cout, c.lout), x.dtype))
    xv, xn, xc = _channels_view(c.x)
    cg = c.c // c.g
    w = weight if weight.is_contiguous else weight.copy()
    if cg == 1 and c.g > 1:  # depthwise: a direct kernel
        b = None if bias is None else (bias if bias.is_contiguous else bias.copy())
        out = gp.empty((c.n, c.cout, c.lout), x.dtype)
        _launch(
            _depthwise_kernel(ct, b is not None), c.n * c.cout, c.lout,
            xv, xn, xc, w, b, c.cout, c.cout // c.g, c.length, c.k, c.s, c.left, c.d, c.lout, out,
        )  # fmt: skip
        return c.finish(out)
    cols = gp.empty((c.n, c.c * c.k, c.lout), x.dtype)
    _launch(_im2col_kernel(ct), c.n * c.c * c.k, c.lout, xv, xn, xc, c.c, c.length, c.k, c.s, c.left, c.d, c.lout, cols)
    if c.g == 1:
        out = gp.matmul(w.reshape(c.cout, cg * c.k), cols)
    else:
        wg = w.reshape(c.g, c.cout // c.g, cg * c.k)
        out = gp.matmul(wg, cols.reshape(c.n, c.g, cg * c.k, c.lout)).reshape(c.n, c.cout, c.lout)
    if bias is not None:
        gp.add(out, bias.reshape(c.cout, 1), out=out)
    return c.finish(out)


def _run_pool(
    x: Any, out_shape: tuple[int, ...], lout: int, mode: int, geometry: tuple[int, int, int, int], include: bool, want_idx: bool
) -> Any:
    """Launch pool1d over the rows of x; geometry (kernel_size, stride, padding, dilation)."""
    out = gp.empty(out_shape, x.dtype)
    idx = gp.empty(out_shape, gp.int64) if want_idx else None
    if x.size:
        xv, xr = rows_of(x)
        length = x.shape[-1]
        _launch(_pool_kernel(_CTYPES[x.dtype], mode), x.size // length, lout, xv, xr, length, lout, *geometry, int(include), out, idx)
    return out, idx


def kernel_avg_pool1d(
    x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: Any = False, count_include_pad: Any = True
) -> gp.GPUArray:
    p = Pool("avg_pool1d", x, kernel_size, stride, padding, 1, ceil_mode)
    include = _bool("avg_pool1d", "count_include_pad", count_include_pad)
    return _run_pool(x, p.out_shape(), p.lout, 0, (p.k, p.s, p.p, 1), include, False)[0]


def kernel_max_pool1d(
    x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: Any = False, return_indices: Any = False
) -> Any:
    p = Pool("max_pool1d", x, kernel_size, stride, padding, dilation, ceil_mode)
    want = _bool("max_pool1d", "return_indices", return_indices)
    out, idx = _run_pool(x, p.out_shape(), p.lout, 1, (p.k, p.s, p.p, p.d), False, want)
    return (out, idx) if want else out


def kernel_adaptive_avg_pool1d(x: Any, output_size: Any) -> gp.GPUArray:
    out = _check_adaptive(x, output_size)
    return _run_pool(x, x.shape[:-1] + (out,), out, 2, (1, 1, 0, 1), False, False)[0]


def _kernel_takes(x: Any, *rest: Any) -> bool:
    """The kernels' int arithmetic and grids: arrays under 2^31 elements, rows of at most
    2^24 outputs, conv1d's im2col rows (N * C_in * K) and output rows under 2^31 (else the reference)."""
    if x.ndim not in (2, 3) or x.shape[-1] > 1 << 24 or x.size >= 1 << 31:
        return False
    weight = rest[0] if rest else None
    if isinstance(weight, gp.GPUArray) and weight.ndim == 3:
        rows = x.size // max(x.shape[-1], 1)
        return rows * weight.shape[2] < 1 << 31 and rows // max(x.shape[-2], 1) * weight.shape[0] < 1 << 31
    return True


def register(registry: Any) -> None:
    for op, nkey, ref, kern in (
        ("conv1d", 2, reference_conv1d, kernel_conv1d),
        ("avg_pool1d", 1, reference_avg_pool1d, kernel_avg_pool1d),
        ("max_pool1d", 1, reference_max_pool1d, kernel_max_pool1d),
        ("adaptive_avg_pool1d", 1, reference_adaptive_avg_pool1d, kernel_adaptive_avg_pool1d),
    ):
        ext.register_family(
            registry, op, nkey=nkey, doc=globals()[op].__doc__ or "", reference=ref, cuda=kern, dtypes=KERNEL_DTYPES, min_sm=80,
            predicate=_kernel_takes,
        )  # fmt: skip
