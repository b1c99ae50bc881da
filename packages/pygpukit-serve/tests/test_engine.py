"""The engine on a tiny random Qwen2 (CPU backend in CI, the GPU on the device):
continuous batching, chunked prefill, prefix caching and preemption give the
tokens ``model.generate`` gives alone; seeded sampling does not depend on the
batch; limits, aborts and a failing step touch only their request."""

from __future__ import annotations

import asyncio
import threading

import pytest
from serve_testing import greedy

import pygpukit as gp
from pygpukit_serve.engine import Engine, EngineConfig
from pygpukit_serve.types import QueueFull, SamplingParams, ServeError, Unavailable

PROMPTS = ["the quick brown fox", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3, "hello", "one two three four five six"]


def ids(model, text):
    return model.tokenizer.encode(text, add_special_tokens=False)


def params(n, **kw):
    return SamplingParams(max_tokens=n, **{"temperature": 0.0, "ignore_eos": True, **kw})


async def collect(engine, rid, prompt, p):
    outs = [o async for o in engine.add_request(rid, prompt, p)]
    return outs


def run_all(engine, requests):
    """requests: [(prompt ids, params)] all added at once; the Output lists in order."""

    async def main():
        return await asyncio.gather(*(collect(engine, f"r{i}", pr, p) for i, (pr, p) in enumerate(requests)))

    return asyncio.run(main())


def tokens(outs):
    return [t for o in outs for t in o.token_ids]


@pytest.fixture
def engine_of(model):
    started = []

    def make(**kw):
        e = Engine(model, "tiny", EngineConfig(**{"max_model_len": 256, **kw}))
        e.start()
        started.append(e)
        return e

    yield make
    for e in started:
        e.stop()


def test_concurrent_greedy_equals_generate_alone(model, engine_of):
    engine = engine_of(max_num_seqs=4)
    prompts = [ids(model, t) for t in PROMPTS]
    outs = run_all(engine, [(p, params(12)) for p in prompts])
    for p, o in zip(prompts, outs):
        assert tokens(o) == greedy(model, p, 12)
        assert o[-1].finish_reason == "length" and o[-1].completion_tokens == 12 and o[-1].prompt_tokens == len(p)
        assert "".join(x.text for x in o) == model.tokenizer.decode(tokens(o))
    assert engine.blocks.used_blocks == 0  # every block came back (the finished prompts' blocks stay cached, evictable)


def test_chunked_prefill_and_few_slots(model, engine_of):
    """A 4-token budget per step: every prompt goes in chunks while the others decode; 2 slots for 4 requests."""
    engine = engine_of(max_num_seqs=2, max_num_batched_tokens=4)
    prompts = [ids(model, t) for t in PROMPTS]
    outs = run_all(engine, [(p, params(6)) for p in prompts])
    for p, o in zip(prompts, outs):
        assert tokens(o) == greedy(model, p, 6)


