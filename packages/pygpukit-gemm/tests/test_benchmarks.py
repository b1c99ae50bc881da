"""The gemm plugin's benchmark suites (matmul, own_gemm) are found through
its entry point and run end to end at their small sizes on the CPU backend
in CI (own_gemm records nothing there: it is GPU only)."""

from pygpukit.benchmark.__main__ import suites
from pygpukit.benchmark.harness import Recorder
from pygpukit_gemm import plugin


def test_suites_are_registered_by_the_plugin():
    found = suites()
    assert set(plugin.BENCHMARKS) == {"matmul", "own_gemm"} <= set(found)


def test_matmul_suite_writes_records():
    import pygpukit as gp

    rec = Recorder("test")
    suites()["matmul"](rec, True)
    ours = {r.bench for r in rec.records if r.impl == "pygpukit"}
    if gp.backend() == "cuda":
        assert {"matmul_bf16_2048^3", "scaled_mm_fp8e4m3_2048^3", "gemv_w4a16_m1_k4096_n14336"} <= ours
    else:  # the square products only, at 256^3
        assert ours == {f"matmul_{label}_256^3" for label in ("bf16", "fp16", "tf32", "fp32")}
    assert all(r.value > 0 for r in rec.records)
    assert all(r.note for r in rec.records if r.impl == "pygpukit" and r.bench.startswith("matmul_"))  # the implementation that ran


def test_own_gemm_suite_runs():
    import pygpukit as gp

    rec = Recorder("test")
    suites()["own_gemm"](rec, True)
    ours = {r.bench for r in rec.records if r.impl == "pygpukit"}
    if gp.backend() == "cuda":
        assert {"matmul_own_bf16_2048^3", "grouped_bf16_e8_t512_k4096_n14336"} <= ours
    else:
        assert rec.records == []
