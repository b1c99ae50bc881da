"""Decode states kept between generate calls (generate.py's module doc): a
later call of the same (batch, paged, capacity) takes the cache, buffers and
graph of an earlier one and gives exactly the tokens a first call gives;
calls under way never share a state; closed or collected generators give it
back, failed ones drop it; the pool is bounded and can be emptied; capacities
are bucketed without passing the model's limit or changing decode's plan."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest
from llm_testing import write_tiny_model
from tokenizer_testing import byte_level_json, model_dir

import pygpukit as gp
import pygpukit_llm
from pygpukit_llm import generate as gen
from pygpukit_llm.bench import random_checkpoint
from pygpukit_llm.generate import GenerationConfig, _capacity, generate_ids

# prompts of 5 to 7 tokens: with 12 new ones, one capacity (32); with 4 or 8, another (16)
P1, P2, P3 = [5, 17, 99, 3, 250], [8, 9, 10, 11, 12, 13, 14], [77, 300, 2, 41, 9, 160]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    path = random_checkpoint(tmp_path_factory.mktemp("tiny"), "tiny-llama", seed=3, std=0.3)
    return pygpukit_llm.load(path, "float32")


@pytest.fixture
def model(loaded):
    loaded.release_decode_states()  # each test starts with none kept
    yield loaded
    loaded.release_decode_states()


def _idle(model):
    return list(model._decode_states._idle)


def _tokens(model, prompts, **kw):
    return np.stack([s.tokens for s in generate_ids(model, prompts, GenerationConfig(**kw))], 1)


def _first_call(model, prompts, **kw):
    """The tokens of a call that takes no kept state."""
    model.release_decode_states()
    return _tokens(model, prompts, **kw)


CONFIGS = {
    "greedy": dict(max_new_tokens=12, greedy=True),
    "seeded": dict(max_new_tokens=12, temperature=1.0, top_p=0.95, top_k=50, seed=7),
    "penalized": dict(max_new_tokens=12, temperature=0.8, repetition_penalty=1.3, presence_penalty=0.2, seed=3),
}


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_a_later_call_takes_the_state_and_gives_a_first_calls_tokens(model, kind, paged):
    kw = dict(CONFIGS[kind], paged=paged)
    want = _first_call(model, [P2, P3], **kw)
    model.release_decode_states()
    _tokens(model, [P1, P3], **kw)
    (state,) = _idle(model)
    assert state.key == (2, paged, 32) and state.cache.max_seq == 32
    it = generate_ids(model, [P2, P3], GenerationConfig(**kw))
    steps = [next(it)]
    assert _idle(model) == []  # checked out while the call runs
    steps += list(it)
    assert (np.stack([s.tokens for s in steps], 1) == want).all()
    assert _idle(model) == [state]  # the same state, back
    # and the call wrote its cache: the prompts, then a token a step (the last one sampled, not appended)
    assert state.cache.seq_lengths(0).tolist() == [len(P2) + 11, len(P3) + 11]
    if paged:  # the next call starts with an empty cache holding blocks for the whole capacity
        state.begin()
        assert state.cache.seq_lengths(0).tolist() == [0, 0] and [len(state.cache.blocks(b)) for b in (0, 1)] == [2, 2]


def test_a_kept_state_gives_the_tokens_of_recomputing_the_sequence(model):
    seq = list(P2)
    for _ in range(8):
        seq.append(int(np.argmax(model(gp.from_numpy(np.array([seq], np.int32)))[0, -1].to_numpy())))
    _tokens(model, [P1], max_new_tokens=8, greedy=True)
    (state,) = _idle(model)
    assert _tokens(model, [P2], max_new_tokens=8, greedy=True)[0].tolist() == seq[len(P2) :]
    assert _idle(model) == [state]


def test_batch_sizes_and_cache_kinds_get_their_own_states(model):
    _tokens(model, [P1], max_new_tokens=4, greedy=True)
    _tokens(model, [P1, P2, P3], max_new_tokens=4, greedy=True)
    _tokens(model, [P1], max_new_tokens=4, greedy=True, paged=True)
    _tokens(model, [P1], max_new_tokens=200, greedy=True)
    keys = [s.key for s in _idle(model)]
    assert keys == [(1, False, 16), (3, False, 16), (1, True, 16), (1, False, 256)]
    assert [s.cache.batch for s in _idle(model)] == [1, 3, 1, 1]


def test_interleaved_generators_use_their_own_states(model):
    cfg_a = GenerationConfig(max_new_tokens=12, temperature=1.0, seed=1)
    cfg_b = GenerationConfig(max_new_tokens=12, greedy=True)
    want_a = _first_call(model, [P1], **vars(cfg_a))
    want_b = _first_call(model, [P3], **vars(cfg_b))
    model.release_decode_states()
    a, b = generate_ids(model, [P1], cfg_a), generate_ids(model, [P3], cfg_b)
    got_a, got_b = [], []
    for _ in range(12):
        got_a.append(next(a).tokens)
        got_b.append(next(b).tokens)
        assert _idle(model) == []
    assert next(a, None) is None and next(b, None) is None
    assert (np.stack(got_a, 1) == want_a).all() and (np.stack(got_b, 1) == want_b).all()
    first, second = _idle(model)
    assert first.key == second.key and first.cache is not second.cache


def test_two_streams_of_one_model_from_asyncio(tmp_path):
    write_tiny_model(tmp_path, "llama", seed=5, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, layers=2)
    model_dir(tmp_path, byte_level_json(), tokenizer_config={"eos_token": "<|endoftext|>"})
    model = pygpukit_llm.load(tmp_path, "float32")
    kw = dict(max_new_tokens=16, greedy=True, ignore_eos=True)
    prompts = ["one model, two streams", "and a second prompt"]
    alone = [model.generate(p, **kw).text for p in prompts]
    keys = {s.key for s in _idle(model)}

    async def collect(prompt):
        return "".join([piece async for piece in model.astream(prompt, **kw)])

    async def both():
        return await asyncio.gather(*(collect(p) for p in prompts))

    assert asyncio.run(both()) == alone
    assert {s.key for s in _idle(model)} == keys


def test_a_closed_or_collected_generator_gives_its_state_back(model):
    kw = dict(max_new_tokens=12, greedy=True)
    want = _first_call(model, [P3], **kw)
    model.release_decode_states()
    it = generate_ids(model, [P1], GenerationConfig(**kw))
    next(it), next(it)
    assert _idle(model) == []
    it.close()
    (state,) = _idle(model)
    assert (_tokens(model, [P3], **kw) == want).all() and _idle(model) == [state]
    it = generate_ids(model, [P2], GenerationConfig(**kw))
    next(it)
    assert _idle(model) == []
    del it
    gc.collect()
    assert _idle(model) == [state]
    assert (_tokens(model, [P3], **kw) == want).all()


def test_a_failed_step_drops_the_state(model, monkeypatch):
    kw = dict(max_new_tokens=12, greedy=True)
    want = _first_call(model, [P2], **kw)
    (kept,) = _idle(model)
    real = gen._Decoder.sample
    calls = []

    def failing(self, logits):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a step fails")
        return real(self, logits)

    monkeypatch.setattr(gen._Decoder, "sample", failing)
    with pytest.raises(RuntimeError, match="a step fails"):
        _tokens(model, [P1], **kw)
    assert _idle(model) == []  # the state it took is not given back
    monkeypatch.setattr(gen._Decoder, "sample", real)
    assert (_tokens(model, [P2], **kw) == want).all()
    (fresh,) = _idle(model)
    assert fresh is not kept


def test_a_refused_request_takes_no_state(model):
    _tokens(model, [P1], max_new_tokens=4, greedy=True)
    (state,) = _idle(model)
    with pytest.raises(pygpukit_llm.ConfigError):
        list(generate_ids(model, [[1] * 500], GenerationConfig(max_new_tokens=20)))
    assert _idle(model) == [state]


def test_the_pool_keeps_the_most_recent_states(model, monkeypatch):
    monkeypatch.setattr(gen, "DECODE_STATES", 2)
    for batch in (1, 2, 3):
        _tokens(model, [P1] * batch, max_new_tokens=4, greedy=True)
    assert [s.key[0] for s in _idle(model)] == [2, 3]
    _tokens(model, [P1] * 2, max_new_tokens=4, greedy=True)  # taken and given back: now the most recent
    assert [s.key[0] for s in _idle(model)] == [3, 2]
    monkeypatch.setattr(gen, "DECODE_STATES", 0)
    _tokens(model, [P1], max_new_tokens=4, greedy=True)
    assert _idle(model) == []


def test_release_empties_the_pool(model):
    _tokens(model, [P1], max_new_tokens=4, greedy=True)
    _tokens(model, [P1, P2], max_new_tokens=4, greedy=True)
    assert model.release_decode_states() == 2 and _idle(model) == []
    assert model.release_decode_states() == 0
    assert _tokens(model, [P1], max_new_tokens=4, greedy=True).shape == (1, 4)


def test_a_state_that_does_not_fit_frees_the_idle_ones(model, monkeypatch):
    _tokens(model, [P1], max_new_tokens=4, greedy=True)
    assert len(_idle(model)) == 1
    real = gen._DecodeState.__init__
    tries = []

    def tight(self, model_, batch, paged, capacity):  # no room for a second state, nor for a paged one
        tries.append(len(_idle(model)))
        if _idle(model) or paged:
            raise gp.OutOfMemoryError("out of memory (test)")
        real(self, model_, batch, paged, capacity)

    monkeypatch.setattr(gen._DecodeState, "__init__", tight)
    want = _tokens(model, [P1, P2], max_new_tokens=4, greedy=True)
    assert tries == [1, 0] and [s.key[0] for s in _idle(model)] == [2]
    monkeypatch.setattr(gen._DecodeState, "__init__", real)
    assert (_first_call(model, [P1, P2], max_new_tokens=4, greedy=True) == want).all()
    model.release_decode_states()
    monkeypatch.setattr(gen._DecodeState, "__init__", tight)
    tries.clear()
    with pytest.raises(gp.OutOfMemoryError):  # with nothing idle to free, the error stands
        _tokens(model, [P1], max_new_tokens=4, greedy=True, paged=True)
    assert tries == [0]


def test_a_step_that_cannot_be_captured_is_tried_once(model, monkeypatch):
    """The float32 reference ops cannot be captured (they read lengths back): the
    state decodes eagerly from then on, with the eager tokens (forced here on
    the CPU backend, where a capture runs its block once)."""
    kw = dict(max_new_tokens=8, greedy=True)
    want = _first_call(model, [P2], **kw)
    (state,) = _idle(model)
    state.graphable = True
    captures = []
    real = gp.graph

    def counted():
        captures.append(1)
        return real()

    monkeypatch.setattr(gen.gp, "graph", counted)
    assert (_tokens(model, [P2], **kw) == want).all()
    assert captures == [1] and not state.graphable and state.graph is None
    assert (_tokens(model, [P2], **kw) == want).all()
    assert captures == [1] and _idle(model) == [state]


def test_capacity_buckets():
    assert [_capacity(n, 4096) for n in (2, 5, 17, 100, 129, 144, 256, 257, 300, 513, 700, 1025)] == [
        2, 8, 32, 128, 256, 256, 256, 512, 512, 768, 768, 1280]  # fmt: skip
    assert _capacity(300, 320) == 320 and _capacity(700, 700) == 700
    for n in range(1, 4097):
        c = _capacity(n, 4096)
        assert n <= c <= 4096 and (c % 256 == 0 or c & (c - 1) == 0 or c == 4096)
        # decode attention plans its split-K by the power of two above the capacity: the bucket never changes it
        assert (c - 1).bit_length() == (n - 1).bit_length()


def test_the_capacity_stays_within_the_model_limit(tmp_path):
    write_tiny_model(tmp_path, "llama", seed=2, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, max_positions=320)
    model = pygpukit_llm.load(tmp_path, "float32")
    prompt = list(range(1, 251))
    for paged in (False, True):
        want = _first_call(model, [prompt[:-30]], max_new_tokens=80, greedy=True, paged=paged)
        model.release_decode_states()
        _tokens(model, [prompt], max_new_tokens=60, greedy=True, paged=paged)  # 310 tokens: 512 rounded, 320 allowed
        (state,) = _idle(model)
        assert state.key == (1, paged, 320) and state.cache.max_seq == 320
        assert (_tokens(model, [prompt[:-30]], max_new_tokens=80, greedy=True, paged=paged) == want).all()  # 300: the same bucket
        assert _idle(model) == [state]
    with pytest.raises(pygpukit_llm.ConfigError, match="longer than the model allows"):
        list(generate_ids(model, [prompt], GenerationConfig(max_new_tokens=71)))


def test_moe_reuses_its_cache(tmp_path):
    write_tiny_model(tmp_path, "mixtral", seed=4, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, layers=2)
    model = pygpukit_llm.load(tmp_path, "float32")
    want = _tokens(model, [P2], max_new_tokens=8, greedy=True)
    (state,) = _idle(model)
    _tokens(model, [P1], max_new_tokens=8, greedy=True)
    assert (_tokens(model, [P2], max_new_tokens=8, greedy=True) == want).all()
    assert _idle(model) == [state] and not state.graphable


@pytest.mark.skipif(gp.backend() != "cuda", reason="CUDA graphs replay on a GPU (the CPU backend decodes eagerly)")
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_a_later_call_replays_the_captured_graph(tmp_path, paged):
    """bfloat16 (the decode kernels): the second call replays the first call's
    graph over its own prompts and gives the tokens of eager decoding, on the
    first call's stream or another one."""
    path = random_checkpoint(tmp_path / "bf16", "tiny-llama", seed=4, std=0.3)
    model = pygpukit_llm.load(path, "bfloat16")
    kw = dict(max_new_tokens=24, greedy=True, paged=paged)
    eager = _tokens(model, [P2, P3], cuda_graph=False, **kw)
    model.release_decode_states()
    _tokens(model, [P1, P3], **kw)
    (state,) = _idle(model)
    graph = state.graph
    assert graph is not None
    assert (_tokens(model, [P2, P3], **kw) == eager).all()
    assert _idle(model) == [state] and state.graph is graph
    with gp.Stream():  # behind the last call's dropped step, queued on the default stream
        assert (_tokens(model, [P2, P3], **kw) == eager).all()
    assert (_tokens(model, [P2, P3], cuda_graph=False, **kw) == eager).all()  # eager on the same state
    assert _idle(model) == [state] and state.graph is graph