def test_prefix_cache_hit_gives_the_same_tokens(model, engine_of):
    engine = engine_of(block_size=16)
    system = ids(model, "you are a helpful assistant who answers briefly and well. " * 2)
    a, b = system + ids(model, " first question"), system + ids(model, " second one")
    (first,) = run_all(engine, [(a, params(5))])
    st = engine.stats()
    hits0 = st.prefix_cache_hits
    (second,) = run_all(engine, [(b, params(5))])
    assert tokens(second) == greedy(model, b, 5)
    assert second[-1].cached_tokens == (len(system) // 16) * 16 > 0
    assert st.prefix_cache_hits - hits0 == second[-1].cached_tokens
    assert first[-1].cached_tokens == 0


def test_preemption_recomputes_and_loses_nothing(model, engine_of):
    """8 blocks of 16 tokens for 3 sequences growing to ~60 tokens each: someone is preempted."""
    engine = engine_of(max_num_seqs=3, block_size=16, num_blocks=8, max_model_len=128, prefix_caching=False)
    prompts = [ids(model, t)[:20] for t in (PROMPTS[1], PROMPTS[0] * 4, PROMPTS[3] * 3)]
    outs = run_all(engine, [(p, params(40)) for p in prompts])
    assert engine.stats().preemptions > 0
    for p, o in zip(prompts, outs):
        assert tokens(o) == greedy(model, p, 40)


def test_seeded_sampling_does_not_depend_on_the_batch(model, engine_of):
    engine = engine_of(max_num_seqs=4)
    p = ids(model, PROMPTS[0])
    seeded = SamplingParams(max_tokens=10, temperature=0.9, top_k=50, seed=1234, ignore_eos=True)
    (alone,) = run_all(engine, [(p, seeded)])
    crowd = run_all(engine, [(ids(model, PROMPTS[2]), params(10, temperature=1.0)), (p, seeded), (ids(model, PROMPTS[3]), params(10))])
    assert tokens(crowd[1]) == tokens(alone)
    other = run_all(engine, [(p, SamplingParams(max_tokens=10, temperature=0.9, top_k=50, seed=99, ignore_eos=True))])[0]
    assert tokens(other) != tokens(alone)  # the seed matters (10 draws over ~50 tokens)


def test_stop_strings_eos_and_logprobs(model, engine_of):
    engine = engine_of()
    p = ids(model, PROMPTS[3])
    ref = greedy(model, p, 12)
    text = model.tokenizer.decode(ref)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    (o,) = run_all(engine, [(p, params(12, stop=(stop,), logprobs=2))])
    assert o[-1].finish_reason == "stop"
    got = "".join(x.text for x in o)
    assert got == text[: text.index(stop)]
    for x in o:
        (lp,) = x.logprobs
        assert lp.token_id == x.token_ids[0] and len(lp.top) == 2 and lp.top[0][0] == lp.token_id  # greedy: the top token
        assert lp.logprob == pytest.approx(lp.top[0][1]) and lp.logprob <= 0 and x.token_text
    eos = next(iter(model.tokenizer.eos_token_ids))
    assert eos < model.tokenizer.vocab_size


def test_penalties_change_the_tokens(model, engine_of):
    engine = engine_of()
    p = ids(model, PROMPTS[0])
    plain, penal = run_all(engine, [(p, params(16)), (p, params(16, repetition_penalty=1.8, frequency_penalty=1.5))])
    assert tokens(plain) == greedy(model, p, 16)
    assert tokens(penal) != tokens(plain)


def test_limits_and_errors(model, engine_of):
    engine = engine_of(max_model_len=64)

    async def bad():
        with pytest.raises(ServeError, match=r"context is 64 tokens; the prompt has 60 and max_tokens asks for 10 more \(70 in all\)") as e:
            engine.add_request("x", list(range(60)), params(10))
        assert e.value.param == "max_tokens" and e.value.status == 400
        with pytest.raises(ServeError, match="the prompt is empty"):
            engine.add_request("y", [], params(1))

    asyncio.run(bad())
    with pytest.raises(ValueError, match=r"max_model_len=999 is longer than the model's context \(256\)"):
        Engine(model, "tiny", EngineConfig(max_model_len=999))
    with pytest.raises(ValueError, match=r"num_blocks=2 cannot hold one sequence"):
        Engine(model, "tiny", EngineConfig(max_model_len=64, num_blocks=2))
    with pytest.raises(ValueError, match=r"max_num_seqs must be an int >= 1, got 0"):
        EngineConfig(max_num_seqs=0)


class Gate:
    """The tiny model, with a gate: hidden_states waits while the gate is closed,
    and raises for a batch holding token ``poison``."""

    def __init__(self, model, poison=None):
        self._model, self.open, self.poison = model, threading.Event(), poison
        self.entered = threading.Event()

    def __getattr__(self, name):
        return getattr(self._model, name)

    def hidden_states(self, ids, *a, **kw):
        self.entered.set()
        self.open.wait(10)
        if self.poison is not None and self.poison in ids.to_numpy():
            raise RuntimeError("poisoned batch")
        return self._model.hidden_states(ids, *a, **kw)


def test_queue_bound_abort_and_a_failing_request(model):
    gate = Gate(model, poison=7)
    engine = Engine(gate, "gated", EngineConfig(max_model_len=128, max_num_seqs=1, max_waiting=2))
    engine.start()
    try:

        async def main():
            first = engine.add_request("a", ids(model, PROMPTS[0]), params(3))
            await asyncio.to_thread(gate.entered.wait, 10)  # "a" is in a step: it holds the only slot
            second = engine.add_request("b", ids(model, PROMPTS[2]), params(3))
            third = engine.add_request("c", [7, 8, 9], params(3))
            with pytest.raises(QueueFull, match=r"2 requests waiting"):
                engine.add_request("d", [1, 2], params(1))
            engine.abort("b")
            gate.open.set()
            a = [o async for o in first]
            with pytest.raises(RuntimeError, match="poisoned batch"):
                [o async for o in third]
            b = [o async for o in second]
            assert [(o.finish_reason, o.token_ids) for o in b] == [("abort", [])]  # aborted before it ran
            return a

        a = asyncio.run(main())
        assert tokens(a) == greedy(model, ids(model, PROMPTS[0]), 3)
        st = engine.stats()
        assert st.requests_finished.get("abort") == 1 and st.requests_finished.get("error") == 1
        assert engine.blocks.used_blocks == 0
    finally:
        gate.open.set()
        engine.stop()


class Recorder(Gate):
    """The tiny model, recording the (batch, tokens) of every forward."""

    def __init__(self, model, closed=False):
        super().__init__(model)
        if not closed:
            self.open.set()
        self.shapes = []

    def hidden_states(self, ids, *a, **kw):
        self.shapes.append(ids.shape)
        return super().hidden_states(ids, *a, **kw)


def test_schedule_of_chunked_prefill_beside_decode(model):
    """An 8-token budget, two slots: A's 20-token prompt goes in chunks of 8, 8, 4,
    B's 5 tokens get the 4 left of the third step's budget; B's last prompt
    token then rides in the batched decode step with A (one token pending is
    one token pending). Every forward is accounted for."""
    rec = Recorder(model)
    engine = Engine(rec, "recorded", EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=8, prefix_caching=False))
    engine.start()
    try:

        async def main():
            a = engine.add_request("a", list(range(10, 30)), params(3))
            b = engine.add_request("b", list(range(40, 45)), params(3))
            return [o async for o in a], [o async for o in b]

        a, b = asyncio.run(main())
    finally:
        engine.stop()
    assert tokens(a) == greedy(model, list(range(10, 30)), 3) and tokens(b) == greedy(model, list(range(40, 45)), 3)
    assert rec.shapes == [
        (1, 8),  # A 0..8; B admitted, no budget left
        (1, 8),  # A 8..16
        (1, 4),  # A 16..20: A's first token
        (1, 4),  # B 0..4, the rest of the budget
        (2, 1),  # A's second token; B's last prompt token gives B's first
        (2, 1),  # A's third (A ends), B's second
        (1, 1),  # B's third
    ]


