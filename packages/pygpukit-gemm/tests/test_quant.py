"""Weight-only int8/int4/fp8 quantization with group scales, and
gp.ops.qlinear: the packing and rounding against NumPy, and the GEMV kernels
(GPU) against the float64 product of the dequantized weight."""

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext
from pygpukit_gemm import QuantizedWeight, dequantize_weight, quantize_weight

FORMATS = ["int8", "int4", "fp8"]


def _numpy_quantize(w, fmt, g):
    """The values (as float) and scales of the documented recipe, in NumPy."""
    n, k = w.shape
    qmax = {"int8": 127, "int4": 7, "fp8": 448}[fmt]
    groups = w.astype(np.float32).reshape(n, k // g, g)
    amax = np.abs(groups).max(axis=2, keepdims=True)
    scales = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32 if fmt == "fp8" else np.float16)
    scaled = groups / scales.astype(np.float32)
    if fmt == "fp8":
        values = np.clip(scaled, -qmax, qmax).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    else:
        values = np.clip(np.rint(scaled), -qmax - (fmt == "int4"), qmax)
    return values.reshape(n, k), scales.reshape(n, k // g)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("g", [32, 128])
def test_quantize_matches_numpy_and_round_trips(rng, fmt, g):
    w = rng.standard_normal((24, 256)).astype(np.float32)
    w[3, :g] = 0  # an all-zero group: scale 1, values 0
    qw = quantize_weight(gp.from_numpy(w), fmt, group_size=g)
    values, scales = _numpy_quantize(w, fmt, g)
    np.testing.assert_array_equal(qw.scales.to_numpy(), scales)
    if fmt == "int4":
        assert qw.q.dtype == np.uint8 and qw.q.shape == (24, 128)
        packed = qw.q.to_numpy()
        np.testing.assert_array_equal((packed & 15).astype(int) - 8, values[:, 0::2])
        np.testing.assert_array_equal((packed >> 4).astype(int) - 8, values[:, 1::2])
    else:
        assert qw.q.dtype == {"int8": np.int8, "fp8": np.dtype(gp.float8_e4m3fn)}[fmt] and qw.q.shape == (24, 256)
        np.testing.assert_array_equal(qw.q.to_numpy().astype(np.float32), values)
    assert qw.shape == (24, 256) and qw.format == fmt
    deq = dequantize_weight(qw).to_numpy()
    group_scale = np.repeat(scales.astype(np.float32), g, axis=1)
    if fmt == "fp8":  # e4m3 keeps 3 mantissa bits: half a unit in the last place, 2^-4 relative
        assert np.all(np.abs(deq - w) <= np.abs(w) * 2.0**-4 + group_scale * 2.0**-9)
    else:  # half a step; int4 clips -8..7, so the top of the range is off by up to one step
        assert np.all(np.abs(deq - w) <= group_scale * (0.5 + (fmt == "int4") * 0.5) + 1e-6)


def test_quantize_errors():
    w = gp.zeros((4, 64), gp.float32)
    for call, exc, match in (
        (lambda: quantize_weight(w, "int3"), ValueError, "format must be one of int8, int4, fp8"),
        (lambda: quantize_weight(gp.full((1, 32), np.nan), group_size=32), ValueError, "NaN or infinite"),
        (lambda: quantize_weight(w, group_size=48), ValueError, "positive multiple of 32"),
        (lambda: quantize_weight(gp.zeros((4, 96)), group_size=64), ValueError, r"in_features \(96\) must be a multiple"),
        (lambda: quantize_weight(gp.zeros((4, 64), gp.int32)), TypeError, "must be a float array"),
        (lambda: quantize_weight(np.zeros((4, 64))), TypeError, "2-D GPUArray"),
        (lambda: quantize_weight(gp.full((1, 32), 1e30), group_size=32), ValueError, "overflows float16"),
    ):
        with pytest.raises(exc, match=match):
            call()
    qw = quantize_weight(w, group_size=32)
    with pytest.raises(ValueError, match=r"x's last axis must have the weight's in_features \(64\)"):
        gp.ops.qlinear(gp.zeros((1, 32)), qw)
    with pytest.raises(TypeError, match="QuantizedWeight"):
        gp.ops.qlinear(gp.zeros((1, 64)), w)


def _sm():
    return ext.device().sm


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32], ids=str)
@pytest.mark.parametrize("xshape", [(1, 512), (3, 512), (2, 4, 512), (8, 512), (9, 512), (2, 16, 512), (33, 512), (512,)])
def test_qlinear_against_float64(rng, fmt, dtype, xshape):
    n = 200  # not a multiple of a block's columns
    w = rng.standard_normal((n, 512)).astype(np.float32)
    qw = quantize_weight(gp.from_numpy(w), fmt)
    x = rng.standard_normal(xshape).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    deq = dequantize_weight(qw, gp.float64).to_numpy()
    ref = x.astype(np.float64) @ deq.T + bias.astype(np.float64)
    got = gp.ops.qlinear(gp.from_numpy(x), qw, gp.from_numpy(bias))
    assert got.shape == (*xshape[:-1], n) and got.dtype == dtype
    again = gp.ops.qlinear(gp.from_numpy(x), qw, gp.from_numpy(bias))  # the prepared launch, on the GPU
    np.testing.assert_array_equal(again.to_numpy(), got.to_numpy())
    rel = np.max(np.abs(got.to_numpy().astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert rel < (1e-5 if dtype == gp.float32 else 1e-2)
    rows = int(np.prod(xshape[:-1]))
    kernel = gp.backend() == "cuda" and _sm() >= 80 and rows <= 32  # 9 and 32 rows: 8 at a time
    assert gp.ops.which("qlinear", gp.from_numpy(x), qw) == ("gemm:gemv_q" if kernel else "gemm:reference")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
@pytest.mark.parametrize("xshape", [(1, 4096), (8, 1024), (5, 896), (2, 1, 520)])
def test_gemv_linear_against_float64(rng, dtype, xshape):
    """The plain-weight GEMV behind linear for decode rows (routed to it): on
    tensor cores where K is a multiple of 128, else the FFMA kernel."""
    from pygpukit_gemm import gemv

    n = 333
    x = rng.standard_normal(xshape).astype(dtype)
    w = rng.standard_normal((n, xshape[-1])).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    gx, gw, gb = gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(bias)
    with gp.routing(linear="gemm:gemv"):
        got, plain = gp.linear(gx, gw, gb), gp.linear(gx, gw)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for y, r in ((got, ref + bias.astype(np.float64)), (plain, ref)):
        assert y.shape == (*xshape[:-1], n)
        assert np.max(np.abs(y.to_numpy().astype(np.float64) - r)) / np.max(np.abs(r)) < 1e-2
    assert gp.ops.which("linear", gx, gw[:, :8]) != "gemm:gemv"  # a strided weight: not the kernel's case
    assert gemv.variant("plain", dtype, 0, xshape[-1]) == ("plain" if xshape[-1] % 128 else "plain_mma")
    assert gp.ops.which("linear", gx, gw) == "gemm:gemv"  # the default for decode rows
    wide = gp.from_numpy(rng.standard_normal((6, 520)).astype(dtype))  # 6 rows of K = 520: cuBLASLt's
    assert gp.ops.which("linear", wide, gp.from_numpy(w[:, :520].copy())) != "gemm:gemv"


@pytest.mark.gpu
@pytest.mark.parametrize("group", [64, 128, 256, 384])
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
@pytest.mark.parametrize("rows", [1, 2, 5, 8])
def test_int4_tensor_core_gemv(rng, group, dtype, rows):
    """int4 weights with groups of a multiple of 128 take the tensor-core
    kernel (several steps a group at 256 and 384, a partial last block of
    columns, more blocks than SMs; one tile a warp at 1 and 2 rows, two at 5 and 8),
    others the FFMA one; both against float64 over the dequantized weight."""
    from pygpukit_gemm import gemv

    # 18 steps of K. (8200, 2304): at 1 row 513 blocks of 8 warps, two steps in flight (the steady depth); at
    # 5 rows two tiles a warp, 257 blocks, a warp's 2-3 steps at once. (1000, 2304): fewer blocks than SMs,
    # one tile a warp at 2 rows, two at 8
    n, k = (8200, 2304) if rows in (1, 5) else (1000, 2304)
    qw = quantize_weight(gp.from_numpy(rng.standard_normal((n, k)).astype(np.float32)), "int4", group_size=group)
    x = rng.standard_normal((rows, k)).astype(dtype)
    ref = x.astype(np.float64) @ dequantize_weight(qw, gp.float64).to_numpy().T
    got = gp.ops.qlinear(gp.from_numpy(x), qw).to_numpy().astype(np.float64)
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-2
    assert gemv.variant("int4", dtype, group) == ("int4" if group == 64 else "int4_mma")


def test_gemv_variant_and_grid():
    """Which kernel a format takes, and its blocks: 16 columns a block on tensor cores."""
    from pygpukit_gemm import gemv

    assert gemv.variant("int4", gp.bfloat16, 128) == gemv.variant("int4", gp.float16, 256) == "int4_mma"
    assert gemv.variant("int4", gp.float32, 128) == "int4" and gemv.variant("int4", gp.bfloat16, 64) == "int4"
    for fmt in ("int8", "fp8"):  # half activations and groups of 128k on tensor cores; float32 or other groups FFMA
        assert gemv.variant(fmt, gp.bfloat16, 128) == gemv.variant(fmt, gp.float16, 512) == fmt + "_mma"
        assert gemv.variant(fmt, gp.float32, 128) == gemv.variant(fmt, gp.bfloat16, 64) == fmt
        assert gemv.variant(fmt, gp.float16, 32) == gemv.variant(fmt, gp.bfloat16, 192) == fmt
        assert gemv.MMA[fmt + "_mma"].format("pgk::half") == f"pgk::{fmt.capitalize()}Operands<pgk::half>"
    assert gemv.variant("plain", gp.bfloat16, 0, 896) == gemv.variant("plain", gp.float16, 0, 4096) == "plain_mma"
    assert gemv.variant("plain", gp.bfloat16, 0, 520) == gemv.variant("plain", gp.float32, 0, 896) == "plain"
    assert gemv.grid_of("int8", (4, 4), 1000) == 63
    assert gemv.grid_of("plain", (8, 1), 1001) == 126
    # the FFMA kernel's tiles by rows: 1, 2, more
    assert [gemv.tile_of("int8", rows) for rows in (1, 2, 3, 8)] == [(16, 2), (4, 2), (4, 4), (4, 4)]
    # int4 on tensor cores: warps a block to bring the grid near MMA_WARPS_PER_SM a SM, 4 to 16, at most K / 128
    assert gemv.tile_of("int4_mma", 1, 14336, 4096, 132) == (4, 2, 1)  # 896 blocks, 8 steps a warp: two in flight
    assert gemv.tile_of("int4_mma", 1, 4096, 14336, 132) == (16, 1, 1)  # 256 blocks of 16 warps: one
    assert gemv.tile_of("int4_mma", 1, 4864, 896, 132) == (7, 1, 1)  # 304 blocks, a step a warp
    assert gemv.tile_of("int4_mma", 1, 896, 4864, 132) == (16, gemv.MMA_DEEP, 1)  # 56 blocks: fewer than SMs
    assert gemv.tile_of("int4_mma", 1, 64, 256, 132)[0] == 2  # two steps of K
    # int4 with 4 to 8 rows and 16 steps of K or more: two tiles a warp, 32 columns a block, MMA_WARPS_PER_SM_2 warps a SM
    assert gemv.tile_of("int4_mma", 2, 14336, 4096, 132) == (4, 2, 1) and gemv.tile_of("int4_mma", 8, 4864, 896, 132) == (7, 1, 1)
    for rows in (4, 8):
        assert gemv.tile_of("int4_mma", rows, 14336, 4096, 132) == (4, 2, 2)  # 448 blocks, 8 steps a warp
        assert gemv.tile_of("int4_mma", rows, 4096, 14336, 132) == (16, 1, 2)  # 128 blocks of 16 warps, 7 steps a warp
        assert gemv.tile_of("int4_mma", rows, 5632, 2048, 132) == (8, 2, 2)  # 176 blocks: a warp's two steps at once
        assert gemv.tile_of("int4_mma", rows, 2048, 5632, 132) == (16, gemv.MMA_DEEP, 2)  # 64 blocks: half the SMs
    assert gemv.grid_of("int4_mma", (4, 2, 2), 1000) == 32 and gemv.grid_of("int4_mma", (4, 2, 1), 1000) == 63
    # int8 / fp8 on tensor cores: int4's rule
    for fmt in ("int8_mma", "fp8_mma"):
        for rows in (1, 8):
            assert gemv.tile_of(fmt, rows, 14336, 4096, 132) == (4, 1, 1)  # 896 blocks
            assert gemv.tile_of(fmt, rows, 4096, 14336, 132) == (16, 1, 1)  # 256 blocks: 13 warps wanted
            assert gemv.tile_of(fmt, rows, 896, 4864, 132) == (16, gemv.MMA_DEEP, 1)  # 56 blocks: fewer than SMs
            assert gemv.tile_of(fmt, rows, 4864, 896, 132) == (7, 1, 1)  # 304 blocks: 11 warps wanted, 7 steps of K
            assert gemv.tile_of(fmt, rows, 200, 384, 132) == (3, gemv.MMA_DEEP, 1)  # 3 steps of K
        assert gemv.grid_of(fmt, (8, 1, 1), 200) == 13
    # plain on tensor cores: a warp a step of K up to 16 warps, then two steps a warp
    assert gemv.tile_of("plain_mma", 1, 9728, 896) == (8, 1, 1) and gemv.tile_of("plain_mma", 8, 2560, 2048) == (16, 1, 1)
    assert gemv.tile_of("plain_mma", 1, 896, 4864) == (16, 2, 1) and gemv.tile_of("plain_mma", 1, 64, 128) == (1, 1, 1)


def _q8_bound(x, deq, ref, dtype):
    """Per output, what the kernel may be off from the float64 ``ref``: the
    rounding to dtype (2^-8 / 2^-11 of the value, a subnormal step) and the
    float32 sums (mma and scale FMAs, some 64 roundings: 2^-16 of sum |x w|)."""
    unit = 2.0**-8 if dtype == gp.bfloat16 else 2.0**-11
    return unit * np.abs(ref) + 2.0**-16 * (np.abs(x.astype(np.float64)) @ np.abs(deq).T) + 2.0**-24


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
@pytest.mark.parametrize(("k", "group"), [(128, 128), (384, 128), (4096, 128), (4096, 256), (1536, 384)])
def test_q8_tensor_core_gemv_against_float64(rng, fmt, dtype, k, group):
    """int8 and fp8 weights with half activations and groups of 128k run on
    tensor cores (gemv_mma): every row count 1..8, with and without bias, a
    partial last block of columns (N = 200), one step of K to many, one group
    a step and two steps a group; against float64 over the dequantized weight."""
    from pygpukit_gemm import gemv

    n = 200
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.1, 4.0, (n, 1)).astype(np.float32)
    qw = quantize_weight(gp.from_numpy(w), fmt, group_size=group)
    deq = dequantize_weight(qw, gp.float64).to_numpy()
    assert gemv.variant(fmt, dtype, group, k) == fmt + "_mma"
    bias = rng.standard_normal(n).astype(dtype)
    for rows in range(1, gemv.MAX_ROWS + 1):
        x = rng.standard_normal((rows, k)).astype(dtype)
        gx = gp.from_numpy(x)
        assert gp.ops.which("qlinear", gx, qw) == "gemm:gemv_q"
        ref = x.astype(np.float64) @ deq.T
        for b, r in ((None, ref), (bias, ref + bias.astype(np.float64))):
            got = gp.ops.qlinear(gx, qw, None if b is None else gp.from_numpy(b))
            assert got.shape == (rows, n) and got.dtype == dtype
            err = np.abs(got.to_numpy().astype(np.float64) - r)
            bound = _q8_bound(x, deq, r, dtype)
            assert np.all(err <= bound), (rows, b is not None, float(np.max(err / bound)))


def _every_code(fmt, n, k):
    """(n, k) weight values where row i, column j holds code (i + j) % 256
    (NaN codes of e4m3 replaced by zero): every int8 value, every finite e4m3
    code, subnormals included, in every column and every row's lanes."""
    codes = ((np.arange(n)[:, None] + np.arange(k)[None, :]) % 256).astype(np.uint8)
    if fmt == "int8":
        return codes.view(np.int8)
    codes[(codes & 0x7F) == 0x7F] = 0
    return codes.view(gp.float8_e4m3fn)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16], ids=str)
