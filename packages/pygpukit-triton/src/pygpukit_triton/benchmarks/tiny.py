"""The tiny Triton kernel of the launch-overhead benchmark (imported only when
that benchmark runs: it imports triton)."""

import triton
import triton.language as tl


@triton.jit
def tiny_add(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)
