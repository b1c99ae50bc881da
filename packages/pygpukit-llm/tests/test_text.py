"""Text generation through the tokenizer on a tiny random Qwen3-shaped model
whose embedding is padded past the tokenizer's vocabulary (any backend)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llm_testing import write_tiny_model
from tokenizer_testing import CHATML, byte_level_json, model_dir

import pygpukit as gp
import pygpukit_llm
from pygpukit_llm import TokenizerError
from pygpukit_llm.generate import GenerationConfig, generate_ids


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen")
    write_tiny_model(path, "qwen3", seed=4, hidden=128, heads=2, kv_heads=1, head_dim=64, intermediate=192, vocab=512, layers=2)
    model_dir(path, byte_level_json(), tokenizer_config={"chat_template": CHATML, "eos_token": "<|im_end|>"})
    return pygpukit_llm.load(path, "float32")


def test_generate_decodes_the_greedy_ids(model):
    tok = model.tokenizer
    out = model.generate("the quick brown fox", max_new_tokens=20, greedy=True, ignore_eos=True)
    ids = [int(s.tokens[0]) for s in generate_ids(model, [tok.encode("the quick brown fox")], GenerationConfig(max_new_tokens=20, greedy=True),
                                                  vocab_limit=tok.vocab_size)]  # fmt: skip
    assert out.token_ids == ids and out.finish_reason == "length"
    assert out.text == tok.decode(ids) and out.text
    assert "".join(model.stream("the quick brown fox", max_new_tokens=20, greedy=True, ignore_eos=True)) == out.text


def test_ids_past_the_tokenizer_are_never_sampled(model):
    out = model.generate(["a", "b c"], max_new_tokens=40, temperature=1.5, seed=3, ignore_eos=True)
    assert all(t < model.tokenizer.vocab_size for c in out for t in c.token_ids)
    assert model.tokenizer.vocab_size < model.config.vocab_size


def test_stop_strings_and_stop_ids(model):
    full = model.generate("hello", max_new_tokens=30, greedy=True, ignore_eos=True)
    cut = full.text[len(full.text) // 2 :][:2]
    stopped = model.generate("hello", max_new_tokens=30, greedy=True, ignore_eos=True, stop=[cut])
    assert stopped.finish_reason == "stop_string" and stopped.text == full.text[: full.text.index(cut)]
    tid = full.token_ids[5]
    ended = model.generate("hello", max_new_tokens=30, greedy=True, ignore_eos=True, stop_ids=(tid,))
    assert ended.finish_reason == "stop" and ended.token_ids == full.token_ids[: full.token_ids.index(tid)]


def test_batch_equals_prompts_alone(model):
    prompts = ["one two three four five", "x", "lorem ipsum"]
    batch = model.generate(prompts, max_new_tokens=12, greedy=True, ignore_eos=True)
    for p, c in zip(prompts, batch):
        assert model.generate(p, max_new_tokens=12, greedy=True, ignore_eos=True).token_ids == c.token_ids


def test_chat_and_its_stream(model):
    messages = [{"role": "user", "content": "h\u00e9llo \u4e16\u754c"}]
    reply = model.chat(messages, max_new_tokens=16, greedy=True, ignore_eos=True)
    pieces = list(model.stream_chat(messages, max_new_tokens=16, greedy=True, ignore_eos=True))
    assert "".join(t for c, t in pieces if c == "reply") == reply.text and reply.thinking == "".join(
        t for c, t in pieces if c == "thinking"
    )
    prompt = model.tokenizer.apply_chat_template(messages, tokenize=True)
    ids = [int(s.tokens[0]) for s in generate_ids(model, [prompt], GenerationConfig(max_new_tokens=16, greedy=True),
                                                  vocab_limit=model.tokenizer.vocab_size)]  # fmt: skip
    assert reply.token_ids == ids


def test_asyncio_forms(model):
    async def run():
        pieces = [t async for t in model.astream("abc", max_new_tokens=10, greedy=True, ignore_eos=True)]
        whole = await model.agenerate("abc", max_new_tokens=10, greedy=True, ignore_eos=True)
        return "".join(pieces), whole.text

    streamed, whole = asyncio.run(run())
    assert streamed == whole == model.generate("abc", max_new_tokens=10, greedy=True, ignore_eos=True).text


def test_text_needs_a_tokenizer(tmp_path):
    write_tiny_model(tmp_path, "llama", hidden=128, heads=2, kv_heads=1, vocab=300)
    model = pygpukit_llm.load(tmp_path, "float32")
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        model.generate("hi")
    with pytest.raises(TypeError, match="string"):
        pygpukit_llm.text.TextGenerator(model, None).generate([[1, 2]])
    assert np.isfinite(model(gp.from_numpy(np.array([[1, 2]], np.int32))).to_numpy()).all()
