"""Flash-attention forward (FlashAttention-2 style): one program per BLOCK_M
queries of one (batch, query head); K/V tiles of BLOCK_N keys stream through
an online softmax in float32 (base 2), P is rounded to the input dtype
before P @ V as flash-attn does. Causal masking is aligned to the bottom
right (query i sees keys j <= i + Sk - Sq); query head h reads KV head
h // group (GQA / MQA). A query that sees no key gets zeros."""

import triton
import triton.language as tl


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
    if CAUSAL:
        hi = tl.minimum(Sk, (pm + 1) * BLOCK_M + off)
    for start in range(0, hi, BLOCK_N):
        rn = start + rn0
        key_ok = rn < Sk
        kt = tl.load(k_base + rn[None, :].to(tl.int64) * sks + rd[:, None], mask=key_ok[None, :], other=0.0)
        s = tl.dot(q, kt) * scale_log2
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (rn[None, :] <= rm[:, None] + off)
        s = tl.where(visible, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == -float("inf"), 0.0, m_new)  # nothing visible yet: keep exp2 finite
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + rn[:, None].to(tl.int64) * svs + rd[None, :], mask=key_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_ptrs = Out + b * sob + h.to(tl.int64) * soh + rm[:, None].to(tl.int64) * sos + rd[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=rm[:, None] < Sq)
