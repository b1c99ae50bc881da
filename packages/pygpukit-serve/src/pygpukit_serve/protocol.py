"""Request bodies of ``/v1/chat/completions`` and ``/v1/completions`` (a dict
from JSON) checked and turned into a ``Request``: prompt token ids and
SamplingParams for the engine, and how to answer (stream, usage chunk).

Every refusal is a ServeError (400) whose ``param`` names the field at fault
and whose message says what was wrong and what was expected. A field sent as
JSON null counts as absent, as in OpenAI's API."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pygpukit_llm import TokenizerError

from .types import SamplingParams, ServeError

__all__ = ["Request", "model_name", "parse_chat", "parse_completion", "token_text"]

_COMMON = {"model", "n", "stream", "stream_options", "user", "logprobs", "max_tokens", "stop", "seed"}
_COMMON |= {"temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos"}
_CHAT_FIELDS = _COMMON | {"messages", "top_logprobs", "max_completion_tokens"}
_COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "best_of"}
# OpenAI fields this server knows of but does not implement: named as unsupported rather than unknown
_CHAT_UNSUPPORTED = {"logit_bias", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "response_format"}
_COMPLETION_UNSUPPORTED = {"logit_bias", "suffix"}

_ROLES = ("system", "user", "assistant", "tool")
_MESSAGE_KEYS = {"role", "content", "name", "tool_call_id"}
_MAX_STOPS = 4
_MAX_CHAT_LOGPROBS = 20
_MAX_COMPLETION_LOGPROBS = 5
_SEED_LIMIT = 2**64


@dataclass(frozen=True)
class Request:
    """A checked request. ``params.logprobs`` None: no logprobs in the answer."""

    model: str
    prompt_ids: list[int]
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False


def token_text(tokenizer: Any, prev: int, token_id: int) -> str:
    """A token's text for logprobs, as it reads after the token ``prev``: decoded alone,
    a SentencePiece-style decoder would drop the leading space of a word."""
    before = tokenizer.decode([prev], skip_special_tokens=False)
    both = tokenizer.decode([prev, token_id], skip_special_tokens=False)
    # a character split across the two tokens leaves no clean boundary: the token alone then
    return str(both[len(before) :] if both.startswith(before) else tokenizer.decode([token_id], skip_special_tokens=False))


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(param: str, expected: str, value: Any) -> ServeError:
    return ServeError(f"{param}: expected {expected}, got {_show(value)}", param=param)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], name: str, default: float, lo: float, hi: float, lo_open: bool = False) -> float:
    value = body.get(name)
    if value is None:
        return default
    # NaN, the infinities and ints too large for a float become NaN, which fails every comparison below
    x = float(value) if _is_number(value) and abs(value) < 1e300 else math.nan
    if not ((x > lo if lo_open else x >= lo) and x <= hi):
        low = f"above {lo:g}" if lo_open else f"from {lo:g}"
        high = "" if math.isinf(hi) else f" to {hi:g}"
        raise _bad(name, f"a number {low}{high}", value)
    return x


def _int(body: Mapping[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not (_is_int(value) and value >= lo and (hi is None or value <= hi)):
        raise _bad(name, f"an integer from {lo} to {hi}" if hi is not None else f"an integer >= {lo}", value)
    return int(value)


def _one(body: Mapping[str, Any], name: str, what: str) -> None:
    """``n`` / ``best_of``: absent or 1."""
    value = body.get(name)
    if value is not None and not (_is_int(value) and value == 1):
        raise _bad(name, f"1 (this server returns one {what} per request)", value)


def _bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, "true or false", value)
    return value


def _check_fields(body: Mapping[str, Any], known: set[str], unsupported: set[str], endpoint: str) -> None:
    for key, value in body.items():
        if key in unsupported:
            if value is not None:
                raise ServeError(f"{key} is not supported by this server", param=key)
        elif key not in known:
            raise ServeError(f"unknown field {key!r} for {endpoint}; accepted fields: {', '.join(sorted(known))}", param=key)


def model_name(body: Mapping[str, Any]) -> str:
    """The ``model`` field, checked: which engine is to answer."""
    value = body.get("model")
    if value is None:
        raise ServeError("model: this field is required (the name of a served model, see /v1/models)", param="model")
    if not isinstance(value, str) or not value:
        raise _bad("model", "a model name (a non-empty string)", value)
    return value


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    expected = f"a non-empty string or a list of up to {_MAX_STOPS} non-empty strings"
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > _MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise _bad("stop", expected, value)
    return tuple(stops)


def _stream(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage``."""
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not stream:
        raise ServeError("stream_options: only allowed when stream is true", param="stream_options")
    if not isinstance(options, dict):
        raise _bad("stream_options", 'an object like {"include_usage": true}', options)
    for key in options:
        if key != "include_usage":
            raise ServeError(f"stream_options: unknown field {key!r}; accepted: include_usage", param=f"stream_options.{key}")
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise _bad("stream_options.include_usage", "true or false", include_usage)
    return True, include_usage


