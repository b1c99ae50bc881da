"""The HTTP layer on a real uvicorn server in a thread, driven by the official
``openai`` client and by httpx, in front of fake engines (serve_fakes.py)."""

from __future__ import annotations

import json
import logging
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from serve_fakes import REPLY_TEXT, WORDS, FakeEngine, ServerThread, tiny_tokenizer

from pygpukit_serve.api import create_app
from pygpukit_serve.types import SamplingParams

TIMEOUT = 10
USER = [{"role": "user", "content": "hello world"}]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def fakes(tok):
    return {"tiny": FakeEngine("tiny", tok, max_model_len=64), "small": FakeEngine("small", tok, max_model_len=16)}


@pytest.fixture(scope="module")
def server(fakes):
    srv = ServerThread(create_app(fakes, served_names={"tiny-alias": "tiny"}))
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def fresh(fakes):
    for fake in fakes.values():
        fake.reset()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def post(server: ServerThread, path: str, body: Any = None, content: bytes | None = None) -> httpx.Response:
    return httpx.post(server.url + path, json=body, content=content, timeout=TIMEOUT)


def events(response: httpx.Response) -> list[Any]:
    """A server-sent event stream's data payloads, "[DONE]" as is, the others parsed."""
    out = []
    for line in response.iter_lines():
        if line:
            assert line.startswith("data: "), line
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def only_request(fake: FakeEngine) -> tuple[str, list[int], SamplingParams]:
    ((rid, (ids, params)),) = fake.requests.items()
    return rid, ids, params


def chat_ids(tok, messages) -> list[int]:
    return tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True), add_special_tokens=False)


def assert_error(response: httpx.Response, status: int, kind: str, param: str | None, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    err = body["error"]
    assert err["type"] == kind and err["param"] == param, err
    for word in words:
        assert word in err["message"], err
    return err


# ---- chat


def test_chat(client, fakes, tok):
    messages = [
        {"role": "system", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "the quick"}, {"type": "text", "text": "dog"}]},
    ]
    r = client.chat.completions.create(model="tiny", messages=messages)
    rid, ids, params = only_request(fakes["tiny"])
    assert ids == chat_ids(tok, [{"role": "system", "content": "hello"}, {"role": "user", "content": "the quick\ndog"}])
    # OpenAI's defaults, and max_tokens: the room left in the context
    assert params == SamplingParams(max_tokens=64 - len(ids))
    assert (r.id, r.object, r.model) == ("chatcmpl-" + rid, "chat.completion", "tiny")
    (choice,) = r.choices
    assert (choice.index, choice.message.role, choice.message.content) == (0, "assistant", REPLY_TEXT)
    assert (choice.finish_reason, choice.logprobs) == ("stop", None)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(ids), 7, len(ids) + 7)  # 6 words + EOS
    assert r.usage.prompt_tokens_details.cached_tokens == len(ids) // 2
    assert fakes["tiny"].aborted == []  # a request that ran to its end is not aborted


def test_chat_sampling_params_reach_the_engine(client, fakes):
    r = client.chat.completions.create(
        model="tiny-alias",
        messages=USER,
        max_completion_tokens=3,
        temperature=0,
        top_p=0.5,
        seed=7,
        stop="dog",
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        user="someone",
        extra_body={"top_k": -1, "min_p": 0.1, "repetition_penalty": 1.2, "ignore_eos": True},
    )
    _, _, params = only_request(fakes["tiny"])
    assert params == SamplingParams(
        max_tokens=3,
        temperature=0.0,
        top_p=0.5,
        top_k=0,
        min_p=0.1,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.2,
        stop=("dog",),
        seed=7,
        ignore_eos=True,
    )
    assert r.model == "tiny-alias"  # the name the request used
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("the quick brown", "length")


@pytest.mark.parametrize(
    ("extra", "text", "finish", "tokens"),
    [
        ({"stop": ["caf\u00e9", "never"]}, "the quick brown ", "stop", 4),
        ({"max_tokens": 8, "extra_body": {"ignore_eos": True}}, REPLY_TEXT + " the quick", "length", 8),
    ],
)
def test_chat_finish_reasons(client, extra, text, finish, tokens):
    r = client.chat.completions.create(model="tiny", messages=USER, **extra)
    assert (r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens) == (text, finish, tokens)


