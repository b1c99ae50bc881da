"""fp8 grouped products (grouped.py: grouped_scaled_linear and its masked
layout): against float64 NumPy over the dequantized operands on whichever
implementation runs here (the reference on the CPU backend and for what the
kernel does not take; the e4m3 mma.sync kernel on SM 89+), the kernel against
the reference on the GPU, argument errors, and NVRTC compilation anywhere."""

import os

import numpy as np
import pytest
from gemm_testing import grouped_reference, uneven_offsets

import pygpukit as gp
from pygpukit import ext
from pygpukit_gemm import gemm_tc, grouped, quantize_fp8

E4M3 = gp.float8_e4m3fn
OUT_TOL = {gp.bfloat16: 1e-2, gp.float16: 2e-3, gp.float32: 1e-5}  # the output's one rounding


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _quantized(rng, shape, dtype=E4M3):
    """(fp8 data, float32 row scales of shape[:-1], the dequantized float64 values)."""
    q = quantize_fp8(gp.from_numpy(rng.standard_normal(shape).astype(np.float32).reshape(-1, shape[-1])), dtype, granularity="row")
    data, scale = q.data.reshape(*shape), q.scale.reshape(*shape[:-1])
    return data, scale, data.to_numpy().astype(np.float64) * scale.to_numpy().astype(np.float64)[..., None]


def _kernel_here(k, dtype=E4M3, out=gp.bfloat16):
    dev = ext.device()
    return dev.backend == "cuda" and dev.sm >= 89 and k % 16 == 0 and dtype == E4M3 and out != gp.float32


def _contiguous_case(rng, t=300, e=5, n=72, k=64, dtype=E4M3, bias=True):
    x, xs, xf = _quantized(rng, (t, k), dtype)
    w, ws, wf = _quantized(rng, (e, n, k), dtype)
    b = rng.standard_normal((e, n)).astype(np.float32) if bias else None
    ends = uneven_offsets(rng, t, e)
    ref = grouped_reference(xf, wf, b, ends)
    return (x, xs, w, ws, gp.from_numpy(ends), None if b is None else gp.from_numpy(b)), ref


@pytest.mark.parametrize("out", list(OUT_TOL), ids=str)
@pytest.mark.parametrize("k", [64, 40])  # 40: not a multiple of 16, the reference's case
def test_grouped_scaled_linear_against_float64(rng, out, k):
    args, ref = _contiguous_case(rng, k=k)
    got = gp.ops.grouped_scaled_linear(*args, out_dtype=out)
    assert got.shape == ref.shape and got.dtype == out
    assert _rel(got.to_numpy(), ref) < OUT_TOL[out]
    assert np.all(got.to_numpy()[-7:] == 0)  # rows no expert owns
    want = "gemm:mma_fp8" if _kernel_here(k, out=out) else "gemm:reference"
    assert gp.ops.which("grouped_scaled_linear", *args, out_dtype=out) == want


def test_e5m2_and_no_bias_take_the_reference_math(rng):
    args, ref = _contiguous_case(rng, n=40, k=48, dtype=gp.float8_e5m2, bias=False)
    assert _rel(gp.ops.grouped_scaled_linear(*args).to_numpy(), ref) < OUT_TOL[gp.bfloat16]
    assert gp.ops.which("grouped_scaled_linear", *args) == "gemm:reference"


@pytest.mark.parametrize("out", [gp.bfloat16, gp.float32], ids=str)
def test_grouped_scaled_linear_masked_against_float64(rng, out):
    e, max_m, n, k = 4, 70, 48, 64
    x, xs, xf = _quantized(rng, (e, max_m, k))
    w, ws, wf = _quantized(rng, (e, n, k))
    b = rng.standard_normal((e, n)).astype(np.float32)
    masked = np.array([0, 70, 13, 99], np.int32)  # 99: more than max_m, read as max_m
    ref = np.zeros((e, max_m, n))
    for i, m in enumerate(np.minimum(masked, max_m)):
        ref[i, :m] = xf[i, :m] @ wf[i].T + b[i]
    args = (x, xs, w, ws, gp.from_numpy(masked), gp.from_numpy(b))
    got = gp.ops.grouped_scaled_linear_masked(*args, out_dtype=out).to_numpy()
    assert got.shape == ref.shape and _rel(got, ref) < OUT_TOL[out]
    assert np.all(got[0] == 0) and np.all(got[2, 13:] == 0)  # rows past masked_m are zeros
    want = "gemm:mma_fp8" if _kernel_here(k, out=out) else "gemm:reference"
    assert gp.ops.which("grouped_scaled_linear_masked", *args, out_dtype=out) == want


