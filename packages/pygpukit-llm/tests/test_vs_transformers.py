"""pygpukit-llm against transformers on the GPU machine: random-initialized
transformers models of each architecture at realistic widths (hidden 1024,
GQA, 16 layers; fewer for the MoE), saved with save_pretrained and loaded by
pygpukit. Last-token logits within 1e-4 (float32) and 1e-2 (bfloat16) of
transformers' float32 logits, relative to their largest magnitude, over
prompts of several lengths; greedy generation of 64 tokens identical in
float32. Skipped without PyTorch, transformers and a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(gp.backend() != "cuda" or not torch.cuda.is_available(), reason="needs a GPU with PyTorch")

import pygpukit_llm  # noqa: E402
from pygpukit_llm.generate import GenerationConfig, generate_ids  # noqa: E402

COMMON = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
              vocab_size=32000, max_position_embeddings=2048, initializer_range=0.04, tie_word_embeddings=False)  # fmt: skip
CONFIGS = {
    "llama": ("LlamaConfig", dict(COMMON, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 256})),
    "qwen2": ("Qwen2Config", dict(COMMON, tie_word_embeddings=True, rope_theta=1e6)),
    "qwen3": ("Qwen3Config", dict(COMMON, head_dim=128, num_key_value_heads=8)),
    "mistral": ("MistralConfig", dict(COMMON, sliding_window=24)),
    "phi3": ("Phi3Config", dict(COMMON, pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    "mixtral": ("MixtralConfig", dict(COMMON, num_hidden_layers=6, intermediate_size=1024, num_local_experts=8, num_experts_per_tok=2)),
    "gpt2": ("GPT2Config", dict(n_embd=1024, n_layer=12, n_head=16, vocab_size=32000, n_positions=1024, initializer_range=0.04)),
}  # fmt: skip
PROMPTS = (7, 40, 97)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def checkpoint(request, tmp_path_factory):
    arch = request.param
    cls, kw = CONFIGS[arch]
    cfg = getattr(transformers, cls)(**kw)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager")
    path = tmp_path_factory.mktemp(arch)
    model.save_pretrained(path)
    model = model.cuda().eval()
    yield arch, path, model
    del model
    torch.cuda.empty_cache()


def _prompts(vocab):
    rng = np.random.default_rng(5)
    return [rng.integers(3, vocab, n).tolist() for n in PROMPTS]


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("dtype,bound", [("float32", 1e-4), ("bfloat16", 1e-2)])
def test_last_token_logits(checkpoint, dtype, bound):
    """Against transformers in float32. In bfloat16 the bound is 1e-2 or 1.5x
    transformers' own bfloat16 error, whichever is larger: on random weights
    16 layers of bfloat16 rounding alone move the logits by a few percent."""
    arch, path, ref = checkpoint
    model = pygpukit_llm.load(path, dtype)
    low = None
    if dtype == "bfloat16":
        low = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    errs, ref_errs = [], []
    for p in _prompts(ref.config.vocab_size):
        with torch.no_grad():
            want = ref(torch.tensor([p]).cuda()).logits[0, -1].double().cpu().numpy()
            if low is not None:
                ref_errs.append(_rel(low(torch.tensor([p]).cuda()).logits[0, -1].double().cpu().numpy(), want))
        got = model(gp.from_numpy(np.array([p], np.int32)))[0, -1].astype(gp.float64).to_numpy()
        errs.append(_rel(got, want))
    print(f"{arch} {dtype}: last-token logits rel err {['%.2e' % e for e in errs]}, transformers {['%.2e' % e for e in ref_errs]}")
    assert max(errs) <= max(bound, 1.5 * max(ref_errs, default=0.0)), (arch, dtype, errs, ref_errs)


def test_greedy_64_tokens_match(checkpoint):
    arch, path, ref = checkpoint
    model = pygpukit_llm.load(path, "float32")
    cfg = GenerationConfig(max_new_tokens=64, greedy=True)
    for p in _prompts(ref.config.vocab_size)[:2]:
        with torch.no_grad():
            out = ref.generate(torch.tensor([p]).cuda(), max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
        want = out[0, len(p) :].tolist()
        got = [int(s.tokens[0]) for s in generate_ids(model, [p], cfg)]
        assert got == want, (arch, next(i for i, (a, b) in enumerate(zip(got, want)) if a != b))