def _sampling(body: Mapping[str, Any]) -> dict[str, Any]:
    """SamplingParams' fields but max_tokens and logprobs."""
    top_k = _int(body, "top_k", -1)
    return {
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        "top_k": 0 if top_k in (None, -1) else top_k,  # -1 is vLLM's spelling of off
        "min_p": _number(body, "min_p", 0.0, 0.0, 1.0),
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2.0, 2.0),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        "repetition_penalty": _number(body, "repetition_penalty", 1.0, 0.0, math.inf, lo_open=True),
        "stop": _stop(body),
        "seed": _int(body, "seed", 0, _SEED_LIMIT - 1),
        "ignore_eos": _bool(body, "ignore_eos"),
    }


def _max_tokens(given: int | None, prompt_len: int, max_model_len: int, prompt_field: str) -> int:
    if given is not None:
        return given  # the engine refuses a prompt plus max_tokens past max_model_len
    # OpenAI's default: as many tokens as the context has room for
    room = max_model_len - prompt_len
    if room < 1:
        raise ServeError(
            f"this model's maximum context length is {max_model_len} tokens, and the prompt has {prompt_len} tokens: no room to generate",
            param=prompt_field,
            code="context_length_exceeded",
        )
    return room


def _user(body: Mapping[str, Any]) -> None:
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad("user", "a string", user)


def _content(message: Mapping[str, Any], where: str) -> str:
    """A message's text: a string, or the texts of a list of text parts joined by newlines."""
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        return ""
    if isinstance(content, str):
        return content
    expected = 'a string or a list of {"type": "text", "text": ...} parts'
    if not isinstance(content, list):
        raise _bad(f"{where}.content", expected, content)
    texts = []
    for j, part in enumerate(content):
        if not (
            isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) and set(part) <= {"type", "text"}
        ):
            raise _bad(f"{where}.content[{j}]", '{"type": "text", "text": "..."} (only text parts are supported)', part)
        texts.append(part["text"])
    return "\n".join(texts)


def _messages(body: Mapping[str, Any]) -> list[dict[str, str]]:
    value = body.get("messages")
    if value is None:
        raise ServeError("messages: this field is required (a list of {role, content} objects)", param="messages")
    if not isinstance(value, list) or not value:
        raise _bad("messages", "a non-empty list of {role, content} objects", value)
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "an object with role and content", m)
        for key in m:
            if key not in _MESSAGE_KEYS:
                raise ServeError(f"{where}: unknown field {key!r}; accepted: {', '.join(sorted(_MESSAGE_KEYS))}", param=f"{where}.{key}")
        if m.get("role") not in _ROLES:
            raise _bad(f"{where}.role", f"one of {', '.join(_ROLES)}", m.get("role"))
        message = {"role": m["role"], "content": _content(m, where)}
        for key in ("name", "tool_call_id"):
            if m.get(key) is not None:
                if not isinstance(m[key], str):
                    raise _bad(f"{where}.{key}", "a string", m[key])
                message[key] = m[key]
        out.append(message)
    return out


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    try:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        # the template writes BOS itself where the model wants one
        ids: list[int] = tokenizer.encode(rendered, add_special_tokens=False)
    except TokenizerError as exc:  # a template's raise_exception (roles must alternate...) or no template at all
        raise ServeError(f"messages: {exc}", param="messages") from None
    if not ids:
        raise ServeError("messages: the model's chat template made an empty prompt of them", param="messages")
    return ids


