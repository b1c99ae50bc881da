"""Text in, text out: prompts and chats through the model's tokenizer.

Each row of a batch has its own streaming detokenizer (never splitting a UTF-8
character) and stop-string matcher; a row ends at a stop id (the union of the
eos ids of config.json, generation_config.json and the tokenizer, plus the
caller's), at a stop string (the text ends before it), or after
``max_new_tokens``. Chat replies of models that think (Qwen3) come with the
``<think>`` block split out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .generate import GenerationConfig, generate_ids
from .streaming import StopStrings, StreamDecoder
from .thinking import ThinkingStream, split_thinking
from .tokenizer import Tokenizer, TokenizerError

__all__ = ["Completion", "TextGenerator"]


@dataclass
class Completion:
    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (a stop id), "stop_string" or "length"
    thinking: str = ""  # a chat reply's <think> block, split out of text


class _Row:
    """One sequence's detokenizer, stop strings and outcome."""

    def __init__(self, tok: Tokenizer, stops: Sequence[str]) -> None:
        self.decoder = StreamDecoder(tok)
        self.stops = StopStrings(stops)
        self.ids: list[int] = []
        self.reason: str | None = None

    def push(self, token: int, stop_ids: frozenset[int]) -> str:
        if token in stop_ids:
            self.reason = "stop"
            return self.finish()
        self.ids.append(token)
        text = self.stops.feed(self.decoder.push(token))
        if self.stops.stopped:
            self.reason = "stop_string"
        return text

    def finish(self) -> str:
        return "" if self.stops.stopped else self.stops.feed(self.decoder.flush()) + self.stops.flush()


class TextGenerator:
    """A model with its tokenizer: ``generate``, ``stream``, ``chat``,
    ``stream_chat`` and their asyncio forms. Keyword arguments are
    GenerationConfig fields (max_new_tokens, temperature, top_p, stop, seed...)."""

    def __init__(self, model: Any, tokenizer: Tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer

    def _config(self, config: GenerationConfig | None, kw: dict[str, Any]) -> GenerationConfig:
        return (config or GenerationConfig()).with_(**kw) if kw else (config or GenerationConfig())

    def _stop_ids(self, cfg: GenerationConfig) -> frozenset[int]:
        return frozenset(cfg.stop_ids) | (frozenset() if cfg.ignore_eos else self.tokenizer.stop_ids)

    def stream_rows(self, prompts: Sequence[Sequence[int]], cfg: GenerationConfig) -> Iterator[tuple[int, str]]:
        """(row, new text) as tokens come, for a batch of tokenized prompts; the
        rows' outcomes are in ``self.last`` (a Completion per row) at the end."""
        stop_ids = self._stop_ids(cfg)
        rows = [_Row(self.tokenizer, cfg.stop) for _ in prompts]
        finished = np.zeros(len(prompts), bool)
        # ids past the tokenizer's vocabulary (a padded embedding) are never sampled
        limit = min(self.tokenizer.vocab_size, self.model.config.vocab_size)
        for step in generate_ids(self.model, prompts, cfg, sorted(stop_ids), finished, vocab_limit=limit):
            for b, row in enumerate(rows):
                if finished[b] or not step.active[b]:
                    continue
                text = row.push(int(step.tokens[b]), stop_ids)
                if text:
                    yield b, text
                finished[b] = row.reason is not None
        for b, row in enumerate(rows):
            if row.reason is None:
                row.reason = "length"
                tail = row.finish()
                if tail:
                    yield b, tail
        self.last = [Completion(self.tokenizer.decode(r.ids), r.ids, r.reason or "length") for r in rows]

    def _encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        return [int(t) for t in prompt]

    def generate(self, prompt: str | Sequence[str], config: GenerationConfig | None = None, **kw: Any) -> Completion | list[Completion]:
        """Complete one prompt (a Completion) or a batch (a list, in order)."""
        single = isinstance(prompt, str)
        prompts = [prompt] if single else list(prompt)
        if not prompts or not all(isinstance(p, str) for p in prompts):
            raise TypeError("generate: prompt must be a string or a non-empty list of strings")
        texts = [""] * len(prompts)
        for b, t in self.stream_rows([self._encode(p) for p in prompts], self._config(config, kw)):
            texts[b] += t
        out = self.last
        for c, t in zip(out, texts):
            c.text = t
        return out[0] if single else out

    def stream(self, prompt: str, config: GenerationConfig | None = None, **kw: Any) -> Iterator[str]:
        """The completion of one prompt, piece by piece as it is generated."""
        if not isinstance(prompt, str):
            raise TypeError(f"stream: prompt must be a string, got {type(prompt).__name__}")
        for _, text in self.stream_rows([self._encode(prompt)], self._config(config, kw)):
            yield text

    def _chat_ids(self, messages: Sequence[dict[str, Any]], template: dict[str, Any]) -> tuple[list[int], bool]:
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **template)
        assert isinstance(rendered, str)
        # a template that opens the think block itself (Qwen3 with thinking on): the reply starts inside it
        return self.tokenizer.encode(rendered, add_special_tokens=False), rendered.rstrip().endswith("<think>")

    def stream_chat(
        self, messages: Sequence[dict[str, Any]], config: GenerationConfig | None = None, *, template: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Iterator[tuple[str, str]]:  # fmt: skip
        """The assistant's reply to ``messages`` as (channel, text) pieces, channel
        "thinking" or "reply". ``template``: chat-template variables (e.g.
        {"enable_thinking": False})."""
        ids, inside = self._chat_ids(messages, template or {})
        router = ThinkingStream(start_inside=inside)
        for _, text in self.stream_rows([ids], self._config(config, kw)):
            yield from router.feed(text)
        yield from router.flush()

    def chat(
        self, messages: Sequence[dict[str, Any]], config: GenerationConfig | None = None, *, template: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Completion:  # fmt: skip
        """The assistant's reply to ``messages``, its <think> block in ``thinking``."""
        ids, inside = self._chat_ids(messages, template or {})
        text = "".join(t for _, t in self.stream_rows([ids], self._config(config, kw)))
        out = self.last[0]
        out.thinking, out.text = split_thinking(text, start_inside=inside)
        return out

    async def astream(self, prompt: str, config: GenerationConfig | None = None, **kw: Any) -> AsyncIterator[str]:
        """``stream`` for asyncio: each step runs in a worker thread, so the event
        loop keeps serving other tasks (and other models) meanwhile."""
        it = self.stream(prompt, config, **kw)
        done = object()
        while True:
            text = await asyncio.to_thread(next, it, done)
            if text is done:
                return
            yield text

    async def agenerate(self, prompt: str | Sequence[str], config: GenerationConfig | None = None, **kw: Any) -> Any:
        """``generate`` for asyncio (in a worker thread)."""
        return await asyncio.to_thread(self.generate, prompt, config, **kw)


def text_generator(model: Any) -> TextGenerator:
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        where = getattr(model, "directory", None)
        raise TokenizerError(f"{where or 'this model'} has no tokenizer.json: text generation needs one (generate_ids takes token ids)")
    return TextGenerator(model, tok)
