"""The own tensor-core GEMM (gemm_tc.py, kernels/gemm_tc.cu) and the grouped
products (grouped.py): the config heuristic and NVRTC compilation anywhere;
products against float64 NumPy on the GPU (routed to the kernel, since
cuBLASLt outranks it); the grouped references on every backend."""

import os

import numpy as np
import pytest
from gemm_testing import grouped_reference, uneven_offsets

import pygpukit as gp
from pygpukit import ext
from pygpukit_gemm import gemm_tc, grouped

HALF = [gp.bfloat16, gp.float16]
# norm-wise relative error (max |C - ref| / max |ref|): inputs are exact in the
# dtype, products accumulate in FP32; what is left is the output rounding
# (2^-8 for bf16, 2^-11 for fp16) and the activation's float32 evaluation.
TOL = 1e-2


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _rand(rng, shape, dtype):
    """Values exactly representable in dtype, as float64."""
    return rng.standard_normal(shape).astype(dtype).astype(np.float64)


# -- anywhere ---------------------------------------------------------------------


def test_heuristic_picks_by_estimated_waves(monkeypatch):
    monkeypatch.delenv("PYGPUKIT_GEMM_CONFIG", raising=False)
    assert gemm_tc.choose(8192, 8192, 1, 132).name == "128x256x32"  # 2048 tiles: the biggest tile fills its waves
    assert gemm_tc.choose(8192, 8192, 1, 132, wgmma=True).name == "wgmma128x256x64"
    assert gemm_tc.choose(256, 1024, 1, 132, wgmma=True).name == "wgmma128x128x64"  # 8 tiles of 256 columns, or 16 of 128
    assert gemm_tc.choose(16, 4096, 1, 132).name == "64x64x64"  # 32 or 16 bigger tiles would leave most SMs idle
    assert gemm_tc.choose(128, 14336, 1, 132).name == "64x128x64"  # 56 tiles of 128x256: 76 SMs idle
    monkeypatch.setenv("PYGPUKIT_GEMM_CONFIG", "64x128x64")
    assert gemm_tc.choose(8192, 8192, 1, 132).name == gemm_tc.choose(8192, 8192, 1, 132, wgmma=True).name == "64x128x64"
    monkeypatch.setenv("PYGPUKIT_GEMM_CONFIG", "wgmma128x256x64")
    with pytest.raises(ValueError, match="on this GPU"):
        gemm_tc.choose(8, 8, 1, 132)  # not an SM 90
    monkeypatch.setenv("PYGPUKIT_GEMM_CONFIG", "100x100x32")
    with pytest.raises(ValueError, match="128x256x32"):
        gemm_tc.choose(8, 8, 1, 132)