def test_prompts_are_padded_to_a_power_of_two(loaded, monkeypatch):
    """Short prompts are right-padded to a power of two of at least PREFILL_MIN
    (within PREFILL_GRAPH_TOKENS a batch, no more than the model's positions),
    and the padding changes no token."""
    assert [gen._prefill_width(n, b, 4096) for n, b in ((1, 1), (5, 1), (16, 1), (17, 1), (300, 1), (100, 4), (300, 2))] == [
        16, 16, 16, 32, 512, 128, 300,
    ]  # fmt: skip
    assert gen._prefill_width(200, 1, 220) == 220 and gen._prefill_width(9, 1, 12) == 12
    dec = gen._Decoder(loaded, gen._check_prompts([P1, P2], loaded.config.vocab_size), GenerationConfig(max_new_tokens=4))
    assert dec.padded.shape == (2, 16) and not dec.padded[0, 5:].any()
    dec.finish(False)
    prompts = [P1, P2 + P3 + P1]  # 5 and 18 tokens: 32 wide
    padded = {name: _first_call(loaded, prompts, **kw) for name, kw in CONFIGS.items()}
    monkeypatch.setattr(gen, "PREFILL_GRAPH_TOKENS", 0)  # no padding: each batch as wide as its longest prompt
    for name, kw in CONFIGS.items():
        assert (_first_call(loaded, prompts, **kw) == padded[name]).all(), name


