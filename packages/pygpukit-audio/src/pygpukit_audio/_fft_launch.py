"""Launches of the FFT kernels (kernels/fft.cu) on the CUDA backend.

``block`` runs one of the four transforms over rows addressed by strides
(any axis, STFT frames) when one block can hold it: a Stockham transform for
7-smooth lengths whose row fits in MAX_ROW_SMEM (8192 complex64, 4096
complex128), Bluestein's algorithm inside the block for the other lengths up
to MAX_BLOCK / 2. ``c2c_rows`` does complex transforms of contiguous rows of
any length: one block, two four-step passes, or Bluestein around either; the
even rfft too long for one block is a real four-step transform of two passes.
``transform`` is the op for an axis of an array.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

import pygpukit as gp
from pygpukit import ext

from . import _fft_plan as plan

LD_C2C, LD_REAL, LD_PAIRS, LD_HERM, LD_IRPRE = range(5)
ST_C2C, ST_RPOST, ST_REAL, ST_IRPOST, ST_HALF, ST_HMIRROR = range(6)
_REAL_T = {np.dtype(np.complex64): "float", np.dtype(np.complex128): "double"}
_SIG = (
    "const void* in, void* out, const void* tw, const void* rtw, const void* chirp, const void* bhat, const void* ptw, "
    "const void* win, long long batch, long long inner, long long ibs, long long iis, long long ies, long long obs, "
    "long long ois, long long oes, int L, long long ptw_n, double scale, long long shift, long long clip"
)
_STATIC_SMEM = 48 * 1024
# Tuning knobs (module constants, so that a sweep can set them before the first launch):
# threads per block below / from MID points per transform (fewer rows per block
# at 512-2048 points ran faster on an H100), unless one transform needs more
THREADS = (256, 128)
MID = 512
POINTS = 16  # per thread: one radix-16 butterfly of every stage in registers
MAX_ROW_SMEM = 72 * 1024  # shared bytes of the longest one-block row (A100: 163 KiB per block)
# registers a thread (float; double: twice) of the kernels of rows from BIG_POINTS
# points and of the four-step passes (launch bounds; 0: the compiler's choice):
# unbounded, the 8192-point row took 80 registers, one 512-thread block per SM
REGS = 64
BIG_POINTS = 8192
SINCOS = True  # float twiddles from sincospif, not gathered from tables (fft.cu: unit_root)
COLS = 32  # at least this many adjacent columns per block in the four-step passes, as shared memory allows


def padded(m: int) -> int:
    """Shared values of an m-point row (fft.cu's padded(): one per 16 against bank conflicts)."""
    return m + (m >> 4)


def geometry(m: int, item: int, cols: bool = False) -> tuple[int, int]:
    """(threads per transform, transforms per block) of an m-point block
    transform of ``item``-byte complex values: about POINTS points per thread.
    ``cols``: the rows are columns of a four-step pass, read or written COLS
    at a time where the threads and MAX_ROW_SMEM allow (whole sectors per
    row segment: 2 columns of 1024 points moved 16 bytes per segment)."""
    t = max(1, min(1024, m // POINTS))
    tpb = max(1, THREADS[m >= MID] // t)
    if cols and COLS > tpb:
        tpb = max(1, min(COLS, 1024 // t))
        while tpb > 1 and tpb * (padded(m) + 1) * item > MAX_ROW_SMEM:
            tpb //= 2
        return t, tpb
    while tpb > 1 and tpb * padded(m) * item > _STATIC_SMEM:
        tpb //= 2
    return t, tpb


def min_blocks(m: int, item: int, threads: int, cols: bool) -> int:
    """The launch bounds' resident blocks per SM (0: none) of an m-point block
    transform of ``item``-byte complex values, ``threads`` a block."""
    if REGS <= 0 or not (cols or m >= BIG_POINTS):
        return 0
    return max(1, 65536 // (threads * REGS * max(1, item // 8)))


class BlockKernel(NamedTuple):
    """A block transform's kernel, threads per transform, transforms per block and dynamic shared bytes."""

    kernel: ext.Kernel
    threads: int
    per_block: int
    smem: int


@functools.cache
def _block_kernel(
    cdt: np.dtype,
    m: int,
    direction: int,
    load: int,
    store: int,
    blue: bool,
    lcols: bool = False,
    scols: bool = False,
    wide: bool = False,
) -> BlockKernel:
    """One block transform; lcols / scols: the column load / store mapping of
    the four-step passes; wide: 64-bit offsets inside rows (see wide())."""
    t, tpb = geometry(m, cdt.itemsize, lcols or scols)
    minb = min_blocks(m, cdt.itemsize, t * tpb, lcols or scols)
    rad = "".join(f", {r}" for r in plan.radices(m) or ())
    flags = ", ".join("true" if f else "false" for f in (blue, lcols, scols, SINCOS, wide))
    expr = f"pgk_fft::fft_block<{_REAL_T[cdt]}, {m}, {t}, {tpb}, {direction}, {load}, {store}, {flags}, {minb}{rad}>"
    kern = ext.Kernel(ext.kernel_source(__name__, "fft"), expr, signature=_SIG, name="fft.cu")
    return BlockKernel(kern, t, tpb, tpb * (padded(m) + (1 if lcols or scols else 0)) * cdt.itemsize)


# (_block_kernel's arguments, wide, rows) -> the launch of that block transform over those rows
_launches: ext.PlanCache[tuple, ext.Launch] = ext.PlanCache("pygpukit_audio.fft.block")


def wide(m: int, ies: int, oes: int) -> bool:
    """Whether the offsets inside the rows of an m-point block transform (at
    most 2m + 2 elements of stride ies / oes, real pairs included) need 64 bits."""
    return (2 * m + 2) * max(abs(ies), abs(oes)) >= 1 << 31


def _launch_block(key: tuple, args: tuple, batch: int) -> None:
    """key: _block_kernel's eight arguments but wide, which comes from the strides in args."""
    pkey = (*key, wide(key[1], args[12], args[15]), batch)
    launch = _launches.get(pkey) or _launches.put(pkey, _block_launch(pkey))
    launch(*args)


def _block_launch(pkey: tuple) -> ext.Launch:
    *key, wide_rows, batch = pkey
    bk = _block_kernel(*key, wide=wide_rows)
    return bk.kernel.launcher((-(-batch // bk.per_block), 1, 1), (bk.threads, bk.per_block, 1), bk.smem)


def modes(kind: str, n: int) -> tuple[int, int, int, int]:
    """(direction, logical complex length L, load mode, store mode) of an
    n-point transform; for the real transforms of even n, L = n / 2."""
    if kind in ("fft", "ifft"):
        return (-1 if kind == "fft" else 1), n, LD_C2C, ST_C2C
    if kind == "rfft":
        return (-1, n // 2, LD_PAIRS, ST_RPOST) if n % 2 == 0 else (-1, n, LD_REAL, ST_HALF)
    return (1, n // 2, LD_IRPRE, ST_IRPOST) if n % 2 == 0 else (1, n, LD_HERM, ST_REAL)


def block_length(L: int, item: int) -> tuple[int, bool] | None:
    """(block size M, Bluestein?) when one block can do an L-point transform
    of ``item``-byte complex values."""
    if padded(L) * item <= MAX_ROW_SMEM and plan.radices(L) is not None:
        return L, False
    m = plan.bluestein_length(L)
    return (m, True) if m <= plan.MAX_BLOCK else None


def block(kind: str, src: Any, dst: Any, n: int, cdt: np.dtype, batch: int, irows: tuple, orows: tuple, scale: float, real_in: bool = False,
          win: Any = None, clip: tuple[int, int] = (0, 0)) -> bool:  # fmt: skip
    """One launch of an n-point ``kind`` transform over ``batch`` rows; rows
    are (inner, outer stride, inner stride, element stride) in elements of
    src / dst. ``real_in``: a real input of fft/ifft. ``clip`` = (row length,
    shift): real rows start ``shift`` elements left of their stride's start
    and read zeros outside [0, row length). False when no block plan exists
    for n (nothing is launched)."""
    direction, L, load, store = modes(kind, n)
    if real_in:
        load = LD_REAL
    bl = block_length(L, cdt.itemsize)
    if bl is None:
        return False
    m, blue = bl
    rtw = plan.table("rtw", L, cdt) if load in (LD_IRPRE,) or store == ST_RPOST else None
    tw = plan.table("tw", m, cdt)
    chirp = plan.table("chirp", L, cdt) if blue else None
    bhat = plan.table("bhat", L, cdt, m) if blue else None
    inner, ibs, iis, ies = irows
    _, obs, ois, oes = orows
    args = (src, dst, tw, rtw, chirp, bhat, None, win, batch, inner, ibs, iis, ies, obs, ois, oes, L, 1, scale, clip[1], clip[0])
    _launch_block((cdt, m, direction, load, store, blue, False, False), args, batch)
    return True


# -- contiguous complex rows of any length -------------------------------------------


_ELEMENTWISE_SIG = {
    "chirp_in": "const void* x, const void* chirp, void* w, long long batch, int L, int M",
    "mul_rows": "void* y, const void* v, long long batch, int M",
    "chirp_out": "const void* y, const void* chirp, void* out, long long batch, int L, int M, double scale",
    "rfft_post": "const void* z, const void* rtw, void* out, long long batch, int L, double scale",
    "irfft_pre": "const void* X, const void* rtw, void* z, long long batch, int L",
    "herm_expand": "const void* X, void* z, long long batch, int n",
}


@functools.cache
def _elementwise(name: str, cdt: np.dtype, direction: int | None) -> Any:
    tmpl = _REAL_T[cdt] if direction is None else f"{_REAL_T[cdt]}, {direction}"
    return ext.Kernel(ext.kernel_source(__name__, "fft"), f"pgk_fft::{name}<{tmpl}>", signature=_ELEMENTWISE_SIG[name], name="fft.cu")


def _grid(total: int) -> int:
    return max(1, -(-total // 256))


def supported(L: int) -> bool:
    """Whether c2c_rows can do an L-point transform on the GPU."""
    if block_length(L, 16) is not None or plan.split(L) is not None:
        return True
    return plan.split(plan.bluestein_length(L)) is not None


def c2c_rows(x: gp.GPUArray, direction: int, scale: float) -> gp.GPUArray:
    """The transform of each contiguous row of complex x (batch, L)."""
    batch, L = x.shape
    return _c2c(x, batch, L, x.dtype, direction, scale, ext.empty((batch, L), x.dtype))


def _c2c(src: gp.GPUArray, batch: int, L: int, cdt: np.dtype, direction: int, scale: float, out: gp.GPUArray) -> gp.GPUArray:
    """The transforms of ``batch`` contiguous rows of L complex ``cdt`` values
    at ``src``, written to ``out`` (returned). The kernels take both through
    their pointers only, so either may be a real array of (re, im) pairs."""
    if batch == 0 or L == 0:
        return out
    kind = "fft" if direction < 0 else "ifft"
    if block(kind, src, out, L, cdt, batch, (1, L, 0, 1), (1, L, 0, 1), scale):
        return out
    sp = plan.split(L)
    if sp is not None:
        return _four_step(src, out, batch, L, cdt, direction, scale, *sp)
    m = plan.bluestein_length(L)
    chirp, bhat = plan.table("chirp", L, cdt), plan.table("bhat", L, cdt, m)
    w = ext.empty((batch, m), cdt)
    _elementwise("chirp_in", cdt, direction)(_grid(batch * m), 256, src, chirp, w, batch, L, m)
    w = c2c_rows(w, -1, 1.0)
    _elementwise("mul_rows", cdt, direction)(_grid(batch * m), 256, w, bhat, batch, m)
    w = c2c_rows(w, 1, 1.0)
    _elementwise("chirp_out", cdt, direction)(_grid(batch * L), 256, w, chirp, out, batch, L, m, scale)
    return out


def _four_step(
    x: gp.GPUArray, out: gp.GPUArray, batch: int, n: int, cdt: np.dtype, direction: int, scale: float, n1: int, n2: int
) -> gp.GPUArray:
    """X[k1 + n1 k2] = sum_j2 w^(j2 k1) W2^(j2 k2) sum_j1 x[j1 n2 + j2] W1^(j1 k1):
    pass A does the n2 columns of n1 points and the twiddles, pass B the n1
    rows of n2 points, writing the transposed order (rows as in _c2c)."""
    tmp = ext.empty((batch, n), cdt)
    ptw = plan.table("tw", n, cdt)
    # adjacent rows of a pass are adjacent columns where it reads / writes with stride n2 / n1
    for (m, src, dst, irows, orows, rows, tw, sc, lcols) in (
        (n1, x, tmp, (n2, n, 1, n2), (n2, n, 1, n2), batch * n2, ptw, 1.0, True),
        (n2, tmp, out, (n1, n, n2, 1), (n1, n, 1, n1), batch * n1, None, scale, False),
    ):  # fmt: skip
        inner, ibs, iis, ies = irows
        _, obs, ois, oes = orows
        args = (src, dst, plan.table("tw", m, cdt), None, None, None, tw, None, rows, inner, ibs, iis, ies, obs, ois, oes, m, n, sc, 0, 0)
        _launch_block((cdt, m, direction, LD_C2C, ST_C2C, False, lcols, True), args, rows)
    return out


def _real_four_step(x: gp.GPUArray, n: int, cdt: np.dtype, scale: float, n1: int, n2: int) -> gp.GPUArray:
    """The n / 2 + 1 bins of the rfft of contiguous real rows x (batch, n), n =
    n1 * n2, in two passes (one read and one write each): pass A transforms
    the n2 real columns of n1 points, keeping the bins k1 <= n1 / 2 (the rest
    are their conjugates) times the twiddles; pass B transforms those rows of
    n2 points, storing X[k1 + n1 k2] where that is a bin <= n / 2 and its
    mirror X[n - k1 - n1 k2] = conj(...) where not (ST_HMIRROR)."""
    if n1 % 2:
        n1, n2 = n2, n1
    batch, h1 = x.shape[0], n1 // 2 + 1
    tmp = ext.empty((batch, h1, n2), cdt)
    out = ext.empty((batch, n // 2 + 1), cdt)
    for (m, src, dst, load, store, irows, orows, rows, ptw, length, sc, lcols) in (
        (n1, x, tmp, LD_REAL, ST_C2C, (n2, n, 1, n2), (h1 * n2, 1, n2), batch * n2, plan.table("tw", n, cdt), h1, 1.0, True),
        (n2, tmp, out, LD_C2C, ST_HMIRROR, (h1, h1 * n2, n2, 1), (n // 2 + 1, 1, n1), batch * h1, None, n2, scale, False),
    ):  # fmt: skip
        inner, ibs, iis, ies = irows
        obs, ois, oes = orows
        args = (
            src,
            dst,
            plan.table("tw", m, cdt),
            None,
            None,
            None,
            ptw,
            None,
            rows,
            inner,
            ibs,
            iis,
            ies,
            obs,
            ois,
            oes,
            length,
            n,
            sc,
            0,
            0,
        )
        _launch_block((cdt, m, -1, load, store, False, lcols, True), args, rows)
    return out


# -- the op over an axis --------------------------------------------------------------


def groups(a: gp.GPUArray, axis: int) -> tuple[int, int, int, int, int] | None:
    """(batch, inner, outer stride, inner stride, element stride) in elements,
    when the axes before ``axis`` and those after it each collapse to one stride."""
    item = a.dtype.itemsize
    shape, strides = a.shape, [s // item for s in a.strides]
    if any(s * item != t for s, t in zip(strides, a.strides)):
        return None

    def collapse(lo: int, hi: int) -> tuple[int, int] | None:
        count, stride = 1, 0
        for i in range(hi - 1, lo - 1, -1):
            if shape[i] == 1:
                continue
            if count > 1 and strides[i] != stride * count:
                return None
            if count == 1:
                stride = strides[i]
            count *= shape[i]
        return count, stride

    outer, inner = collapse(0, axis), collapse(axis + 1, a.ndim)
    if outer is None or inner is None:
        return None
    return outer[0] * inner[0], inner[0], outer[1], inner[1], strides[axis]


def transform(kind: str, a: gp.GPUArray, n: int, axis: int, scale: float) -> gp.GPUArray:
    """The n-point ``kind`` transform along ``axis`` of ``a``, already cropped or
    padded to the input length and of a kernel dtype."""
    cdt = plan.complex_dtype(a.dtype)
    real_in = a.dtype.kind == "f"
    out_len = n // 2 + 1 if kind == "rfft" else n
    out_dt = cdt.type(0).real.dtype if kind == "irfft" else cdt
    shape = a.shape[:axis] + (out_len,) + a.shape[axis + 1 :]
    out = ext.empty(shape, out_dt)
    if out.size == 0:
        return out
    if block_length(modes(kind, n)[1], cdt.itemsize) is not None:
        g = groups(a, axis)
        if g is None:
            a = gp.ascontiguousarray(a)
            g = groups(a, axis)
        batch, inner, bs, is_, es = g
        ostride = int(np.prod(shape[axis + 1 :], dtype=np.int64))
        block(
            kind,
            a,
            out,
            n,
            cdt,
            batch,
            (inner, bs, is_, es),
            (inner, out_len * ostride, 1, ostride),
            scale,
            real_in and kind in ("fft", "ifft"),
        )
        return out
    rows = gp.ascontiguousarray(gp.swapaxes(a, axis, -1))
    lead = rows.shape[:-1]
    rows = rows.reshape(-1, rows.shape[-1])
    y = _rows(kind, rows, n, cdt, scale)
    return gp.ascontiguousarray(gp.swapaxes(y.reshape(*lead, y.shape[-1]), axis, -1))


def _rows(kind: str, x: gp.GPUArray, n: int, cdt: np.dtype, scale: float) -> gp.GPUArray:
    """A transform too long for one block, over contiguous rows x (batch, in_len)."""
    batch = x.shape[0]
    if kind in ("fft", "ifft"):
        return c2c_rows(x.astype(cdt), -1 if kind == "fft" else 1, scale)
    half = n // 2
    if kind == "rfft" and n % 2 == 0 and plan.split(n) is not None:
        return _real_four_step(x, n, cdt, scale, *plan.split(n))
    if kind == "rfft" and n % 2 == 0:
        if x.data_ptr % cdt.itemsize:  # the pairs are read as complex values: align them
            x = x.copy()
        z = _c2c(x, batch, half, cdt, -1, 1.0, ext.empty((batch, half), cdt))
        out = ext.empty((batch, half + 1), cdt)
        _elementwise("rfft_post", cdt, None)(_grid(batch * (half + 1)), 256, z, plan.table("rtw", half, cdt), out, batch, half, scale)
        return out
    if kind == "rfft":
        return gp.ascontiguousarray(c2c_rows(x.astype(cdt), -1, scale)[:, : half + 1])
    if n % 2 == 0:
        z = ext.empty((batch, half), cdt)
        _elementwise("irfft_pre", cdt, None)(_grid(batch * half), 256, x, plan.table("rtw", half, cdt), z, batch, half)
        samples = ext.empty((batch, n), cdt.type(0).real.dtype)
        return _c2c(z, batch, half, cdt, 1, scale, samples)  # the complex results' (re, im) pairs are the samples
    z = ext.empty((batch, n), cdt)
    _elementwise("herm_expand", cdt, None)(_grid(batch * n), 256, x, z, batch, n)
    return gp.ascontiguousarray(c2c_rows(z, 1, scale).real)