def test_chat_stream_with_usage(client, fakes):
    chunks = list(client.chat.completions.create(model="tiny", messages=USER, stream=True, stream_options={"include_usage": True}))
    rid, ids, _ = only_request(fakes["tiny"])
    assert {c.id for c in chunks} == {"chatcmpl-" + rid} and {c.object for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in chunks[1:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == REPLY_TEXT
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-2:] == [None, "stop"]
    *body, last = chunks
    assert last.choices == [] and (last.usage.prompt_tokens, last.usage.completion_tokens) == (len(ids), 7)
    assert last.usage.prompt_tokens_details.cached_tokens == len(ids) // 2
    assert all(c.usage is None for c in body)


def test_chat_stream_raw_without_usage(server):
    with httpx.stream("POST", server.url + "/v1/chat/completions", json={"model": "tiny", "messages": USER, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        got = events(r)
    assert got[-1] == "[DONE]"
    chunks = got[:-1]
    assert all("usage" not in c for c in chunks)
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="tiny", messages=USER, logprobs=True, top_logprobs=2, max_tokens=4)
    content = r.choices[0].logprobs.content
    assert [c.token for c in content] == ["the", " quick", " brown", " caf\u00e9"]
    assert [c.logprob for c in content] == [-0.5, -1.0, -1.5, -2.0]
    assert content[3].bytes == list(" caf\u00e9".encode())
    # the fake's alternatives: the chosen token, then WORDS[i], each as it reads after the token before
    assert [(t.token, t.logprob) for t in content[1].top_logprobs] == [(" quick", -1.0), (" " + WORDS[1], -2.0)]
    assert [t.bytes for t in content[0].top_logprobs] == [list(b" the"), list((" " + WORDS[0]).encode())]
    streamed = client.chat.completions.create(model="tiny", messages=USER, logprobs=True, top_logprobs=2, max_tokens=4, stream=True)
    tokens = [t for c in streamed if c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert tokens == content
    r0 = client.chat.completions.create(model="tiny", messages=USER, logprobs=True, max_tokens=2)
    assert [c.top_logprobs for c in r0.choices[0].logprobs.content] == [[], []]


# ---- completions


@pytest.mark.parametrize("form", ["text", "ids", "one text", "one id list"])
def test_completion_prompt_forms(client, fakes, tok, form):
    ids = tok.encode("hello world")
    prompt = {"text": "hello world", "ids": ids, "one text": ["hello world"], "one id list": [ids]}[form]
    r = client.completions.create(model="tiny", prompt=prompt)
    rid, got, params = only_request(fakes["tiny"])
    assert got == ids and params.max_tokens == 64 - len(ids)
    assert (r.id, r.object, r.model) == ("cmpl-" + rid, "text_completion", "tiny")
    assert (r.choices[0].text, r.choices[0].finish_reason, r.choices[0].logprobs) == (REPLY_TEXT, "stop", None)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(ids), 7, len(ids) + 7)


def test_completion_logprobs_stream_and_not(client):
    whole = client.completions.create(model="tiny", prompt="hello", logprobs=2, max_tokens=4)
    lp = whole.choices[0].logprobs
    assert lp.tokens == ["the", " quick", " brown", " caf\u00e9"]
    assert lp.token_logprobs == [-0.5, -1.0, -1.5, -2.0]
    assert lp.text_offset == [0, 3, 9, 15]
    # the sampled token is always among the alternatives
    assert lp.top_logprobs[1] == {" quick": -1.0, " " + WORDS[1]: -2.0}
    assert lp.top_logprobs[0] == {" the": -0.5, " " + WORDS[0]: -1.5, "the": -0.5}
    chunks = list(
        client.completions.create(
            model="tiny", prompt="hello", logprobs=2, max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
    )
    *body, last = chunks
    assert "".join(c.choices[0].text for c in body) == "the quick brown caf\u00e9"
    assert body[-1].choices[0].finish_reason == "length" and last.choices == [] and last.usage.completion_tokens == 4
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert [x for c in body for x in getattr(c.choices[0].logprobs, key)] == getattr(lp, key), key


# ---- other routes


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["tiny", "small", "tiny-alias"]
    data = httpx.get(server.url + "/v1/models").json()
    assert data["object"] == "list"
    assert [(m["object"], m["owned_by"], m["max_model_len"]) for m in data["data"]] == [("model", "pygpukit", n) for n in (64, 16, 64)]
    r = httpx.get(server.url + "/health")
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\} (\S+)$')


def scrape(server) -> dict[tuple[str, str], float]:
    r = httpx.get(server.url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = {}
    for line in r.text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP pygpukit_serve_\w+ .+|TYPE pygpukit_serve_\w+ (gauge|counter|histogram))", line), line
            continue
        m = _SAMPLE.match(line)
        assert m, line
        samples[m[1], m[2]] = float(m[3])
    return samples


def test_metrics(server, client):
    before = scrape(server)
    client.completions.create(model="small", prompt="hello world", max_tokens=2)
    after = scrape(server)
    delta = lambda name, labels='model="small"': after[name, labels] - before.get((name, labels), 0.0)
    assert delta("pygpukit_serve_prompt_tokens_total") == 2
    assert delta("pygpukit_serve_generation_tokens_total") == 2
    assert delta("pygpukit_serve_requests_finished_total", 'model="small",finish_reason="length"') == 1
    assert delta("pygpukit_serve_e2e_request_latency_seconds_count") == 1
    assert (
        after["pygpukit_serve_e2e_request_latency_seconds_bucket", 'model="small",le="+Inf"']
        == after["pygpukit_serve_e2e_request_latency_seconds_count", 'model="small"']
    )
    assert {labels for name, labels in after if name == "pygpukit_serve_requests_running"} == {'model="tiny"', 'model="small"'}


def test_metrics_failure_is_a_500(server, fakes):
    fakes["small"].stats_error = RuntimeError("stats broke")
    assert_error(httpx.get(server.url + "/metrics"), 500, "server_error", None, "GET /metrics")
    assert httpx.get(server.url + "/health").status_code == 200


def test_create_app_checks_its_names(fakes):
    with pytest.raises(ValueError, match="at least one engine"):
        create_app({})
    with pytest.raises(ValueError, match="'nope', which is not an engine"):
        create_app(fakes, served_names={"alias": "nope"})
    with pytest.raises(ValueError, match="'small' is already the name of another engine"):
        create_app(fakes, served_names={"small": "tiny"})


# ---- errors


def test_malformed_and_non_object_bodies(server, fakes):
    assert_error(post(server, "/v1/chat/completions", content=b'{"model": "tiny",'), 400, "invalid_request_error", None, "not valid JSON")
    assert_error(post(server, "/v1/completions", content=b"[1, 2]"), 400, "invalid_request_error", None, "JSON object", "list")
    assert_error(post(server, "/v1/completions", content=b"\xff\xfe\x00"), 400, "invalid_request_error", None, "not valid JSON")
    assert fakes["tiny"].requests == {}


def test_unknown_model_and_route(server):
    err = assert_error(post(server, "/v1/chat/completions", {"model": "nope", "messages": USER}), 404, "not_found_error", "model", "'nope'")
    assert "tiny, small, tiny-alias" in err["message"] and err["code"] == "model_not_found"
    assert_error(httpx.get(server.url + "/v1/nothing"), 404, "not_found_error", None, "/v1/nothing")
    r = httpx.get(server.url + "/v1/chat/completions")
    assert_error(r, 405, "invalid_request_error", None, "GET /v1/chat/completions")
    assert r.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("path", "body", "param", "words"),
    [
        ("/v1/chat/completions", {"messages": USER}, "model", ["required"]),
        ("/v1/chat/completions", {"model": "tiny"}, "messages", ["required"]),
        ("/v1/completions", {"model": "tiny"}, "prompt", ["required"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": USER, "temperature": "hot"}, "temperature", ["number", '"hot"']),
        ("/v1/chat/completions", {"model": "tiny", "messages": USER, "max_tokens": True}, "max_tokens", ["integer", "true"]),
        ("/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": -1}, "max_tokens", ["integer >= 1", "-1"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": USER, "n": 2}, "n", ["1"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": USER, "best_of": 1}, "best_of", ["unknown field"]),
        ("/v1/completions", {"model": "tiny", "prompt": "hello", "echo": True}, "echo", ["not supported"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": USER, "tools": []}, "tools", ["not supported"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": "hello"}, "messages", ["list"]),
        ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", ["robot"]),
        (
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "tool", "content": "x"}]},
            "messages",
            ["cannot start with a tool"],
        ),
        ("/v1/completions", {"model": "tiny", "prompt": [3, 10_000]}, "prompt", ["10000", "vocabulary"]),
        ("/v1/completions", {"model": "tiny", "prompt": ["hello", "world"]}, "prompt", ["one prompt"]),
        ("/v1/completions", {"model": "tiny", "prompt": "hello", "stream_options": {"include_usage": True}}, "stream_options", ["stream"]),
    ],
)
def test_bad_requests(server, fakes, path, body, param, words):
    assert_error(post(server, path, body), 400, "invalid_request_error", param, *words)
    assert all(f.requests == {} for f in fakes.values())


