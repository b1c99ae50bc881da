"""The whole server on the tiny model: the real engine behind the real app on
uvicorn (127.0.0.1, a free port), driven by the openai client; and
``pygpukit serve`` as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time

import httpx
import openai
import pytest
from serve_fakes import ServerThread
from serve_testing import greedy

from pygpukit_serve.api import create_app
from pygpukit_serve.cli import split_argv
from pygpukit_serve.engine import Engine, EngineConfig

TIMEOUT = 60


@pytest.fixture(scope="module")
def engine(model):
    e = Engine(model, "tiny", EngineConfig(max_model_len=256, max_num_seqs=8, block_size=16))
    e.start()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def server(engine):
    srv = ServerThread(create_app({"tiny": engine}))
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def chat_ids(model, messages):
    return model.tokenizer.encode(model.tokenizer.apply_chat_template(messages, add_generation_prompt=True), add_special_tokens=False)


def metric(server, name):
    text = httpx.get(server.url + "/metrics", timeout=TIMEOUT).text
    m = re.search(rf'^pygpukit_serve_{name}{{model="tiny"(?:,[^}}]*)?}} (\S+)$', text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


GREEDY = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}


def test_chat_greedy_equals_generate_and_usage(client, model):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "name three colours"}]
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=9, **GREEDY)
    ids = chat_ids(model, messages)
    assert r.choices[0].message.content == model.tokenizer.decode(greedy(model, ids, 9))
    assert r.choices[0].finish_reason == "length" and r.model == "tiny"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (len(ids), 9, len(ids) + 9)


def test_completion_stream_with_usage(client, model):
    prompt = "once upon a time"
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=7, stream=True, stream_options={"include_usage": True},
                                            **GREEDY))  # fmt: skip
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    ids = model.tokenizer.encode(prompt, add_special_tokens=False)
    assert text == model.tokenizer.decode(greedy(model, ids, 7))
    assert chunks[-1].usage.completion_tokens == 7 and chunks[-1].usage.prompt_tokens == len(ids) and not chunks[-1].choices
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_stop_string_and_seeded_sampling(client, model):
    prompt = "the rain in spain"
    ids = model.tokenizer.encode(prompt, add_special_tokens=False)
    full = model.tokenizer.decode(greedy(model, ids, 12))
    stop = full[5:8]
    r = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, stop=[stop], **GREEDY)
    assert r.choices[0].text == full[: full.index(stop)] and r.choices[0].finish_reason == "stop"
    seeded = {"model": "tiny", "prompt": prompt, "max_tokens": 10, "temperature": 1.0, "seed": 4242, "extra_body": {"ignore_eos": True}}
    a, b = client.completions.create(**seeded), client.completions.create(**seeded)
    assert a.choices[0].text == b.choices[0].text


def test_32_concurrent_streams_equal_each_alone(server, model):
    prompts = [f"request number {i} says " + "ab" * (i % 5) for i in range(32)]

    async def one(c, p):
        stream = await c.completions.create(model="tiny", prompt=p, max_tokens=6, stream=True, **GREEDY)
        return "".join([ch.choices[0].text async for ch in stream if ch.choices])

    async def main():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT) as c:
            return await asyncio.gather(*(one(c, p) for p in prompts))

    got = asyncio.run(main())
    for p, text in zip(prompts, got):
        assert text == model.tokenizer.decode(greedy(model, model.tokenizer.encode(p, add_special_tokens=False), 6))


def test_a_client_that_goes_away_frees_its_blocks(server, engine):
    aborted = engine.stats().requests_finished.get("abort", 0)
    body = {"model": "tiny", "prompt": "tell me a very long story", "max_tokens": 200, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=TIMEOUT) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # one chunk, then hang up
    deadline = time.monotonic() + TIMEOUT
    while engine.stats().requests_finished.get("abort", 0) == aborted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.stats().requests_finished.get("abort", 0) == aborted + 1
    while metric(server, "kv_blocks_used") and time.monotonic() < deadline:  # the next step updates the gauge
        time.sleep(0.02)
    assert metric(server, "kv_blocks_used") == 0 and metric(server, "requests_running") == 0


def test_prefix_cache_hit_in_metrics_and_same_tokens(client, server, model):
    system = {"role": "system", "content": "You answer questions about the weather in one short sentence. " * 2}
    hits = metric(server, "prefix_cache_hits_total")
    for question in ("is it raining?", "will it snow?"):
        messages = [system, {"role": "user", "content": question}]
        r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=5, **GREEDY)
        assert r.choices[0].message.content == model.tokenizer.decode(greedy(model, chat_ids(model, messages), 5))
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached >= 16 and cached % 16 == 0
    assert metric(server, "prefix_cache_hits_total") - hits >= cached


def test_bad_requests_get_openai_errors(client):
    with pytest.raises(openai.BadRequestError, match=r"context") as e:
        client.completions.create(model="tiny", prompt="hi", max_tokens=1000)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError, match="nope"):
        client.completions.create(model="nope", prompt="hi", max_tokens=1)


def test_split_argv_groups_options_by_model():
    glob, models = split_argv(["--port", "9", "--model", "a", "--qos", "guaranteed", "--host=0.0.0.0", "--model", "b", "--name", "x"])
    assert glob == ["--port", "9", "--host=0.0.0.0"] and models == [
        ["--model", "a", "--qos", "guaranteed"],
        ["--model", "b", "--name", "x"],
    ]


def _serve(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "pygpukit", "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def test_pygpukit_serve_command_with_two_models(model_path, tmp_path, model):
    """Two models in one process, each in its own partition and tier, as ``pygpukit top`` sees them."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYGPUKIT_RUN_DIR": str(tmp_path)}
    common = ["--dtype", "float32", "--max-model-len", "128"]
    proc = _serve("--port", str(port), "--model", str(model_path), "--name", "qwen", *common, "--qos", "guaranteed", "--memory", "1GiB",
                  "--model", str(model_path), "--name", "other", *common, "--qos", "best_effort", env=env)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
        assert [m.id for m in c.models.list().data] == ["qwen", "other"]
        want = model.tokenizer.decode(greedy(model, model.tokenizer.encode("hello there", add_special_tokens=False), 4))
        for name in ("qwen", "other"):
            assert c.completions.create(model=name, prompt="hello there", max_tokens=4, **GREEDY).choices[0].text == want
        published, tasks = tmp_path / f"{proc.pid}.json", {}
        while len(tasks) < 2 and time.monotonic() < deadline:  # the scheduler publishes its snapshot once a second
            time.sleep(0.1)
            if published.exists():
                snap = json.loads(published.read_text())["snapshot"]
                tasks = {t["name"]: (t["qos"], t["partition"], t["state"]) for t in snap["tasks"]}
        assert tasks["serve:qwen"] == ("guaranteed", "serve:qwen", "running")
        assert tasks["serve:other"] == ("best_effort", "serve:other", "running")
        quotas = {p["name"]: p["quota"] for p in snap["partitions"]}
        assert quotas["serve:qwen"] == 1 << 30 and quotas["serve:other"] is None
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give at least one --model DIR"),
        (["--model", "/nonexistent/dir"], "/nonexistent/dir is not a model directory"),
        (["--model", "{path}", "--max-model-len", "100000"], "longer than the model"),
        (["--model", "{path}", "--qos", "guaranteed"], "--qos guaranteed needs --memory"),
    ],
)
def test_serve_command_user_errors(args, message, model_path):
    proc = _serve(*[a.replace("{path}", str(model_path)) for a in args])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and message in err and "Traceback" not in err, err
