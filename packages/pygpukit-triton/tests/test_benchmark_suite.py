"""``python -m pygpukit.benchmark --only triton_ops --backends native,triton``:
the option is parsed and checked, and the suite runs (on the CPU backend it
says why it has nothing to time; on a GPU it writes a record per op and
backend, the PyTorch peer's where torch is installed, and the launch
overheads)."""

from __future__ import annotations

import json
import subprocess
import sys

import pygpukit as gp


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pygpukit.benchmark", "--quick", *args], capture_output=True, text=True, timeout=1800)


def test_backends_option_is_checked():
    run = _run("--only", "triton_ops", "--backends", "native,opencl")
    assert run.returncode == 2 and "--backends: a comma-separated list of native, triton" in run.stderr


def test_triton_suite_compares_backends(tmp_path, triton_plugin):
    out = tmp_path / "t.json"
    run = _run("--only", "triton_ops", "--backends", "native,triton", "--json", str(out))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = json.loads(out.read_text())
    if gp.backend() != "cuda":
        assert "triton_ops: needs a CUDA GPU" in run.stdout or "triton_ops: needs pygpukit-nn" in run.stdout
        assert records == []
        return
    by = {(r["bench"].split("_bf16")[0], r["impl"]) for r in records}
    for op in ("rms_norm", "layer_norm", "add_rms_norm", "softmax", "swiglu", "geglu", "gelu", "rope_neox", "matmul", "sdpa_causal_gqa"):
        assert (op, "pygpukit") in by and (op, "pygpukit-triton") in by, op
    assert ("copy", "pygpukit") in by
    assert {r["impl"] for r in records if r["bench"] == "triton_tiny_launch_host"} >= {"pygpukit", "pygpukit-direct"}
    assert all(r["value"] > 0 for r in records)
