"""RoPE frequencies (every scaling type) against transformers' formulas written
out here in float64 (and transformers itself where installed), the rope op
against a float64 NumPy rotation (both layouts, partial rotary, batches,
strided q/k, positions out of order), ALiBi against BLOOM's formula, and the
kernel (GPU) with its choice, fallbacks and PyTorch."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import positional as P
from pygpukit_nn.positional import RotaryEmbedding, alibi_bias, alibi_slopes, apply_rope, rope_cos_sin, rope_frequencies

# Tolerances on rel_err against float64: float32 math and a float32 cos/sin
# cache are good to ~1e-6; bf16 / fp16 outputs are rounded once (2^-9 / 2^-11
# relative), so 1e-2 bounds both; float64 inputs still use the float32 cache.
TOL = {np.dtype(gp.float32): 1e-5, np.dtype(gp.bfloat16): 1e-2, np.dtype(gp.float16): 1e-2, np.dtype(gp.float64): 1e-6}
DTYPES = [gp.float32, gp.bfloat16, gp.float16, gp.float64]


# -- transformers' rope init functions, written out per type in float64 ------------------------------


def hf_inv_freq(dim, base, sc, max_pos=None, seq_len=None):
    """(inv_freq, attention_factor) as transformers' modeling_rope_utils computes them."""
    sc = sc or {}
    kind = sc.get("rope_type", sc.get("type", "default"))
    default = np.array([1.0 / base ** (i / dim) for i in range(0, dim, 2)])
    if kind == "default":
        return default, 1.0
    if kind == "linear":
        return default / sc["factor"], 1.0
    if kind == "dynamic":
        seq = seq_len if seq_len is not None and seq_len > max_pos else max_pos
        scaled = base * ((sc["factor"] * seq / max_pos) - (sc["factor"] - 1)) ** (dim / (dim - 2))
        return np.array([1.0 / scaled ** (i / dim) for i in range(0, dim, 2)]), 1.0
    if kind == "llama3":
        factor, low, high, old = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], sc["original_max_position_embeddings"]
        out = []
        for f in default:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                out.append(f)
            elif wavelen > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        return np.array(out), 1.0
    assert kind == "yarn"
    orig = sc.get("original_max_position_embeddings") or max_pos
    factor = sc.get("factor") or max_pos / orig

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention = sc.get("attention_factor")
    if attention is None:
        if sc.get("mscale") and sc.get("mscale_all_dim"):
            attention = get_mscale(factor, sc["mscale"]) / get_mscale(factor, sc["mscale_all_dim"])
        else:
            attention = get_mscale(factor)

    def correction_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(sc.get("beta_fast") or 32), correction_dim(sc.get("beta_slow") or 1)
    if sc.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        pos_freq = base ** (2 * i / dim)
        extrapolation = 1 - ramp
        out.append(1.0 / (factor * pos_freq) * (1 - extrapolation) + 1.0 / pos_freq * extrapolation)
    return np.array(out), attention


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
# (id, rotary_dim, base, scaling, max_position_embeddings, seq_len)
FREQ_CASES = [
    ("default", 128, 10000.0, None, None, None),
    ("default_partial", 32, 10000.0, {"rope_type": "default"}, None, None),
    ("linear", 64, 10000.0, {"type": "linear", "factor": 4.0}, None, None),
    ("dynamic_short", 128, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 4096, 1000),
    ("dynamic_long", 128, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 4096, 10000),
    ("llama3", 128, 500000.0, LLAMA31, 131072, None),
    ("yarn", 128, 1000000.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072, None),
    ("yarn_mscale", 64, 10000.0, {"rope_type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707,
                                  "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}, 163840, None),
    ("yarn_mscale_differ", 64, 10000.0, {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.5,
                                         "original_max_position_embeddings": 4096}, 163840, None),
    ("yarn_no_truncate", 64, 150000.0, {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                        "original_max_position_embeddings": 4096}, 131072, None),
    ("yarn_attention", 96, 10000.0, {"rope_type": "yarn", "factor": 2.0, "attention_factor": 1.25,
                                     "original_max_position_embeddings": 2048}, 4096, None),
]  # fmt: skip


@pytest.mark.parametrize("case", FREQ_CASES, ids=[c[0] for c in FREQ_CASES])
def test_frequencies_match_transformers_formulas(case):
    _, dim, base, sc, max_pos, seq_len = case
    got, attention = rope_frequencies(dim, base, sc, max_position_embeddings=max_pos, seq_len=seq_len)
    want, want_attention = hf_inv_freq(dim, base, sc, max_pos, seq_len)
    assert got.dtype == np.float64 and got.shape == (dim // 2,)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert attention == pytest.approx(want_attention, rel=1e-14)


def test_frequencies_known_values():
    base = rope_frequencies(128, 500000.0)[0]
    llama = rope_frequencies(128, 500000.0, LLAMA31)[0]
    assert llama[0] == base[0] == 1.0 and llama[-1] == pytest.approx(base[-1] / 8, rel=1e-15)  # fast dims kept, slow ones / factor
    assert rope_frequencies(64, None, {"rope_theta": 500.0})[0][1] == pytest.approx(500.0 ** (-2 / 64))  # rope_parameters' theta
    dyn = {"rope_type": "dynamic", "factor": 2.0}
    np.testing.assert_allclose(rope_frequencies(64, 1e4, dyn, max_position_embeddings=100, seq_len=50)[0], rope_frequencies(64, 1e4)[0])
    yarn = {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096}  # factor from the lengths (DeepSeek)
    got, attention = rope_frequencies(64, 1e4, yarn, max_position_embeddings=16384)
    assert attention == pytest.approx(0.1 * math.log(4) + 1) and got[-1] == pytest.approx(1e4 ** (-62 / 64) / 4)


@pytest.mark.parametrize(
    "case", [c for c in FREQ_CASES if c[0] != "default_partial"], ids=[c[0] for c in FREQ_CASES if c[0] != "default_partial"]
)
def test_frequencies_against_transformers(case):
    pytest.importorskip("torch")
    mru = pytest.importorskip("transformers.modeling_rope_utils")
    _, dim, base, sc, max_pos, seq_len = case
    sc = dict(sc or {"rope_type": "default"})
    kind = sc.get("rope_type", sc.get("type"))
    sc.setdefault("rope_type", kind)
    fn = mru.ROPE_INIT_FUNCTIONS.get(kind)
    if fn is None:
        pytest.skip(f"transformers has no rope init function {kind!r} (transformers 5 keeps 'default' in each model)")
    if kind == "yarn":  # some releases take factor from these lengths: make both agree
        max_pos = int(sc["factor"] * sc["original_max_position_embeddings"])
    elif kind == "dynamic":
        sc.setdefault("original_max_position_embeddings", max_pos)

    config = SimpleNamespace(  # what both the 4.x (rope_scaling) and 5.x (rope_parameters) functions read
        rope_theta=base, rope_scaling=sc, rope_parameters={**sc, "rope_theta": base}, head_dim=dim, hidden_size=dim * 4,
        num_attention_heads=4, max_position_embeddings=max_pos or 2048, partial_rotary_factor=1.0, standardize_rope_params=lambda: None,
    )  # fmt: skip
    inv, attention = fn(config, None, seq_len)
    got, got_attention = rope_frequencies(dim, base, sc, max_position_embeddings=config.max_position_embeddings, seq_len=seq_len)
    np.testing.assert_allclose(got, inv.double().numpy(), rtol=5e-6)  # transformers works in float32
    assert got_attention == pytest.approx(float(attention), rel=1e-6)


def test_frequency_errors():
    for call, exc, match in (
        (lambda: rope_frequencies(7), ValueError, "rotary_dim must be an even int"),
        (lambda: rope_frequencies(8, 1.0), ValueError, "must be > 1"),
        (lambda: rope_frequencies(8, scaling={"rope_type": "longrope"}), ValueError, "'longrope' is not supported"),
        (lambda: rope_frequencies(8, scaling=[1]), TypeError, "must be a dict"),
        (lambda: rope_frequencies(8, scaling={"rope_type": "linear"}), ValueError, "linear scaling needs 'factor'"),
        (lambda: rope_frequencies(8, scaling={"rope_type": "dynamic", "factor": 2}), ValueError, "needs max_position_embeddings"),
        (lambda: rope_frequencies(8, scaling={**LLAMA31, "low_freq_factor": None}), ValueError, "needs 'low_freq_factor'"),
        (lambda: rope_frequencies(8, scaling={"rope_type": "yarn", "factor": 2}), ValueError, "original_max_position_embeddings"),
        (lambda: rope_cos_sin([], 4), ValueError, "non-empty 1-D"),
        (lambda: rope_cos_sin([1.0], 0), ValueError, "max_positions must be an int >= 1"),
    ):
        with pytest.raises(exc, match=match):
            call()


# -- the cache and RotaryEmbedding ------------------------------------------------------------------------


def test_cos_sin_cache_and_attention_factor():
    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    rope = RotaryEmbedding(32, 300, scaling=sc, max_position_embeddings=256)
    inv, attention = hf_inv_freq(32, 10000.0, sc, 256)
    assert attention > 1 and rope.attention_factor == pytest.approx(attention)
    cs = rope.cos_sin.to_numpy()
    assert cs.dtype == np.float32 and cs.shape == (300, 2, 16) and rope.max_positions == 300
    angles = np.arange(300)[:, None] * inv[None, :]
    np.testing.assert_allclose(cs[:, 0], np.cos(angles) * attention, atol=2e-7)  # float32 rounding of each value
    np.testing.assert_allclose(cs[:, 1], np.sin(angles) * attention, atol=2e-7)
    rope.grow(100)  # smaller: nothing changes
    assert rope.max_positions == 300
    rope.grow(500)
    assert rope.max_positions == 500
    np.testing.assert_array_equal(rope.cos_sin.to_numpy()[:300], cs)


def test_rotary_embedding_partial_and_from_config():
    rope = RotaryEmbedding(80, 64, partial_rotary_factor=0.4)
    assert rope.rotary_dim == 32 and rope.cos_sin.shape == (64, 2, 16)
    cfg = {"hidden_size": 256, "num_attention_heads": 4, "rope_theta": 500000.0, "max_position_embeddings": 1024, "rope_scaling": LLAMA31}
    rope = RotaryEmbedding.from_config(cfg, max_positions=128)
    assert rope.head_dim == rope.rotary_dim == 64 and rope.base == 500000.0 and rope.rope_type == "llama3"
    np.testing.assert_allclose(rope.inv_freq, hf_inv_freq(64, 500000.0, LLAMA31)[0], rtol=1e-13)
    v5 = {
        "head_dim": 80,
        "max_position_embeddings": 512,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
    }
    rope = RotaryEmbedding.from_config(v5, layout="gptj")
    assert (rope.rotary_dim, rope.base, rope.max_positions, rope.layout) == (40, 1e6, 512, "gptj")
    dyn = RotaryEmbedding(64, 200, scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=100)
    np.testing.assert_allclose(dyn.inv_freq, hf_inv_freq(64, 1e4, {"rope_type": "dynamic", "factor": 2.0}, 100, 200)[0], rtol=1e-13)
    dyn.grow(400)  # the dynamic frequencies follow the length
    np.testing.assert_allclose(dyn.inv_freq, hf_inv_freq(64, 1e4, {"rope_type": "dynamic", "factor": 2.0}, 100, 400)[0], rtol=1e-13)
    for call, match in (
        (lambda: RotaryEmbedding(64, 16, rotary_dim=65), "rotary_dim must be an even int"),
        (lambda: RotaryEmbedding(64, 16, layout="half"), "layout must be one of neox, gptj"),
        (lambda: RotaryEmbedding(1, 16), "head_dim must be an int >= 2"),
        (lambda: RotaryEmbedding(64, 0), "max_positions must be an int >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            call()


# -- the rope op ------------------------------------------------------------------------------------------


def rope64(x, inv_freq, pos, layout, rd, attention=1.0):
    """Rotate x (..., H, D) float64 by positions pos (x.shape[:-2]) the float64 way."""
    out = x.copy()
    angles = pos[..., None, None].astype(np.float64) * inv_freq  # (..., 1, half)
    c, s = np.cos(angles) * attention, np.sin(angles) * attention
    if layout == "neox":
        a, b = x[..., : rd // 2], x[..., rd // 2 : rd]
        out[..., : rd // 2], out[..., rd // 2 : rd] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2], out[..., 1:rd:2] = a * c - b * s, b * c + a * s
    return out


def _check_rotated(got, x, inv, pos, layout, rd, dtype, attention=1.0):
    got = got.to_numpy().astype(np.float64)
    want = rope64(x, inv, np.broadcast_to(pos, x.shape[:-2]), layout, rd, attention)
    assert rel_err(got[..., :rd], want[..., :rd]) < TOL[np.dtype(dtype)]
    np.testing.assert_array_equal(got[..., rd:], x[..., rd:])  # the rest untouched, bit for bit


# (id, lead shape, Hq, Hk, D, rotary_dim, positions shape: "full" or "seq")
SHAPES = [
    ("llama", (7,), 4, 2, 64, 64, "full"),
    ("partial_64_of_128", (5,), 2, 1, 128, 64, "full"),
    ("partial_32_of_80", (9,), 3, 1, 80, 32, "full"),
    ("batch", (2, 5), 3, 1, 32, 32, "full"),
    ("batch_shared_positions", (3, 4), 2, 2, 48, 16, "seq"),
    ("mqa_odd", (11,), 5, 1, 20, 20, "full"),
]


@pytest.mark.parametrize("layout", P.LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_rope_against_float64(rng, layout, dtype, shape):
    _, lead, hq, hk, d, rd, pshape = shape
    rope = RotaryEmbedding(d, 64, rotary_dim=rd, layout=layout)
    xq, xk = rand(rng, (*lead, hq, d), dtype), rand(rng, (*lead, hk, d), dtype)
    pos = rng.permutation(64)[: math.prod(lead) if pshape == "full" else lead[-1]].reshape(lead if pshape == "full" else lead[-1:])
    q, k = gp.from_numpy(xq.astype(dtype)), gp.from_numpy(xk.astype(dtype))
    positions = gp.from_numpy(pos.astype(np.int32 if len(lead) == 1 else np.int64))
    q2, k2 = rope(q, k, positions)
    assert q2 is q and k2 is k  # in place
    _check_rotated(q, xq, rope.inv_freq, pos, layout, rd, dtype)
    _check_rotated(k, xk, rope.inv_freq, pos, layout, rd, dtype)


def test_rope_strided_views_of_fused_qkv(rng):
    """q and k as views of a fused qkv projection output (T, (Hq + 2 Hk) D); v stays as it was."""
    t, hq, hk, d = 13, 4, 2, 64
    rope = RotaryEmbedding(d, 32, scaling=LLAMA31)
    x = rand(rng, (t, (hq + 2 * hk) * d), np.float32)
    qkv = gp.from_numpy(x.astype(np.float32))
    q = qkv[:, : hq * d].reshape(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].reshape(t, hk, d)
    assert not q.is_contiguous and not k.is_contiguous
    pos = rng.integers(0, 32, t)
    rope(q, k, pos)  # host positions: checked, then copied to the device
    got = qkv.to_numpy().astype(np.float64)
    want_q = rope64(x[:, : hq * d].reshape(t, hq, d), rope.inv_freq, pos, "neox", d)
    want_k = rope64(x[:, hq * d : (hq + hk) * d].reshape(t, hk, d), rope.inv_freq, pos, "neox", d)
    assert rel_err(got[:, : hq * d], want_q.reshape(t, -1)) < 1e-5
    assert rel_err(got[:, hq * d : (hq + hk) * d], want_k.reshape(t, -1)) < 1e-5
    np.testing.assert_array_equal(got[:, (hq + hk) * d :], x[:, (hq + hk) * d :])


def test_rope_k_none_and_positions_outside_the_cache(rng):
    rope = RotaryEmbedding(16, 8)
    x = rand(rng, (4, 2, 16), np.float32)
    q = gp.from_numpy(x.astype(np.float32))
    pos = np.array([3, 8, -1, 0])
    assert apply_rope(q, None, rope.cos_sin, gp.from_numpy(pos))[1] is None  # device positions: not checked
    got = q.to_numpy()
    np.testing.assert_array_equal(got[1:3], x[1:3])  # outside [0, 8): left as they were
    want = rope64(x, rope.inv_freq, np.where((pos >= 0) & (pos < 8), pos, 0), "neox", 16)
    assert rel_err(got[[0, 3]], want[[0, 3]]) < 1e-5
    with pytest.raises(ValueError, match=r"position 8 is outside the cos/sin cache of 8 positions \(RotaryEmbedding.grow"):
        rope(q, None, pos[:2])  # host positions are checked
    with pytest.raises(ValueError, match="position -1 is outside"):
        rope(q, None, [0, -1, 2, 3])


def test_rope_empty(rng):
    rope = RotaryEmbedding(8, 4)
    q, k = gp.empty((0, 2, 8), gp.float32), gp.empty((0, 1, 8), gp.float32)
    assert rope(q, k, gp.empty((0,), gp.int32))[0].shape == (0, 2, 8)
    k = gp.from_numpy(rand(rng, (3, 1, 8), np.float32).astype(np.float32))
    before = k.to_numpy()
    rope(gp.empty((3, 0, 8), gp.float32), k, [1, 2, 3])  # no q heads: k is still rotated
    assert not np.array_equal(k.to_numpy(), before)


def test_rope_errors():
    cs = RotaryEmbedding(16, 8).cos_sin
    q, k, pos = gp.zeros((4, 2, 16), gp.float32), gp.zeros((4, 1, 16), gp.float32), gp.arange(4).astype(gp.int32)
    op = gp.ops.rope
    for call, exc, match in (
        (lambda: op(q.to_numpy(), k, cs, pos, "neox", 16), TypeError, "rope: q must be a GPUArray, got ndarray"),
        (lambda: op(q.astype(gp.int32), k, cs, pos, "neox", 16), TypeError, "q must be float16, bfloat16, float32 or float64, got int32"),
        (lambda: op(q[0], k, cs, pos, "neox", 16), ValueError, r"q must be \(T, heads, head_dim\) or \(B, S, heads, head_dim\)"),
        (lambda: op(q, k.astype(gp.float16), cs, pos, "neox", 16), TypeError, "k must have q's dtype float32, got float16"),
        (lambda: op(q, k[:3], cs, pos, "neox", 16), ValueError, "k must be"),
        (lambda: op(q, "k", cs, pos, "neox", 16), TypeError, "k must be a GPUArray or None"),
        (lambda: op(q, k, cs.astype(gp.float16), pos, "neox", 16), TypeError, "cos_sin must be float32"),
        (lambda: op(q, k, cs[:, 0], pos, "neox", 16), ValueError, r"cos_sin must be \(max_positions, 2, rotary_dim / 2\)"),
        (lambda: op(q, k, cs, pos, "rotate_half", 16), ValueError, "layout must be one of neox, gptj, got 'rotate_half'"),
        (lambda: op(q, k, cs, pos, "neox", 8), ValueError, r"twice cos_sin's last axis \(8\), got 8"),
        (lambda: op(q, k, cs, pos, "neox", 16.0), TypeError, "rotary_dim must be an int"),
        (lambda: op(q, k, cs, pos.astype(gp.float32), "neox", 16), TypeError, "positions must be int32 or int64, got float32"),
        (lambda: op(q, k, cs, pos[:3], "neox", 16), ValueError, r"positions must have shape \(4,\)"),
        (lambda: op(q, k, cs, [0, 1, 2, 3], "neox", 16), TypeError, "positions must be a GPUArray"),
        (lambda: op(gp.broadcast_to(q[:1], (4, 2, 16)), k, cs, pos, "neox", 16), ValueError, "q must not be a broadcast view"),
        (lambda: apply_rope(q, k, cs, [0.5, 1, 2, 3]), TypeError, "positions must be integers"),
        (lambda: apply_rope(q, k, cs, "0123"), TypeError, "positions must be integers"),
        (lambda: apply_rope(q, k, cs, 3), TypeError, "positions must be a GPUArray, a NumPy array or a sequence"),
    ):
        with pytest.raises(exc, match=match):
            call()
    q4 = gp.zeros((2, 4, 2, 16))
    with pytest.raises(ValueError, match=r"positions must have shape \(2, 4\) or \(4,\)"):
        apply_rope(q4, None, cs, gp.zeros((2, 3), gp.int32))


# -- ALiBi ------------------------------------------------------------------------------------------------


def bloom_slopes(n):
    """BLOOM's build_alibi_tensor slopes, written out."""
    closest = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = [base**p for p in range(1, closest + 1)]
    if closest != n:
        extra = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra**p for p in range(1, 1 + 2 * min(closest, n - closest), 2)]
    return np.array(slopes)


@pytest.mark.parametrize("heads", [1, 2, 5, 8, 12, 16, 24, 40])
def test_alibi_slopes_match_bloom(heads):
    got = alibi_slopes(heads).to_numpy()
    assert got.dtype == np.float32 and got.shape == (heads,)
    np.testing.assert_allclose(got, bloom_slopes(heads), rtol=1e-7)


def test_alibi_slopes_against_transformers():
    torch = pytest.importorskip("torch")
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    for heads in (6, 16):
        alibi = bloom.build_alibi_tensor(torch.ones(1, 4), heads, torch.float32)  # (heads, 1, 4) = slope * key position
        np.testing.assert_allclose(alibi[:, 0, 1].numpy(), alibi_slopes(heads).to_numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16, gp.float64], ids=str)
def test_alibi_bias(dtype):
    slopes = alibi_slopes(6)
    q_len, k_len = 3, 7
    got = alibi_bias(slopes, q_len, k_len, dtype)
    assert got.shape == (6, q_len, k_len) and got.dtype == dtype
    s = bloom_slopes(6)
    rel = np.arange(k_len)[None, :] - (np.arange(q_len)[:, None] + k_len - q_len)
    want = s[:, None, None] * rel[None]
    assert rel_err(got.to_numpy(), want) < (1e-6 if dtype != gp.bfloat16 else 1e-2)
    assert np.all(np.diagonal(got.to_numpy().astype(np.float64), offset=k_len - q_len, axis1=1, axis2=2) == 0)  # 0 at the query's own key
    # softmax sees the same as BLOOM's slope * j: a constant shift per row
    bloom = s[:, None, None] * np.arange(k_len)[None, None, :]
    assert np.allclose(np.ptp(want - bloom, axis=-1), 0)
    np.testing.assert_allclose(alibi_bias([0.5], 2, 2).to_numpy()[0], [[0, 0.5], [-0.5, 0]])
    for call, match in (
        (lambda: alibi_slopes(0), "num_heads must be an int >= 1"),
        (lambda: alibi_bias(gp.zeros((2, 2)), 1, 1), r"slopes must be 1-D"),
        (lambda: alibi_bias(slopes, -1, 1), "q_len must be an int >= 0"),
    ):
        with pytest.raises(ValueError, match=match):
            call()


# -- the kernel ---------------------------------------------------------------------------------------------


def test_rope_kernels_compile_for_sm80_and_sm90(need_nvrtc):
    """Every instantiation the kernel path can launch compiles with NVRTC (no GPU needed)."""
    for ctype, itemsize in (("pgk::bfloat16", 2), ("pgk::half", 2), ("float", 4)):
        for layout in P.LAYOUTS:
            for vec in P.vec_choices(itemsize, layout):
                kernel = P.rope_kernel(ctype, vec, layout)
                for sm in (80, 90):
                    assert kernel.compile(sm).image[:4] == b"\x7fELF", (ctype, vec, layout, sm)


def _kernel_case(rng, case, dtype, layout):
    """(q, k, positions, host q, host k, host positions, rope, whether the kernel takes it)."""
    t, hq, hk, d, rd = {"decode": (1, 32, 8, 128, 128), "partial": (37, 8, 2, 80, 32), "odd_half": (9, 3, 1, 40, 20)}.get(
        case, (129, 6, 2, 128, 128)
    )
    rope = RotaryEmbedding(d, 4096, rotary_dim=rd, layout=layout, scaling=LLAMA31)
    width = (hq + 2 * hk) * d + (1 if case == "misaligned" else 0)
    x = rand(rng, (t, width), dtype)
    buf = gp.from_numpy(x.astype(dtype))
    off = 1 if case == "misaligned" else 0  # q and k start 1 element past 16-byte alignment
    q = buf[:, off : off + hq * d].reshape(t, hq, d)
    k = buf[:, off + hq * d : off + (hq + hk) * d].reshape(t, hk, d)
    xq, xk = x[:, off : off + hq * d].reshape(t, hq, d), x[:, off + hq * d : off + (hq + hk) * d].reshape(t, hk, d)
    if case == "contiguous":
        q, k = gp.from_numpy(xq.astype(dtype)), gp.from_numpy(xk.astype(dtype))
    pos = rng.permutation(4096)[:t]
    positions = gp.from_numpy(pos.astype(np.int64 if case == "partial" else np.int32))
    kernel = not (case == "misaligned" and layout == "gptj")  # an interleaved pair needs 2-element alignment
    return q, k, positions, xq, xk, pos, rope, kernel


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["contiguous", "fused", "decode", "partial", "odd_half", "misaligned"])
@pytest.mark.parametrize("layout", P.LAYOUTS)
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32], ids=str)
def test_rope_kernel_against_float64(rng, case, layout, dtype):
    q, k, positions, xq, xk, pos, rope, kernel = _kernel_case(rng, case, dtype, layout)
    args = (q, k, rope.cos_sin, positions, layout, rope.rotary_dim)
    assert gp.ops.which("rope", *args) == ("nn:kernel" if kernel else "nn:reference")
    rope(q, k, positions)
    rope(q, k, positions)  # again: the prepared launch; rotating twice is rotating by twice the angle
    _check_rotated(q, xq, 2 * rope.inv_freq, pos, layout, rope.rotary_dim, dtype)
    _check_rotated(k, xk, 2 * rope.inv_freq, pos, layout, rope.rotary_dim, dtype)


@pytest.mark.gpu
def test_rope_kernel_batch_and_positions_outside(rng):
    rope = RotaryEmbedding(64, 100, layout="gptj")
    x = rand(rng, (3, 5, 4, 64), np.float32)
    q = gp.from_numpy(x.astype(np.float32))
    pos = rng.integers(0, 100, (3, 5))
    pos[1, 2], pos[2, 0] = 100, -5  # left unrotated
    positions = gp.from_numpy(pos)
    assert gp.ops.which("rope", q, None, rope.cos_sin, positions, "gptj", 64) == "nn:kernel"
    rope(q, None, positions)
    got = q.to_numpy()
    ok = (pos >= 0) & (pos < 100)
    want = rope64(x, rope.inv_freq, np.where(ok, pos, 0), "gptj", 64)
    assert rel_err(got[ok], want[ok]) < 1e-5
    np.testing.assert_array_equal(got[~ok], x[~ok])
    shared = rng.integers(0, 100, 5)  # (S,) positions shared by the batch
    q = gp.from_numpy(x.astype(np.float32))
    rope(q, None, gp.from_numpy(shared.astype(np.int32)))
    assert rel_err(q.to_numpy(), rope64(x, rope.inv_freq, np.broadcast_to(shared, (3, 5)), "gptj", 64)) < 1e-5


@pytest.mark.gpu
def test_rope_kernel_against_torch_and_transformers(rng):
    torch = pytest.importorskip("torch")
    t, hq, hk, d = 77, 8, 2, 128
    rope = RotaryEmbedding(d, 2048, base=500000.0, scaling=LLAMA31)
    xq, xk = rand(rng, (t, hq, d), gp.bfloat16), rand(rng, (t, hk, d), gp.bfloat16)
    pos = rng.permutation(2048)[:t]
    q, k = gp.from_numpy(xq.astype(gp.bfloat16)), gp.from_numpy(xk.astype(gp.bfloat16))
    rope(q, k, gp.from_numpy(pos))
    cs = torch.from_numpy(rope.cos_sin.to_numpy()).cuda()
    idx = torch.from_numpy(pos).cuda()
    cos, sin = torch.cat([cs[idx, 0]] * 2, -1)[:, None], torch.cat([cs[idx, 1]] * 2, -1)[:, None]  # (T, 1, D)

    def rotate_half(x):
        return torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)

    for got, x in ((q, xq), (k, xk)):
        tx = torch.from_numpy(x).cuda().float()
        want = (tx * cos + rotate_half(tx) * sin).to(torch.bfloat16).double().cpu().numpy()
        assert rel_err(got.to_numpy(), want) < 1e-2
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    tq = torch.from_numpy(xq).cuda().float().transpose(0, 1)[None]  # (1, H, T, D)
    tk = torch.from_numpy(xk).cuda().float().transpose(0, 1)[None]
    eq, ek = llama.apply_rotary_pos_emb(tq, tk, cos[:, 0][None], sin[:, 0][None], unsqueeze_dim=1)
    assert rel_err(q.to_numpy(), eq[0].transpose(0, 1).double().cpu().numpy()) < 1e-2
    assert rel_err(k.to_numpy(), ek[0].transpose(0, 1).double().cpu().numpy()) < 1e-2
