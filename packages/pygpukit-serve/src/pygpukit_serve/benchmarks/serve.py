"""The serving benchmark (suite "serve"): a load generator against the
in-process Engine, measured on the client's side, as a user of the server
sees it.

A request is random token ids below the vocabulary and asks for an exact
number of tokens (``ignore_eos``, ``temperature=0``). Its TTFT is the time
from ``add_request`` to its first Output; its inter-token latencies (ITL) are
the gaps between its Outputs (one token each); a run's output tok/s is all
its tokens over the time from its first request sent to its last token
received. An Output reaches the client only after the engine has read the
sampled tokens back from the device, so these host clocks include all the
device work before them and need no other synchronization.

Per model shape (random bf16 weights written to a temporary directory, with
a byte-level tokenizer of the model's vocabulary; ``Plan`` gives the sizes):

1. closed loops: each of C clients sends its next request when its previous
   one ends (C = 1, 8, 32, 64), then Poisson arrivals at 0.75x the request
   rate the largest C sustained: tok/s, TTFT and ITL p50 / p99;
2. the peer: pygpukit-llm's ``generate_ids`` on a static batch of C prompts of
   the workload's mean lengths (its decode steps replay a CUDA graph): tok/s
   and the gaps between its steps, and the ratios the targets are stated in;
3. (first shape only) prefix caching: requests that share a system prompt,
   TTFT with the prefix cache and on an engine without it;
4. two models in one process: the first shape at C=4 with guaranteed QoS in
   a partition of its own, beside the second at C=64 with best effort: the
   guaranteed model's ITL against its ITL alone.

A part that needs more device memory than is free is skipped with a printed
reason. On the CPU backend the plan is TINY (tiny-llama only, a few seconds).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers

import pygpukit as gp
from pygpukit_llm import load
from pygpukit_llm.bench import SHAPES, checkpoint_nbytes, random_checkpoint
from pygpukit_llm.generate import GenerationConfig, generate_ids

from ..engine import Engine, EngineConfig
from ..types import SamplingParams

__all__ = ["FULL", "QUICK", "TINY", "Plan", "Request", "Run", "Trace", "closed_loop", "default_plan", "draw", "engine_config",
           "poisson", "run", "tokenizer_json", "write_checkpoint"]  # fmt: skip


SERVE = "pygpukit-serve"  # the impl of the engine's records
POISSON_LOAD = 0.75  # the open loop's rate, as a fraction of the request rate the largest closed loop sustained
MAX_WAITING = 1024  # EngineConfig.max_waiting: above any run's queue (a 429 would end the run)
PARTS = ("loops", "prefix", "qos")
PARTITION = "serve-bench"  # the guaranteed model's partition (part 4)
GiB = 1 << 30


@dataclass(frozen=True)
class Plan:
    """What the suite runs; token ranges are inclusive."""

    shapes: tuple[str, ...]  # parts 1 and 2 on each, in this order; part 3 on the first
    concurrency: tuple[int, ...]
    prompt: tuple[int, int]
    output: tuple[int, int]
    rounds: int  # a closed loop of C clients sends max(rounds * C, min_requests) requests
    min_requests: int
    generate_reps: int  # timed generate calls per batch, after an untimed one
    poisson_requests: int
    prefix: int  # tokens of the shared system prompt
    prefix_suffix: tuple[int, int]  # each request's own tokens after it
    prefix_output: int
    prefix_concurrency: int
    prefix_requests: int
    qos_shapes: tuple[str, str]  # (guaranteed, best effort)
    qos_concurrency: tuple[int, int]
    qos_requests: int  # the guaranteed model's, alone and then beside the other
    parts: tuple[str, ...] = PARTS  # which parts run: "loops" (1 and 2), "prefix" (3), "qos" (4)
    batched_tokens: int = EngineConfig.max_num_batched_tokens  # the engine's default
    block_size: int = 16


FULL = Plan(
    shapes=("llama-1.1b", "llama-8b"), concurrency=(1, 8, 32, 64), prompt=(128, 1024), output=(128, 512), rounds=2, min_requests=4,
    generate_reps=2, poisson_requests=128, prefix=1000, prefix_suffix=(32, 128), prefix_output=64, prefix_concurrency=8,
    prefix_requests=32, qos_shapes=("llama-1.1b", "llama-8b"), qos_concurrency=(4, 64), qos_requests=16,
)  # fmt: skip
QUICK = Plan(
    shapes=("llama-1.1b", "llama-8b"), concurrency=(1, 4), prompt=(128, 256), output=(32, 128), rounds=2, min_requests=2,
    generate_reps=1, poisson_requests=16, prefix=256, prefix_suffix=(16, 64), prefix_output=16, prefix_concurrency=4,
    prefix_requests=8, qos_shapes=("llama-1.1b", "llama-8b"), qos_concurrency=(4, 16), qos_requests=8,
)  # fmt: skip
TINY = Plan(  # the CPU backend's
    shapes=("tiny-llama",), concurrency=(1, 4), prompt=(8, 40), output=(3, 8), rounds=2, min_requests=2, generate_reps=1,
    poisson_requests=6, prefix=48, prefix_suffix=(4, 12), prefix_output=3, prefix_concurrency=2, prefix_requests=4,
    qos_shapes=("tiny-llama", "tiny-llama"), qos_concurrency=(2, 4), qos_requests=4,
)  # fmt: skip


def default_plan(quick: bool) -> Plan:
    if gp.backend() != "cuda":
        return TINY
    return QUICK if quick else FULL


def run(rec: Any, quick: bool, plan: Plan | None = None) -> None:
    """The suite: every part of ``plan`` (default: ``default_plan(quick)``) into the Recorder ``rec``."""
    plan = plan or default_plan(quick)
    unknown = set(plan.parts) - set(PARTS)
    if unknown:
        raise ValueError(f"Plan.parts: unknown {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    with tempfile.TemporaryDirectory(prefix="pygpukit-serve-bench-") as tmp:
        checkpoints = _Checkpoints(Path(tmp))
        for n, shape in enumerate(plan.shapes):
            _shape(rec, plan, shape, checkpoints, first=n == 0)
            gc.collect()  # the model and its engines' caches go before the next model loads
        if "qos" in plan.parts:
            _qos(rec, plan, checkpoints)
            gc.collect()


# -- checkpoints ------------------------------------------------------------------------


def tokenizer_json(vocab_size: int) -> str:
    """A byte-level BPE tokenizer of exactly ``vocab_size`` tokens: the 256 byte
    symbols, then made-up pieces of two or more of them, and no merges (text
    encodes byte by byte; every id a random model samples decodes)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size < len(alphabet):
        raise ValueError(f"a byte-level vocabulary needs at least {len(alphabet)} tokens, got {vocab_size}")
    vocab = {}
    for i in range(vocab_size):
        width, first = 1, 0
        while i - first >= 256**width:
            first += 256**width
            width += 1
        j = i - first
        vocab["".join(alphabet[(j >> (8 * k)) & 255] for k in reversed(range(width)))] = i
    tok = tokenizers.Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def write_checkpoint(directory: str | Path, shape: str, seed: int = 0) -> Path:
    """pygpukit-llm's random bf16 checkpoint of ``shape``, with ``tokenizer_json`` of its vocabulary."""
    out = random_checkpoint(directory, shape, seed=seed)
    (out / "tokenizer.json").write_text(tokenizer_json(SHAPES[shape]["vocab_size"]), encoding="utf-8")
    return out