def parse_chat(body: Mapping[str, Any], tokenizer: Any, max_model_len: int) -> Request:
    """A ``/v1/chat/completions`` body: messages rendered with the model's chat template."""
    _check_fields(body, _CHAT_FIELDS, _CHAT_UNSUPPORTED, "/v1/chat/completions")
    model = model_name(body)
    messages = _messages(body)
    _one(body, "n", "choice")
    stream, include_usage = _stream(body)
    _user(body)
    sampling = _sampling(body)
    max_tokens = _int(body, "max_tokens", 1)
    alias = _int(body, "max_completion_tokens", 1)
    if max_tokens is not None and alias is not None and alias != max_tokens:
        raise ServeError(
            f"max_completion_tokens ({alias}) and max_tokens ({max_tokens}) disagree: send one of them", param="max_completion_tokens"
        )
    want_logprobs = _bool(body, "logprobs")
    top = _int(body, "top_logprobs", 0, _MAX_CHAT_LOGPROBS)
    if top and not want_logprobs:
        raise ServeError("top_logprobs: only allowed when logprobs is true", param="top_logprobs")
    ids = _chat_ids(tokenizer, messages)
    params = SamplingParams(
        max_tokens=_max_tokens(alias or max_tokens, len(ids), max_model_len, "messages"),
        logprobs=(top or 0) if want_logprobs else None,
        **sampling,
    )
    return Request(model, ids, params, stream, include_usage)


def _token_ids(value: list[Any], vocab_size: int) -> list[int]:
    if not value:
        raise _bad("prompt", "a non-empty list of token ids", value)
    for tid in value:
        if not _is_int(tid):
            raise _bad("prompt", "token ids (integers)", tid)
        if not 0 <= tid < vocab_size:
            raise ServeError(f"prompt: token id {tid} is outside the vocabulary (ids 0 to {vocab_size - 1})", param="prompt")
    return list(value)


def _prompt_ids(body: Mapping[str, Any], tokenizer: Any) -> list[int]:
    value = body.get("prompt")
    expected = "a string, a list of token ids, or a list holding one of those"
    if value is None:
        raise ServeError(f"prompt: this field is required ({expected})", param="prompt")
    if isinstance(value, list) and value and isinstance(value[0], (str, list)):
        if len(value) != 1:
            raise ServeError(f"prompt: one prompt per request (got a batch of {len(value)}); send each as its own request", param="prompt")
        value = value[0]
    if isinstance(value, str):
        ids: list[int] = tokenizer.encode(value)
        if not ids:
            raise ServeError("prompt: the prompt is empty", param="prompt")
        return ids
    if isinstance(value, list):
        return _token_ids(value, tokenizer.vocab_size)
    raise _bad("prompt", expected, value)


def parse_completion(body: Mapping[str, Any], tokenizer: Any, max_model_len: int) -> Request:
    """A ``/v1/completions`` body: a prompt string encoded as the model wants (BOS where it has one), or token ids."""
    _check_fields(body, _COMPLETION_FIELDS, _COMPLETION_UNSUPPORTED, "/v1/completions")
    model = model_name(body)
    if _bool(body, "echo"):
        raise ServeError("echo is not supported by this server", param="echo")
    _one(body, "n", "choice")
    _one(body, "best_of", "candidate")
    stream, include_usage = _stream(body)
    _user(body)
    sampling = _sampling(body)
    max_tokens = _int(body, "max_tokens", 1)
    logprobs = _int(body, "logprobs", 0, _MAX_COMPLETION_LOGPROBS)
    ids = _prompt_ids(body, tokenizer)
    params = SamplingParams(max_tokens=_max_tokens(max_tokens, len(ids), max_model_len, "prompt"), logprobs=logprobs, **sampling)
    return Request(model, ids, params, stream, include_usage)
