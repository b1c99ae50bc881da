"""A fake engine for the HTTP layer's tests, a tiny word-level tokenizer with a
chat template, and a real uvicorn server on a free port in a thread
(importable: tests/ is on pytest's path)."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from tokenizers import Tokenizer as Backend
from tokenizers import models, pre_tokenizers

from pygpukit_llm import Tokenizer
from pygpukit_serve.metrics import EngineStats
from pygpukit_serve.types import Output, QueueFull, SamplingParams, ServeError, TokenLogprob

SPECIALS = ["[UNK]", "<|im_start|>", "<|im_end|>"]
# marker words steer the fake: see FakeEngine
WORDS = ["system", "user", "assistant", "tool", "hello", "world", "the", "quick", "brown", "caf\u00e9", "jumps", "over", "lazy", "dog"]
MARKERS = ["hold", "stall", "boom", "crash", "busy"]
# the fake's answer to anything, then EOS (or again and again with ignore_eos)
REPLY = ["the", "quick", "brown", "caf\u00e9", "jumps", "over"]
REPLY_TEXT = "the quick brown caf\u00e9 jumps over"

TEMPLATE = (
    "{% if messages[0]['role'] == 'tool' %}{{ raise_exception('a conversation cannot start with a tool message') }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_tokenizer() -> Tokenizer:
    """Words split on whitespace and punctuation, unknown ones [UNK]; EOS <|im_end|>; a ChatML template."""
    vocab = {t: i for i, t in enumerate(SPECIALS + WORDS + MARKERS)}
    backend = Backend(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.add_special_tokens(SPECIALS)
    return Tokenizer(backend, tokenizer_config={"eos_token": "<|im_end|>", "unk_token": "[UNK]"}, chat_templates={"default": TEMPLATE})


class FakeStream:
    def __init__(self, request_id: str, outputs: AsyncIterator[Output]) -> None:
        self.request_id = request_id
        self._outputs = outputs

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Output:
        return await self._outputs.__anext__()


class FakeEngine:
    """EngineLike that answers REPLY, one token per Output, honouring max_tokens,
    ignore_eos, stop strings (never sent), logprobs and the context limit.

    Words in the prompt steer it: "busy" -> QueueFull from add_request; "boom" ->
    RuntimeError before the first Output; "crash" -> RuntimeError after two
    Outputs; "hold" -> after the first Output it sets ``held`` and waits for
    ``release()``; "stall" -> the same before the first Output. ``requests``
    maps each request id to its (prompt ids, params); ``aborted`` lists the
    aborted ids (of this test's requests) and ``aborted_event`` is set on each
    abort."""

    def __init__(self, name: str, tokenizer: Tokenizer, max_model_len: int = 64) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._stats = EngineStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate: asyncio.Event | None = None
        self.reset()

    def reset(self) -> None:
        self.requests: dict[str, tuple[list[int], SamplingParams]] = {}
        self.aborted: list[str] = []
        self.aborted_event = threading.Event()
        self.held = threading.Event()
        self.stats_error: Exception | None = None  # what stats() raises

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> FakeStream:
        words = set(self.tokenizer.decode(prompt_ids).split())
        if "busy" in words:
            raise QueueFull("the fake's waiting queue is full; retry later")
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ServeError(
                f"this model's maximum context length is {self.max_model_len} tokens; the prompt has {len(prompt_ids)} "
                f"and max_tokens is {params.max_tokens}",
                param="max_tokens",
            )
        self.requests[request_id] = (list(prompt_ids), params)
        self._stats.record_prompt(len(prompt_ids))
        return FakeStream(request_id, self._run(self._script(prompt_ids, params), words))

    def abort(self, request_id: str) -> None:
        if request_id not in self.requests:  # as the engine: unknown ids (here: an earlier test's) are ignored
            return
        self.aborted.append(request_id)
        self._stats.record_finished("abort")
        self.aborted_event.set()

    def stats(self) -> EngineStats:
        if self.stats_error is not None:
            raise self.stats_error
        return self._stats

    def release(self) -> None:
        """Let a held request go on (from any thread)."""
        assert self._loop is not None and self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def _script(self, prompt_ids: list[int], params: SamplingParams) -> list[Output]:
        ids: list[int] = []
        texts: list[str] = []
        finish = "length"
        while len(ids) < params.max_tokens:
            k = len(ids)
            if k == len(REPLY) and not params.ignore_eos:
                assert self.tokenizer.eos_token_id is not None
                ids.append(self.tokenizer.eos_token_id)
                texts.append("")
                finish = "stop"
                break
            word = REPLY[k % len(REPLY)]
            ids.append(self.tokenizer.token_to_id(word))
            texts.append(word if k == 0 else " " + word)
            if any(s in "".join(texts) for s in params.stop):
                finish = "stop"
                break
        full = "".join(texts)
        # text from the first stop string on is never sent
        cut = min([full.find(s) for s in params.stop if s in full], default=len(full))
        outputs, start = [], 0
        for i, (tid, text) in enumerate(zip(ids, texts)):
            end = start + len(text)
            logprobs = None
            if params.logprobs is not None:
                lp = -0.5 * (i + 1)
                alternatives = [tid] + [self.tokenizer.token_to_id(WORDS[(i + j) % len(WORDS)]) for j in range(params.logprobs)]
                top = tuple((t, lp - j) for j, t in enumerate(alternatives[: params.logprobs]))
                logprobs = [TokenLogprob(tid, lp, top)]
            last = i == len(ids) - 1
            outputs.append(
                Output(
                    text=full[min(start, cut) : min(end, cut)],
                    token_ids=[tid],
                    prompt_tokens=len(prompt_ids),
                    completion_tokens=i + 1,
                    cached_tokens=len(prompt_ids) // 2,
                    logprobs=logprobs,
                    finish_reason=finish if last else None,
                    token_text=[text],
                )
            )
            start = end
        return outputs

    async def _run(self, outputs: list[Output], words: set[str]) -> AsyncIterator[Output]:
        for i, out in enumerate(outputs):
            await asyncio.sleep(0)  # one engine step: other requests get their turn
            if "boom" in words:
                raise RuntimeError("the fake engine failed before the first token")
            if "crash" in words and i == 2:
                raise RuntimeError("the fake engine failed mid-stream")
            if ("stall" in words and i == 0) or ("hold" in words and i == 1):
                self._loop, self._gate = asyncio.get_running_loop(), asyncio.Event()
                self.held.set()
                await self._gate.wait()
            self._stats.record_generated(1)
            if out.finished:
                self._stats.record_finished(out.finish_reason or "")
                self._stats.e2e_seconds.observe(0.01 * (i + 1))
            yield out


class ServerThread:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in a daemon thread; ``stop()`` ends it."""

    def __init__(self, app: Any) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._ready = threading.Event()
        ready = self._ready

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                try:
                    await super().startup(sockets)
                finally:
                    ready.set()

        self.server = Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        if not ready.wait(timeout=30) or not self.server.started:
            raise RuntimeError("uvicorn did not start")

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
