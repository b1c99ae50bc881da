"""Row kernels over (rows, n) views with a row stride: RMSNorm / LayerNorm (each
optionally fused with the residual add before it), softmax, and the
(gated) activations. A block holds BLOCK_M whole rows of BLOCK_N >= n
columns, so a row is read once and written once; math in float32, each
output rounded once to its dtype."""

import triton
import triton.language as tl


@triton.jit
def norm_rows(X, xs, R, rs, H, W, B, Y, rows, n, eps,
              LAYER: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    r = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    c = tl.arange(0, BLOCK_N)[None, :]
    cm = c < n
    m = (r < rows) & cm
    x = tl.load(X + r * xs + c, mask=m, other=0.0).to(tl.float32)
    if HAS_RES:
        # h = x + residual rounded to the dtype is the new residual stream, and what is normalized
        h = (x + tl.load(R + r * rs + c, mask=m, other=0.0).to(tl.float32)).to(H.dtype.element_ty)
        tl.store(H + r * n + c, h, mask=m)
        x = h.to(tl.float32)
    if LAYER:
        x = tl.where(m, x - (tl.sum(x, axis=1) / n)[:, None], 0.0)
    y = x * (1.0 / tl.sqrt_rn(tl.sum(x * x, axis=1) / n + eps))[:, None]
    if HAS_W:
        y = y * tl.load(W + c, mask=cm, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(B + c, mask=cm, other=0.0).to(tl.float32)
    tl.store(Y + r * n + c, y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def softmax_rows(X, xs, Y, rows, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    c = tl.arange(0, BLOCK_N)[None, :]
    m = (r < rows) & (c < n)
    x = tl.load(X + r * xs + c, mask=m, other=-float("inf")).to(tl.float32)
    # a row of -inf gives NaN (x - max is NaN), as scipy and core's softmax
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    tl.store(Y + r * n + c, (e / tl.sum(e, axis=1)[:, None]).to(Y.dtype.element_ty), mask=m)


SILU, GELU, GELU_TANH = 0, 1, 2


@triton.jit
def act_rows(G, gs, U, us, Y, n, ACT: tl.constexpr, GATED: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < n
    g = tl.load(G + row * gs + c, mask=m, other=0.0).to(tl.float32)
    if ACT == 0:
        a = g / (1.0 + tl.exp(-g))
    elif ACT == 1:
        a = 0.5 * g * (1.0 + tl.erf(g * 0.7071067811865476))
    else:
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        a = 0.5 * g * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))  # 1 + tanh(z), without overflow at large |z|
    if GATED:
        a = a * tl.load(U + row * us + c, mask=m, other=0.0).to(tl.float32)
    tl.store(Y + row * n + c, a.to(Y.dtype.element_ty), mask=m)
