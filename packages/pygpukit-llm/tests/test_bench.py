"""``pygpukit bench-llm``: the figures it writes, the per-op breakdown of a
decode step, and its argument errors (on the CPU backend the times are the
NumPy backend's, but every field is measured the same way)."""

from __future__ import annotations

import json

import pytest

import pygpukit as gp
import pygpukit_llm
from pygpukit_llm import bench


def test_bench_llm_writes_every_figure(tmp_path):
    out = tmp_path / "r.json"
    argv = ["--shape", "tiny-llama", "--batch", "1,2", "--prompt", "4", "--new", "3", "--prefill", "8", "--reps", "1",
            "--no-transformers", "--breakdown", "--json", str(out)]  # fmt: skip
    assert bench.main(argv) == 0
    r = json.loads(out.read_text())
    assert r["model"] == "tiny-llama" and r["batches"] == [1, 2] and r["quantize"] is None
    p = r["pygpukit"]
    assert p["decode_b1_tok_s"] > 0 and p["decode_b2_tok_s"] > 0 and p["prefill_ms_per_token"] > 0 and p["load_s"] > 0
    assert p["decode_b1_steady_tok_s"] > 0 and p["decode_b2_steady_tok_s"] > 0
    cfg = bench.SHAPES["tiny-llama"]
    # vocab 512, hidden 128, intermediate 256, 2 layers, head_dim 64, 1 kv head; bfloat16
    layer = 2 * 128 + 128 * 128 + 2 * 64 * 128 + 128 * 128 + 3 * 256 * 128
    assert p["weight_bytes"] == 2 * (2 * 512 * 128 + 128 + 2 * layer)
    for b in ("b1", "b2"):
        times = p["decode_breakdown_us"][b]
        ops = {"layer.attn_norm", "layer.qkv", "layer.rope", "layer.kv_append", "layer.attention", "layer.o", "layer.mlp_norm",
               "layer.up", "layer.act", "layer.down", "final_norm", "lm_head", "argmax"}  # fmt: skip
        assert set(times) == ops | {"step_estimate"}
        assert all(times[o] > 0 for o in ops)
        layer = sum(t for o, t in times.items() if o.startswith("layer."))
        rest = times["final_norm"] + times["lm_head"] + times["argmax"]
        assert times["step_estimate"] == pytest.approx(cfg["num_hidden_layers"] * layer + rest)
    if gp.backend() == "cuda":
        assert p["decode_b1_replay_ms"] > 0 and p["decode_b1_graph_nodes"] >= cfg["num_hidden_layers"] * 6


@pytest.mark.parametrize(("fmt", "per_weight"), [(None, 2.0), ("int8", 1.0), ("int4", 0.5)])
def test_step_bytes_count_quantized_projections_packed(tmp_path, fmt, per_weight):
    """A batch-1 step reads each weight once: bfloat16 bytes, or for the
    layers' quantized projections their packed weight and half scales (one a
    group of 128); embeddings, norms and the head stay bfloat16."""
    from pygpukit_llm.safetensors import Checkpoint

    directory = bench.random_checkpoint(tmp_path / "m", "tiny-llama")
    model = pygpukit_llm.load(directory, "bfloat16", quantize=fmt)
    # vocab 512, hidden 128, intermediate 256, 2 layers, head_dim 64, 1 kv head
    projections = [(128 + 2 * 64, 128), (128, 128), (2 * 256, 128), (128, 256)]  # qkv, o, gate and up, down
    proj = sum(n * k * per_weight + (0 if fmt is None else n * (k // 128) * 2) for n, k in projections)
    assert bench.step_bytes(model, Checkpoint(directory)) == 2 * (2 * 512 * 128 + 128 + 2 * 2 * 128) + 2 * proj


def test_decode_rates_end_to_end_and_steady(monkeypatch):
    """On a clock that a fake generation advances: 5 s of prefill and setup,
    then 1 s per token; 4 tokens for 2 prompts."""
    import types

    clock = types.SimpleNamespace(t=0.0)

    def fake_generate(model, prompts, cfg):
        clock.t += 5.0
        for _ in range(cfg.max_new_tokens):
            clock.t += 1.0
            yield None

    monkeypatch.setattr(bench, "generate_ids", fake_generate)
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: clock.t))
    cfg = bench.GenerationConfig(max_new_tokens=4)
    assert bench.decode_rates(None, [[1], [2]], cfg, reps=3) == (2 * 4 / 9, 2 * 3 / 3)
    assert bench.decode_rates(None, [[1]], cfg.with_(max_new_tokens=1), reps=1) == (1 / 6, None)


def test_breakdown_times_a_qk_norm_model(tmp_path):
    from llm_testing import write_tiny_model

    write_tiny_model(tmp_path / "q3", "qwen3", head_dim=64)  # a head_dim the KV cache takes
    model = pygpukit_llm.load(tmp_path / "q3", "float32")
    times = bench.breakdown(model, batch=2, context=5, reps=1)
    assert "layer.qk_norm" in times and times["layer.qk_norm"] > 0


def test_bench_llm_refuses_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--shape", "tiny-llama", "--batch", "1,x"])
    assert exc.value.code == 2 and "--batch must be comma-separated ints" in capsys.readouterr().err
    with pytest.raises(ValueError, match="shape must be one of"):
        bench.random_checkpoint("/nonexistent", "gpt-5")


def test_measure_transformers_without_torch_or_gpu_is_none(tmp_path):
    if gp.backend() == "cuda":
        pytest.skip("the GPU machine has torch and transformers: bench-llm runs them there")
    assert bench.measure_transformers(bench.random_checkpoint(tmp_path / "m", "tiny-llama")) is None


def test_large_random_checkpoints_go_one_file_per_layer(tmp_path, monkeypatch):
    """Past _ONE_FILE_BYTES a checkpoint is a file per layer and its large tensors windows of one pool;
    it loads like the one-file form, and checkpoint_nbytes is what the files hold."""
    small = bench.random_checkpoint(tmp_path / "one", "tiny-llama", seed=2)
    monkeypatch.setattr(bench, "_ONE_FILE_BYTES", 0)
    monkeypatch.setattr(bench, "_POOL", 1 << 12)
    big = bench.random_checkpoint(tmp_path / "many", "tiny-llama", seed=2)
    files = sorted(p.name for p in big.glob("*.safetensors"))
    layers = bench.SHAPES["tiny-llama"]["num_hidden_layers"]
    assert files == [f"model-{n:05d}-of-{layers + 1:05d}.safetensors" for n in range(layers + 1)]
    assert [p.name for p in small.glob("*.safetensors")] == ["model.safetensors"]
    ckpt = pygpukit_llm.Checkpoint(big)
    assert ckpt.nbytes() == bench.checkpoint_nbytes("tiny-llama")
    up = ckpt.numpy("model.layers.0.mlp.up_proj.weight").astype("float32")  # 32768 values > the pool: a window of it
    assert up.std() == pytest.approx(0.02, rel=0.1) and len(set(up.ravel().tolist())) <= 1 << 12
    model = pygpukit_llm.load(big, "float32", progress=False)
    assert model.config.num_layers == layers
    with pytest.raises(ValueError, match="shape must be one of"):
        bench.random_checkpoint(tmp_path / "x", "nope")
