"""Every supported architecture against the float64 NumPy reference of
llm_testing.py, on tiny checkpoints written as transformers saves them (any
backend): logits of a ragged batch, the KV-cache decode path, greedy
generation, and the sharded and float16/bfloat16 storage variants."""

from __future__ import annotations

import numpy as np
import pytest
from llm_testing import reference_greedy, reference_logits, write_tiny_model

import pygpukit as gp
import pygpukit_llm
from pygpukit import ext
from pygpukit_llm.generate import GenerationConfig, generate_ids

ARCHS = sorted(pygpukit_llm.ARCHITECTURES)
# head_dim 64 (the KV cache's smallest), GQA 2:1, a window the prompts pass
SIZES = dict(hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=300, layers=2, experts=4, top_k=2)


def _write(path, arch, **kw):
    extra = {"head_dim": 64} if arch == "qwen3" else {}
    if arch in ("mistral", "mixtral", "phi3"):
        extra["sliding_window"] = 6
    return write_tiny_model(path, arch, seed=2, **SIZES, **extra, **kw)


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_the_reference(tmp_path, arch):
    _write(tmp_path, arch)
    model = pygpukit_llm.load(tmp_path, "float32")
    ids = np.random.default_rng(1).integers(0, 300, (2, 13)).astype(np.int32)
    got = model(gp.from_numpy(ids)).astype(gp.float64).to_numpy()
    assert _rel(got, reference_logits(tmp_path, ids)) < 1e-5


@pytest.mark.parametrize("arch", ARCHS)
def test_fused_norm_and_activation_projections_give_the_same_logits(tmp_path, arch, monkeypatch):
    """The model calls the fused ops (add_rms_norm_linear for an RMSNorm before a
    projection, swiglu_linear before a dense SwiGLU MLP's down projection: a GPU
    kernel for decode rows, else their references): the same logits as the ops one
    by one put in their place, prefill and a decode step over the cache."""
    from pygpukit_nn import activations, norms

    def add_rms_norm_linear(x, residual, weight, eps, w, bias):
        normed, h = (norms.rms_norm(x, weight, eps), x) if residual is None else norms.add_rms_norm(x, residual, weight, eps)
        return gp.linear(normed, w, bias), h

    unfused = {"add_rms_norm_linear": add_rms_norm_linear, "swiglu_linear": lambda gu, w, bias: gp.linear(activations.swiglu(gu), w, bias)}
    _write(tmp_path, arch)
    model = pygpukit_llm.load(tmp_path, "float32")
    ids = np.random.default_rng(3).integers(0, 300, (2, 9)).astype(np.int32)
    op, called, runs = ext.op, set(), []
    for fused in (False, True):
        if fused:
            monkeypatch.setattr(ext, "op", lambda name: called.add(name) or op(name))
        else:
            monkeypatch.setattr(ext, "op", lambda name: unfused.get(name) or op(name))
        cache = model.new_cache(2, 16)
        first = model(gp.from_numpy(np.ascontiguousarray(ids[:, :8])), None, cache).astype(gp.float64).to_numpy()
        step = model(gp.from_numpy(np.ascontiguousarray(ids[:, 8:])), np.array([8]), cache).astype(gp.float64).to_numpy()
        runs.append((first, step))
    spec = model.spec
    want = {"add_rms_norm_linear"} if spec.norm == "rms" else set()
    want |= {"swiglu_linear"} if spec.gated and not spec.moe and model.config.activation == "silu" else set()
    assert called & set(unfused) == want
    for unfused_logits, fused_logits in zip(*runs):
        assert _rel(fused_logits, unfused_logits) < 1e-6


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generation_matches_the_reference(tmp_path, arch):
    _write(tmp_path, arch)
    model = pygpukit_llm.load(tmp_path, "float32")
    prompts = [[5, 9, 200, 3, 77, 12, 41, 8, 99, 150, 7], [14, 2]]  # past the window, and ragged
    steps = list(generate_ids(model, prompts, GenerationConfig(max_new_tokens=10, greedy=True)))
    for row, p in enumerate(prompts):
        assert [int(s.tokens[row]) for s in steps] == reference_greedy(tmp_path, p, 10)


@pytest.mark.parametrize("variant", [{"sharded": True}, {"dtype": "float16"}, {"dtype": "bfloat16"}])
def test_storage_variants(tmp_path, variant):
    _write(tmp_path, "qwen2", **variant)
    model = pygpukit_llm.load(tmp_path, "float32")  # converted on load
    ids = np.arange(3, 12, dtype=np.int32)[None]
    assert _rel(model(gp.from_numpy(ids)).astype(gp.float64).to_numpy(), reference_logits(tmp_path, ids)) < 1e-5
