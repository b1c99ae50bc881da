"""The tiny random Qwen2 with a byte-level tokenizer and ChatML that the engine
and server tests serve, and the reference they compare with."""

from __future__ import annotations

from pathlib import Path

from llm_testing import write_tiny_model
from tokenizer_testing import CHATML, byte_level_json, model_dir

from pygpukit_llm.generate import GenerationConfig
from pygpukit_llm.text import text_generator


def write_model(path: Path) -> Path:
    write_tiny_model(path, "qwen2", seed=7, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, layers=2, max_positions=256)
    model_dir(path, byte_level_json(), tokenizer_config={"chat_template": CHATML, "eos_token": "<|im_end|>"})
    return path


def greedy(model, prompt_ids, n):
    """What generate gives for these token ids alone: the reference every batching is compared with."""
    gen = text_generator(model)
    for _ in gen.stream_rows([list(prompt_ids)], GenerationConfig(max_new_tokens=n, greedy=True, ignore_eos=True)):
        pass
    return gen.last[0].token_ids
