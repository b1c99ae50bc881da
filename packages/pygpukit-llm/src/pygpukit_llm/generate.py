"""Token generation: prefill once, then one decode step per new token over a KV cache.

A batch of prompts of different lengths is right-padded and prefilled in one
pass (causal attention keeps the padding out of every real token's view; the
cache keeps only each row's real tokens); each row's first new token comes
from its own last prompt position. Decoding then runs the whole batch one
token per step, each row at its own position; a finished row keeps running
(its tokens are dropped) until every row is done. Sampling (temperature,
top-k, top-p, min-p, penalties) runs on the device; the one sync per step
reads the new token ids back.

What a call decodes with outlives it: the KV cache, the decode step's input
buffers, its captured CUDA graph and the captured prefills of short prompts
(a ``_DecodeState``) go back to the model
when the generator ends (done, closed early or collected), and a later call
of the same batch size, cache kind and capacity takes them again instead of
allocating and capturing anew. The capacity is the prompt plus
``max_new_tokens``, rounded up (``_capacity``), so calls of similar lengths
share one. A model keeps at most ``DECODE_STATES`` idle states (the least
recently used go first); ``CausalLM.release_decode_states()`` frees them. A
call never shares a state with another under way, and a call that fails in
a step drops its state rather than give back one it may have half written.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import GraphCaptureError

from .config import ConfigError

__all__ = ["DECODE_STATES", "GenerationConfig", "StepTokens", "generate_ids"]

DECODE_STATES = 4  # idle decode states a model keeps for later calls (read when one is given back; 0 keeps none)
CAPACITY_STEP = 256  # cache capacities are multiples of this, or powers of two below it (see _capacity)
# Short prompts are right-padded to a power of two of at least PREFILL_MIN tokens while the
# batch's padded tokens stay within PREFILL_GRAPH_TOKENS, and such prefills replay a CUDA graph
# captured per padded width (see _Decoder.prefill): a short prefill is host-bound, hundreds of
# op calls for little device work. Eager prefills pad alike, so both give the same bits.
PREFILL_MIN = 16
PREFILL_GRAPH_TOKENS = 512


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate. ``temperature`` 0 (or ``greedy``) takes the argmax;
    penalties follow transformers' conventions (repetition divides positive
    logits of seen tokens, multiplies the others; presence and frequency
    subtract, as OpenAI's API does) over prompt and generated tokens.
    ``stop`` strings end a row's text before them; ``stop_ids`` (added to the
    tokenizer's end-of-sequence ids unless ``ignore_eos``) end it at that
    token. ``seed`` makes sampling reproducible."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    greedy: bool = False
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    stop_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None
    paged: bool = False  # a paged KV cache instead of a contiguous one
    cuda_graph: bool = True  # replay the decode step as a CUDA graph (GPU only; not MoE: its routing reads counts back)

    def __post_init__(self) -> None:
        checks = (
            ("max_new_tokens", isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1, "an int >= 1"),
            ("temperature", self.temperature >= 0, ">= 0"),
            ("top_k", isinstance(self.top_k, int) and self.top_k >= 0, "an int >= 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("min_p", 0 <= self.min_p < 1, "in [0, 1)"),
            ("repetition_penalty", self.repetition_penalty > 0, "> 0"),
        )
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"GenerationConfig: {name} must be {want}, got {getattr(self, name)!r}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"GenerationConfig: stop strings must be non-empty strings, got {self.stop!r}")

    def with_(self, **kw: Any) -> GenerationConfig:
        return replace(self, **kw)

    @property
    def penalized(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0


@dataclass
class StepTokens:
    """One decode step: a token per row, and which rows were still running."""

    tokens: np.ndarray  # (batch,) int
    active: np.ndarray  # (batch,) bool: the row had not finished before this step


def _check_prompts(prompts: Sequence[Sequence[int]], vocab: int) -> list[np.ndarray]:
    if not len(prompts):
        raise ValueError("generate: no prompts")
    out = []
    for i, p in enumerate(prompts):
        a = np.asarray(p)
        if a.ndim != 1 or a.size == 0 or a.dtype.kind not in "iu":
            raise ValueError(f"generate: prompt {i} must be a non-empty list of token ids, got {p!r:.80}")
        if a.min() < 0 or a.max() >= vocab:
            raise ValueError(f"generate: prompt {i} has token ids outside [0, {vocab})")
        out.append(a.astype(np.int32))
    return out


def _prefill_width(longest: int, batch: int, limit: int) -> int:
    """The padded width of a batch's prompts (see PREFILL_GRAPH_TOKENS), no more
    than the model's positions (``limit``)."""
    width = min(max(PREFILL_MIN, 1 << (longest - 1).bit_length()), limit)
    return width if batch * width <= PREFILL_GRAPH_TOKENS else longest