def test_configs_fit_the_hardware():
    for c in gemm_tc.CONFIGS + gemm_tc.WGMMA_CONFIGS:
        assert c.smem * c.per_sm <= 227 * 1024 and c.threads <= 1024
        assert (c.bm // c.wm) % 16 == 0 and (c.bn // c.wn) % 16 == 0 and c.bn % 64 == 0


def test_kernels_compile_for_sm80_and_sm90(tmp_path, monkeypatch):
    """Every config, both B layouts and both dtypes, each entry point and each
    activation compile with NVRTC (no GPU needed)."""
    from pygpukit.jit import nvrtc

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    cases = [
        ("gemm", c, nk, ct, "pgk::Positive", False, False) for c in gemm_tc.CONFIGS for nk in (True, False) for ct in gemm_tc.CTYPE.values()
    ]
    cases += [("gemm", gemm_tc.CONFIGS[-1], True, "pgk::bfloat16", act, True, True) for act in gemm_tc.ACTIVATIONS.values()]
    cases += [(entry, gemm_tc.CONFIGS[0], True, "pgk::bfloat16", "pgk::Positive", True, False) for entry in ("grouped", "masked")]
    for case in cases:
        kernel = gemm_tc.kernel(*case)
        for sm in (80, 90):
            assert kernel.compile(sm).image[:4] == b"\x7fELF", case
    for cfg in gemm_tc.WGMMA_CONFIGS:  # sm_90a only
        for ct in gemm_tc.CTYPE.values():
            for act, bias in (("pgk::Positive", False), ("pgk::Silu", True)):
                assert gemm_tc.kernel("gemm", cfg, True, ct, act, bias, bias).compile(90).image[:4] == b"\x7fELF"
            for entry in ("grouped", "masked"):
                assert gemm_tc.kernel(entry, cfg, True, ct, "pgk::Positive", True, False).compile(90).image[:4] == b"\x7fELF"
            for entry in ("gemm", "grouped"):  # with the TMA producer
                assert gemm_tc.kernel(entry, cfg, True, ct, "pgk::Positive", True, False, True).compile(90).image[:4] == b"\x7fELF"
            assert gemm_tc._transpose_kernel(ct).compile(80).image[:4] == b"\x7fELF"


def test_tma_maps_or_a_clear_error(monkeypatch):
    """Tensor maps come from the driver through core (ext.encode_tensor_map_2d):
    128 bytes on the CUDA backend, a RuntimeError that names the encoder on the
    CPU backend (no driver there) or for a geometry the driver refuses;
    PYGPUKIT_GEMM_TMA=0 turns the TMA producer off (gemm_tc.tma_maps gives None)."""
    from pygpukit_gemm import tma

    if gp.backend() != "cuda":
        assert not tma.available()
        with pytest.raises(RuntimeError, match="encode_tensor_map_2d"):
            tma.encode_2d(0, 64, 64, 128, 64)
    else:
        x = gp.zeros((300, 200), gp.bfloat16)
        m = tma.encode_2d(x.data_ptr, 200, 300, 400, 128)
        assert len(m) == 128 and any(m)
        with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled.*box 64x300"):
            tma.encode_2d(x.data_ptr, 200, 300, 400, 300)  # a box is at most 256 rows
        assert tma.maps((x.data_ptr, 200, 300, 400, 128)).nbytes == 128
    monkeypatch.setenv("PYGPUKIT_GEMM_TMA", "0")
    assert not tma.available()
    assert gemm_tc.tma_maps(gemm_tc.WGMMA_CONFIGS[0], (0, 8, 16), (0, 8, 16), 8) is None


def _moe_case(rng, dtype, t=300, e=5, n=72, k=40, bias=True):
    x = _rand(rng, (t, k), dtype)
    w = _rand(rng, (e, n, k), dtype)
    b = _rand(rng, (e, n), dtype) if bias else None
    ends = uneven_offsets(rng, t, e)
    ref = grouped_reference(x, w, b, ends)
    g = [gp.from_numpy(v.astype(dtype)) for v in (x, w)]
    return g, gp.from_numpy(ends), None if b is None else gp.from_numpy(b.astype(dtype)), ref


@pytest.mark.parametrize("dtype", [gp.float32, *HALF], ids=str)
def test_grouped_linear_against_float64(rng, dtype):
    (x, w), offs, b, ref = _moe_case(rng, dtype)
    got = gp.ops.grouped_linear(x, w, offs, b)
    assert got.shape == ref.shape and got.dtype == dtype
    assert _rel(got.to_numpy(), ref) < (1e-5 if dtype == gp.float32 else TOL)
    kernel = gp.backend() == "cuda" and dtype != gp.float32
    assert gp.ops.which("grouped_linear", x, w, offs, b) == ("gemm:mma" if kernel else "gemm:reference")


@pytest.mark.parametrize("dtype", [gp.float32, *HALF], ids=str)
def test_grouped_linear_masked_against_float64(rng, dtype):
    e, max_m, n, k = 4, 70, 48, 64
    x = _rand(rng, (e, max_m, k), dtype)
    w = _rand(rng, (e, n, k), dtype)
    masked = np.array([0, 70, 13, 65], np.int32)
    ref = np.zeros((e, max_m, n))
    for i, m in enumerate(masked):
        ref[i, :m] = x[i, :m] @ w[i].T
    got = gp.ops.grouped_linear_masked(gp.from_numpy(x.astype(dtype)), gp.from_numpy(w.astype(dtype)), gp.from_numpy(masked))
    assert got.shape == ref.shape
    assert _rel(got.to_numpy(), ref) < (1e-5 if dtype == gp.float32 else TOL)
    assert np.all(got.to_numpy()[0] == 0) and np.all(got.to_numpy()[2, 13:] == 0)  # rows past masked_m are zeros


def test_grouped_errors(rng):
    (x, w), offs, b, _ = _moe_case(rng, gp.float32)
    with pytest.raises(ValueError, match="non-decreasing"):
        grouped.reference(x, w, gp.from_numpy(np.array([5, 3, 9, 9, 9], np.int32)))
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        gp.ops.grouped_linear(x, w, gp.from_numpy(np.array([1, 2], np.int32)))
    with pytest.raises(ValueError, match="in_features"):
        gp.ops.grouped_linear(x[:, :3], w, offs)
    with pytest.raises(TypeError, match="one dtype"):
        gp.ops.grouped_linear(x.astype(gp.float16), w, offs)
    with pytest.raises(ValueError, match="bias"):
        gp.ops.grouped_linear(x, w, offs, b[:2])
    with pytest.raises(TypeError, match="offs must be a GPUArray"):
        gp.ops.grouped_linear(x, w, [1, 2, 3, 4, 5])


# -- on the GPU ---------------------------------------------------------------------


def _sm():
    return ext.device().sm


SHAPES = [(256, 512, 384), (1, 4096, 512), (33, 47, 17), (129, 200, 72), (5, 64, 1), (300, 136, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("mnk", SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["kn", "nk", "strided"])
@pytest.mark.parametrize("config", ["auto", "128x256x32", "64x64x64"])  # on an H100, auto is the wgmma kernel
def test_matmul_against_float64(rng, monkeypatch, dtype, mnk, layout, config):
    if config != "auto":
        monkeypatch.setenv("PYGPUKIT_GEMM_CONFIG", config)
    m, n, k = mnk
    a = _rand(rng, (m, k), dtype)
    b = _rand(rng, (k, n), dtype)
    ga = gp.from_numpy(a.astype(dtype))
    gb = {
        "kn": lambda: gp.from_numpy(b.astype(dtype)),
        "nk": lambda: gp.from_numpy(np.ascontiguousarray(b.T).astype(dtype)).T,  # a Linear weight's view
        "strided": lambda: gp.from_numpy(np.repeat(b, 2, axis=1).astype(dtype))[:, ::2],  # copied first
    }[layout]()
    with gp.routing(matmul="gemm:mma"):
        assert gp.ops.which("matmul", ga, gb) == "gemm:mma"
        got = ga @ gb
    assert got.dtype == dtype and got.shape == (m, n)
    assert _rel(got.to_numpy(), a @ b) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("config", [c.name for c in gemm_tc.WGMMA_CONFIGS])
@pytest.mark.parametrize("mnk", [(256, 512, 384), (129, 200, 72), (300, 136, 1000), (700, 300, 8)], ids=str)
def test_warpgroup_configs_against_float64(rng, monkeypatch, config, mnk):
    """Each SM 90 config, forced: a strided batch, a fused epilogue, partial
    row, column and K tiles, K of one stage and of many."""
    if _sm() != 90:
        pytest.skip("the warpgroup kernels need SM 90")
    monkeypatch.setenv("PYGPUKIT_GEMM_CONFIG", config)
    m, n, k = mnk
    a = _rand(rng, (2, m, k), gp.bfloat16)
    w = _rand(rng, (n, k), gp.bfloat16)
    b = _rand(rng, (n,), gp.bfloat16)
    ga, gw, gb = (gp.from_numpy(v.astype(gp.bfloat16)) for v in (a, w, b))
    with gp.routing(matmul="gemm:mma"):
        got = ga @ gw.T
    assert _rel(got.to_numpy(), a @ w.T) < TOL
    fused = gemm_tc.fused_linear(ga, gw, gb, activation="silu")
    y = a @ w.T + b
    assert _rel(fused.to_numpy(), y / (1 + np.exp(-y))) < TOL


@pytest.mark.gpu
def test_batched_stacked_operands(rng):
    """A batch whose operands are contiguous stacks, partial tiles at every
    entry's edge: no entry's rows or columns mix into the next one's."""
    a = _rand(rng, (3, 130, 72), gp.bfloat16)
    w = _rand(rng, (3, 200, 72), gp.bfloat16)
    ga, gw = gp.from_numpy(a.astype(gp.bfloat16)), gp.from_numpy(w.astype(gp.bfloat16))
    with gp.routing(matmul="gemm:mma"):
        got = ga @ gw.swapaxes(-1, -2)
    assert got.shape == (3, 130, 200)
    assert _rel(got.to_numpy(), a @ w.swapaxes(-1, -2)) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_batched_broadcast_and_1d(rng, dtype):
    a = _rand(rng, (3, 1, 65, 48), dtype)
    b = _rand(rng, (4, 48, 80), dtype)
    ga, gb = gp.from_numpy(a.astype(dtype)), gp.from_numpy(b.astype(dtype))
    with gp.routing(matmul="gemm:mma"):
        got = ga @ gb
        v = gp.from_numpy(b[0, :, 0].astype(dtype))
        got_v = ga[0, 0] @ v
        got_t = gb.swapaxes(-1, -2) @ ga[0, 0].T  # transposed A: copied first
    assert got.shape == (3, 4, 65, 80) and _rel(got.to_numpy(), a @ b) < TOL
    assert got_v.shape == (65,) and _rel(got_v.to_numpy(), a[0, 0] @ b[0, :, 0]) < TOL
    assert _rel(got_t.to_numpy(), b.swapaxes(-1, -2) @ a[0, 0].T) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("activation", list(gemm_tc.ACTIVATIONS), ids=str)
def test_fused_linear_epilogues(rng, dtype, activation):
    import math

    x = _rand(rng, (2, 37, 96), dtype)
    w = _rand(rng, (130, 96), dtype)
    b = _rand(rng, (130,), dtype)
    r = _rand(rng, (2, 37, 130), dtype)
    y = x @ w.T + b
    erf = np.vectorize(math.erf)
    act = {
        None: lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "gelu": lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2))),
        "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
        "silu": lambda v: v / (1 + np.exp(-v)),
    }[activation]
    g = [gp.from_numpy(v.astype(dtype)) for v in (x, w, b, r)]
    with gp.routing(fused_linear="gemm:mma"):
        assert gp.ops.which("fused_linear", g[0], g[1]) == "gemm:mma"
        got = gp.ops.fused_linear(g[0], g[1], g[2], activation=activation, residual=g[3])
    assert got.shape == (2, 37, 130)
    assert _rel(got.to_numpy(), act(y) + r) < TOL
    plain = gemm_tc.fused_linear(g[0], g[1], activation=activation)
    assert _rel(plain.to_numpy(), act(x @ w.T)) < TOL


