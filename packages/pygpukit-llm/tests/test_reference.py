"""The test fixtures of the LLM loader (llm_testing.py): the tiny model
directories, read back by pygpukit_llm, and the float64 reference forward,
checked by invariants that a wrong mask, GQA mapping or fused-weight split
breaks. The tests at the end (they skip without torch and transformers 5)
check both against transformers itself: the directory is what
save_pretrained writes, and the logits are transformers' logits."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import safetensors
from llm_testing import ARCHS, TRANSFORMERS_VERSION, mixtral_moe, reference_greedy, reference_logits, swiglu, write_tiny_model
from safetensors.numpy import save_file

from pygpukit_llm import ARCHITECTURES, Checkpoint, ConfigError, ModelConfig

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# the window each architecture's tiny model has, as ModelConfig reports it
WINDOW = {"mistral": 8, "mixtral": 8, "gemma2": 8}


def _ids(rng, shape, vocab=256):
    return rng.integers(0, vocab, shape)


def _tensors(directory):
    """name -> (dtype code, shape, bytes), read with the safetensors package."""
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        for name, t in safetensors.deserialize(f.read_bytes()):
            out[name] = (t["dtype"], tuple(t["shape"]), bytes(t["data"]))
    return out


# ---------------------------------------------------------------- the directories


@pytest.mark.parametrize("arch", list(ARCHS))
def test_directory_reads_back_through_pygpukit_llm(tmp_path, arch):
    cfg = write_tiny_model(tmp_path, arch, seed=3, layers=3, heads=4, kv_heads=2, experts=3, top_k=2)
    if arch not in ARCHITECTURES:  # Gemma 2: a reference here, not (yet) loaded by pygpukit-llm
        with pytest.raises(ConfigError, match="supported model types: gpt2"):
            ModelConfig.load(tmp_path)
        return
    mc = ModelConfig.load(tmp_path)
    assert mc.model_type == arch and cfg["model_type"] == arch and cfg["architectures"] == [ARCHS[arch].architecture]
    assert (mc.hidden_size, mc.num_layers, mc.num_heads, mc.vocab_size, mc.max_position_embeddings) == (64, 3, 4, 256, 256)
    assert mc.num_kv_heads == (4 if arch == "gpt2" else 2)
    assert mc.head_dim == (32 if arch == "qwen3" else 16) and mc.intermediate_size == 128
    assert mc.tie_word_embeddings == (arch in ("gpt2", "gemma2"))
    assert (mc.num_experts, mc.num_experts_per_tok) == ((3, 2) if arch == "mixtral" else (0, 0))
    assert mc.sliding_window == WINDOW.get(arch)
    if arch == "phi3":  # Phi-3-mini-4k's config has sliding_window 2047, and transformers applies it
        write_tiny_model(tmp_path / "w", arch, sliding_window=5)
        assert ModelConfig.load(tmp_path / "w").sliding_window == 5
    ck, stored = Checkpoint(tmp_path), _tensors(tmp_path)
    assert sorted(ck.keys()) == sorted(stored)
    assert ("lm_head.weight" in ck) == (not mc.tie_word_embeddings)
    for name, (code, shape, raw) in stored.items():
        got = ck.numpy(name)
        assert code == "F32" and got.shape == shape and got.tobytes() == raw
    assert json.loads((tmp_path / "generation_config.json").read_text())["_from_model_config"] is True


def test_names_and_layouts(tmp_path):
    write_tiny_model(tmp_path / "gpt2", "gpt2", tie=False)
    ck = Checkpoint(tmp_path / "gpt2")
    assert ck.info("transformer.h.1.attn.c_attn.weight").shape == (64, 192)  # Conv1D: (in, out)
    assert ck.info("transformer.h.0.mlp.c_fc.weight").shape == (64, 128) and "lm_head.weight" in ck
    write_tiny_model(tmp_path / "phi3", "phi3", kv_heads=1)
    ck = Checkpoint(tmp_path / "phi3")
    assert ck.info("model.layers.0.self_attn.qkv_proj.weight").shape == ((4 + 2) * 16, 64)
    assert ck.info("model.layers.0.mlp.gate_up_proj.weight").shape == (256, 64)
    write_tiny_model(tmp_path / "mixtral", "mixtral", experts=5)
    ck = Checkpoint(tmp_path / "mixtral")
    assert ck.info("model.layers.1.block_sparse_moe.gate.weight").shape == (5, 64)
    assert ck.info("model.layers.1.block_sparse_moe.experts.4.w2.weight").shape == (64, 128)
    write_tiny_model(tmp_path / "qwen2", "qwen2")
    assert {"bias" in n for n in Checkpoint(tmp_path / "qwen2").keys() if "_proj" in n} == {True, False}
    write_tiny_model(tmp_path / "qwen3", "qwen3")
    assert Checkpoint(tmp_path / "qwen3").info("model.layers.0.self_attn.k_norm.weight").shape == (32,)


def test_gpt2_legacy_names(tmp_path, rng):
    write_tiny_model(tmp_path / "new", "gpt2", seed=8)
    write_tiny_model(tmp_path / "old", "gpt2", seed=8, legacy_names=True, layers=2)
    old = Checkpoint(tmp_path / "old")
    assert "h.1.attn.c_attn.weight" in old and "wte.weight" in old and not any(n.startswith("transformer.") for n in old)
    assert old.info("h.0.attn.bias").shape == (1, 1, 256, 256)
    ids = _ids(rng, (1, 9))
    np.testing.assert_array_equal(reference_logits(tmp_path / "old", ids), reference_logits(tmp_path / "new", ids))
    with pytest.raises(ValueError, match="gpt2 only"):
        write_tiny_model(tmp_path / "x", "llama", legacy_names=True)


def test_sharded_index_holds_the_same_model(tmp_path, rng):
    write_tiny_model(tmp_path / "one", "llama", seed=5)
    write_tiny_model(tmp_path / "many", "llama", seed=5, sharded=True)
    index = json.loads((tmp_path / "many" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    assert not (tmp_path / "many" / "model.safetensors").exists()
    ck = Checkpoint(tmp_path / "many")
    assert len(ck.files) == 3 and sorted(ck.keys()) == sorted(index["weight_map"]) == sorted(Checkpoint(tmp_path / "one").keys())
    assert index["metadata"]["total_size"] == ck.nbytes()
    ids = _ids(rng, (2, 9))
    np.testing.assert_array_equal(reference_logits(tmp_path / "many", ids), reference_logits(tmp_path / "one", ids))


@pytest.mark.parametrize("dtype, code, tol", [("bfloat16", "BF16", 3e-2), ("float16", "F16", 3e-3)])
def test_stored_dtypes(tmp_path, rng, dtype, code, tol):
    cfg = write_tiny_model(tmp_path / "low", "qwen2", dtype=dtype, seed=2)
    write_tiny_model(tmp_path / "f32", "qwen2", seed=2)
    assert cfg["dtype"] == dtype and {c for c, _, _ in _tensors(tmp_path / "low").values()} == {code}
    assert Checkpoint(tmp_path / "low").info("model.norm.weight").dtype.itemsize == 2
    ids = _ids(rng, (1, 12))
    low, ref = reference_logits(tmp_path / "low", ids), reference_logits(tmp_path / "f32", ids)
    err = np.abs(low - ref).max() / np.abs(ref).max()
    assert 0 < err < tol  # the rounded weights, read exactly


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
def test_v4_config_describes_the_same_model(tmp_path, rng, arch):
    v4 = write_tiny_model(tmp_path / "v4", arch, config_format="v4", seed=4)
    v5 = write_tiny_model(tmp_path / "v5", arch, seed=4)
    assert "rope_parameters" not in v4 and v4["rope_theta"] == v5["rope_parameters"]["rope_theta"]
    assert v4["torch_dtype"] == "float32" and "dtype" not in v4 and v4["rope_scaling"] is None
    assert "tie_word_embeddings" in v4
    assert replace(ModelConfig.load(tmp_path / "v4"), raw={}) == replace(ModelConfig.load(tmp_path / "v5"), raw={})
    ids = _ids(rng, (1, 10))
    np.testing.assert_array_equal(reference_logits(tmp_path / "v4", ids), reference_logits(tmp_path / "v5", ids))


def test_llama3_rope_scaling(tmp_path, rng):
    cfg = write_tiny_model(tmp_path / "l3", "llama", rope_theta=5e5, rope_scaling=LLAMA3, seed=6)
    assert cfg["rope_parameters"] == dict(LLAMA3, rope_theta=5e5)
    write_tiny_model(tmp_path / "plain", "llama", rope_theta=5e5, seed=6)
    # factor 1 leaves every frequency as it was; factor 8 moves the long waves
    write_tiny_model(tmp_path / "f1", "llama", rope_theta=5e5, rope_scaling=dict(LLAMA3, factor=1.0), seed=6)
    ids = _ids(rng, (1, 40))
    plain = reference_logits(tmp_path / "plain", ids)
    np.testing.assert_allclose(reference_logits(tmp_path / "f1", ids), plain, rtol=0, atol=1e-12)
    assert np.abs(reference_logits(tmp_path / "l3", ids)[0, 1:] - plain[0, 1:]).max() > 1e-3
    v4 = write_tiny_model(tmp_path / "v4", "llama", rope_theta=5e5, rope_scaling=LLAMA3, seed=6, config_format="v4")
    assert v4["rope_scaling"] == LLAMA3 and v4["rope_theta"] == 5e5


def test_partial_rotary_rotates_only_the_first_dims(tmp_path, rng):
    """With a quarter of each head rotated, position reaches attention only
    through dims 0..3 of 16: zero q/k there and the last query cannot tell
    the earlier tokens' order; with those dims kept, it can."""
    cfg = write_tiny_model(tmp_path, "phi3", partial_rotary_factor=0.25, layers=1)
    assert cfg["rope_parameters"]["partial_rotary_factor"] == 0.25
    ids = _ids(rng, 12)
    perm = np.r_[ids[:-1][::-1], ids[-1]]
    assert not np.array_equal(perm, ids)
    sees_order = reference_logits(tmp_path, np.stack([ids, perm]))[:, -1]
    assert np.abs(sees_order[0] - sees_order[1]).max() > 1e-6
    tensors = {n: np.frombuffer(r, np.float32).reshape(s).copy() for n, (_, s, r) in _tensors(tmp_path).items()}
    qkv = tensors["model.layers.0.self_attn.qkv_proj.weight"].reshape(-1, 16, 64)  # 4 q, 2 k, 2 v heads
    qkv[:6, :4] = 0
    save_file(tensors, tmp_path / "model.safetensors")
    blind = reference_logits(tmp_path, np.stack([ids, perm]))[:, -1]
    np.testing.assert_allclose(blind[1], blind[0], rtol=0, atol=1e-12)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown architecture"):
        write_tiny_model(tmp_path, "bert")
    with pytest.raises(ValueError, match="dtype"):
        write_tiny_model(tmp_path, "llama", dtype="int8")
    write_tiny_model(tmp_path, "llama")
    with pytest.raises(ValueError, match=r"\[0, 256\)"):
        reference_logits(tmp_path, [1, 256])
    with pytest.raises(ValueError, match="integers"):
        reference_logits(tmp_path, np.zeros((1, 1, 3), np.int64))


