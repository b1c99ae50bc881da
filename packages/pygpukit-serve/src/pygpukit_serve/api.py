"""The HTTP layer: engines behind OpenAI's ``/v1/chat/completions``,
``/v1/completions`` and ``/v1/models``, plus ``/health`` and ``/metrics``.

Every error is answered in OpenAI's shape, ``{"error": {"message", "type",
"param", "code"}}``, with its status: a ServeError's own, 404 for an unknown
model or route, 500 (logged) for anything unexpected in one request, which
leaves the others alone. A stream answers its first chunk only once the
engine has produced its first Output, so that a request refused until then
still gets its HTTP status; a later error ends the stream with a
``data: {"error": ...}`` event and ``data: [DONE]``. A client that goes away
before its request is done has the request aborted in the engine."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from . import protocol
from .metrics import render
from .types import EngineLike, NotFound, Output, RequestStream, ServeError

__all__ = ["create_app", "run"]

log = logging.getLogger("pygpukit_serve")

T = TypeVar("T")
# a generated token for the logprobs: its text, log-probability, and the top alternatives' (text, log-probability)
_TokenInfo = tuple[str, float, list[tuple[str, float]]]

# OpenAI's stand-in for a log-probability that underflowed to -inf (JSON has no infinities)
_LOGPROB_FLOOR = -9999.0
# nginx's status for a client that closed the connection first: only the access log sees it
_CLIENT_GONE = 499


class _InternalError(ServeError):
    status = 500
    kind = "server_error"

    def __init__(self, what: str) -> None:
        super().__init__(f"the server had an error while processing {what}; the server's log has the details")


def _error_body(exc: ServeError) -> dict[str, Any]:
    return {"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}}


def _error_response(exc: ServeError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(_error_body(exc), status_code=exc.status, headers=headers)


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _logprob(value: float) -> float:
    return max(value, _LOGPROB_FLOOR)


def _usage(last: Output) -> dict[str, Any]:
    return {
        "prompt_tokens": last.prompt_tokens,
        "completion_tokens": last.completion_tokens,
        "total_tokens": last.prompt_tokens + last.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": last.cached_tokens},
    }


class _Call:
    """One request in an engine: its Outputs, and an abort on leaving before the last one."""

    def __init__(self, engine: EngineLike, request_id: str, stream: RequestStream) -> None:
        self.engine, self.request_id, self.stream = engine, request_id, stream
        self.done = False

    async def next(self) -> Output:
        try:
            out = await self.stream.__anext__()
        except StopAsyncIteration:
            raise RuntimeError(f"the engine's stream for request {self.request_id} ended without a finish_reason") from None
        self.done = out.finished
        return out

    async def collect(self) -> list[Output]:
        outputs = [await self.next()]
        while not self.done:
            outputs.append(await self.next())
        return outputs

    def close(self) -> None:
        if not self.done:
            self.done = True
            self.engine.abort(self.request_id)


class _Answer(ABC):
    """One request's response body or stream chunks, in the shape of its API."""

    id_prefix = ""
    object = ""
    chunk_object = ""

    def __init__(self, request_id: str, model: str, tokenizer: Any, request: protocol.Request) -> None:
        self.id = self.id_prefix + request_id
        self.model = model
        self.created = int(time.time())
        self.tokenizer = tokenizer
        self.logprobs = request.params.logprobs is not None
        self.include_usage = request.include_usage
        self._prev = request.prompt_ids[-1]  # the token before the next generated one

    @abstractmethod
    def _choice(self, text: str, logprobs: dict[str, Any] | None, finish: str | None, delta: bool) -> dict[str, Any]:
        """The one choice of a body (``delta`` False) or of a chunk."""

    @abstractmethod
    def _format_logprobs(self, tokens: list[_TokenInfo]) -> dict[str, Any]:
        """The ``logprobs`` of a choice from each token's (text, logprob, [(alternative's text, logprob)])."""

    def opening(self) -> list[dict[str, Any]]:
        """Chunks a stream starts with, before the first Output's."""
        return []

    def _logprobs(self, outputs: Sequence[Output]) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        tokens = []
        for o in outputs:
            for lp, text in zip(o.logprobs or (), o.token_text):
                top = [(protocol.token_text(self.tokenizer, self._prev, t), _logprob(v)) for t, v in lp.top]
                tokens.append((text, _logprob(lp.logprob), top))
                self._prev = lp.token_id
        return self._format_logprobs(tokens)

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk = {**self._head(self.chunk_object), "choices": choices}
        if self.include_usage:
            chunk["usage"] = None  # as OpenAI: every chunk has the key, only the last one a value
        return chunk

    def body(self, outputs: Sequence[Output]) -> dict[str, Any]:
        last = outputs[-1]
        choice = self._choice("".join(o.text for o in outputs), self._logprobs(outputs), last.finish_reason, delta=False)
        return {**self._head(self.object), "choices": [choice], "usage": _usage(last)}

    def chunk(self, out: Output) -> dict[str, Any] | None:
        """``out`` as a stream chunk; None when it has nothing to tell (no text, no logprobs, not the end)."""
        if not out.text and not out.finished and not (self.logprobs and out.logprobs):
            return None
        return self._chunk([self._choice(out.text, self._logprobs([out]), out.finish_reason, delta=True)])

    def usage_chunk(self, last: Output) -> dict[str, Any]:
        return {**self._head(self.chunk_object), "choices": [], "usage": _usage(last)}


