"""The audio benchmark suite runs end to end (on the CPU backend in CI, at its
small sizes) and writes a record for every case it names."""

import json
import subprocess
import sys
from importlib import metadata

import pytest


def test_audio_fft_suite_writes_records(tmp_path):
    try:
        metadata.version("pygpukit-audio")
    except metadata.PackageNotFoundError:
        pytest.skip("pygpukit-audio is not installed: the benchmark finds it through its entry point")
    out = tmp_path / "audio.json"
    cmd = [sys.executable, "-m", "pygpukit.benchmark", "--quick", "--only", "audio_fft", "--json", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    records = json.loads(out.read_text())
    ours = {r["bench"].split("_")[0] for r in records if r["impl"] == "pygpukit"}
    assert ours == {"rfft", "stft"}, ours
    assert all(r["value"] > 0 for r in records)