# ---------------------------------------------------------------- the reference's invariants


@pytest.mark.parametrize("arch", list(ARCHS))
def test_causal_and_batch_rows_independent(tmp_path, rng, arch):
    write_tiny_model(tmp_path, arch, seed=7)
    a, b = _ids(rng, 12), _ids(rng, 12)
    both = reference_logits(tmp_path, np.stack([a, b]))
    assert both.shape == (2, 12, 256) and both.dtype == np.float64
    np.testing.assert_array_equal(both[1:], reference_logits(tmp_path, b[None]))
    np.testing.assert_allclose(both[0], reference_logits(tmp_path, a)[0], rtol=0, atol=1e-12)
    a2 = a.copy()
    a2[7:] = (a[7:] + 1 + rng.integers(0, 255, 5)) % 256  # every later token differs
    changed = reference_logits(tmp_path, a2)[0]
    np.testing.assert_allclose(changed[:7], both[0, :7], rtol=0, atol=1e-12)
    assert np.all(np.abs(changed[7:] - both[0, 7:]).max(axis=-1) > 1e-6)


@pytest.mark.parametrize(
    "arch, overrides",
    [
        ("mistral", {}),
        ("mixtral", {}),
        ("phi3", {"sliding_window": 4}),
        ("gemma2", {}),  # layer 0 slides
        ("qwen2", {"use_sliding_window": True, "max_window_layers": 0}),
        ("qwen3", {"use_sliding_window": True, "max_window_layers": 0}),
    ],
)
def test_sliding_window(tmp_path, rng, arch, overrides):
    """In one layer, the last query (position 9) with a window of 4 sees keys 6..9:
    a change at 5 is invisible to it, a change at 6 is not; without the window both show."""
    overrides = {"sliding_window": 4, **overrides}
    write_tiny_model(tmp_path / "w", arch, layers=1, **overrides)
    write_tiny_model(tmp_path / "full", arch, layers=1, **dict(overrides, sliding_window=None))
    ids = _ids(rng, 10)
    for d, sees_5 in ((tmp_path / "w", False), (tmp_path / "full", True)):
        last = reference_logits(d, ids)[0, -1]
        for pos, visible in ((5, sees_5), (6, True)):
            other = ids.copy()
            other[pos] = (ids[pos] + 1) % 256
            delta = np.abs(reference_logits(d, other)[0, -1] - last).max()
            assert (delta > 1e-6) == visible, (d.name, pos, delta)