def test_scaled_errors_say_what_is_wrong(rng):
    (x, xs, w, ws, offs, b), _ = _contiguous_case(rng, t=20, e=3, n=16, k=32)
    op = gp.ops.grouped_scaled_linear
    cases = [
        (lambda: op(x.astype(gp.bfloat16), xs, w, ws, offs), TypeError, "float8_e4m3fn or float8_e5m2"),
        (lambda: op(x, xs[:5], w, ws, offs), ValueError, r"x_scale must be a float32 GPUArray of shape \(20,\)"),
        (lambda: op(x, xs, w, ws.astype(gp.float16), offs), ValueError, r"w_scale must be a float32 GPUArray of shape \(3, 16\)"),
        (lambda: op(x, xs, w, np.ones((3, 16), np.float32), offs), ValueError, "w_scale must be a float32 GPUArray"),
        (lambda: op(x, xs, w, ws, offs, out_dtype=gp.int32), TypeError, "out_dtype must be bfloat16, float16 or float32"),
        (lambda: op(x, xs, w, ws, offs, out_dtype="nonsense"), TypeError, "out_dtype"),
        (lambda: op(x, xs, w, ws, offs, b[:2]), ValueError, "bias"),
        (lambda: op(x[:, :16], xs, w, ws, offs), ValueError, "in_features"),
        (lambda: op(x, xs, w, ws, gp.from_numpy(np.array([1, 2], np.int32))), ValueError, r"shape \(3,\)"),
        (lambda: grouped.reference_scaled(x, xs, w, ws, gp.from_numpy(np.array([9, 3, 20], np.int32))), ValueError, "non-decreasing"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_fp8_kernels_compile_for_sm89_and_sm90(tmp_path, monkeypatch):
    """Every config (mma.sync for SM 89 and 90, warpgroup for SM 90), the plain
    and both grouped entries, both outputs, with and without bias (NVRTC, no GPU needed)."""
    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    for entry in ("gemm_fp8", "grouped_fp8", "masked_fp8"):
        for cfg in gemm_tc.CONFIGS + gemm_tc.WGMMA_CONFIGS:
            for out in gemm_tc.CTYPE.values():
                for bias in (False, True):
                    kernel = gemm_tc.fp8_kernel(entry, cfg, out, bias)
                    for sm in (90,) if cfg.wgmma else (89, 90):
                        assert kernel.compile(sm).image[:4] == b"\x7fELF", (entry, cfg, out, bias, sm)
        if entry != "masked_fp8":  # with the TMA producer
            assert gemm_tc.fp8_kernel(entry, gemm_tc.WGMMA_CONFIGS[0], "pgk::bfloat16", True, True).compile(90).image[:4] == b"\x7fELF"


# -- on the GPU ---------------------------------------------------------------------


def _needs_fp8_kernel():
    if not _kernel_here(64):
        pytest.skip("the fp8 kernel needs SM 89+")


@pytest.mark.gpu
@pytest.mark.parametrize("t,e,n,k", [(300, 5, 72, 64), (1100, 8, 520, 256), (1, 3, 16, 16), (64, 2, 200, 1024), (2000, 16, 1100, 528)])
def test_fp8_kernel_matches_the_reference(rng, t, e, n, k):
    """Row tiles of 64 and 128 rows, partial column tiles, K of one and many
    stages, more tiles than an H100's SMs (the last case); the kernel's
    float32 sums differ from the reference's in order only."""
    _needs_fp8_kernel()
    args, ref = _contiguous_case(rng, t=max(t, 8), e=e, n=n, k=k)
    got = gp.ops.grouped_scaled_linear(*args)
    with gp.routing(grouped_scaled_linear="gemm:reference"):
        want = gp.ops.grouped_scaled_linear(*args)
    assert _rel(got.to_numpy(), want.to_numpy().astype(np.float64)) < 1e-2
    assert _rel(got.to_numpy(), ref) < 1e-2
    np.testing.assert_array_equal(gp.ops.grouped_scaled_linear(*args).to_numpy(), got.to_numpy())  # deterministic
    half = gp.ops.grouped_scaled_linear(*args, out_dtype=gp.float16)
    assert _rel(half.to_numpy(), ref) < 2e-3


@pytest.mark.gpu
def test_fp8_kernel_clamps_offsets(rng):
    """Offsets past T and decreasing ones are read clamped, as the bf16 kernel reads them."""
    _needs_fp8_kernel()
    x, xs, xf = _quantized(rng, (64, 32))
    w, ws, wf = _quantized(rng, (3, 24, 32))
    got = gp.ops.grouped_scaled_linear(x, xs, w, ws, gp.from_numpy(np.array([40, 10, 1000], np.int32))).to_numpy()
    ref = np.concatenate([xf[:40] @ wf[0].T, xf[40:] @ wf[2].T])  # 10 reads as 40, 1000 as 64
    assert _rel(got, ref) < 1e-2