def test_prompt_too_long(server, fakes, tok):
    # max_tokens given: the engine refuses the prompt plus max_tokens past its context
    body = {"model": "small", "messages": USER, "max_tokens": 15}
    err = assert_error(post(server, "/v1/chat/completions", body), 400, "invalid_request_error", "max_tokens", "16", "15")
    assert str(len(chat_ids(tok, USER))) in err["message"]
    # no max_tokens: no room left for even one token
    long_prompt = " ".join(["hello"] * 16)
    err = assert_error(
        post(server, "/v1/completions", {"model": "small", "prompt": long_prompt}), 400, "invalid_request_error", "prompt", "16"
    )
    assert err["code"] == "context_length_exceeded"
    assert fakes["small"].requests == {}


@pytest.mark.parametrize("stream", [False, True])
def test_queue_full_is_429(server, stream):
    r = post(server, "/v1/completions", {"model": "tiny", "prompt": "busy", "stream": stream})
    assert_error(r, 429, "rate_limit_exceeded", None, "retry")


def test_500_leaves_other_requests_alone(server, fakes, caplog):
    fake = fakes["tiny"]
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(post, server, "/v1/completions", {"model": "tiny", "prompt": "hold"})
        assert fake.held.wait(TIMEOUT)
        # an engine error before the first Output: a stream too still gets its status
        for stream in (False, True):
            err = assert_error(
                post(server, "/v1/completions", {"model": "tiny", "prompt": "boom", "stream": stream}), 500, "server_error", None
            )
            boom = [rid for rid, (ids, _) in fake.requests.items() if "boom" in fake.tokenizer.decode(ids)]
            assert boom[-1] in err["message"]
        fake.release()
        ok = held.result(timeout=TIMEOUT)
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == REPLY_TEXT
    failures = [r for r in caplog.records if r.name == "pygpukit_serve" and r.levelno == logging.ERROR]
    assert sorted(r.args[0] for r in failures) == sorted(boom)
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in failures)