def test_qwen_window_only_above_max_window_layers(tmp_path, rng):
    """Qwen slides only on layers >= max_window_layers: with max_window_layers=1 of 1 layer, nothing slides."""
    cfg = write_tiny_model(tmp_path, "qwen2", layers=1, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    assert cfg["layer_types"] == ["full_attention"]
    ids = _ids(rng, 10)
    other = ids.copy()
    other[0] = (ids[0] + 1) % 256
    assert np.abs(reference_logits(tmp_path, other)[0, -1] - reference_logits(tmp_path, ids)[0, -1]).max() > 1e-6


KV_NAMES = ("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")


def _expand_kv(src, dst, rep, tile=False):
    """``src`` rewritten with rep times the kv heads: each head repeated in
    place (the GQA mapping, query head h reads kv head h // rep) or, with
    ``tile``, the whole set repeated (a wrong mapping)."""
    cfg = json.loads((src / "config.json").read_text())
    tensors = {}
    for name, (_, shape, raw) in _tensors(src).items():
        t = np.frombuffer(raw, np.float32).reshape(shape)
        if name.endswith(KV_NAMES):
            heads = t.reshape(-1, cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"], *t.shape[1:])
            heads = np.concatenate([heads] * rep) if tile else np.repeat(heads, rep, axis=0)
            t = heads.reshape(-1, *t.shape[1:])
        tensors[name] = np.ascontiguousarray(t)
    dst.mkdir()
    save_file(tensors, dst / "model.safetensors")
    cfg["num_key_value_heads"] *= rep
    (dst / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gqa_equals_multi_head_with_repeated_kv(tmp_path, rng, arch):
    write_tiny_model(tmp_path / "gqa", arch, heads=8, kv_heads=2, hidden=64)
    ids = _ids(rng, (2, 11))
    want = reference_logits(tmp_path / "gqa", ids)
    _expand_kv(tmp_path / "gqa", tmp_path / "mha", 4)
    np.testing.assert_allclose(reference_logits(tmp_path / "mha", ids), want, rtol=0, atol=1e-12)
    _expand_kv(tmp_path / "gqa", tmp_path / "tiled", 4, tile=True)
    assert np.abs(reference_logits(tmp_path / "tiled", ids) - want).max() > 1e-4


def test_phi3_fused_layout_splits_as_llama(tmp_path, rng):
    """Phi-3's qkv_proj and gate_up_proj draw the same numbers as LLaMA's
    q/k/v and gate/up for one seed, so the two models must agree exactly."""
    write_tiny_model(tmp_path / "phi3", "phi3", seed=9, rms_norm_eps=1e-6)
    write_tiny_model(tmp_path / "llama", "llama", seed=9)
    ids = _ids(rng, (1, 10))
    np.testing.assert_allclose(reference_logits(tmp_path / "phi3", ids), reference_logits(tmp_path / "llama", ids), rtol=0, atol=1e-12)


def test_mixtral_routing(rng):
    x = rng.standard_normal((2, 5, 16))
    router = rng.standard_normal((4, 16))
    experts = [(rng.standard_normal((8, 16)), rng.standard_normal((16, 8)), rng.standard_normal((8, 16))) for _ in range(4)]
    outs = np.stack([swiglu(x, w1, w3, w2) for w1, w2, w3 in experts], axis=-2)  # (2, 5, 4, 16)
    probs = np.exp(x @ router.T)
    probs /= probs.sum(-1, keepdims=True)
    # top_k = all experts: the softmax-weighted sum of every expert
    np.testing.assert_allclose(mixtral_moe(x, router, experts, 4), np.einsum("bse,bsed->bsd", probs, outs), rtol=1e-12, atol=1e-12)
    # top_k = 1: the best expert alone, at weight 1
    best = probs.argmax(-1)
    np.testing.assert_allclose(
        mixtral_moe(x, router, experts, 1), np.take_along_axis(outs, best[..., None, None], 2)[:, :, 0], rtol=1e-12, atol=1e-12
    )
    # top_k = 2: the two best, renormalized
    top2 = np.argsort(-probs, -1)[..., :2]
    w = np.take_along_axis(probs, top2, -1)
    w /= w.sum(-1, keepdims=True)
    want = np.einsum("bsk,bskd->bsd", w, np.take_along_axis(outs, top2[..., None], 2))
    np.testing.assert_allclose(mixtral_moe(x, router, experts, 2), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("arch", ["gpt2", "mixtral", "gemma2"])
def test_greedy_follows_the_logits(tmp_path, rng, arch):
    write_tiny_model(tmp_path, arch, seed=11)
    prompt = _ids(rng, 5)
    new = reference_greedy(tmp_path, prompt, 6)
    assert len(new) == 6 and all(0 <= t < 256 for t in new)
    logits = reference_logits(tmp_path, np.concatenate([prompt, new[:-1]]))[0]
    assert list(logits[4:].argmax(-1)) == new


# ---------------------------------------------------------------- against transformers


@pytest.fixture
def hf():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip(f"needs transformers 5, found {transformers.__version__}")
    transformers.logging.set_verbosity_error()
    return torch, transformers


def _hf_logits(hf, directory, ids, dtype):
    torch, transformers = hf
    kwargs = {"dtype": dtype, "attn_implementation": "eager"}
    try:  # the default grouped-GEMM experts have no float64 kernel
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, experts_implementation="eager", **kwargs)
    except (TypeError, ValueError):
        model = transformers.AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(ids))).logits.double().numpy()


HF_CASES = [(arch, {}) for arch in ARCHS] + [
    ("llama", {"rope_theta": 5e5, "rope_scaling": LLAMA3}),
    ("llama", {"rope_theta": 5e5, "rope_scaling": LLAMA3, "config_format": "v4"}),
    ("llama", {"dtype": "bfloat16", "tie": True, "attention_bias": True, "mlp_bias": True}),
    ("qwen2", {"tie": True, "sharded": True}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1, "layers": 3}),
    ("mistral", {"sliding_window": None, "config_format": "v4"}),
    ("mixtral", {"experts": 5, "top_k": 1, "dtype": "float16"}),
    ("phi3", {"sliding_window": 5}),
    ("phi3", {"partial_rotary_factor": 0.5, "config_format": "v4"}),  # Phi-4-mini is model_type phi3 with 0.75
    ("phi3", {"partial_rotary_factor": 0.75}),
    ("gemma2", {"layers": 3, "sliding_window": 4}),
    ("gpt2", {"tie": False, "config_format": "v4"}),
    ("gpt2", {"legacy_names": True, "config_format": "v4"}),
]


