"""metrics.py: histograms, EngineStats and the Prometheus text format."""

from __future__ import annotations

import re
import threading

import pytest

from pygpukit_serve.metrics import EngineStats, Histogram, render


def test_histogram_buckets():
    h = Histogram([0.1, 1.0, 10.0])
    for v in (0.05, 0.1, 0.5, 1.0, 20.0, 30.0):
        h.observe(v)
    cumulative, total, count = h.snapshot()
    # upper bounds are inclusive (Prometheus' le), the last bucket is +Inf
    assert cumulative == [2, 4, 4, 6] and count == 6 and total == pytest.approx(51.65)
    for bad in ([], [1.0, 0.5], [1.0, 1.0], [1.0, float("inf")]):
        with pytest.raises(ValueError, match="buckets"):
            Histogram(bad)


def test_histogram_threads():
    h = Histogram([0.5])
    start = threading.Barrier(4)

    def work(value: float) -> None:
        start.wait()
        for _ in range(20_000):
            h.observe(value)

    threads = [threading.Thread(target=work, args=(v,)) for v in (0.25, 0.25, 1.0, 1.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert h.snapshot() == ([40_000, 80_000], 20_000 * (0.25 * 2 + 2.0), 80_000)


def test_engine_stats_counters_and_rate():
    now = [100.0]
    s = EngineStats(window_s=10.0, clock=lambda: now[0])
    assert s.tokens_per_second() == 0.0
    now[0] = 102.0
    s.record_generated(8)
    assert s.tokens_per_second() == pytest.approx(4.0)  # younger than the window: over 2 s
    now[0] = 111.0
    s.record_generated(30)
    assert s.tokens_per_second() == pytest.approx(3.8)  # the last 10 s hold both
    now[0] = 112.5
    assert s.tokens_per_second() == pytest.approx(3.0)  # the first fell out
    now[0] = 200.0
    assert s.tokens_per_second() == 0.0
    s.record_prompt(5)
    s.record_prefix_cache(16, 12)
    s.record_preemption()
    for reason in ("stop", "stop", "length", "abort", "error"):
        s.record_finished(reason)
    assert (s.prompt_tokens, s.generation_tokens, s.prefix_cache_queries, s.prefix_cache_hits, s.preemptions) == (5, 38, 16, 12, 1)
    assert s.requests_finished == {"stop": 2, "length": 1, "abort": 1, "error": 1}
    s.requests_finished["stop"] = 99  # a copy
    assert s.requests_finished["stop"] == 2


def parse(text: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, dict[str, str], str]]]:
    """Prometheus text: HELP/TYPE per family (each before its samples), and the samples."""
    families: dict[str, tuple[str, str]] = {}
    samples = []
    helps: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if m := re.fullmatch(r"# HELP (\w+) (.+)", line):
            helps[m[1]] = m[2]
        elif m := re.fullmatch(r"# TYPE (\w+) (gauge|counter|histogram)", line):
            families[m[1]] = (helps[m[1]], m[2])
        else:
            m = re.fullmatch(r'(\w+)\{((?:\w+="(?:[^"\\\n]|\\.)*",?)*)\} (\S+)', line)
            assert m, line
            name = m[1]
            family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in families else name
            assert family in families, f"{name} before its TYPE line"
            labels = dict(re.findall(r'(\w+)="((?:[^"\\\n]|\\.)*)"', m[2]))
            samples.append((name, labels, m[3]))
    return families, samples


def test_render():
    a, b = EngineStats(), EngineStats()
    a.waiting, a.running, a.kv_blocks_total, a.kv_blocks_used = 3, 2, 100, 40
    a.record_prompt(7)
    a.record_generated(5)
    a.record_finished("length")
    a.ttft_seconds.observe(0.02)
    a.ttft_seconds.observe(100.0)
    a.e2e_seconds.observe(1.5)
    families, samples = parse(render({"tiny": a, 'we"ird\\name\n': b}))
    assert all(name.startswith("pygpukit_serve_") for name in families)
    kinds = {name: kind for name, (_, kind) in families.items()}
    assert kinds["pygpukit_serve_requests_waiting"] == "gauge" and kinds["pygpukit_serve_prompt_tokens_total"] == "counter"
    assert kinds["pygpukit_serve_time_to_first_token_seconds"] == "histogram"
    value = {(n, tuple(sorted(lb.items()))): v for n, lb, v in samples}
    tiny = (("model", "tiny"),)
    assert value["pygpukit_serve_requests_waiting", tiny] == "3"
    assert value["pygpukit_serve_requests_running", tiny] == "2"
    assert value["pygpukit_serve_kv_blocks", tiny] == "100"
    assert value["pygpukit_serve_kv_blocks_used", tiny] == "40"
    assert value["pygpukit_serve_prompt_tokens_total", tiny] == "7"
    assert value["pygpukit_serve_generation_tokens_total", tiny] == "5"
    assert value["pygpukit_serve_requests_finished_total", (("finish_reason", "length"), *tiny)] == "1"
    assert float(value["pygpukit_serve_generation_tokens_per_second", tiny]) > 0
    ttft = [
        (lb["le"], int(v)) for n, lb, v in samples if n == "pygpukit_serve_time_to_first_token_seconds_bucket" and lb["model"] == "tiny"
    ]
    assert ttft[-1] == ("+Inf", 2) and ("0.01", 0) in ttft and ("0.025", 1) in ttft and ("80.0", 1) in ttft
    assert [c for _, c in ttft] == sorted(c for _, c in ttft)  # cumulative
    assert float(value["pygpukit_serve_time_to_first_token_seconds_sum", tiny]) == pytest.approx(100.02)
    assert value["pygpukit_serve_time_to_first_token_seconds_count", tiny] == "2"
    assert value["pygpukit_serve_e2e_request_latency_seconds_count", tiny] == "1"
    # a label value escaped as the format wants
    assert value["pygpukit_serve_requests_waiting", (("model", 'we\\"ird\\\\name\\n'),)] == "0"