@pytest.mark.gpu
def test_linear_routed_deterministic_and_8192(rng):
    """linear through the kernel with a bias; the same bits twice; a product
    big enough to use the largest tile."""
    m, n, k = 2048, 1024, 4096
    x = gp.from_numpy(_rand(rng, (m, k), gp.bfloat16).astype(gp.bfloat16))
    w = gp.from_numpy(_rand(rng, (n, k), gp.bfloat16).astype(gp.bfloat16))
    b = gp.from_numpy(_rand(rng, (n,), gp.bfloat16).astype(gp.bfloat16))
    with gp.routing(linear="gemm:mma"):
        first, second = gp.linear(x, w, b), gp.linear(x, w, b)
    ref = x.to_numpy().astype(np.float64) @ w.to_numpy().astype(np.float64).T + b.to_numpy().astype(np.float64)
    assert _rel(first.to_numpy(), ref) < TOL
    assert np.array_equal(first.to_numpy().view(np.uint16), second.to_numpy().view(np.uint16))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_grouped_linear_big_experts(rng, dtype):
    """Enough rows per expert for the 128-row tiles (the warpgroup kernel on an H100)."""
    (x, w), offs, b, ref = _moe_case(rng, dtype, t=1100, e=4, n=200, k=136)
    assert _rel(gp.ops.grouped_linear(x, w, offs, b).to_numpy(), ref) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_grouped_more_tiles_than_sms(rng, dtype):
    """More tiles than an H100 has SMs, so the persistent blocks walk several
    each, many experts' last row tiles with at most 64 rows (one warpgroup
    computes them), K over several turns of the stage ring; contiguous and
    masked layouts against float64."""
    (x, w), offs, b, ref = _moe_case(rng, dtype, t=2000, e=16, n=1100, k=520)
    assert _rel(gp.ops.grouped_linear(x, w, offs, b).to_numpy(), ref) < TOL
    e, max_m, n, k = 40, 100, 1100, 264
    xm = _rand(rng, (e, max_m, k), dtype)
    wm = _rand(rng, (e, n, k), dtype)
    masked = rng.integers(0, max_m + 1, e).astype(np.int32)
    refm = np.zeros((e, max_m, n))
    for i, m in enumerate(masked):
        refm[i, :m] = xm[i, :m] @ wm[i].T
    got = gp.ops.grouped_linear_masked(gp.from_numpy(xm.astype(dtype)), gp.from_numpy(wm.astype(dtype)), gp.from_numpy(masked))
    assert _rel(got.to_numpy(), refm) < TOL