@pytest.mark.parametrize("arch, overrides", HF_CASES, ids=[f"{a}-{'-'.join(o) or 'default'}" for a, o in HF_CASES])
def test_reference_matches_transformers(tmp_path, rng, hf, arch, overrides):
    """transformers keeps a few steps in float32 even in a float64 model
    (RMSNorm, the eager softmax, RoPE's cos/sin, the router), hence 1e-6;
    GPT-2 has none of them."""
    write_tiny_model(tmp_path, arch, seed=13, **overrides)
    ids = _ids(rng, (2, 20))
    ref = reference_logits(tmp_path, ids)
    scale = np.abs(ref).max()
    got = _hf_logits(hf, tmp_path, ids, hf[0].float64)
    assert np.abs(got - ref).max() / scale < (1e-12 if arch == "gpt2" else 1e-6)
    got32 = _hf_logits(hf, tmp_path, ids, hf[0].float32)
    assert np.abs(got32 - ref).max() / scale < 1e-4


@pytest.mark.parametrize("arch, overrides", HF_CASES, ids=[f"{a}-{'-'.join(o) or 'default'}" for a, o in HF_CASES])
def test_directory_is_what_save_pretrained_writes(tmp_path, hf, arch, overrides):
    transformers = hf[1]
    mine = write_tiny_model(tmp_path / "mine", arch, **overrides)
    config = transformers.AutoConfig.from_pretrained(tmp_path / "mine")
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "theirs", max_shard_size="100KB")
    theirs = json.loads((tmp_path / "theirs" / "config.json").read_text())
    if overrides.get("config_format") != "v4":  # v4 is the older form, which transformers 5 rewrites as v5
        # another 5.x may add or drop a key nobody reads; the values both have must agree
        keys = set(mine) & set(theirs) if transformers.__version__ != TRANSFORMERS_VERSION else set(mine) | set(theirs)
        keys.discard("transformers_version")
        assert {k: mine.get(k) for k in keys} == {k: theirs.get(k) for k in keys}
        gen = [json.loads((tmp_path / d / "generation_config.json").read_text()) for d in ("mine", "theirs")]
        assert gen[0] | {"transformers_version": None} == gen[1] | {"transformers_version": None}
    shapes = [{n: (s, c) for n, (c, s, _) in _tensors(tmp_path / d).items()} for d in ("mine", "theirs")]
    if overrides.get("legacy_names"):  # the old checkpoint's names, which transformers 5 saves with the prefix
        shapes[0] = {"transformer." + n: v for n, v in shapes[0].items() if not n.endswith(".attn.bias")}
    assert shapes[0] == shapes[1]