def test_error_mid_stream_is_an_event(server, fakes):
    with httpx.stream("POST", server.url + "/v1/completions", json={"model": "tiny", "prompt": "crash", "stream": True}) as r:
        assert r.status_code == 200
        got = events(r)
    assert [c["choices"][0]["text"] for c in got[:2]] == ["the", " quick"]
    assert got[2]["error"]["type"] == "server_error" and set(got[2]) == {"error"}
    assert got[3:] == ["[DONE]"]
    # not streamed: a plain 500
    assert_error(post(server, "/v1/completions", {"model": "tiny", "prompt": "crash"}), 500, "server_error", None)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_disconnect_mid_stream_aborts(server, fakes, path):
    fake = fakes["tiny"]
    body = {"model": "tiny", "prompt": "hold", "stream": True}
    if path.endswith("chat/completions"):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hold"}], "stream": True}
    with httpx.Client(timeout=TIMEOUT) as http, http.stream("POST", server.url + path, json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: httpx drops the connection when its line iterator is collected
        first = json.loads(next(line for line in lines if line)[len("data: ") :])
        assert fake.held.wait(TIMEOUT)
        assert not fake.aborted_event.is_set()
    # leaving the block dropped the connection
    assert fake.aborted_event.wait(TIMEOUT)
    rid = first["id"].split("-", 1)[1]
    assert fake.aborted == [rid] and list(fake.requests) == [rid]


@pytest.mark.parametrize(("stream", "marker"), [(False, "hold"), (True, "stall")])
def test_disconnect_before_any_answer_aborts(server, fakes, stream, marker):
    fake = fakes["tiny"]
    body = json.dumps({"model": "tiny", "prompt": marker, "stream": stream}).encode()
    head = f"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as s:
        s.sendall(head.encode() + body)
        assert fake.held.wait(TIMEOUT)
        assert not fake.aborted_event.is_set()
    assert fake.aborted_event.wait(TIMEOUT)
    assert fake.aborted == list(fake.requests) and len(fake.aborted) == 1
