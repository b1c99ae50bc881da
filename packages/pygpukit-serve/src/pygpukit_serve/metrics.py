"""What ``/metrics`` shows: each engine's counters, gauges and latency
histograms, written by the engine's thread and read by the HTTP thread, and
their rendering in Prometheus' text exposition format 0.0.4.

The engine updates an ``EngineStats``: gauges are plain attributes it sets
each step (``waiting``, ``running``, ``kv_blocks_total``, ``kv_blocks_used``);
counters go through the ``record_*`` methods (``prompt_tokens``,
``generation_tokens``, ``preemptions``, ``prefix_cache_queries`` and
``prefix_cache_hits`` in tokens, ``requests_finished`` per finish reason);
latencies through ``ttft_seconds.observe(s)``, ``inter_token_seconds`` and
``e2e_seconds``."""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

__all__ = ["E2E_BUCKETS", "INTER_TOKEN_BUCKETS", "TTFT_BUCKETS", "EngineStats", "Histogram", "render"]

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
INTER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)

_PREFIX = "pygpukit_serve_"


class Histogram:
    """Counts of observed values in fixed buckets (upper bounds, inclusive, as
    Prometheus' ``le``), their sum and count. One writer and any number of
    readers in other threads: ``snapshot`` is consistent."""

    def __init__(self, buckets: Sequence[float]) -> None:
        bounds = [float(b) for b in buckets]
        if not bounds or bounds != sorted(set(bounds)) or not all(math.isfinite(b) for b in bounds):
            raise ValueError(f"buckets must be finite, strictly increasing and not empty, got {list(buckets)}")
        self.buckets = tuple(bounds)
        self._counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float, int]:
        """Cumulative counts per bucket (the last one is +Inf, the total count), the sum, the count."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for c in counts:
            running += c
            cumulative.append(running)
        return cumulative, total, running


class EngineStats:
    """One engine's numbers, see the module docstring. ``tokens_per_second``
    is the generation rate over the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._started = self._clock()
        self.waiting = 0
        self.running = 0
        self.kv_blocks_total = 0
        self.kv_blocks_used = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self._finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft_seconds = Histogram(TTFT_BUCKETS)
        self.inter_token_seconds = Histogram(INTER_TOKEN_BUCKETS)
        self.e2e_seconds = Histogram(E2E_BUCKETS)
        self._recent: deque[tuple[float, int]] = deque()  # (time, tokens generated then)
        self._lock = threading.Lock()

    def record_prompt(self, tokens: int) -> None:
        """A request's prompt of ``tokens`` tokens was admitted."""
        self.prompt_tokens += tokens

    def record_generated(self, tokens: int) -> None:
        """A step produced ``tokens`` new tokens (over all running requests)."""
        now = self._clock()
        with self._lock:
            self.generation_tokens += tokens
            self._recent.append((now, tokens))
            self._forget(now)

    def record_prefix_cache(self, queried: int, hit: int) -> None:
        """A prompt of ``queried`` tokens was looked up in the prefix cache and ``hit`` of them found."""
        self.prefix_cache_queries += queried
        self.prefix_cache_hits += hit

    def record_preemption(self) -> None:
        self.preemptions += 1

    def record_finished(self, reason: str) -> None:
        """A request ended: "stop", "length", "abort" (its client went away) or another reason."""
        with self._lock:
            self._finished[reason] = self._finished.get(reason, 0) + 1

    @property
    def requests_finished(self) -> dict[str, int]:
        """Finished requests per finish reason (a copy)."""
        with self._lock:
            return dict(self._finished)

    def _forget(self, now: float) -> None:
        while self._recent and self._recent[0][0] <= now - self.window_s:
            self._recent.popleft()

    def tokens_per_second(self) -> float:
        """Tokens generated per second over the last ``window_s`` seconds (or since creation, when younger)."""
        now = self._clock()
        with self._lock:
            self._forget(now)
            tokens = sum(n for _, n in self._recent)
        span = min(self.window_s, now - self._started)
        return tokens / span if span > 0 else 0.0


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> str:
        full = _PREFIX + name
        self.lines += [f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"]
        return full

    def sample(self, name: str, labels: Mapping[str, str], value: float) -> None:
        text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        self.lines.append(f"{name}{{{text}}} {_number(value)}")


_GAUGES = (
    ("requests_waiting", "waiting", "Requests waiting to be scheduled."),
    ("requests_running", "running", "Requests being generated."),
    ("kv_blocks", "kv_blocks_total", "KV cache blocks in the pool."),
    ("kv_blocks_used", "kv_blocks_used", "KV cache blocks in use."),
)
_COUNTERS = (
    ("prompt_tokens_total", "prompt_tokens", "Prompt tokens of admitted requests."),
    ("generation_tokens_total", "generation_tokens", "Tokens generated."),
    ("preemptions_total", "preemptions", "Requests preempted to free KV cache blocks."),
    ("prefix_cache_queries_total", "prefix_cache_queries", "Prompt tokens looked up in the prefix cache."),
    ("prefix_cache_hits_total", "prefix_cache_hits", "Prompt tokens found in the prefix cache."),
)
_HISTOGRAMS = (
    ("time_to_first_token_seconds", "ttft_seconds", "Time from a request's arrival to its first generated token."),
    ("inter_token_latency_seconds", "inter_token_seconds", "Time between consecutive tokens of a request."),
    ("e2e_request_latency_seconds", "e2e_seconds", "Time from a request's arrival to its end."),
)


def render(stats: Mapping[str, EngineStats]) -> str:
    """Every engine's numbers in Prometheus text format 0.0.4, labelled ``model="<name>"``."""
    out = _Writer()
    for metric, attr, help_text in _GAUGES:
        name = out.family(metric, "gauge", help_text)
        for model, s in stats.items():
            out.sample(name, {"model": model}, getattr(s, attr))
    name = out.family("generation_tokens_per_second", "gauge", "Tokens generated per second over a recent window.")
    for model, s in stats.items():
        out.sample(name, {"model": model}, s.tokens_per_second())
    for metric, attr, help_text in _COUNTERS:
        name = out.family(metric, "counter", help_text)
        for model, s in stats.items():
            out.sample(name, {"model": model}, getattr(s, attr))
    name = out.family("requests_finished_total", "counter", "Requests finished, by finish reason.")
    for model, s in stats.items():
        for reason, count in sorted(s.requests_finished.items()):
            out.sample(name, {"model": model, "finish_reason": reason}, count)
    for metric, attr, help_text in _HISTOGRAMS:
        name = out.family(metric, "histogram", help_text)
        for model, s in stats.items():
            hist: Histogram = getattr(s, attr)
            cumulative, total, count = hist.snapshot()
            for bound, c in zip((*hist.buckets, math.inf), cumulative):
                out.sample(name + "_bucket", {"model": model, "le": _number(bound)}, c)
            out.sample(name + "_sum", {"model": model}, total)
            out.sample(name + "_count", {"model": model}, count)
    return "\n".join(out.lines) + "\n"
