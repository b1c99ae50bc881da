"""Flash-attention forward (FlashAttention-2 style): one program per BLOCK_M
queries of one (batch, query head); K/V tiles of BLOCK_N keys stream through
an online softmax in float32 (base 2), P is rounded to the input dtype
before P @ V as flash-attn does. Causal masking is aligned to the bottom
right (query i sees keys j <= i + Sk - Sq); query head h reads KV head
h // group (GQA / MQA). A query that sees no key gets zeros. Tiles that
every query of the block sees whole (below the diagonal, before the last
partial tile) skip the masking."""

import triton
import triton.language as tl


@triton.jit
def _tile(acc, l_i, m_i, q, k_base, v_base, start, rm, rd, rn0, sks, svs, Sk, off, scale_log2,
          CAUSAL: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """One K/V tile folded into the running (acc, l, m) of the block's queries."""
    rn = start + rn0
    key_ok = rn < Sk
    k_ptrs = k_base + rn[None, :].to(tl.int64) * sks + rd[:, None]
    v_ptrs = v_base + rn[:, None].to(tl.int64) * svs + rd[None, :]
    if MASKED:
        kt = tl.load(k_ptrs, mask=key_ok[None, :], other=0.0)
    else:
        kt = tl.load(k_ptrs)
    s = tl.dot(q, kt) * scale_log2
    if MASKED:
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (rn[None, :] <= rm[:, None] + off)
        s = tl.where(visible, s, -float("inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_use = tl.where(m_new == -float("inf"), 0.0, m_new)  # nothing visible yet: keep exp2 finite
    p = tl.exp2(s - m_use[:, None])
    alpha = tl.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if MASKED:
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
    else:
        v = tl.load(v_ptrs)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def flash_fwd(Q, K, V, Out, sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos, Hq, group, Sq, Sk, scale_log2,
              CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    pm = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // Hq).to(tl.int64)
    h = bh % Hq
    hk = (h // group).to(tl.int64)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    rn0 = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * sqb + h.to(tl.int64) * sqh + rm[:, None].to(tl.int64) * sqs + rd[None, :], mask=rm[:, None] < Sq, other=0.0)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    off = Sk - Sq
    hi = Sk
    whole = Sk  # keys [0, whole) come in tiles every query of the block sees in full
    if CAUSAL:
        hi = tl.minimum(Sk, (pm + 1) * BLOCK_M + off)
        whole = tl.minimum(Sk, pm * BLOCK_M + off + 1)
    whole = tl.maximum(whole, 0) // BLOCK_N * BLOCK_N
    for start in range(0, whole, BLOCK_N):
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_base, v_base, start, rm, rd, rn0, sks, svs, Sk, off, scale_log2, CAUSAL, False)
    for start in range(whole, hi, BLOCK_N):
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_base, v_base, start, rm, rd, rn0, sks, svs, Sk, off, scale_log2, CAUSAL, True)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_ptrs = Out + b * sob + h.to(tl.int64) * soh + rm[:, None].to(tl.int64) * sos + rd[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=rm[:, None] < Sq)