class _Checkpoints:
    """Each shape's model directory, written on first use under ``root`` (if the disk has room)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[str, Path] = {}

    def get(self, shape: str) -> Path | None:
        if shape not in self.paths:
            need, free = checkpoint_nbytes(shape), shutil.disk_usage(self.root).free
            if need + GiB > free:
                print(f"  skipped {shape}: its checkpoint needs {gp.memory.format_bytes(need)} on disk, "
                      f"{gp.memory.format_bytes(free)} is free in {self.root}", flush=True)  # fmt: skip
                return None
            self.paths[shape] = write_checkpoint(self.root / shape, shape, seed=len(self.paths))
        return self.paths[shape]


def _load(path: Path) -> Any:
    return load(path, "bfloat16", progress=False)


# -- memory -------------------------------------------------------------------------------


def _kv_bytes(cfg: dict[str, Any], tokens: int) -> int:
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2 * tokens


def _work_bytes(cfg: dict[str, Any], tokens: int) -> int:
    """Activations of a forward over ``tokens`` tokens (as pygpukit_llm.estimate
    counts them), and 1 GiB for logits, workspaces and the pool's rounding."""
    return tokens * (3 * cfg["hidden_size"] + 2 * cfg["intermediate_size"]) * 2 + GiB


def _fits(what: str, need: int) -> bool:
    """Whether ``need`` bytes fit in the device's free memory (and the pool's
    limit); prints why not. Always on the CPU backend."""
    free = gp.memory.available_bytes()
    if free is None or need <= free:
        return True
    print(f"  skipped {what}: it needs about {gp.memory.format_bytes(need)} of device memory, "
          f"{gp.memory.format_bytes(free)} is free", flush=True)  # fmt: skip
    return False


