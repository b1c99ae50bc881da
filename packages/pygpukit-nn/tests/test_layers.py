"""The layer objects against float64 NumPy: Linear, Embedding, RMSNorm and
LayerNorm (with the fused residual add), MLP gated and plain."""

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import layers


def _silu(x):
    return x / (1 + np.exp(-x))


def test_linear_norms_embedding(rng):
    x, w, b = rand(rng, (3, 4, 16), np.float32), rand(rng, (8, 16), np.float32), rand(rng, (8,), np.float32)
    lin = layers.Linear(gp.from_numpy(w.astype(np.float32)), gp.from_numpy(b.astype(np.float32)))
    assert (lin.in_features, lin.out_features) == (16, 8) and "16 -> 8" in repr(lin)
    assert rel_err(lin(gp.from_numpy(x.astype(np.float32))).to_numpy(), x @ w.T + b) < 1e-5
    gx, gr = gp.from_numpy(x.astype(np.float32)), gp.from_numpy(x[::-1].astype(np.float32).copy())
    g = rand(rng, (16,), np.float32)
    rms = layers.RMSNorm(gp.from_numpy(g.astype(np.float32)), 1e-5)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g
    assert rel_err(rms(gx).to_numpy(), ref) < 1e-5
    y, h = rms.add(gx, gr)
    hh = x + x[::-1]
    assert rel_err(h.to_numpy(), hh) < 1e-6
    assert rel_err(y.to_numpy(), hh / np.sqrt((hh * hh).mean(-1, keepdims=True) + 1e-5) * g) < 1e-5
    ln = layers.LayerNorm(None, gp.from_numpy(g.astype(np.float32)))
    c = x - x.mean(-1, keepdims=True)
    assert rel_err(ln(gx).to_numpy(), c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) + g) < 1e-5
    table = rand(rng, (50, 16), np.float32)
    emb = layers.Embedding(gp.from_numpy(table.astype(np.float32)))
    ids = np.array([[3, 49, 0], [7, 7, 1]], dtype=np.int32)
    np.testing.assert_array_equal(emb(gp.from_numpy(ids)).to_numpy(), table[ids].astype(np.float32))
    assert rel_err(emb.as_lm_head(gx).to_numpy(), x @ table.T) < 1e-5


@pytest.mark.parametrize("dtype", [np.float32, gp.bfloat16])
def test_mlp_gated_and_plain(rng, dtype):
    hdim, inter = 32, 48
    x = rand(rng, (5, hdim), dtype)
    gate, up, down = rand(rng, (inter, hdim), dtype, 0.3), rand(rng, (inter, hdim), dtype, 0.3), rand(rng, (hdim, inter), dtype, 0.3)
    mlp = layers.MLP.gated_from(*(gp.from_numpy(a.astype(dtype)) for a in (gate, up, down)))
    ref = (_silu(x @ gate.T) * (x @ up.T)) @ down.T
    tol = 1e-5 if dtype == np.float32 else 3e-2  # bf16: three roundings of intermediate products
    assert rel_err(mlp(gp.from_numpy(x.astype(dtype))).to_numpy(), ref) < tol
    gx = gp.from_numpy(x.astype(dtype))
    np.testing.assert_array_equal(mlp.down_proj(mlp.up(gx)).to_numpy(), mlp(gx).to_numpy())  # the block after its up projection
    plain = layers.MLP(
        layers.Linear(gp.from_numpy(up.astype(dtype))), layers.Linear(gp.from_numpy(down.astype(dtype))), "relu", gated=False
    )
    assert rel_err(plain(gp.from_numpy(x.astype(dtype))).to_numpy(), np.maximum(x @ up.T, 0) @ down.T) < tol


def test_errors():
    w = gp.zeros((8, 4), gp.float32)
    for call, exc, match in [
        (lambda: layers.Linear(np.zeros((8, 4))), TypeError, "Linear: weight must be a GPUArray"),
        (lambda: layers.Linear(gp.zeros((8,), gp.float32)), ValueError, "must be 2-D"),
        (lambda: layers.Linear(w, gp.zeros((4,), gp.float32)), ValueError, r"bias must have shape \(8,\)"),
        (
            lambda: layers.MLP(layers.Linear(w), layers.Linear(gp.zeros((4, 4), gp.float32)), "swish"),
            ValueError,
            "activation must be one of",
        ),
        (lambda: layers.MLP(layers.Linear(w), layers.Linear(gp.zeros((4, 5), gp.float32))), ValueError, "down must map 4 -> 4"),
        (lambda: layers.MLP(layers.Linear(gp.zeros((7, 4), gp.float32)), layers.Linear(w)), ValueError, "2 \\* intermediate"),
        (lambda: layers.MLP.gated_from(w, gp.zeros((8, 5), gp.float32), w), ValueError, "gate and up must match"),
        (lambda: layers.RMSNorm(gp.zeros((2, 2), gp.float32)), ValueError, "must be 1-D"),
    ]:
        with pytest.raises(exc, match=match):
            call()


