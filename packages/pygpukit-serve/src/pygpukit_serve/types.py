"""What a request asks of an engine and what comes back, shared by the engine
and the HTTP layer; and the errors a request can meet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class ServeError(Exception):
    """A request the server refuses; ``status`` is its HTTP status, ``param``
    the request field at fault (None when no one field is)."""

    status = 400
    kind = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class QueueFull(ServeError):
    """The engine's waiting queue is at its bound: retry later."""

    status = 429
    kind = "rate_limit_exceeded"


class Unavailable(ServeError):
    """The model's engine is not running (stopped, or its step thread died)."""

    status = 503
    kind = "service_unavailable"


class NotFound(ServeError):
    """An unknown model (or route)."""

    status = 404
    kind = "not_found_error"


@dataclass(frozen=True)
class SamplingParams:
    """One request's generation settings, checked by the HTTP layer (protocol.py).

    temperature 0 is greedy; top_k 0, top_p 1 and min_p 0 are off; penalties as
    pygpukit_nn.sampling.apply_penalties (repetition 1 and presence /
    frequency 0 are off). ``logprobs``: None for none, else how many
    alternatives to return beside each chosen token (0..20)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None
    ignore_eos: bool = False


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log-probability (of the distribution it was drawn
    from, before temperature), with the ``top`` most likely alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class Output:
    """One step's news for a request: the text and tokens new since the last
    Output (text matching a stop string is held back until it is resolved and
    never sent), and at the end ``finish_reason`` ("stop" or "length"; "abort" after ``abort``)."""

    text: str
    token_ids: list[int]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None
    token_text: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestStream(Protocol):
    """What ``Engine.add_request`` returns: the request's Outputs as they come
    (the last one has a finish_reason), then StopAsyncIteration. An error
    inside the engine for this request raises from ``__anext__``."""

    request_id: str

    def __aiter__(self) -> RequestStream: ...

    async def __anext__(self) -> Output: ...


class EngineLike(Protocol):
    """The engine as the HTTP layer sees it (engine.py's Engine; a test's fake).

    ``add_request`` is called on the event loop's thread and does not block:
    it raises ServeError (400: the prompt plus max_tokens pass ``max_model_len``,
    naming both numbers; param "max_tokens" or "messages"/"prompt") or
    QueueFull (429) at once. ``abort`` frees a request's sequence and blocks
    at the next step (a client that went away); unknown ids are ignored.
    ``stats()`` is what /metrics shows, a snapshot (metrics.py)."""

    name: str
    max_model_len: int
    tokenizer: Any  # a pygpukit_llm.Tokenizer: encode(text, add_special_tokens=), decode(ids), apply_chat_template(messages, ...)

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> RequestStream: ...

    def abort(self, request_id: str) -> None: ...

    def stats(self) -> Any: ...
