"""The serve benchmark suite at its TINY plan (the CPU backend in CI): the load
generator's figures hang together (each request got exactly its tokens, TTFT
within end to end, one gap fewer than tokens, at most C requests in flight in
a closed loop), and the suite writes the records it names, registered
without being imported."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from pygpukit.benchmark.harness import Recorder
from pygpukit_llm import load
from pygpukit_serve.benchmarks import serve
from pygpukit_serve.engine import Engine


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load(serve.write_checkpoint(tmp_path_factory.mktemp("serve-bench"), "tiny-llama", seed=5), "bfloat16", progress=False)


def test_load_generator_figures_hang_together(tiny):
    requests = serve.draw(np.random.default_rng(0), tiny.config.vocab_size, 7, (8, 40), (2, 9))
    assert len({r.max_tokens for r in requests}) > 1 and len({len(r.prompt) for r in requests}) > 1
    engine = Engine(tiny, "bench-test", serve.engine_config(serve.TINY, 3, 49))
    engine.start()
    try:
        closed = asyncio.run(serve.closed_loop(engine, requests, 3))
        opened = asyncio.run(serve.poisson(engine, requests, rate=100.0, seed=1))
    finally:
        engine.stop()
    for run in (closed, opened):
        assert len(run.traces) == len(requests)
        for t, r in zip(run.traces, requests):
            assert (t.prompt_tokens, t.max_tokens, t.tokens, t.finish_reason) == (len(r.prompt), r.max_tokens, r.max_tokens, "length")
            assert len(t.times) == t.tokens and len(t.itl) == t.tokens - 1 and min(t.itl) >= 0
            assert 0 < t.ttft <= t.e2e and t.e2e == pytest.approx(t.ttft + sum(t.itl))
        assert run.tokens == sum(r.max_tokens for r in requests)
        assert run.wall >= max(t.e2e for t in run.traces) and run.tok_s == pytest.approx(run.tokens / run.wall) and run.tok_s > 0
        assert 0 < run.ttft_ms(50) <= run.ttft_ms(99) <= 1e3 * max(t.ttft for t in run.traces)
        assert 0 < run.itl_ms(50) <= run.itl_ms(99) <= 1e3 * max(max(t.itl) for t in run.traces)
    # the closed loop keeps 3 requests in flight, never more: a request goes out once another has ended
    spans = [(t.sent, t.times[-1]) for t in closed.traces]
    assert max(sum(s <= at < e for s, e in spans) for at, _ in spans) == 3
    sent = [t.sent for t in opened.traces]
    assert sent == sorted(sent)  # the open loop sends at its arrivals, in order


def test_the_suite_writes_its_records():
    rec = Recorder("test")
    serve.run(rec, True, serve.TINY)
    s, srv = "serve_tiny-llama", "pygpukit-serve"
    expected = set()
    for c in (1, 4):
        for m in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99"):
            expected.add((f"{s}_c{c}_{m}", srv, "ms"))
        for m in ("itl_p50", "itl_p99"):
            expected.add((f"{s}_c{c}_{m}", "generate", "ms"))
        expected |= {(f"{s}_c{c}_tok_s", srv, "tok/s"), (f"{s}_c{c}_tok_s", "generate", "tok/s"), (f"{s}_c{c}_tok_s_vs_generate", srv, "x")}
    expected.add((f"{s}_c1_itl_p50_vs_generate", srv, "x"))
    expected.add((f"{s}_poisson_tok_s", srv, "tok/s"))
    expected |= {(f"{s}_poisson_{m}", srv, "ms") for m in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")}
    expected |= {(f"{s}_prefix_c2_{m}", impl, "ms") for m in ("ttft_p50", "ttft_p99") for impl in (srv, "no-prefix-cache")}
    expected.add((f"{s}_prefix_c2_ttft_p50_vs_no_cache", srv, "x"))
    expected |= {(f"{s}_c2_guaranteed_{m}", impl, "ms") for m in ("itl_p50", "itl_p99") for impl in (srv, "solo")}
    expected |= {(f"{s}_c2_guaranteed_itl_p99_vs_solo", srv, "x"), (f"{s}_c4_best_effort_tok_s", srv, "tok/s")}
    got = [(r.bench, r.impl, r.metric) for r in rec.records]
    assert len(got) == len(set(got))
    assert set(got) == expected
    assert all(math.isfinite(r.value) and r.value > 0 for r in rec.records)
    by = {(r.bench, r.impl): r for r in rec.records}
    assert by[(f"{s}_c1_tok_s_vs_generate", srv)].value == pytest.approx(
        by[(f"{s}_c1_tok_s", srv)].value / by[(f"{s}_c1_tok_s", "generate")].value, rel=1e-3
    )
    assert "target <= 0.3x" in by[(f"{s}_prefix_c2_ttft_p50_vs_no_cache", srv)].note


def test_a_plan_runs_only_its_parts():
    rec = Recorder("test")
    serve.run(rec, True, dataclasses.replace(serve.TINY, parts=("prefix",)))
    assert {r.bench for r in rec.records} == {f"serve_tiny-llama_prefix_c2_{m}" for m in ("ttft_p50", "ttft_p99", "ttft_p50_vs_no_cache")}
    with pytest.raises(ValueError, match="unknown"):
        serve.run(rec, True, dataclasses.replace(serve.TINY, parts=("loop",)))


def test_the_plugin_registers_the_suite_without_importing_it():
    code = (
        "import json, sys; from pygpukit.benchmark.__main__ import suites; "
        "print(json.dumps(['serve' in suites(), 'pygpukit_serve.benchmarks.serve' in sys.modules]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == [True, False]
