"""The audio benchmark suites run end to end (on the CPU backend in CI, at
their small sizes) and write a record for every case they name."""

import json
import subprocess
import sys
from importlib import metadata

import pytest

from pygpukit.benchmark.__main__ import suites
from pygpukit.benchmark.harness import Recorder
from pygpukit_audio.benchmarks.dsp import bench_audio_dsp


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
    assert ours == {"rfft", "stft", "mel80"}, ours
    assert all(r["value"] > 0 for r in records)


def test_audio_dsp_suite_writes_records():
    assert suites()["audio_dsp"] is bench_audio_dsp
    rec = Recorder("test")
    bench_audio_dsp(rec, True)
    mine = {r.bench for r in rec.records if r.impl == "pygpukit"}
    assert {b.split("_f32")[0] for b in mine} == {"sosfilt6", "resample_44k1_16k"}
    assert all(r.value > 0 and r.metric == "ms" for r in rec.records)
