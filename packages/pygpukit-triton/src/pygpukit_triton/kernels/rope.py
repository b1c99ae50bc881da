"""RoPE in place: one program per token and block of heads rotates the first
rotary_dim dims of each head by the token's angle, read from the float32
cos/sin cache (max_positions, 2, half). A position outside the cache leaves
the token unchanged, as pygpukit-nn's kernel does."""

import triton
import triton.language as tl


@triton.jit
def rope_inplace(X, xb, xs, xh, CS, P, pb, ps, seq, heads, half, max_pos,
                 NEOX: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    t = tl.program_id(0)
    b = t // seq
    s = t % seq
    pos = tl.load(P + b.to(tl.int64) * pb + s.to(tl.int64) * ps).to(tl.int64)
    valid = (pos >= 0) & (pos < max_pos)
    pos = tl.where(valid, pos, 0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    j = tl.arange(0, BLOCK_D)[None, :]
    jm = (j < half) & valid
    m = (h < heads) & jm
    cos = tl.load(CS + pos * 2 * half + j, mask=jm, other=1.0)
    sin = tl.load(CS + pos * 2 * half + half + j, mask=jm, other=0.0)
    base = X + b.to(tl.int64) * xb + s.to(tl.int64) * xs + h.to(tl.int64) * xh
    if NEOX:
        ia = j
        ib = j + half
    else:
        ia = 2 * j
        ib = 2 * j + 1
    a = tl.load(base + ia, mask=m, other=0.0).to(tl.float32)
    c = tl.load(base + ib, mask=m, other=0.0).to(tl.float32)
    tl.store(base + ia, (a * cos - c * sin).to(X.dtype.element_ty), mask=m)
    tl.store(base + ib, (c * cos + a * sin).to(X.dtype.element_ty), mask=m)