def _capacity(tokens: int, limit: int) -> int:
    """The cache capacity for ``tokens`` tokens a sequence: rounded up to a
    multiple of CAPACITY_STEP, or to the power of two above when that is less,
    at most ``limit``. Decode attention splits the keys by the power of two
    above the capacity (``plan_capacity``), and no rounding here passes it: a
    call gives the tokens a cache of exactly ``tokens`` would."""
    return min(-(-tokens // CAPACITY_STEP) * CAPACITY_STEP, 1 << (tokens - 1).bit_length(), limit)


class _DecodeState:
    """What decoding keeps between calls, for one (batch, paged, capacity): the
    cache, the decode step's input buffers, its captured graph and the logits
    that graph writes, and the captured prefills of each padded width (their
    activations stay in the graphs' pools). One call uses it at a time."""

    def __init__(self, model: Any, batch: int, paged: bool, capacity: int) -> None:
        self.key = (batch, paged, capacity)
        self.cache = model.new_cache(batch, capacity, paged=paged)
        self.cache.plan_capacity = True  # graph and eager steps make the same launches, so they give the same tokens
        # the decode step's inputs live in fixed buffers, so that a captured graph reads them on every replay
        self.ids = gp.zeros((batch, 1), gp.int32)
        self.positions = gp.zeros((batch, 1), gp.int32)
        # (the CPU backend's references read cache lengths on the host, so its steps run eagerly)
        self.graphable = not model.spec.moe and gp.backend() == "cuda"
        self.graph: Any = None
        self.logits: gp.GPUArray | None = None
        # padded width -> (captured prefill, its ids and last-row buffers, the logits it writes)
        self.prefills: dict[int, tuple[Any, gp.GPUArray, gp.GPUArray, gp.GPUArray]] = {}
        self.prefill_graphable = self.graphable
        self.done: gp.Event | None = None  # recorded behind the work of the last call that used it

    def begin(self) -> None:
        """Ready for a call on the current stream: behind the last call's work (a
        step it queued ahead and dropped may still run, on its stream), with
        an empty cache; a paged one holds blocks for the whole capacity, as
        a replay takes none."""
        if self.done is not None:
            gp.current_stream().wait_event(self.done)
        self.cache.reset()
        batch, paged, capacity = self.key
        if paged:
            for b in range(batch):
                self.cache.reserve(b, capacity)


class DecodeStates:
    """A model's idle decode states, least recently given back first."""

    def __init__(self) -> None:
        self._idle: list[_DecodeState] = []
        # reentrant: a generator collected while this thread holds it gives its state back
        self._lock = threading.RLock()

    def take(self, key: tuple[int, bool, int]) -> _DecodeState | None:
        """The most recently given back state of ``key``, out of the pool; None if there is none."""
        with self._lock:
            for i in reversed(range(len(self._idle))):
                if self._idle[i].key == key:
                    return self._idle.pop(i)
        return None

    def give(self, state: _DecodeState) -> None:
        """Put ``state`` back, dropping the least recently used past DECODE_STATES."""
        with self._lock:
            self._idle.append(state)
            del self._idle[: max(0, len(self._idle) - DECODE_STATES)]

    def clear(self) -> int:
        """Drop every idle state; returns how many there were."""
        with self._lock:
            n = len(self._idle)
            self._idle.clear()
        return n


class _Decoder:
    """One call's decoding of a batch: prompts, sampling, penalty history and
    steps, over a decode state taken from the model (``finish`` gives it back)."""

    def __init__(self, model: Any, prompts: list[np.ndarray], cfg: GenerationConfig, vocab_limit: int | None = None) -> None:
        self.model, self.cfg, self.vocab_limit = model, cfg, vocab_limit
        self.batch = len(prompts)
        self.lengths = np.array([len(p) for p in prompts], np.int64)
        longest = int(self.lengths.max())
        limit = model.config.max_position_embeddings
        if longest + cfg.max_new_tokens > limit:
            raise ConfigError(
                f"a prompt of {longest} tokens plus {cfg.max_new_tokens} new ones is longer than the model allows ({limit} tokens)"
            )
        self.padded = np.zeros((self.batch, _prefill_width(longest, self.batch, limit)), np.int32)
        for b, p in enumerate(prompts):
            self.padded[b, : len(p)] = p
        self.generator = gp.random.Generator(cfg.seed)
        self.history = None
        if cfg.penalized:  # prompt and generated ids, -1 where nothing is yet
            self.history = np.full((self.batch, longest + cfg.max_new_tokens), -1, np.int32)
            self.history[:, :longest] = np.where(np.arange(longest)[None, :] < self.lengths[:, None], self.padded[:, :longest], -1)
        self.step = 0
        self.ready, self.side = gp.Event(), gp.Stream()  # generate_ids' pipelined reads
        self.stream = gp.current_stream()  # where this call queues its work
        self.state = self._take(model, (self.batch, cfg.paged, _capacity(longest + cfg.max_new_tokens, limit)))
        self.state.begin()
        self.cache = self.state.cache
        self.use_graph = cfg.cuda_graph and self.state.graphable

    @staticmethod
    def _take(model: Any, key: tuple[int, bool, int]) -> _DecodeState:
        state = model._decode_states.take(key)
        if state is not None:
            return state
        try:
            return _DecodeState(model, *key)
        except gp.OutOfMemoryError:  # idle states of other shapes may hold the memory: without them it may fit
            if not model.release_decode_states():
                raise
        return _DecodeState(model, *key)  # (out of the except: its traceback holds the half-made state's arrays)

    def finish(self, keep: bool) -> None:
        """The call is over: give the state back to the model (``keep``), or drop it
        (a step failed, and may have left it half written)."""
        if keep:
            self.state.done = gp.Event().record(self.stream)
            self.model._decode_states.give(self.state)

    def prefill(self) -> gp.GPUArray:
        """Logits (batch, vocab) of each row's last prompt token, the prompts
        appended to the cache. A padded width of PREFILL_GRAPH_TOKENS or less
        replays the state's graph of that width (captured by its first call),
        its inputs written into the graph's buffers first."""
        b, t = self.padded.shape
        rows = (np.arange(b) * t + self.lengths - 1).astype(np.int64)
        st = self.state
        if not (self.use_graph and st.prefill_graphable and b * t <= PREFILL_GRAPH_TOKENS):
            ragged = bool((self.lengths != t).any())
            return self._prefill(gp.asarray(self.padded), self.lengths if ragged else None, gp.from_numpy(rows))
        self.cache.stage_counts(self.lengths)  # (the counts always: one graph serves full and ragged batches)
        entry = st.prefills.get(t)
        if entry is None:
            ids, last = gp.from_numpy(self.padded), gp.from_numpy(rows)
            try:
                with self.cache.capturing(), gp.graph() as graph:
                    logits = self._prefill(ids, self.lengths, last)
            except GraphCaptureError:  # an op without a capturable implementation here: later calls run it eagerly
                st.prefill_graphable = False
                return self.prefill()
            entry = st.prefills[t] = (graph, ids, last, logits)
        else:
            entry[1][...], entry[2][...] = self.padded, rows
        entry[0].replay()
        self.cache.advance(self.lengths)
        return entry[3]

    def _prefill(self, ids: gp.GPUArray, counts: np.ndarray | None, rows: gp.GPUArray) -> gp.GPUArray:
        b, t = ids.shape
        hidden = self.model.hidden_states(ids, None, self.cache, counts, check_ids=False)
        last = gp.take(hidden.reshape(b * t, -1), rows, axis=0, mode="clip")  # (rows made here: in range, no check to wait for)
        return self.model.logits(last)

    def decode(self, tokens: gp.GPUArray) -> gp.GPUArray:
        """Logits (batch, vocab) of the step after ``tokens`` (batch,) on the device."""
        st = self.state
        st.ids[...] = tokens.reshape(self.batch, 1)
        if self.step == 1:
            st.positions[...] = gp.from_numpy(self.lengths.astype(np.int32).reshape(self.batch, 1))
        else:
            gp.add(st.positions, 1, out=st.positions)  # in place: a step allocates nothing
        if not self.use_graph:
            return self._step()
        if st.graph is None:  # captured once per state: later calls replay it over their own inputs
            try:
                with self.cache.capturing(), gp.graph() as graph:
                    logits = self._step()
            except GraphCaptureError:  # an op without a capturable implementation here (e.g. a float32 reference): later calls skip trying
                st.graphable = self.use_graph = False
                return self._step()
            st.graph, st.logits = graph, logits
        st.graph.replay()
        self.cache.advance(1)
        return st.logits

    def _step(self) -> gp.GPUArray:
        st = self.state
        return self.model(st.ids, st.positions, self.cache, check_ids=False).reshape(self.batch, -1)

    def sample(self, logits: gp.GPUArray) -> gp.GPUArray:
        """This step's tokens (batch,) on the device, queued behind ``logits``."""
        from pygpukit_nn import sampling

        cfg = self.cfg
        if self.vocab_limit is not None and self.vocab_limit < logits.shape[-1]:
            logits = logits[:, : self.vocab_limit]
        if self.history is not None:
            logits = sampling.apply_penalties(
                logits.astype(gp.float32), ids=gp.from_numpy(self.history), repetition_penalty=cfg.repetition_penalty,
                presence_penalty=cfg.presence_penalty, frequency_penalty=cfg.frequency_penalty,
            )  # fmt: skip
        greedy = cfg.greedy or cfg.temperature == 0
        tok = sampling.sample(
            logits, temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, min_p=cfg.min_p, greedy=greedy, generator=self.generator
        )
        self.step += 1
        return tok

    def fetch(self, tok: gp.GPUArray, queued_after: bool = False) -> np.ndarray:
        """The tokens ``tok`` of the latest sample on the host. ``queued_after``:
        more work was queued since ``self.ready`` was recorded behind them, so
        wait for the event and read on the side stream, not behind that work."""
        if queued_after:
            self.ready.synchronize()
        with self.side if queued_after else contextlib.nullcontext():
            out = tok.to_numpy().astype(np.int64)
        if self.history is not None:  # (penalized runs are not pipelined: tok is the latest sample)
            self.history[np.arange(self.batch), self.lengths + self.step - 1] = out
        return out


def generate_ids(
    model: Any, prompts: Sequence[Sequence[int]], cfg: GenerationConfig, stop_ids: Sequence[int] = (), finished: np.ndarray | None = None,
    vocab_limit: int | None = None,
) -> Iterator[StepTokens]:  # fmt: skip
    """Yield each step's new tokens for a batch of tokenized prompts, until every
    row has produced a stop id or ``cfg.max_new_tokens`` tokens. ``finished``
    (batch bools, owned by the caller) ends rows from outside, e.g. on a stop
    string: it is read after every step. ``vocab_limit`` samples only ids below
    it (a tokenizer smaller than the model's padded vocabulary). The cache and
    the captured decode step come from the model's idle decode states and go
    back when the generator ends (see the module doc)."""
    arrays = _check_prompts(prompts, model.config.vocab_size)
    dec = _Decoder(model, arrays, cfg, vocab_limit)
    stops = np.array(sorted(set(stop_ids) | set(cfg.stop_ids)), np.int64)
    active = np.ones(dec.batch, bool)
    # Pipelined unless penalties need each token on the host before the next
    # sampling: step t + 1 is queued before step t's tokens are read back, so
    # the host's work per token (the read, the stop checks, whatever the caller
    # does with the yield) overlaps the GPU's next step instead of idling it.
    # When generation stops, the step queued ahead is dropped unread.
    pipelined = dec.history is None
    keep = False  # whether the decode state goes back to the model: not after a failed step
    try:
        tok = dec.sample(dec.prefill())
        for step in range(cfg.max_new_tokens):
            last = step + 1 == cfg.max_new_tokens
            if pipelined and not last:
                dec.ready.record()
                ahead = dec.sample(dec.decode(tok))
                tokens = dec.fetch(tok, queued_after=True)
            else:
                tokens = dec.fetch(tok)
            yield StepTokens(tokens, active.copy())
            active &= ~np.isin(tokens, stops)
            if finished is not None:
                active &= ~finished
            if not active.any() or last:
                break
            tok = ahead if pipelined else dec.sample(dec.decode(tok))
        keep = True
    except GeneratorExit:  # closed (or collected) at a yield, between steps: the state is whole
        keep = True
        raise
    finally:
        dec.finish(keep)
