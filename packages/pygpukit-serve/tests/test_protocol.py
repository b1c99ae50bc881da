"""Request bodies checked by protocol.py, without a server."""

from __future__ import annotations

import json
import math

import pytest
import tokenizers
from serve_fakes import tiny_tokenizer
from tokenizer_testing import byte_fallback_json, byte_level_json

from pygpukit_llm import Tokenizer
from pygpukit_serve.protocol import Request, parse_chat, parse_completion, token_text
from pygpukit_serve.types import SamplingParams, ServeError

MAX_LEN = 32
USER = [{"role": "user", "content": "hello world"}]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def chat(tok, **fields) -> Request:
    return parse_chat({"model": "m", "messages": USER, **fields}, tok, MAX_LEN)


def completion(tok, **fields) -> Request:
    return parse_completion({"model": "m", "prompt": "hello", **fields}, tok, MAX_LEN)


def refused(parse, tok, param: str, *words: str, **fields) -> ServeError:
    with pytest.raises(ServeError) as info:
        parse(tok, **fields)
    err = info.value
    assert (err.status, err.kind, err.param) == (400, "invalid_request_error", param), err.message
    for word in words:
        assert word in err.message, err.message
    return err


def chat_ids(tok, messages) -> list[int]:
    return tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True), add_special_tokens=False)


def test_chat_defaults(tok):
    req = chat(tok)
    ids = chat_ids(tok, USER)
    assert req == Request("m", ids, SamplingParams(max_tokens=MAX_LEN - len(ids)), stream=False, include_usage=False)


def test_chat_messages(tok):
    messages = [
        {"role": "system", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "the"}, {"type": "text", "text": "dog"}], "name": "ann"},
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "world", "tool_call_id": "c1"},
    ]
    want = [
        {"role": "system", "content": "hello"},
        {"role": "user", "content": "the\ndog", "name": "ann"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "world", "tool_call_id": "c1"},
    ]
    assert chat(tok, messages=messages).prompt_ids == chat_ids(tok, want)


def test_all_fields(tok):
    req = chat(
        tok,
        max_tokens=5,
        max_completion_tokens=5,
        temperature=0,
        top_p=0.25,
        top_k=40,
        min_p=0.5,
        presence_penalty=-2,
        frequency_penalty=2,
        repetition_penalty=1.5,
        stop=["a", "b"],
        seed=2**64 - 1,
        logprobs=True,
        top_logprobs=20,
        ignore_eos=True,
        stream=True,
        stream_options={"include_usage": True},
        n=1,
        user="u",
        tools=None,  # null: as if absent
    )
    assert req.params == SamplingParams(
        max_tokens=5,
        temperature=0.0,
        top_p=0.25,
        top_k=40,
        min_p=0.5,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        repetition_penalty=1.5,
        stop=("a", "b"),
        seed=2**64 - 1,
        logprobs=20,
        ignore_eos=True,
    )
    assert (req.stream, req.include_usage) == (True, True)
    assert isinstance(req.params.temperature, float)
    assert chat(tok, stop="x", top_k=-1, max_completion_tokens=3, logprobs=True).params == SamplingParams(
        max_tokens=3, stop=("x",), logprobs=0
    )
    assert chat(tok, stream=True).include_usage is False
    assert chat(tok, logprobs=False, top_logprobs=0).params.logprobs is None