def test_q8_tensor_core_gemv_is_exact_per_weight(rng, fmt, dtype):
    """Each weight converts exactly on the tensor-core path: with one-hot
    activation rows, every output is one weight times its group scale, so it
    must equal that product rounded to float32 (the kernel's scale multiply)
    and then to the output dtype, bit for bit, for every int8 value and every
    finite e4m3 code (e4m3 subnormals too) at every position of K."""
    from pygpukit_gemm import gemv

    n, k, group, rows = 264, 256, 128, gemv.MAX_ROWS  # n: 16 x 16 + a partial block
    values = _every_code(fmt, n, k)
    stype = np.float16 if fmt == "int8" else np.float32
    scales = (rng.uniform(0.5, 2.0, (n, k // group)) * 2.0 ** rng.integers(-3, 4, (n, k // group))).astype(stype)
    scales[0] = 1  # row 0: the values themselves
    qw = QuantizedWeight(gp.from_numpy(values), gp.from_numpy(scales), fmt, group)
    assert gemv.variant(fmt, dtype, group, k) == fmt + "_mma"
    want = (values.astype(np.float32) * np.repeat(scales.astype(np.float32), group, axis=1)).astype(dtype)
    for k0 in range(0, k, rows):
        x = np.zeros((rows, k), dtype)
        x[np.arange(rows), k0 + np.arange(rows)] = 1
        got = gp.ops.qlinear(gp.from_numpy(x), qw).to_numpy()
        np.testing.assert_array_equal(got.astype(np.float32), want[:, k0 : k0 + rows].T.astype(np.float32), err_msg=f"k {k0}..")


def test_quantized_weight_is_plain_data():
    qw = quantize_weight(gp.ones((2, 64)), "int4", group_size=64)
    assert isinstance(qw, QuantizedWeight) and qw.format == "int4" and qw.group_size == 64 and qw.scales.shape == (2, 1)
    assert qw.shape == (2, 64) and qw.q.shape == (2, 32)


def test_gemv_kernels_compile_for_sm80_and_sm90(tmp_path, monkeypatch):
    """Every instantiation the plugin can launch compiles with NVRTC for SM 90
    (no GPU needed); the extremes of the row count for SM 80."""
    import os

    from pygpukit.jit import nvrtc
    from pygpukit_gemm import gemv

    if not nvrtc.available():
        if os.environ.get("CI"):
            pytest.fail("NVRTC could not be loaded in CI; pygpukit-core depends on nvidia-cuda-nvrtc")
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    for rows in range(1, gemv.MAX_ROWS + 1):
        for fmt in gemv.TILES:
            for dtype, ctype in gemv._CTYPES.items():
                if fmt == "plain" and dtype not in gemv.HALF:
                    continue
                kernel = gemv.kernel(rows, fmt, ctype)
                for sm in (80, 90) if rows in (1, gemv.MAX_ROWS) else (90,):
                    assert kernel.compile(sm).image[:4] == b"\x7fELF"
        for ctype in ("pgk::bfloat16", "pgk::half"):  # on tensor cores, at the tiles tile_of gives
            for fmt in gemv.MMA:
                for tile in {gemv.tile_of(fmt, rows, n, k) for n, k in ((14336, 4096), (4096, 14336), (896, 4864), (64, 128))}:
                    kernel = gemv.kernel(rows, fmt, ctype, tile)
                    for sm in (80, 90) if rows in (1, gemv.MAX_ROWS) else (90,):
                        assert kernel.compile(sm).image[:4] == b"\x7fELF"
    for fmt in FORMATS:  # the dequantize kernel
        for ctype in gemv._CTYPES.values():
            for sm in (80, 90):
                assert gemv._dequantize_kernel(fmt, ctype).compile(sm).image[:4] == b"\x7fELF"


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_kernel_equals_the_ops(rng, fmt, monkeypatch):
    """On a GPU dequantize_weight is one kernel: the same bits as the ops it
    replaces (value * scale in float32, then the dtype), over weights spanning
    many binades (fp8 subnormals included), odd N, groups of 64; float64 and
    the CPU take the ops."""
    from pygpukit_gemm import gemv

    w = rng.standard_normal((37, 384)) * np.exp(rng.uniform(-12, 2, (37, 384)))
    qw = quantize_weight(gp.from_numpy(w.astype(np.float32)), fmt, group_size=64)
    assert not gemv.dequantizes(qw.q, qw.scales, gp.float64)
    for dtype in (gp.bfloat16, gp.float16, gp.float32):
        assert gemv.dequantizes(qw.q, qw.scales, dtype) == (gp.backend() == "cuda")
        got = dequantize_weight(qw, dtype)
        with monkeypatch.context() as m:
            m.setattr(gemv, "dequantizes", lambda *a: False)
            want = dequantize_weight(qw, dtype)
        assert got.shape == (37, 384) and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
