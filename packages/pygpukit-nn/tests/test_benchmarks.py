"""The nn benchmark suites run end to end (on the CPU backend in CI, at their
small sizes) and write a record for every case they name."""

import json
import subprocess
import sys

SUITES = ["nn_norms", "nn_rope", "nn_moe", "nn_sampling", "nn_attention", "nn_decode"]


def test_the_plugin_registers_its_suites_without_importing_them():
    code = (
        "import json, sys; from pygpukit.benchmark.__main__ import suites; "
        "print(json.dumps([sorted(suites()), [m for m in sys.modules if m.startswith('pygpukit_nn.benchmarks.')]]))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    names, imported = json.loads(run.stdout.splitlines()[-1])
    assert set(SUITES) <= set(names)
    assert imported == []  # a suite's module is imported when it runs


def test_nn_suites_write_records(tmp_path):
    out = tmp_path / "nn.json"
    cmd = [sys.executable, "-m", "pygpukit.benchmark", "--quick", "--json", str(out)]
    for s in SUITES:
        cmd += ["--only", s]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    records = json.loads(out.read_text())
    benches = {r["bench"].split("_bf16")[0].split("_f32")[0] for r in records if r["impl"] == "pygpukit"}
    for prefix in ("rms_norm", "layer_norm", "add_rms_norm", "swiglu", "softmax", "rope_neox", "embedding", "sample_top_p0.9"):
        assert prefix in benches, (prefix, sorted(benches))
    assert all(r["value"] > 0 for r in records)
