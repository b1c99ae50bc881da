"""The audio_dsp benchmark suite runs end to end (on the CPU backend in CI, at
its small sizes) and writes a record for each case it names."""

from pygpukit.benchmark.audio_dsp import bench_audio_dsp
from pygpukit.benchmark.core import SUITE
from pygpukit.benchmark.harness import Recorder


def test_audio_dsp_suite_writes_records():
    assert SUITE["audio_dsp"] is bench_audio_dsp
    rec = Recorder("test")
    bench_audio_dsp(rec, True)
    mine = {r.bench for r in rec.records if r.impl == "pygpukit"}
    assert {b.split("_f32")[0] for b in mine} == {"sosfilt6", "resample_44k1_16k"}
    assert all(r.value > 0 and r.metric == "ms" for r in rec.records)
