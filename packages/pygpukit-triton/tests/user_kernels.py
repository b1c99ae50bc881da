"""Triton kernels a user would write, for the launch tests (a Python file of
their own: @triton.jit reads the source)."""

import triton
import triton.language as tl


@triton.jit
def vector_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def scale_2d(a, out, rows, cols, sar, sac, sor, soc, alpha, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    c = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    m = (r < rows) & (c < cols)
    v = tl.load(a + r * sar + c * sac, mask=m)
    tl.store(out + r * sor + c * soc, alpha * v + 1.0, mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"])
@triton.jit
def scaled_copy_tuned(x, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=m), mask=m)


@triton.jit
def spin_then_fill(out, n, value, iters, BLOCK: tl.constexpr):
    """Busy for ``iters`` steps (acc converges to 2.0), then out[:n] = value: a slow writer
    for the stream-ordering test."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for _ in range(iters):
        acc = acc * 0.5 + 1.0
    tl.store(out + offs, value + (acc - 2.0), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 512})], key=["n"], reset_to_zero=["total"])
@triton.jit
def sum_atomic_tuned(x, total, n, BLOCK: tl.constexpr):
    """total += sum(x): the autotuner must zero ``total`` before each timed run (TritonArray.zero_)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(total, tl.sum(tl.load(x + offs, mask=offs < n, other=0.0), axis=0))
