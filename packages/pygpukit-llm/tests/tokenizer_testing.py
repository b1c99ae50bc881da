"""Tiny tokenizers trained here with the ``tokenizers`` library, in the two
families real models use, model directories written around them, and chat
templates of real models (importable: tests/ is on pytest's path)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

WORDS = (
    "the quick brown fox jumps over lazy dog hello world token stream model answer question river mountain "
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe fa\u00e7ade ni\u00f1o cr\u00e8me br\u00fbl\u00e9e sm\u00f6rg\u00e5sbord d\u00e9j\u00e0 vu "
    "\u65e5\u672c\u8a9e \u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \u6587\u672c \u6771\u4eac \u5929\u6c17 \ud55c\uad6d\uc5b4 \uc548\ub155\ud558\uc138\uc694 "
    "\U0001f600 \U0001f389 \U0001f44d\U0001f3fd \U0001f1ef\U0001f1f5 \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f \U0001f680"
).split()
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    """A few KB of sentences mixing ASCII, accented Latin, CJK, Hangul and emoji."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", ""]))
    return lines


def random_text(rng: random.Random, n_words: int = 8) -> str:
    """Text like the corpus plus characters the tiny vocabularies have never seen."""
    rare = ["\u01c5", "\u03a9", "\u2211", "\U0001d518", "\u9f98", "\U0001f984", "\U0001f9ec", "\u00a0", "\t", "  "]
    parts = [rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(rare) for _ in range(n_words)]
    return "".join(p + rng.choice([" ", "", ", "]) for p in parts)


def byte_level_json(vocab_size: int = 420) -> str:
    """GPT-2 / Qwen / Llama-3 style: byte-level pre-tokenizer and decoder, no unknown tokens.
    ``<think>`` and ``</think>`` are added tokens that are not special, as in Qwen3."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_tokens(["<think>", "</think>"])
    return tok.to_str()


def byte_fallback_json(style: str = "metaspace", vocab_size: int = 420, bos_post_processor: bool = True) -> str:
    """Llama-2 / Mistral style: SentencePiece-like BPE with ``<0xNN>`` byte tokens in the
    model's vocabulary (ids 3..258) for characters it does not know.

    style "metaspace": Metaspace pre-tokenizer and decoder (recent conversions);
    style "legacy": a normalizer that prepends "\u2581" and replaces spaces, and the
    Replace / ByteFallback / Fuse / Strip decoder of the original Llama-2 tokenizer.json."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    if style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="\u2581", prepend_scheme="first")])
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)]
        )
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=70, show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    data = json.loads(tok.to_str())
    # byte tokens go into the model's vocabulary, not among the added (special) tokens
    trained = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for t, _ in trained:
        if t not in vocab:
            vocab[t] = len(vocab)
    data["model"]["vocab"] = vocab
    data["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, t in enumerate(["<unk>", "<s>", "</s>"])
    ]
    if bos_post_processor:
        data["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<s>", "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
        }
    return json.dumps(data, ensure_ascii=False)


def model_dir(path: Path, tokenizer_json: str, **files: Any) -> Path:
    """A model directory: tokenizer.json and, for each keyword, NAME.json (a dict) or a file
    (``chat_template_jinja=`` writes chat_template.jinja)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    for name, content in files.items():
        if name == "chat_template_jinja":
            (path / "chat_template.jinja").write_text(content, encoding="utf-8")
        else:
            (path / f"{name}.json").write_text(json.dumps(content, ensure_ascii=False), encoding="utf-8")
    return path


# Qwen2.5's template, shortened (tools as JSON lines, a default system prompt)
CHATML = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'system' and loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# Llama-3-8B-Instruct's template
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Mistral-7B-Instruct-v0.1's template: roles must alternate
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)

CONVO = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi! Caf\u00e9?"},
    {"role": "assistant", "content": "Oui. \U0001f600"},
    {"role": "user", "content": "\u6771\u4eac\u306e\u5929\u6c17\u306f?"},
]
