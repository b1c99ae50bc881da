"""Loading a model directory: names, shapes, dtypes and memory checked before
allocation, with errors that name what is wrong; the checkpoint is never written."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import pygpukit as gp
import pygpukit_llm
from pygpukit_llm import Checkpoint, ConfigError, LoadError
from pygpukit_llm.bench import random_checkpoint
from pygpukit_llm.safetensors import save_file


@pytest.fixture
def tiny(tmp_path):
    return random_checkpoint(tmp_path / "m", "tiny-llama", seed=1)


def _rewrite(path, change):
    ckpt = Checkpoint(path)
    tensors = {n: np.array(ckpt.numpy(n)) for n in ckpt.keys()}
    del ckpt
    change(tensors)
    save_file(tensors, path / "model.safetensors")


def test_load_builds_the_layers_and_keeps_the_file(tiny):
    before = (tiny / "model.safetensors").read_bytes()
    model = pygpukit_llm.load(tiny, "bfloat16")
    cfg = model.config
    assert model.num_layers == cfg.num_layers == 2 and model.dtype == gp.bfloat16
    assert model.layers[0].attn.qkv.weight.shape == ((cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, cfg.hidden_size)
    assert model.layers[1].mlp.up.weight.shape == (2 * cfg.intermediate_size, cfg.hidden_size)  # gate and up, fused
    q = Checkpoint(tiny).numpy("model.layers.1.self_attn.q_proj.weight").astype(np.float32)
    np.testing.assert_array_equal(model.layers[1].attn.qkv.weight[: q.shape[0]].astype(gp.float32).to_numpy(), q)
    logits = model(gp.from_numpy(np.array([[1, 2, 3]], np.int32)))
    assert logits.shape == (1, 3, cfg.vocab_size) and logits.dtype == gp.bfloat16
    assert (tiny / "model.safetensors").read_bytes() == before


def test_tied_embeddings_share_the_array(tmp_path):
    path = random_checkpoint(tmp_path / "m", "tiny-llama")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, tie_word_embeddings=True)))
    _rewrite(path, lambda t: t.pop("lm_head.weight"))
    model = pygpukit_llm.load(path, "float32")
    assert model.lm_head.weight is model.embed.weight


def test_missing_extra_and_misshapen_tensors(tiny):
    _rewrite(tiny, lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    with pytest.raises(LoadError, match=r"down.weight \(layer 1\)"):
        pygpukit_llm.load(tiny)
    _rewrite(
        tiny,
        lambda t: t.update({"model.layers.1.mlp.down_proj.weight": np.zeros((128, 256), np.float32), "extra.w": np.ones(3, np.float32)}),
    )
    with pytest.raises(LoadError, match=r"not used by the llama architecture.*extra.w"):
        pygpukit_llm.load(tiny)
    _rewrite(tiny, lambda t: (t.pop("extra.w"), t.update({"model.layers.0.self_attn.o_proj.weight": np.zeros((128, 64), np.float32)})))
    with pytest.raises(LoadError, match=r"layer 0 does not match config.json"):
        pygpukit_llm.load(tiny)


def test_bad_directories_and_options(tiny, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"not a model directory"):
        pygpukit_llm.load(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"dtype must be one of"):
        pygpukit_llm.load(tiny, "int8")
    cfg = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps(dict(cfg, model_type="mamba", architectures=["MambaForCausalLM"])))
    with pytest.raises(ConfigError, match=r"MambaForCausalLM.*supported model types: gpt2, llama"):
        pygpukit_llm.load(tiny)
    (tiny / "config.json").write_text(json.dumps(cfg))
    with open(tiny / "model.safetensors", "r+b") as f:
        f.truncate(os.path.getsize(tiny / "model.safetensors") - 10)
    with pytest.raises(LoadError, match=r"model.safetensors"):
        pygpukit_llm.load(tiny)


def test_memory_is_checked_before_allocating(tiny, monkeypatch):
    monkeypatch.setattr(gp.memory, "available_bytes", lambda: 1000)
    before = gp.memory.stats()["allocated_bytes"]
    with pytest.raises(LoadError, match=r"has only .* free; nothing was allocated"):
        pygpukit_llm.load(tiny)
    assert gp.memory.stats()["allocated_bytes"] == before


def test_new_cache_respects_the_model_context(tiny):
    model = pygpukit_llm.load(tiny, "float32")
    with pytest.raises(ConfigError, match=r"longer than the model allows"):
        model.new_cache(1, 100_000)
    cache = model.new_cache(2, 64, paged=True)
    assert cache.num_layers == 2 and cache.batch == 2


@pytest.mark.parametrize("fmt,bound", [("int8", 4e-2), ("fp8", 0.15), ("int4", 0.5)])
def test_quantize_on_load(tmp_path, fmt, bound):
    pytest.importorskip("pygpukit_gemm")
    from pygpukit_gemm.quant import dequantize_weight
    from pygpukit_llm.generate import GenerationConfig, generate_ids

    path = random_checkpoint(tmp_path / "m", "tiny-llama", seed=6, std=0.1)
    full = pygpukit_llm.load(path, "float32")
    quant = pygpukit_llm.load(path, "float32", quantize=fmt, group_size=64)
    layer = quant.layers[0]
    assert type(layer.attn.qkv).__name__ == "QuantizedLinear" and layer.attn.qkv.weight.format == fmt
    assert layer.mlp.down.in_features == 256 and quant.lm_head.weight.dtype == gp.float32  # the head stays
    ids = gp.from_numpy(np.array([[3, 14, 15, 92, 65, 35]], np.int32))
    want, got = full(ids).to_numpy(), quant(ids).to_numpy()
    err = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < err < bound, err  # quantized: close, not identical
    # exactly the model whose projections are the dequantized weights
    for fl, ql in zip(full.layers, quant.layers):
        for f, q in ((fl.attn.qkv, ql.attn.qkv), (fl.attn.o, ql.attn.o), (fl.mlp.up, ql.mlp.up), (fl.mlp.down, ql.mlp.down)):
            f.weight = dequantize_weight(q.weight, gp.float32)
    same = full(ids).to_numpy()
    assert np.abs(got - same).max() / np.abs(same).max() < 1e-5
    assert len(list(generate_ids(quant, [[1, 2, 3]], GenerationConfig(max_new_tokens=4, greedy=True)))) == 4
    with pytest.raises(ValueError, match="quantize must be"):
        pygpukit_llm.load(path, quantize="int3")
    with pytest.raises(ValueError, match="must divide hidden_size"):
        pygpukit_llm.load(path, quantize=fmt, group_size=96)


def test_fp8_checkpoints_dequantize_on_load(tmp_path):
    """Weights stored as float8_e4m3fn with 2-D block scales (``weight_scale_inv``,
    transformers' FP8 format), a per-tensor ``weight_scale``, or none: loaded as the
    float model of the dequantized values."""
    path = random_checkpoint(tmp_path / "m", "tiny-llama", seed=8, std=0.1)
    ckpt = Checkpoint(path)
    tensors = {n: np.array(ckpt.numpy(n)).astype(np.float32) for n in ckpt.keys()}
    del ckpt
    rng = np.random.default_rng(0)
    stored, plain = {}, {}
    for i, (name, w) in enumerate(sorted(tensors.items())):
        if "layers" not in name or w.ndim != 2:
            stored[name] = plain[name] = w
            continue
        kind = i % 3
        if kind == 0:  # blocks of 64 x 96 (edges partial): scales (ceil(N / 64), ceil(K / 96))
            sn, sk = -(-w.shape[0] // 64), -(-w.shape[1] // 96)
            pad = np.zeros((sn * 64, sk * 96), np.float32)
            pad[: w.shape[0], : w.shape[1]] = np.abs(w)
            amax = pad.reshape(sn, 64, sk, 96).max(axis=(1, 3))
            scale = (amax / 448 * rng.uniform(1.0, 1.5, (sn, sk))).astype(np.float32)  # no value past e4m3's 448
            full = np.repeat(np.repeat(scale, 64, 0), 96, 1)[: w.shape[0], : w.shape[1]]
            q = (w / full).astype(gp.float8_e4m3fn)
            stored[name], stored[name + "_scale_inv"] = q, scale
            plain[name] = q.astype(np.float32) * full
        elif kind == 1:
            scale = np.float32(np.abs(w).max() / 400)
            q = (w / scale).astype(gp.float8_e4m3fn)
            stored[name], stored[name + "_scale"] = q, np.array([scale], np.float32)
            plain[name] = q.astype(np.float32) * scale
        else:
            stored[name] = w.astype(gp.float8_e4m3fn)
            plain[name] = stored[name].astype(np.float32)
    save_file(stored, path / "model.safetensors")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(cfg, quantization_config={"quant_method": "fp8", "weight_block_size": [64, 96]})))
    fp8 = pygpukit_llm.load(path, "float32")
    other = tmp_path / "plain"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(cfg))
    save_file(plain, other / "model.safetensors")
    want = pygpukit_llm.load(other, "float32")
    ids = gp.from_numpy(np.array([[5, 6, 7, 8, 9]], np.int32))
    got, ref = fp8(ids).to_numpy(), want(ids).to_numpy()
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-5
    victim = next(n for n in stored if n.endswith("_scale_inv"))
    save_file({**stored, victim: np.ones((7, 5), np.float32)}, path / "model.safetensors")
    with pytest.raises(LoadError, match="do not tile"):
        pygpukit_llm.load(path, "float32")