@pytest.mark.skipif(gp.backend() != "cuda", reason="CUDA graphs replay on a GPU (the CPU backend decodes eagerly)")
def test_a_prefill_graph_per_width_replays_over_new_prompts(tmp_path):
    """bfloat16: the first call of a padded width captures its prefill; later
    calls of that width replay it over their own prompts (ragged or not) and
    give the eager tokens; another width captures another graph in the same
    state; prompts past PREFILL_GRAPH_TOKENS prefill eagerly."""
    path = random_checkpoint(tmp_path / "bf16", "tiny-llama", seed=4, std=0.3)
    model = pygpukit_llm.load(path, "bfloat16")
    kw = dict(max_new_tokens=12, greedy=True)
    batches = [[P1, P3], [P2, P3], [P3, P3], [P2 + P3 + P1, P1]]  # widths 16, 16, 16, 32
    eager = [_tokens(model, b, cuda_graph=False, **kw) for b in batches]
    model.release_decode_states()
    _tokens(model, [P2, P1], **kw)
    (state,) = _idle(model)
    assert list(state.prefills) == [16]
    graph = state.prefills[16][0]
    for prompts, want in zip(batches, eager):
        assert (_tokens(model, prompts, **kw) == want).all()
    assert _idle(model) == [state] and sorted(state.prefills) == [16, 32] and state.prefills[16][0] is graph
    long = [list(range(1, 301))]  # 512 wide: 2 x 512 > PREFILL_GRAPH_TOKENS at batch 2, so eager
    want = _tokens(model, long * 2, cuda_graph=False, **kw)
    model.release_decode_states()
    assert (_tokens(model, long * 2, **kw) == want).all()
    assert not _idle(model)[0].prefills