class _ChatAnswer(_Answer):
    id_prefix = "chatcmpl-"
    object = "chat.completion"
    chunk_object = "chat.completion.chunk"

    def opening(self) -> list[dict[str, Any]]:
        return [self._chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])]

    def _choice(self, text: str, logprobs: dict[str, Any] | None, finish: str | None, delta: bool) -> dict[str, Any]:
        if delta:
            return {"index": 0, "delta": {"content": text} if text or not finish else {}, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs, "finish_reason": finish}

    @staticmethod
    def _entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def _format_logprobs(self, tokens: list[_TokenInfo]) -> dict[str, Any]:
        return {"content": [{**self._entry(text, lp), "top_logprobs": [self._entry(t, v) for t, v in top]} for text, lp, top in tokens]}


class _CompletionAnswer(_Answer):
    id_prefix = "cmpl-"
    object = "text_completion"
    chunk_object = "text_completion"

    def __init__(self, request_id: str, model: str, tokenizer: Any, request: protocol.Request) -> None:
        super().__init__(request_id, model, tokenizer, request)
        self._offset = 0  # text_offset of the next token: streamed chunks continue where the last one ended

    def _choice(self, text: str, logprobs: dict[str, Any] | None, finish: str | None, delta: bool) -> dict[str, Any]:
        return {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}

    def _format_logprobs(self, tokens: list[_TokenInfo]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for text, lp, top in tokens:
            alternatives = dict(top)
            alternatives.setdefault(text, lp)  # as OpenAI: the sampled token is always there (up to logprobs + 1 entries)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp)
            out["top_logprobs"].append(alternatives)
            out["text_offset"].append(self._offset)
            self._offset += len(text)
        return out


class _EventStream(StreamingResponse):
    """Server-sent events that call ``on_close`` however they end: done, failed, the
    client gone (Starlette then cancels the body iterator), or never started."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


async def _disconnected(request: Request) -> None:
    # the body has been read: what comes next is the disconnect
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None when the client goes away first (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        task.cancel()
    return task.result() if task.done() else None


async def _events(call: _Call, first: Output, answer: _Answer) -> AsyncIterator[str]:
    out = first
    try:
        for chunk in answer.opening():
            yield _sse(chunk)
        while True:
            piece = answer.chunk(out)
            if piece is not None:
                yield _sse(piece)
            if out.finished:
                break
            out = await call.next()
        if answer.include_usage:
            yield _sse(answer.usage_chunk(out))
    except ServeError as exc:
        yield _sse(_error_body(exc))
    except Exception:
        log.exception("request %s failed while streaming", call.request_id)
        yield _sse(_error_body(_InternalError(f"request {call.request_id}")))
    yield "data: [DONE]\n\n"


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8/16/32
        raise ServeError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ServeError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def create_app(engines: Mapping[str, EngineLike], *, served_names: Mapping[str, str] | None = None) -> FastAPI:
    """An app serving each engine under its key in ``engines`` (the ``model`` a
    request names) and under the aliases of ``served_names`` (alias -> key)."""
    if not engines:
        raise ValueError("create_app needs at least one engine")
    routes: dict[str, EngineLike] = dict(engines)
    for alias, key in (served_names or {}).items():
        if key not in engines:
            raise ValueError(f"served_names: {alias!r} names {key!r}, which is not an engine (engines: {', '.join(engines)})")
        if alias in routes and routes[alias] is not engines[key]:
            raise ValueError(f"served_names: {alias!r} is already the name of another engine")
        routes[alias] = engines[key]
    started = int(time.time())
    app = FastAPI(title="pygpukit-serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = NotFound if exc.status_code == 404 else ServeError
        err = kind(f"{exc.detail}: {request.method} {request.url.path}")
        err.status = exc.status_code
        return _error_response(err, headers=exc.headers)

    # the completion routes answer their own errors; this is for the others (an engine's stats() that raises)
    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises the exception after this response, and uvicorn logs it
        return _error_response(_InternalError(f"{request.method} {request.url.path}"))

    def engine_for(name: str) -> EngineLike:
        engine = routes.get(name)
        if engine is None:
            raise NotFound(
                f"the model {name!r} does not exist here; served models: {', '.join(routes)}", param="model", code="model_not_found"
            )
        return engine

    async def serve(request: Request, parse: Callable[..., protocol.Request], answer_type: type[_Answer]) -> Response:
        request_id = uuid.uuid4().hex
        try:
            body = await _json_body(request)
            name = protocol.model_name(body)
            engine = engine_for(name)
            # a long prompt's template and tokenization would hold up every stream on the event loop
            req = await run_in_threadpool(parse, body, engine.tokenizer, engine.max_model_len)
            answer = answer_type(request_id, name, engine.tokenizer, req)
            call = _Call(engine, request_id, engine.add_request(request_id, req.prompt_ids, req.params))
            if req.stream:
                first = None
                try:
                    first = await _unless_disconnected(request, call.next())
                finally:
                    if first is None:
                        call.close()
                if first is None:
                    return Response(status_code=_CLIENT_GONE)
                return _EventStream(_events(call, first, answer), on_close=call.close)
            try:
                outputs = await _unless_disconnected(request, call.collect())
            finally:
                call.close()
            if outputs is None:
                return Response(status_code=_CLIENT_GONE)
            return JSONResponse(answer.body(outputs))
        except ServeError as exc:
            return _error_response(exc)
        except Exception:
            log.exception("request %s failed", request_id)
            return _error_response(_InternalError(f"request {request_id}"))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await serve(request, protocol.parse_chat, _ChatAnswer)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await serve(request, protocol.parse_completion, _CompletionAnswer)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "created": started, "owned_by": "pygpukit", "max_model_len": engine.max_model_len}
            for name, engine in routes.items()
        ]
        return {"object": "list", "data": data}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = render({name: engine.stats() for name, engine in engines.items()})
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    return app


def run(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve ``app`` with uvicorn until interrupted."""
    uvicorn.run(app, host=host, port=port, log_level=log_level)