@pytest.mark.gpu
def test_grouped_kernel_edge_cases(rng):
    """Offsets past T and decreasing ones are read clamped, not out of bounds;
    all tokens in one expert; a single token; K = 0 (the bias alone)."""
    (x, w), _, _, _ = _moe_case(rng, gp.bfloat16, t=64, e=3, bias=False)
    xn = x.to_numpy().astype(np.float64)
    wn = w.to_numpy().astype(np.float64)
    got = gp.ops.grouped_linear(x, w, gp.from_numpy(np.array([0, 64, 64], np.int32)))
    assert _rel(got.to_numpy(), xn @ wn[1].T) < TOL
    clamped = gp.ops.grouped_linear(x, w, gp.from_numpy(np.array([40, 10, 1000], np.int32))).to_numpy()
    ref = np.concatenate([xn[:40] @ wn[0].T, xn[40:] @ wn[2].T])  # 10 reads as 40, 1000 as 64
    assert _rel(clamped, ref) < TOL
    one = gp.ops.grouped_linear(x[:1], w, gp.from_numpy(np.array([0, 0, 1], np.int32)))
    assert _rel(one.to_numpy(), xn[:1] @ wn[2].T) < TOL

    def k_zero(op, x_shape, counts):  # K = 0 operands of 3 experts x 24 outputs, a bias of ones
        bias = gp.from_numpy(np.ones((3, 24), np.float32).astype(gp.bfloat16))
        return op(
            gp.zeros((*x_shape, 0), gp.bfloat16), gp.zeros((3, 24, 0), gp.bfloat16), gp.from_numpy(np.array(counts, np.int32)), bias
        ).to_numpy()

    empty_k = k_zero(gp.ops.grouped_linear, (70,), [10, 40, 64])
    assert np.all(empty_k[:64] == 1) and np.all(empty_k[64:] == 0)  # K = 0: the bias alone; unowned rows zero
    empty_masked = k_zero(gp.ops.grouped_linear_masked, (3, 16), [16, 5, 0])
    assert np.all(empty_masked[0] == 1) and np.all(empty_masked[1, :5] == 1) and np.all(empty_masked[1, 5:] == 0)
    assert np.all(empty_masked[2] == 0)  # masked rows zero
    empty_km = k_zero(gp.ops.grouped_linear_masked, (3, 5), [1, 5, 0])
    assert np.all(empty_km[0, :1] == 1) and np.all(empty_km[0, 1:] == 0) and np.all(empty_km[1] == 1) and np.all(empty_km[2] == 0)