# -- the load generator -----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    prompt: list[int]
    max_tokens: int


def draw(rng: np.random.Generator, vocab: int, n: int, prompt: tuple[int, int], output: tuple[int, int]) -> list[Request]:
    """``n`` requests of random token ids below ``vocab``, their prompt and output lengths uniform in the (inclusive) ranges."""
    return [Request(rng.integers(0, vocab, int(rng.integers(prompt[0], prompt[1] + 1))).tolist(), int(rng.integers(output[0], output[1] + 1)))
            for _ in range(n)]  # fmt: skip


@dataclass
class Trace:
    """One request as its client saw it: ``sent`` when add_request was called,
    ``times`` when each Output with a token arrived (perf_counter seconds)."""

    prompt_tokens: int
    max_tokens: int
    sent: float
    times: list[float] = field(default_factory=list)
    tokens: int = 0
    finish_reason: str | None = None

    @property
    def ttft(self) -> float:
        return self.times[0] - self.sent

    @property
    def e2e(self) -> float:
        return self.times[-1] - self.sent

    @property
    def itl(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.times)]


@dataclass
class Run:
    """A run's requests, in the order they were given."""

    traces: list[Trace]

    @property
    def start(self) -> float:
        return min(t.sent for t in self.traces)

    @property
    def end(self) -> float:
        return max(t.times[-1] for t in self.traces)

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.traces)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.wall

    def ttft_ms(self, q: float) -> float:
        return float(np.percentile([t.ttft for t in self.traces], q)) * 1e3

    def itl_ms(self, q: float) -> float:
        return float(np.percentile([g for t in self.traces for g in t.itl], q)) * 1e3


