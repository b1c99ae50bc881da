import json
import subprocess
import sys

from pygpukit.benchmark import Recorder, compare, ratios, table
from pygpukit.benchmark.harness import median_time_ms


def test_ratios_table_and_compare():
    rec = Recorder("TestGPU")
    rec.add("add", "pygpukit", "GB/s", 3000.0, True)
    rec.add("add", "torch", "GB/s", 2000.0, True)
    rec.add("tiny", "pygpukit", "us", 3.0, False)
    rec.add("tiny", "torch", "us", 6.0, False)
    r = {(b, p): x for b, p, x in ratios(rec.records)}
    assert r[("add", "torch")] == 1.5 and r[("tiny", "torch")] == 2.0
    md = table(rec.records, markdown=True)
    assert "| add | GB/s | 3000 | 2000 | 1.50x |" in md
    old = [{"bench": "add", "impl": "pygpukit", "metric": "GB/s", "value": 3500.0}]
    lines = compare(old, rec.records)
    assert len(lines) == 1 and "REGRESSION add [pygpukit]" in lines[0]
    assert compare([{"bench": "add", "impl": "pygpukit", "metric": "GB/s", "value": 3050.0}], rec.records) == []


def test_median_time_ms_times_bursts_per_call():
    # A fake clock: each call costs 0.5 ms of "GPU" time and the first call of
    # a measurement 0.3 ms of launch latency, which bursts spread thin.
    state = {"calls": 0, "t": 0.0}

    def run():
        state["t"] += 0.5 + (0.3 if state["calls"] == 0 else 0.0)
        state["calls"] += 1

    def start_stop():
        def begin():
            state["calls"], state["t"] = 0, 0.0

        def end():
            return state["t"]

        return begin, end

    ms = median_time_ms(run, start_stop, warmup=1, reps=5, min_ms=4.0)
    assert state["calls"] == 5  # ceil(4 / 0.8) calls per measurement
    assert abs(ms - (5 * 0.5 + 0.3) / 5) < 1e-12


def test_benchmark_cli_writes_json(tmp_path):
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "pygpukit.benchmark",
        "--quick",
        "--only",
        "host_overhead",
        "--only",
        "import",
        "--only",
        "dispatch",
        "--json",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    records = json.loads(out.read_text())
    benches = {(r["bench"], r["impl"]) for r in records}
    assert ("tiny_add_1024_host", "pygpukit") in benches and ("import_pygpukit", "pygpukit") in benches
    assert {
        ("dispatch_noop_host", "pygpukit"),
        ("dispatch_noop_host", "direct"),
        ("dispatch_matmul_16_host", "direct"),
    } <= benches
    for r in records:
        assert set(r) >= {"bench", "impl", "metric", "value", "higher_is_better", "gpu", "date"}
        assert r["value"] > 0
    # comparing a run against itself finds no regression
    same = subprocess.run(cmd[:-2] + ["--compare", str(out), "--threshold", "10"], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout + same.stderr
