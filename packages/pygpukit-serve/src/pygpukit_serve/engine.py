"""The engine: one model, many requests, continuous batching.

A thread of its own runs steps (inside a pygpukit scheduler task, so the
model's KV cache and launches are charged to its partition and QoS tier).
Each step:

1. takes in new requests and aborts (``add_request`` / ``abort`` are called
   on the event loop's thread and only queue a command);
2. admits waiting requests while there are sequence slots and KV blocks: the
   BlockManager (blocks.py) gives each prompt its blocks, reusing the blocks
   of an identical prompt prefix already in the cache (prefix caching);
3. runs the prompt tokens still to compute, in chunks within a per-step token
   budget (``max_num_batched_tokens``), so a long prompt does not stall the
   running sequences for more than a chunk: the chunks of prompts starting at
   token 0 in one right-padded forward, those after cached tokens (a prefix
   hit, a long prompt's later chunks) one forward each;
4. decodes one token for every running sequence in one batched forward over
   a view of the paged KV cache (pygpukit_nn's ``PagedKVCache.view``: the
   batch changes every step, the blocks stay where they are);
5. samples (penalties, temperature, top-k/p, min-p; a seeded request draws
   from its own generator, so its tokens do not depend on its batch),
   detokenizes, checks EOS, stop strings and limits, and hands each request
   its Output through its asyncio queue; finished sequences free their
   blocks at once.

When a decode step finds no free block, the youngest running sequence is
preempted: its blocks go back and it waits at the head of the queue to be
recomputed (prompt and the tokens it already produced), losing nothing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit_llm import StopStrings, StreamDecoder
from pygpukit_nn import sampling
from pygpukit_nn.kv_cache import PagedKVCache

from .blocks import BlockManager, OutOfBlocks
from .metrics import EngineStats
from .protocol import token_text
from .types import Output, QueueFull, SamplingParams, ServeError, TokenLogprob, Unavailable

__all__ = ["Engine", "EngineConfig"]

log = logging.getLogger("pygpukit_serve")


@dataclass(frozen=True)
class EngineConfig:
    """``max_model_len``: prompt plus output tokens of one request (default the
    model's context, at most 4096); ``num_blocks``: KV-cache blocks of
    ``block_size`` tokens (default: enough for ``max_num_seqs`` full-length
    sequences); ``max_num_batched_tokens``: tokens one step computes (prompt
    chunks plus one per decoding sequence); ``max_waiting``: requests queued
    before new ones get 429; ``cuda_graphs``: replay the decode step as a CUDA
    graph captured per batch size (powers of two up to ``max_num_seqs``; GPU only)."""

    max_num_seqs: int = 32
    max_model_len: int | None = None
    block_size: int = 16
    num_blocks: int | None = None
    max_num_batched_tokens: int = 2048
    max_waiting: int = 256
    prefix_caching: bool = True
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "block_size", "max_num_batched_tokens", "max_waiting"):
            _positive(name, getattr(self, name))
        for name in ("max_model_len", "num_blocks"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"EngineConfig: {name} must be an int >= 1, got {value!r}")


class _DecodeGraph:
    """A decode step of ``size`` sequences captured as a CUDA graph: its view of
    the cache (block table and lengths rewritten before each replay), its input
    buffers and the logits it writes."""

    def __init__(self, cache: PagedKVCache, size: int) -> None:
        self.view = cache.view(size)
        self.view.plan_capacity = True  # the same launch at every length, as a replay needs
        self.ids = gp.zeros((size, 1), gp.int32)
        self.positions = gp.zeros((size, 1), gp.int32)
        self.graph: Any = None
        self.logits: gp.GPUArray | None = None


class _Stream:
    """A request's Outputs, delivered from the engine thread to the event loop."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Output | BaseException] = asyncio.Queue()
        self._done = False

    def put(self, item: Output | BaseException) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> Output:
        if self._done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        self._done = item.finished
        return item


class _Seq:
    """A request inside the engine."""

    def __init__(self, rid: str, prompt: list[int], params: SamplingParams, stream: _Stream, tokenizer: Any) -> None:
        self.id, self.prompt, self.params, self.stream = rid, prompt, params, stream
        self.queued = True  # counted in Engine._queued until first admitted (a preempted one comes back uncounted)
        self.tokens = list(prompt)  # the prompt, then each generated token
        self.computed = 0  # tokens whose K and V are in the cache
        self.cached = 0  # prompt tokens the prefix cache gave
        self.decoder = StreamDecoder(tokenizer)
        self.stops = StopStrings(params.stop) if params.stop else None
        self.generator = None if params.seed is None else gp.random.Generator(params.seed)
        self.arrival = time.perf_counter()
        self.last_token: float | None = None

    @property
    def out(self) -> list[int]:
        return self.tokens[len(self.prompt) :]

    @property
    def generated(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def pending(self) -> int:
        """Tokens to run through the model before the next one can be sampled."""
        return len(self.tokens) - self.computed

    def advance(self, blocks: BlockManager, n: int) -> None:
        """``n`` more tokens' K and V are in the cache: blocks they filled become shareable."""
        size = blocks.block_size
        self.computed += n
        if self.computed // size > (self.computed - n) // size:
            blocks.commit(self.id, self.tokens[: self.computed])


class Engine:
    """Serves one model: ``add_request`` from the event loop, Outputs back as
    an async iterator (types.RequestStream). ``start()`` starts the step thread
    (inside a scheduler task of ``qos`` in ``partition``); ``stop()`` ends it,
    failing what is still queued or running."""

    def __init__(self, model: Any, name: str, config: EngineConfig | None = None, tokenizer: Any = None) -> None:
        self.model, self.name = model, name
        self.config = cfg = config or EngineConfig()
        self.tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        if self.tokenizer is None:
            raise ValueError(f"Engine {name!r}: the model has no tokenizer (tokenizer.json in its directory) and none was given")
        mc = model.config
        limit = mc.max_position_embeddings
        self.max_model_len = min(limit, 4096) if cfg.max_model_len is None else cfg.max_model_len
        if self.max_model_len > limit:
            raise ValueError(f"Engine {name!r}: max_model_len={self.max_model_len} is longer than the model's context ({limit})")
        per_seq = -(-self.max_model_len // cfg.block_size)
        self.num_blocks = cfg.num_blocks if cfg.num_blocks is not None else cfg.max_num_seqs * per_seq
        if self.num_blocks < per_seq:
            raise ValueError(f"Engine {name!r}: num_blocks={self.num_blocks} cannot hold one sequence of max_model_len={self.max_model_len} "
                             f"tokens ({per_seq} blocks of {cfg.block_size})")  # fmt: skip
        self.blocks = BlockManager(self.num_blocks, cfg.block_size, cfg.prefix_caching)
        self.eos = frozenset(self.tokenizer.eos_token_ids)
        self._stats = EngineStats()
        self._stats.kv_blocks_total = self.num_blocks
        self._commands: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._queued = 0  # requests added and not yet admitted (the bound of max_waiting)
        self._waiting: collections.deque[_Seq] = collections.deque()
        self._running: list[_Seq] = []
        self._sampler = gp.random.Generator()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._cache: Any = None
        self._views: dict[int, Any] = {}
        # decode steps captured as CUDA graphs, one per batch size of _buckets (not on the CPU backend, whose
        # references read the cache lengths on the host, nor for MoE models, whose routing reads counts back)
        self._graphs: dict[int, _DecodeGraph] | None = {} if cfg.cuda_graphs and gp.backend() == "cuda" and not model.spec.moe else None
        self._buckets = sorted({*(1 << i for i in range(cfg.max_num_seqs.bit_length()) if 1 << i < cfg.max_num_seqs), cfg.max_num_seqs})

    # -- the event loop's side ---------------------------------------------------------

    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> _Stream:
        n = len(prompt_ids)
        if n == 0:
            raise ServeError("the prompt is empty", "prompt")
        if n + params.max_tokens > self.max_model_len:
            raise ServeError(f"this model's context is {self.max_model_len} tokens; the prompt has {n} and max_tokens asks for "
                             f"{params.max_tokens} more ({n + params.max_tokens} in all)", "max_tokens", "context_length_exceeded")  # fmt: skip
        if self._thread is None or not self._thread.is_alive():
            raise Unavailable(f"model {self.name!r} is not running", None, "engine_stopped")
        with self._lock:
            if self._queued >= self.config.max_waiting:
                raise QueueFull(f"model {self.name!r} has {self._queued} requests waiting (the limit); retry later")
            self._queued += 1
        stream = _Stream(request_id)
        self._commands.put(("add", _Seq(request_id, list(prompt_ids), params, stream, self.tokenizer)))
        self._wake.set()
        return stream

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))
        self._wake.set()

    def stats(self) -> EngineStats:
        return self._stats

    # -- life cycle ----------------------------------------------------------------------

    def start(self, qos: str = "burstable", partition: str = "default", memory: int | str | None = None) -> None:
        """Start the step thread; returns once the KV cache is allocated (or raises what allocating it raised)."""
        if self._thread is not None:
            raise RuntimeError(f"Engine {self.name!r} is already started")
        ready: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        task = gp.scheduler.task(f"serve:{self.name}", qos=qos, partition=partition, memory=memory)
        self._thread = threading.Thread(target=self._main, args=(task, ready), name=f"pygpukit-serve:{self.name}", daemon=True)
        self._thread.start()
        error = ready.get()
        if error is not None:
            self._thread.join()
            raise error

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def _main(self, task: Any, ready: queue.SimpleQueue[BaseException | None]) -> None:
        try:
            task.__enter__()
            mc = self.model.config
            # one block more than the BlockManager hands out: the padding rows of a captured decode step write there
            self._cache = PagedKVCache(self.num_blocks + 1, self.config.block_size, mc.num_kv_heads, mc.head_dim, self.model.dtype, batch=1,
                                       max_seq=self.max_model_len, num_layers=mc.num_layers)  # fmt: skip
        except BaseException as exc:
            ready.put(exc)
            return
        ready.put(None)
        try:
            while not self._stopping:
                self._take_commands()
                if not self._waiting and not self._running:
                    self._wake.wait(0.5)
                    self._wake.clear()
                    continue
                self.step()
        finally:
            for seq in [*self._waiting, *self._running]:
                seq.stream.put(Unavailable(f"model {self.name!r} stopped", None, "engine_stopped"))
            task.__exit__(None, None, None)

    # -- one step --------------------------------------------------------------------------

    def _take_commands(self) -> None:
        while True:
            try:
                what, arg = self._commands.get_nowait()
            except queue.Empty:
                return
            if what == "add":
                self._waiting.append(arg)
            else:
                self._drop(arg)
                self._publish()

    def _drop(self, rid: str) -> None:
        for seq in self._waiting:
            if seq.id == rid:
                self._waiting.remove(seq)
                self._admitted(seq)
                self._finish(seq, "abort")
                return
        for seq in self._running:
            if seq.id == rid:
                self._running.remove(seq)
                self._finish(seq, "abort")
                return

    def _admitted(self, seq: _Seq) -> None:
        if seq.queued:
            with self._lock:
                self._queued -= 1
            seq.queued = False

    def step(self) -> None:
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        # admit: the queue's head first (a preempted sequence is put back there)
        while self._waiting and len(self._running) < cfg.max_num_seqs:
            seq = self._waiting[0]
            tokens = seq.tokens
            if not self.blocks.can_allocate(tokens):
                break
            self._waiting.popleft()
            self._admitted(seq)
            seq.computed = self.blocks.allocate(seq.id, tokens)
            if not seq.generated:
                seq.cached = seq.computed
                self._stats.record_prefix_cache(len(tokens), seq.computed)
            self._running.append(seq)
        decoding = [s for s in self._running if s.pending == 1]
        budget -= len(decoding)
        # prompt chunks from token 0 (batched), and after cached tokens (one by one)
        fresh: list[tuple[_Seq, int]] = []
        resumed: list[tuple[_Seq, int]] = []
        for seq in (s for s in self._running if s.pending > 1):
            if budget <= 0:
                break
            chunk = min(seq.pending, budget)
            budget -= chunk
            (resumed if seq.computed else fresh).append((seq, chunk))
        if fresh:
            self._guarded([s for s, _ in fresh], self._prefill, fresh)
        for item in resumed:
            self._guarded([item[0]], self._prefill, [item])
        decoding = [s for s in decoding if s in self._running]
        if decoding:
            decoding = self._make_room(decoding)
            if decoding:
                self._guarded(decoding, self._decode, decoding)
        self._publish()

    def _publish(self) -> None:
        """The gauges of /metrics: after every step, and after commands (an abort frees blocks without a step)."""
        with self._lock:  # added but not admitted, and preempted ones back in the queue
            self._stats.waiting = self._queued + sum(1 for s in self._waiting if not s.queued)
        self._stats.running = len(self._running)
        self._stats.kv_blocks_used = self.blocks.used_blocks

    def _guarded(self, seqs: list[_Seq], fn: Any, *args: Any) -> None:
        """Run one forward; an exception fails only the requests in it."""
        try:
            fn(*args)
        except Exception as exc:
            log.exception("model %s: a step failed for requests %s", self.name, [s.id for s in seqs])
            for seq in seqs:
                if seq in self._running:
                    self._running.remove(seq)
                self.blocks.free(seq.id)
                seq.stream.put(exc)
                self._stats.record_finished("error")

    def _make_room(self, decoding: list[_Seq]) -> list[_Seq]:
        """Blocks for one more token of each decoding sequence, preempting the youngest running ones when there are none."""
        for seq in sorted(decoding, key=lambda s: s.arrival):
            while seq in self._running:
                try:
                    self.blocks.grow(seq.id, seq.computed + 1)
                    break
                except OutOfBlocks:
                    victim = max(self._running, key=lambda s: s.arrival)
                    self._preempt(victim)
        return [s for s in decoding if s in self._running]

    def _preempt(self, seq: _Seq) -> None:
        self._running.remove(seq)
        self.blocks.free(seq.id)
        seq.computed = 0
        self._waiting.appendleft(seq)
        self._stats.record_preemption()

    def _view(self, n: int, seqs: Sequence[_Seq]) -> Any:
        view = self._views.get(n)
        if view is None:
            view = self._views[n] = self._cache.view(n)
        view.assign([self.blocks.blocks(s.id) for s in seqs], [s.computed for s in seqs])
        return view

    def _prefill(self, items: list[tuple[_Seq, int]]) -> None:
        """Prompt chunks (sequence, tokens): several sequences from token 0 in one
        right-padded forward that appends each row's count, or one sequence's
        chunk after its cached tokens (attention over a cache takes one length a
        batch). A sequence whose prompt is then in samples its first token."""
        seqs, counts = [s for s, _ in items], [c for _, c in items]
        b, t, start = len(items), max(counts), seqs[0].computed
        ids = np.zeros((b, t), np.int32)
        for r, (seq, c) in enumerate(items):
            ids[r, :c] = seq.tokens[seq.computed : seq.computed + c]
        ragged = np.asarray(counts) if min(counts) != t else None
        hidden = self.model.hidden_states(gp.from_numpy(ids), gp.arange(start, start + t, dtype=gp.int32), self._view(b, seqs), ragged,
                                          check_ids=False)  # fmt: skip
        done = []
        for r, (seq, c) in enumerate(items):
            seq.advance(self.blocks, c)
            if seq.pending == 0:
                done.append(r)
        if done:  # each finished prompt's last position gives its first token
            rows = gp.from_numpy(np.asarray([r * t + counts[r] - 1 for r in done], np.int64))
            last = gp.take(hidden.reshape(b * t, -1), rows, axis=0, mode="clip")
            self._sample([seqs[r] for r in done], self.model.logits(last))

    def _decode(self, seqs: list[_Seq]) -> None:
        n = len(seqs)
        ids = np.asarray([[s.tokens[-1]] for s in seqs], np.int32)
        positions = np.asarray([[s.computed] for s in seqs], np.int32)
        if self._graphs is not None:
            logits = self._replay(seqs, ids, positions)
        else:
            logits = self._forward(gp.from_numpy(ids), gp.from_numpy(positions), self._view(n, seqs)).reshape(n, -1)
        for s in seqs:
            s.advance(self.blocks, 1)
        self._sample(seqs, logits)

    def _forward(self, ids: gp.GPUArray, positions: gp.GPUArray, view: Any) -> gp.GPUArray:
        """Logits of a decode step (every row's one token)."""
        return self.model.logits(self.model.hidden_states(ids, positions, view, check_ids=False))  # type: ignore[no-any-return]

    def _replay(self, seqs: list[_Seq], ids: np.ndarray, positions: np.ndarray) -> gp.GPUArray:
        """The decode step of the smallest captured batch size that holds ``seqs``
        (captured at its first use); the rows past them decode token 0 into the
        scratch block, and their logits are left out."""
        n = len(seqs)
        size = next(b for b in self._buckets if b >= n)
        g = self._graphs.get(size)  # type: ignore[union-attr]
        if g is None:
            g = self._graphs[size] = _DecodeGraph(self._cache, size)  # type: ignore[index]
        pad = size - n
        g.view.assign(
            [*(self.blocks.blocks(s.id) for s in seqs), *([[self.num_blocks]] * pad)], [*(s.computed for s in seqs), *([0] * pad)]
        )
        g.ids[...] = np.pad(ids, ((0, pad), (0, 0)))
        g.positions[...] = np.pad(positions, ((0, pad), (0, 0)))
        if g.graph is None:
            try:
                with g.view.capturing(), gp.graph() as graph:
                    g.logits = self._forward(g.ids, g.positions, g.view).reshape(size, -1)
            except gp.GraphCaptureError:  # an op without a capturable implementation here: decode eagerly from now on
                log.warning("model %s: the decode step cannot be captured as a CUDA graph; decoding eagerly", self.name)
                self._graphs = None
                return self._forward(gp.from_numpy(ids), gp.from_numpy(positions), self._view(n, seqs)).reshape(n, -1)
            g.graph = graph
        g.graph.replay()
        return g.logits[:n]  # type: ignore[index]

    # -- sampling and what the requests get ---------------------------------------------

    def _sample(self, seqs: list[_Seq], logits: gp.GPUArray) -> None:
        # config.json's vocabulary may be padded past the tokenizer's: those ids decode to nothing
        logits = logits[:, : self.tokenizer.vocab_size].astype(gp.float32)
        if any(_penalized(s.params) for s in seqs):
            logits = self._penalize(seqs, logits)
        rows: dict[int, int] = {}
        tops = {i: s.params.logprobs for i, s in enumerate(seqs) if s.params.logprobs is not None}
        host = logits.to_numpy()[list(tops)] if tops else None  # before sampling: penalized, not yet tempered
        shared = [i for i, s in enumerate(seqs) if s.generator is None]
        if shared:
            sub = logits if len(shared) == len(seqs) else logits[np.asarray(shared)]
            col = _columns([seqs[i].params for i in shared])
            drawn = sampling.sample(sub, generator=self._sampler, **col).to_numpy()
            rows.update(zip(shared, (int(t) for t in drawn.tolist())))
        for i, s in enumerate(seqs):
            if s.generator is not None:
                p = s.params
                rows[i] = int(sampling.sample(logits[i : i + 1], temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
                                              generator=s.generator).to_numpy()[0])  # fmt: skip
        logprobs = {} if host is None else dict(zip(tops, _logprobs(host, [rows[i] for i in tops], list(tops.values()))))
        now = time.perf_counter()
        for i, s in enumerate(seqs):
            self._deliver(s, rows[i], logprobs.get(i), now)

    def _penalize(self, seqs: list[_Seq], logits: gp.GPUArray) -> gp.GPUArray:
        """Repetition over prompt and output tokens, presence and frequency over the output's (as vLLM and OpenAI)."""

        def ids(lists: list[list[int]]) -> gp.GPUArray:
            width = max(1, *(len(x) for x in lists))
            a = np.full((len(lists), width), -1, np.int32)
            for r, x in enumerate(lists):
                a[r, : len(x)] = x
            return gp.from_numpy(a)

        rep = gp.from_numpy(np.asarray([s.params.repetition_penalty for s in seqs], np.float32))
        logits = sampling.apply_penalties(logits, ids=ids([s.tokens for s in seqs]), repetition_penalty=rep)
        pres = gp.from_numpy(np.asarray([s.params.presence_penalty for s in seqs], np.float32))
        freq = gp.from_numpy(np.asarray([s.params.frequency_penalty for s in seqs], np.float32))
        return sampling.apply_penalties(logits, ids=ids([s.out for s in seqs]), presence_penalty=pres, frequency_penalty=freq)

    def _deliver(self, seq: _Seq, token: int, logprob: TokenLogprob | None, now: float) -> None:
        p = seq.params
        seq.tokens.append(token)
        st = self._stats
        st.record_generated(1)
        if seq.last_token is None:
            st.ttft_seconds.observe(now - seq.arrival)
            st.record_prompt(len(seq.prompt))
        else:
            st.inter_token_seconds.observe(now - seq.last_token)
        seq.last_token = now
        finish = None
        text = seq.decoder.push(token)
        if seq.stops is not None:
            text = seq.stops.feed(text)
            if seq.stops.stopped:
                finish = "stop"
        if finish is None:
            if token in self.eos and not p.ignore_eos:
                finish = "stop"
            elif seq.generated >= p.max_tokens or len(seq.tokens) >= self.max_model_len:
                finish = "length"
            if finish is not None:
                tail = seq.decoder.flush()
                text += (seq.stops.feed(tail) + seq.stops.flush()) if seq.stops is not None else tail
        out = Output(text, [token], len(seq.prompt), seq.generated, seq.cached, None if logprob is None else [logprob], finish,
                     [token_text(self.tokenizer, seq.tokens[-2], token)] if logprob is not None else [])  # fmt: skip
        seq.stream.put(out)
        if finish is not None:
            st.e2e_seconds.observe(now - seq.arrival)
            self._running.remove(seq)
            self._finish(seq, finish)

    def _finish(self, seq: _Seq, reason: str) -> None:
        self.blocks.free(seq.id)
        self._stats.record_finished(reason)
        if reason == "abort":  # an in-process caller iterating the stream sees it end
            seq.stream.put(Output("", [], len(seq.prompt), seq.generated, seq.cached, None, "abort"))


def _penalized(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0


def _columns(params: list[SamplingParams]) -> dict[str, Any]:
    """sample()'s per-row parameters: scalars when every row agrees (no uploads), else (B,) arrays."""
    out: dict[str, Any] = {}
    for name, dt in (("temperature", np.float32), ("top_k", np.int32), ("top_p", np.float32), ("min_p", np.float32)):
        values = [getattr(p, name) for p in params]
        out[name] = values[0] if len(set(values)) == 1 else gp.from_numpy(np.asarray(values, dt))
    return out


def _logprobs(host: np.ndarray, chosen: list[int], tops: list[int]) -> list[TokenLogprob]:
    """Log-probabilities of the model's distribution (after penalties, before temperature) in float64."""
    x = host.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    lp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    out = []
    for r, (tok, k) in enumerate(zip(chosen, tops)):
        top = np.argsort(-lp[r], kind="stable")[:k] if k else np.empty(0, np.int64)
        out.append(TokenLogprob(int(tok), float(lp[r, tok]), tuple((int(t), float(lp[r, t])) for t in top)))
    return out