def _params(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


async def _send(engine: Engine, rid: str, req: Request, on_token: Callable[[float], None] | None = None) -> Trace:
    trace = Trace(len(req.prompt), req.max_tokens, time.perf_counter())
    async for out in engine.add_request(rid, req.prompt, _params(req.max_tokens)):
        if out.token_ids:
            now = time.perf_counter()
            trace.times.append(now)
            trace.tokens += len(out.token_ids)
            if on_token is not None:
                on_token(now)
        trace.finish_reason = out.finish_reason
    return trace


def _complete(traces: Sequence[Trace]) -> Run:
    """The run, once every request is seen to have got exactly its tokens (else the figures are not of the workload asked for)."""
    for n, t in enumerate(traces):
        if t.tokens != t.max_tokens or t.finish_reason != "length":
            raise RuntimeError(f"request {n} got {t.tokens} tokens of {t.max_tokens} (finish_reason {t.finish_reason!r})")
    return Run(list(traces))


async def closed_loop(engine: Engine, requests: Sequence[Request], concurrency: int, label: str = "r") -> Run:
    """``concurrency`` clients, each sending the next of ``requests`` when its previous one has ended."""
    queue = iter(enumerate(requests))
    traces: dict[int, Trace] = {}

    async def client() -> None:
        for n, req in queue:
            traces[n] = await _send(engine, f"{label}{n}", req)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return _complete([traces[n] for n in range(len(requests))])


async def poisson(engine: Engine, requests: Sequence[Request], rate: float, seed: int = 0, label: str = "p") -> Run:
    """An open loop: ``requests`` sent in order at Poisson arrivals of ``rate`` per second (the first at once), whatever is still running."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, len(requests))
    arrivals = np.cumsum(gaps) - gaps[0]
    start = time.perf_counter()

    async def one(n: int, req: Request, at: float) -> Trace:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        return await _send(engine, f"{label}{n}", req)

    return _complete(await asyncio.gather(*(one(n, r, float(at)) for n, (r, at) in enumerate(zip(requests, arrivals)))))


async def _beside(engine: Engine, requests: Sequence[Request], concurrency: int, other: Engine, draw_other: Callable[[], Request],
                  other_concurrency: int) -> tuple[Run, float]:  # fmt: skip
    """``closed_loop(engine, requests, concurrency)`` while ``other_concurrency``
    clients keep ``other`` busy with endless requests (from when each of them
    has its first token to the end of the run, then aborted); returns the run
    and the other engine's tok/s over it."""
    busy = asyncio.Event()
    started: set[int] = set()
    times: list[float] = []
    live: set[str] = set()
    done = False

    async def neighbour(k: int) -> None:
        def on_token(now: float) -> None:
            times.append(now)
            started.add(k)
            if len(started) == other_concurrency:
                busy.set()

        try:
            for n in itertools.count():
                if done:
                    return
                rid = f"n{k}-{n}"
                live.add(rid)
                await _send(other, rid, draw_other(), on_token)
                live.discard(rid)
        except BaseException:
            busy.set()  # the measured run does not wait for a neighbour that failed; gather below raises its error
            raise

    tasks = [asyncio.create_task(neighbour(k)) for k in range(other_concurrency)]
    await busy.wait()
    result = await closed_loop(engine, requests, concurrency, "g")
    done = True
    for rid in live:
        other.abort(rid)
    await asyncio.gather(*tasks)
    return result, sum(result.start <= t <= result.end for t in times) / result.wall


# -- engines ------------------------------------------------------------------------------


def _cache_tokens(plan: Plan, seqs: int, max_len: int) -> int:
    """KV-cache rows for ``seqs`` sequences of ``max_len`` tokens, in whole blocks."""
    return seqs * -(-max_len // plan.block_size) * plan.block_size


def engine_config(plan: Plan, seqs: int, max_len: int, prefix_caching: bool = True) -> EngineConfig:
    """``seqs`` sequences of up to ``max_len`` tokens, with KV blocks for all of them at full length (no preemption)."""
    blocks = _cache_tokens(plan, seqs, max_len) // plan.block_size
    return EngineConfig(max_num_seqs=seqs, max_model_len=max_len, block_size=plan.block_size, num_blocks=blocks,
                        max_num_batched_tokens=plan.batched_tokens, max_waiting=MAX_WAITING, prefix_caching=prefix_caching)  # fmt: skip


def _warm(engine: Engine, plan: Plan, rng: np.random.Generator, vocab: int, concurrency: int) -> None:
    """An untimed run before the timed ones (the first steps compile kernels and
    plan launches): ``concurrency`` requests at once, with outputs long enough
    that all of them decode together at the end (each waits for the prefills
    before it: about concurrency x the mean prompt / the token budget steps)."""
    n = min(plan.output[1], math.ceil(concurrency * sum(plan.prompt) / 2 / plan.batched_tokens) + 8)
    asyncio.run(closed_loop(engine, draw(rng, vocab, concurrency, plan.prompt, (n, n)), concurrency, "warm"))


def _record(rec: Any, bench: str, run: Run, note: str = "") -> None:
    rec.add(f"{bench}_tok_s", SERVE, "tok/s", run.tok_s, True, note)
    for q in (50, 99):
        rec.add(f"{bench}_ttft_p{q}", SERVE, "ms", run.ttft_ms(q), False, note)
    for q in (50, 99):
        rec.add(f"{bench}_itl_p{q}", SERVE, "ms", run.itl_ms(q), False, note)


# -- parts 1 and 2: closed and open loops, against generate ---------------------------------


def _generate(
    model: Any, concurrency: int, requests: Sequence[Request], reps: int, rng: np.random.Generator
) -> tuple[float, list[float], str]:
    """generate_ids on a static batch of ``concurrency`` prompts of ``requests``'
    mean lengths: tok/s (the median of ``reps`` timed calls after an untimed
    one, from the call to the last token on the host), the gaps between its
    steps' tokens on the host (seconds), and a note saying what ran."""
    length = round(statistics.mean(len(r.prompt) for r in requests))
    new = round(statistics.mean(r.max_tokens for r in requests))
    prompts = rng.integers(0, model.config.vocab_size, (concurrency, length)).tolist()
    cfg = GenerationConfig(max_new_tokens=new, greedy=True, ignore_eos=True)
    walls, gaps = [], []
    for rep in range(reps + 1):  # the first compiles, plans and captures the graphs
        gp.synchronize()
        start = time.perf_counter()
        # each step's tokens are on the host when it yields them
        times = [time.perf_counter() for _ in generate_ids(model, prompts, cfg)]
        if len(times) != new:
            raise RuntimeError(f"generate gave {len(times)} steps, not {new}")
        if rep:
            walls.append(times[-1] - start)
            gaps += [b - a for a, b in itertools.pairwise(times)]
    model.release_decode_states()  # its cache for this batch: the next batch or the engine takes the memory
    return concurrency * new / statistics.median(walls), gaps, f"a static batch of {concurrency}: {length}-token prompts, {new} new tokens"


def _shape(rec: Any, plan: Plan, shape: str, checkpoints: _Checkpoints, first: bool) -> None:
    """Parts 1 and 2, and on the first shape part 3, on one model."""
    loops, prefix = "loops" in plan.parts, first and "prefix" in plan.parts
    if not (loops or prefix):
        return
    cfg, top = SHAPES[shape], max(plan.concurrency)
    max_len = plan.prompt[1] + plan.output[1]
    need = checkpoint_nbytes(cfg) + _kv_bytes(cfg, _cache_tokens(plan, top, max_len)) + _work_bytes(cfg, top * sum(plan.prompt) // 2)
    if not _fits(f"serve_{shape}", need):
        return
    path = checkpoints.get(shape)
    if path is None:
        return
    model = _load(path)
    if loops:
        _loops(rec, plan, shape, model)
    if prefix:
        _prefix(rec, plan, shape, model)


def _loops(rec: Any, plan: Plan, shape: str, model: Any) -> None:
    vocab, top = SHAPES[shape]["vocab_size"], max(plan.concurrency)
    max_len = plan.prompt[1] + plan.output[1]
    rng = np.random.default_rng(1)
    loads = {c: draw(rng, vocab, max(plan.rounds * c, plan.min_requests), plan.prompt, plan.output) for c in plan.concurrency}
    # generate first, alone on the device: the engine's thread is not started yet
    peers = {c: _generate(model, c, loads[c], plan.generate_reps, rng) for c in plan.concurrency}
    engine = Engine(model, shape, engine_config(plan, top, max_len))
    engine.start()
    try:
        _warm(engine, plan, rng, vocab, top)
        runs = {c: asyncio.run(closed_loop(engine, loads[c], c)) for c in plan.concurrency}
        rate = POISSON_LOAD * len(runs[top].traces) / runs[top].wall
        opened = asyncio.run(poisson(engine, draw(rng, vocab, plan.poisson_requests, plan.prompt, plan.output), rate, seed=2))
    finally:
        engine.stop()
    for c in plan.concurrency:
        bench, served = f"serve_{shape}_c{c}", runs[c]
        tok_s, gaps, note = peers[c]
        _record(rec, bench, served, f"closed loop, {len(served.traces)} requests")
        rec.add(f"{bench}_tok_s", "generate", "tok/s", tok_s, True, note)
        step = "the gaps between its steps' tokens" + (" (the batch-1 step time, ms per token after the first)" if c == 1 else "")
        for q in (50, 99):
            rec.add(f"{bench}_itl_p{q}", "generate", "ms", float(np.percentile(gaps, q)) * 1e3, False, f"{step}; {note}")
        target = "; target >= 0.8x" if c == 32 else ""
        rec.add(f"{bench}_tok_s_vs_generate", SERVE, "x", served.tok_s / tok_s, True, f"tok/s over generate's static batch{target}")
        if c == 1:
            ratio = served.itl_ms(50) / (float(np.percentile(gaps, 50)) * 1e3)
            rec.add(f"{bench}_itl_p50_vs_generate", SERVE, "x", ratio, False, "ITL p50 over generate's batch-1 step time; target <= 1.15x")
    note = f"Poisson arrivals at {rate:.3g} requests/s ({POISSON_LOAD}x the closed loop's at C={top}), {plan.poisson_requests} requests"
    _record(rec, f"serve_{shape}_poisson", opened, note)


# -- part 3: prefix caching ------------------------------------------------------------------


def _prefix(rec: Any, plan: Plan, shape: str, model: Any) -> None:
    vocab, c = SHAPES[shape]["vocab_size"], plan.prefix_concurrency
    rng = np.random.default_rng(3)
    system = rng.integers(0, vocab, plan.prefix).tolist()

    def requests(n: int) -> list[Request]:
        return [
            Request(system + r.prompt, r.max_tokens)
            for r in draw(rng, vocab, n, plan.prefix_suffix, (plan.prefix_output, plan.prefix_output))
        ]

    warm, measured = requests(c), requests(plan.prefix_requests)
    max_len = plan.prefix + plan.prefix_suffix[1] + plan.prefix_output
    runs, hits = {}, {}
    for caching in (True, False):
        engine = Engine(model, f"{shape}-prefix", engine_config(plan, c, max_len, prefix_caching=caching))
        engine.start()
        try:
            # untimed: compiles, and with the cache on leaves the system prompt
            # cached, as on a server that has served it before
            asyncio.run(closed_loop(engine, warm, c, "warm"))
            stats = engine.stats()
            queries, hit = stats.prefix_cache_queries, stats.prefix_cache_hits
            runs[caching] = asyncio.run(closed_loop(engine, measured, c))
            hits[caching] = (stats.prefix_cache_hits - hit) / max(1, stats.prefix_cache_queries - queries)
        finally:
            engine.stop()
    bench = f"serve_{shape}_prefix_c{c}"
    for caching, impl in ((True, SERVE), (False, "no-prefix-cache")):
        note = f"{plan.prefix}-token shared system prompt, {len(measured)} requests; {hits[caching]:.0%} of prompt tokens from the cache"
        for q in (50, 99):
            rec.add(f"{bench}_ttft_p{q}", impl, "ms", runs[caching].ttft_ms(q), False, note)
    ratio = runs[True].ttft_ms(50) / runs[False].ttft_ms(50)
    rec.add(f"{bench}_ttft_p50_vs_no_cache", SERVE, "x", ratio, False, "TTFT p50 with the prefix cache over without; target <= 0.3x")


# -- part 4: a guaranteed model beside a best-effort one -------------------------------------


def _qos(rec: Any, plan: Plan, checkpoints: _Checkpoints) -> None:
    (g_shape, b_shape), (cg, cb) = plan.qos_shapes, plan.qos_concurrency
    g, b = SHAPES[g_shape], SHAPES[b_shape]
    max_len = plan.prompt[1] + plan.output[1]
    # the guaranteed engine's reservation (and its partition's quota): its KV cache and activations; the weights load before
    reserve = _kv_bytes(g, _cache_tokens(plan, cg, max_len)) + _work_bytes(g, plan.batched_tokens)
    b_need = _kv_bytes(b, _cache_tokens(plan, cb, max_len)) + _work_bytes(b, plan.batched_tokens)
    if not _fits(f"serve_{g_shape}_c{cg}_guaranteed", checkpoint_nbytes(g) + reserve + checkpoint_nbytes(b) + b_need):
        return
    g_path, b_path = checkpoints.get(g_shape), checkpoints.get(b_shape)
    if g_path is None or b_path is None:
        return
    rng = np.random.default_rng(4)
    requests = draw(rng, g["vocab_size"], plan.qos_requests, plan.prompt, plan.output)
    # compute share 1: a partition's share paces only its best-effort launches
    part = gp.scheduler.partition(PARTITION, memory=reserve, compute=1.0)
    g_model, b_model = _load(g_path), _load(b_path)
    g_engine = Engine(g_model, f"{g_shape}-guaranteed", engine_config(plan, cg, max_len))
    g_engine.start(qos="guaranteed", partition=part.name, memory=reserve)
    try:
        _warm(g_engine, plan, rng, g["vocab_size"], cg)
        alone = asyncio.run(closed_loop(g_engine, requests, cg))
        b_engine = Engine(b_model, f"{b_shape}-best-effort", engine_config(plan, cb, max_len))
        b_engine.start(qos="best_effort")
        try:
            _warm(b_engine, plan, rng, b["vocab_size"], cb)
            beside, b_tok_s = asyncio.run(
                _beside(g_engine, requests, cg, b_engine, lambda: draw(rng, b["vocab_size"], 1, plan.prompt, plan.output)[0], cb)
            )
        finally:
            b_engine.stop()
    finally:
        g_engine.stop()
    bench = f"serve_{g_shape}_c{cg}_guaranteed"
    note = f"guaranteed QoS, beside {b_shape} (best effort) at C={cb}; {len(requests)} requests"
    for q in (50, 99):
        rec.add(f"{bench}_itl_p{q}", SERVE, "ms", beside.itl_ms(q), False, note)
        rec.add(f"{bench}_itl_p{q}", "solo", "ms", alone.itl_ms(q), False, "the same engine and requests, alone on the device")
    ratio = beside.itl_ms(99) / alone.itl_ms(99)
    rec.add(f"{bench}_itl_p99_vs_solo", SERVE, "x", ratio, False, "ITL p99 beside the best-effort model over alone; target <= 1.5x")
    rec.add(
        f"serve_{b_shape}_c{cb}_best_effort_tok_s", SERVE, "tok/s", b_tok_s, True, f"best effort, beside {g_shape} (guaranteed) at C={cg}"
    )