def _np_attention(x, wqkv, wo, hq, hk, d, rope_base=None):
    """float64 causal GQA attention of x (B, S, H) with NeoX RoPE at positions 0..S-1."""
    b, s, _ = x.shape
    qkv = x @ wqkv.T
    q = qkv[..., : hq * d].reshape(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d)
    v = qkv[..., (hq + hk) * d :].reshape(b, s, hk, d)
    if rope_base is not None:
        inv = rope_base ** (-np.arange(0, d, 2) / d)
        ang = np.arange(s)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[None, :, None, :], np.sin(ang)[None, :, None, :]

        def rot(t):
            a, c = t[..., : d // 2], t[..., d // 2 :]
            return np.concatenate([a * cos - c * sin, c * cos + a * sin], axis=-1)

        q, k = rot(q), rot(k)
    k, v = np.repeat(k, hq // hk, axis=2), np.repeat(v, hq // hk, axis=2)
    sc = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d)
    sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, hq * d) @ wo.T


@pytest.mark.parametrize("dtype", [np.float32, gp.bfloat16])
def test_attention_layer_prefill_and_cached_decode(rng, dtype):
    from pygpukit_nn.kv_cache import KVCache
    from pygpukit_nn.positional import RotaryEmbedding

    hq, hk, d, hidden, s = 4, 2, 64, 48, 13
    x = rand(rng, (2, s, hidden), dtype)
    wqkv, wo = rand(rng, ((hq + 2 * hk) * d, hidden), dtype, 0.2), rand(rng, (hidden, hq * d), dtype, 0.2)
    ref = _np_attention(x, wqkv, wo, hq, hk, d, 10000.0)
    g = lambda a: gp.from_numpy(a.astype(dtype))
    attn = layers.Attention(layers.Linear(g(wqkv)), layers.Linear(g(wo)), hq, hk, d, rope=RotaryEmbedding(d, 64, base=10000.0))
    tol = 1e-4 if dtype == np.float32 else 5e-2  # bf16: q, k, v, scores, probabilities and the output each rounded
    pos = np.arange(s)
    assert rel_err(attn(g(x), pos).to_numpy(), ref) < tol
    qkv = attn.qkv(g(x)).to_numpy()
    q, k, v = (a.to_numpy() for a in attn.split_qkv(attn.qkv(g(x))))
    assert q.shape == (2, s, hq, d) and k.shape == v.shape == (2, s, hk, d)
    np.testing.assert_array_equal(np.concatenate([a.reshape(2, s, -1) for a in (q, k, v)], axis=-1), qkv)
    np.testing.assert_array_equal(attn.attend(attn.qkv(g(x)), pos).to_numpy(), attn(g(x), pos).to_numpy())
    with pytest.raises(ValueError, match=r"qkv must have \(num_heads \+ 2 \* num_kv_heads\) \* head_dim = 512 features, got 511"):
        attn.attend(gp.zeros((2, s, 511), g(x).dtype), pos)
    # a cache: 12 tokens through the prefill kernel over the gathered cache, then one decode step
    cache = KVCache(2, 32, hk, d, gp.float32 if dtype == np.float32 else gp.bfloat16)
    first = attn(g(x[:, :12]), pos[:12], cache)
    assert rel_err(first.to_numpy(), ref[:, :12]) < tol
    last = attn(g(x[:, 12:]), pos[12:], cache)
    assert rel_err(last.to_numpy(), ref[:, 12:]) < tol
    assert cache.seq_lengths().tolist() == [13, 13]
    # short prompts take the decode kernel for all their tokens (causal among them)
    cache2 = KVCache(2, 32, hk, d, gp.float32 if dtype == np.float32 else gp.bfloat16)
    assert rel_err(attn(g(x[:, :5]), pos[:5], cache2).to_numpy(), _np_attention(x[:, :5], wqkv, wo, hq, hk, d, 10000.0)) < tol
    # a ragged batch of short prompts (5 and 3 real tokens of 6): each row's real tokens as alone
    cache3 = KVCache(2, 32, hk, d, gp.float32 if dtype == np.float32 else gp.bfloat16)
    out = attn(g(x[:, :6]), pos[:6], cache3, counts=[5, 3]).to_numpy()
    assert cache3.seq_lengths().tolist() == [5, 3]
    for b, n in ((0, 5), (1, 3)):
        assert rel_err(out[b : b + 1, :n], _np_attention(x[b : b + 1, :n], wqkv, wo, hq, hk, d, 10000.0)) < tol


def test_attention_and_moe_layer_errors():
    w = gp.zeros((8, 4), gp.float32)
    for call, match in [
        (lambda: layers.Attention(layers.Linear(w), layers.Linear(w), 3, 2, 1), "multiple of num_kv_heads"),
        (lambda: layers.Attention(layers.Linear(w), layers.Linear(w), 2, 1, 4), r"qkv must have \(num_heads"),
        (lambda: layers.Attention(layers.Linear(gp.zeros((16, 4), gp.float32)), layers.Linear(w), 2, 1, 4), "o must take"),
        (
            lambda: layers.Attention.from_separate(
                *(layers.Linear(w) for _ in range(2)), layers.Linear(w, gp.zeros((8,), gp.float32)), layers.Linear(w), 2, 1, 4
            ),
            "all have a bias or none",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(ValueError, match="must be 3-D"):
        layers.MoE(layers.Linear(w), gp.zeros((8, 4), gp.float32), gp.zeros((2, 4, 4), gp.float32), 2)