def test_engine_runs_in_a_scheduler_task(engine_of):
    engine = engine_of()
    tasks = {t.name: t for t in gp.scheduler.snapshot().tasks}
    assert tasks["serve:tiny"].state == "running" and tasks["serve:tiny"].qos == "burstable"
    assert engine.stats().kv_blocks_total == engine.num_blocks


def test_a_stopped_engine_answers_503(model):
    gate = Gate(model)
    engine = Engine(gate, "stopping", EngineConfig(max_model_len=64))
    engine.start()

    async def main():
        stream = engine.add_request("a", [1, 2, 3], params(5))
        await asyncio.to_thread(gate.entered.wait, 10)  # "a" is inside a step when the engine is told to stop
        stopper = asyncio.create_task(asyncio.to_thread(engine.stop))
        await asyncio.sleep(0)
        gate.open.set()
        await stopper
        with pytest.raises(Unavailable, match="model 'stopping' stopped") as e:
            [o async for o in stream]
        assert e.value.status == 503
        with pytest.raises(Unavailable, match="model 'stopping' is not running"):
            engine.add_request("b", [1], params(1))

    asyncio.run(main())


def test_new_prompts_prefill_in_one_ragged_forward(model):
    """Three prompts that arrive while a step runs go in together: one forward of
    3 rows padded to the longest, each appending its own count; the tokens are
    generate's for each alone."""
    rec = Recorder(model, closed=True)
    engine = Engine(rec, "ragged", EngineConfig(max_model_len=64, max_num_seqs=4, prefix_caching=False))
    engine.start()
    prompts = [list(range(3, 9)), list(range(20, 31)), list(range(40, 43))]
    try:

        async def main():
            first = engine.add_request("x", [5, 6], params(1))
            await asyncio.to_thread(rec.entered.wait, 10)  # the engine is inside x's step
            streams = [engine.add_request(f"p{i}", p, params(4)) for i, p in enumerate(prompts)]
            rec.open.set()
            [o async for o in first]
            outs = []
            for st in streams:
                outs.append([o async for o in st])
            return outs

        outs = asyncio.run(main())
    finally:
        engine.stop()
    for p, o in zip(prompts, outs):
        assert tokens(o) == greedy(model, p, 4)
    assert rec.shapes[:2] == [(1, 2), (3, 11)] and rec.shapes[2:] == [(3, 1)] * 3