def test_completion_prompts(tok):
    ids = tok.encode("hello world")
    for prompt in ("hello world", ids, ["hello world"], [ids]):
        req = completion(tok, prompt=prompt)
        assert req.prompt_ids == ids and req.params == SamplingParams(max_tokens=MAX_LEN - len(ids))
    req = completion(tok, logprobs=5, echo=False, best_of=1, max_tokens=4)
    assert req.params == SamplingParams(max_tokens=4, logprobs=5)
    assert completion(tok, logprobs=0).params.logprobs == 0


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"temperature": 2.5}, "temperature", ["from 0 to 2", "2.5"]),
        ({"temperature": True}, "temperature", ["number", "true"]),
        ({"temperature": "1"}, "temperature", ['"1"']),
        ({"temperature": math.nan}, "temperature", ["NaN"]),
        ({"top_p": 0}, "top_p", ["above 0 to 1"]),
        ({"top_p": 1.01}, "top_p", []),
        ({"top_k": -2}, "top_k", ["integer >= -1"]),
        ({"top_k": 1.5}, "top_k", []),
        ({"min_p": -0.1}, "min_p", []),
        ({"presence_penalty": 2.1}, "presence_penalty", ["from -2 to 2"]),
        ({"frequency_penalty": -3}, "frequency_penalty", []),
        ({"repetition_penalty": 0}, "repetition_penalty", ["above 0"]),
        ({"repetition_penalty": math.inf}, "repetition_penalty", ["Infinity"]),
        ({"repetition_penalty": 10**400}, "repetition_penalty", []),
        ({"max_tokens": 0}, "max_tokens", ["integer >= 1"]),
        ({"max_tokens": 2.0}, "max_tokens", []),
        ({"max_completion_tokens": 3, "max_tokens": 4}, "max_completion_tokens", ["disagree"]),
        ({"stop": ""}, "stop", ["non-empty"]),
        ({"stop": ["a", ""]}, "stop", []),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", ["up to 4"]),
        ({"stop": 3}, "stop", []),
        ({"seed": -1}, "seed", []),
        ({"seed": 2**64}, "seed", []),
        ({"n": 2}, "n", ["one choice"]),
        ({"n": True}, "n", []),
        ({"stream": 1}, "stream", ["true or false"]),
        ({"stream_options": {"include_usage": True}}, "stream_options", ["only allowed when stream is true"]),
        ({"stream": True, "stream_options": []}, "stream_options", []),
        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage", []),
        ({"stream": True, "stream_options": {"other": True}}, "stream_options.other", ["include_usage"]),
        ({"logprobs": 1}, "logprobs", ["true or false"]),
        ({"top_logprobs": 2}, "top_logprobs", ["logprobs is true"]),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", ["from 0 to 20"]),
        ({"user": 5}, "user", ["string"]),
        ({"ignore_eos": "yes"}, "ignore_eos", []),
        ({"logit_bias": {"1": 5}}, "logit_bias", ["not supported"]),
        ({"response_format": {"type": "json_object"}}, "response_format", ["not supported"]),
        ({"echo": True}, "echo", ["unknown field"]),
        ({"frobnicate": 1}, "frobnicate", ["unknown field 'frobnicate'", "temperature"]),
        ({"model": None}, "model", ["required"]),
        ({"model": 3}, "model", ["non-empty string"]),
        ({"messages": None}, "messages", ["required"]),
        ({"messages": []}, "messages", ["non-empty list"]),
        ({"messages": ["hi"]}, "messages[0]", ["role and content"]),
        ({"messages": [{"role": "developer", "content": "x"}]}, "messages[0].role", ["system, user, assistant, tool"]),
        ({"messages": [{"role": "user"}]}, "messages[0].content", ["a string or a list"]),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", []),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages[0].content[0]", ["only text"]),
        ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls", ["unknown field"]),
        ({"messages": [{"role": "user", "content": "x", "name": 1}]}, "messages[0].name", []),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages", ["cannot start with a tool message"]),
    ],
)
def test_chat_refusals(tok, fields, param, words):
    refused(chat, tok, param, *words, **fields)


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"echo": True}, "echo", ["not supported"]),
        ({"echo": "no"}, "echo", []),
        ({"best_of": 2}, "best_of", ["one candidate"]),
        ({"suffix": "x"}, "suffix", ["not supported"]),
        ({"logprobs": True}, "logprobs", ["integer from 0 to 5"]),
        ({"logprobs": 6}, "logprobs", []),
        ({"top_logprobs": 1}, "top_logprobs", ["unknown field"]),
        ({"messages": USER}, "messages", ["unknown field"]),
        ({"prompt": None}, "prompt", ["required"]),
        ({"prompt": 7}, "prompt", ["a string, a list of token ids"]),
        ({"prompt": {"text": "x"}}, "prompt", []),
        ({"prompt": []}, "prompt", ["non-empty"]),
        ({"prompt": [[]]}, "prompt", ["non-empty"]),
        ({"prompt": ""}, "prompt", ["empty"]),
        ({"prompt": ["a", "b"]}, "prompt", ["batch of 2"]),
        ({"prompt": [[1], [2]]}, "prompt", ["batch of 2"]),
        ({"prompt": [1, True]}, "prompt", ["token ids"]),
        ({"prompt": [1, 2.0]}, "prompt", []),
        ({"prompt": [1, -1]}, "prompt", ["-1", "outside the vocabulary"]),
        ({"prompt": [1, 10**6]}, "prompt", ["1000000"]),
        ({"prompt": [1, "a"]}, "prompt", []),
    ],
)
def test_completion_refusals(tok, fields, param, words):
    refused(completion, tok, param, *words, **fields)


def test_empty_chat_prompt():
    tok = tiny_tokenizer()
    tok.chat_templates = {"default": "{% for m in messages %}{% endfor %}"}
    refused(chat, tok, "messages", "empty prompt")


def test_vocabulary_edge(tok):
    assert completion(tok, prompt=[0, tok.vocab_size - 1]).prompt_ids == [0, tok.vocab_size - 1]
    refused(completion, tok, "prompt", str(tok.vocab_size), prompt=[tok.vocab_size])


def test_context_room(tok):
    # no max_tokens: whatever room the context has, at least one token
    ids = tok.encode(" ".join(["hello"] * (MAX_LEN - 1)))
    assert completion(tok, prompt=ids).params.max_tokens == 1
    err = refused(completion, tok, "prompt", str(MAX_LEN), str(MAX_LEN), prompt=ids + [ids[0]])
    assert err.code == "context_length_exceeded"
    # with max_tokens the engine decides
    assert completion(tok, prompt=ids + [ids[0]], max_tokens=9).params.max_tokens == 9


def test_numbers_from_json(tok):
    # JSON that Python's json module reads: NaN and Infinity literals, large ints
    body = json.loads('{"model": "m", "prompt": "hello", "temperature": NaN}')
    with pytest.raises(ServeError, match="temperature"):
        parse_completion(body, tok, MAX_LEN)
    assert completion(tok, max_tokens=10**30).params.max_tokens == 10**30  # the engine refuses it against its context


def test_token_text_in_context():
    # SentencePiece-style: a word's leading space is dropped when its token is decoded alone
    tok = Tokenizer(tokenizers.Tokenizer.from_str(byte_fallback_json("metaspace")))
    hello, world = tok.encode("hello world", add_special_tokens=False)
    assert tok.decode([world]) == "world"
    assert token_text(tok, hello, world) == " world"
    # byte-level BPE with a character split across two tokens: no clean boundary, the token alone
    tok = Tokenizer(tokenizers.Tokenizer.from_str(byte_level_json()))
    hello, head, tail = tok.encode("hello \u65e5\u672c\u8a9e", add_special_tokens=False)
    assert tok.decode([hello, head]) == "hello \ufffd" and tok.decode([head, tail]) == " \u65e5\u672c\u8a9e"
    assert token_text(tok, hello, head) == " \ufffd"
    assert token_text(tok, head, tail) == tok.decode([tail])
