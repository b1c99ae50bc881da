"""gp.ops.scaled_mm (fp8 with per-tensor, row-wise and block scales): the
reference everywhere, and cuBLASLt's fp8 tensor cores on the GPU, against
float64 products of the dequantized inputs (and, through quantize_fp8, of the
original ones)."""

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext

E4M3, E5M2 = np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2)


def _quantize(x, dtype):
    """Per-tensor scaling to the format's largest finite value, as fp8 recipes do."""
    amax = float(np.abs(x).max())
    scale = amax / float(ml_dtypes.finfo(dtype).max)
    return (x / scale).astype(dtype), np.float32(scale)


def _case(rng, m, k, n, da=E4M3, db=E4M3):
    a, sa = _quantize(rng.standard_normal((m, k)), da)
    w, sb = _quantize(rng.standard_normal((n, k)), db)  # a Linear weight: b = w.T is column-major
    ref = (a.astype(np.float64) * sa) @ (w.astype(np.float64) * sb).T
    g = (gp.from_numpy(a), gp.from_numpy(w).T, gp.from_numpy(np.array([sa])), gp.from_numpy(np.array([sb])))
    return g, ref


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.mark.parametrize("out", [gp.bfloat16, gp.float16, gp.float32], ids=str)
@pytest.mark.parametrize("mkn", [(64, 128, 96), (1, 4096, 512), (33, 48, 17), (256, 512, 1024)])
def test_against_float64(rng, out, mkn):
    (a, b, sa, sb), ref = _case(rng, *mkn)
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=out)
    assert got.dtype == out and got.shape == ref.shape
    impl = _expected("tensor", a, b, out)
    assert gp.ops.which("scaled_mm", a, b, sa, sb, out_dtype=out) == impl
    assert _rel(got.to_numpy(), ref) < _tol(out, impl)


def _sm():
    return ext.device().sm


def test_bias_layouts_and_e5m2(rng):
    (a, b, sa, sb), ref = _case(rng, 32, 64, 48, E4M3, E5M2)
    bias = rng.standard_normal(48).astype(np.float32)
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=gp.from_numpy(bias.astype(gp.bfloat16)))
    assert _rel(got.to_numpy(), ref + bias.astype(gp.bfloat16).astype(np.float64)) < 1e-2
    row_major_b = b.T.copy().T.copy()  # b stored row-major: copied to column-major on the GPU path
    assert not row_major_b.T.is_contiguous
    np.testing.assert_array_equal(gp.ops.scaled_mm(a, row_major_b, sa, sb).to_numpy(), gp.ops.scaled_mm(a, b, sa, sb).to_numpy())


def test_errors(rng):
    (a, b, sa, sb), _ = _case(rng, 16, 32, 16)
    for call, exc, match in (
        (lambda: gp.ops.scaled_mm(a.astype(gp.float16), b, sa, sb), TypeError, "must be float8_e4m3fn or float8_e5m2"),
        (lambda: gp.ops.scaled_mm(a, b[:16], sa, sb), ValueError, "inner dimensions differ"),
        (
            lambda: gp.ops.scaled_mm(a, b, gp.ones((2,), gp.float32), sb),
            ValueError,
            r"scale_a of shape \(2,\) and scale_b of shape \(1,\) fit no scaling",
        ),
        (lambda: gp.ops.scaled_mm(a, b, gp.ones((16, 1), gp.float32), sb), ValueError, r"row-wise \(\(16, 1\) and \(1, 16\)\)"),
        (
            lambda: gp.ops.scaled_mm(a, b, gp.ones((16, 1), gp.float32), gp.ones((2, 2), gp.float32)),
            ValueError,
            r"block-scaled \(\(16, 1\) and \(1, 1\), 1x128",
        ),
        (lambda: gp.ops.scaled_mm(a, b, gp.ones((1,)), sb), TypeError, "scale_a and scale_b must be float32, got float64"),
        (lambda: gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.int8), TypeError, "out_dtype must be bfloat16"),
        (lambda: gp.ops.scaled_mm(a, b, sa, sb, bias=gp.zeros((3,))), ValueError, r"bias must be a GPUArray of shape \(16,\)"),
        (lambda: gp.ops.scaled_mm(a, b, 1.0, sb), TypeError, "scale_a must be a GPUArray"),
    ):
        with pytest.raises(exc, match=match):
            call()


def _expected(mode, a, b, out=gp.bfloat16):
    """The implementation scaled_mm should take here for these operands: cuBLASLt
    for per-tensor scales, k and n multiples of 16; the own e4m3 kernel for
    per-tensor or row-wise scales of two e4m3 operands, k a multiple of 16,
    into bf16/fp16 (cuBLASLt's row-wise and block modes are not enabled, see
    plugin.py); the reference for the rest."""
    if gp.backend() != "cuda" or _sm() < 89:
        return "gemm:reference"
    k, n = a.shape[1], b.shape[1]
    if mode == "tensor" and k % 16 == 0 and n % 16 == 0 and not (a.dtype == b.dtype == E5M2):
        return "gemm:cublaslt_fp8"
    if mode in ("tensor", "row") and a.dtype == b.dtype == E4M3 and k % 16 == 0 and out != gp.float32:
        return "gemm:mma_fp8"
    return "gemm:reference"


def _tol(out, impl):
    # The products of fp8 values are exact; what remains is the accumulation and
    # the output rounding. The reference accumulates in FP32 (1e-5); Hopper's fp8
    # tensor cores accumulate with fewer mantissa bits than FP32 (1.4e-4 to 3.5e-4
    # measured per tensor on an H100 into float32), bf16 and fp16 outputs are bounded by their rounding.
    return 1e-2 if out != gp.float32 else (1e-5 if impl == "gemm:reference" else 1e-3)


def _fp8(rng, shape, dtype):
    """Random fp8 values over the format's range (not only its largest binade)."""
    fmax = float(ml_dtypes.finfo(dtype).max)
    return np.clip(rng.standard_normal(shape) * fmax / 4, -fmax, fmax).astype(dtype)


def _blocks(s, shape, block):
    (m, k), (bm, bk) = shape, block
    return np.repeat(np.repeat(s.astype(np.float64), bm, axis=0), bk, axis=1)[:m, :k]


def _scaled_case(rng, mode, m, k, n, da=E4M3, db=E4M3):
    """fp8 a (m, k), b = w.T (column-major), float32 scales of ``mode`` with
    values across four binades, and the float64 product of the dequantized inputs."""
    a, w = _fp8(rng, (m, k), da), _fp8(rng, (n, k), db)
    kb, nb = -(-k // 128), -(-n // 128)
    shapes = {"row": ((m, 1), (1, n)), "block": ((m, kb), (kb, nb))}[mode]
    sa, sb = (np.float32(2.0 ** rng.uniform(-12, -8, s)) for s in shapes)
    a64 = a.astype(np.float64) * _blocks(sa, (m, k), (1, 128) if mode == "block" else (1, k))
    b64 = w.T.astype(np.float64) * _blocks(sb, (k, n), (128, 128) if mode == "block" else (k, 1))
    g = (gp.from_numpy(a), gp.from_numpy(w).T, gp.from_numpy(sa), gp.from_numpy(sb))
    return g, a64 @ b64


@pytest.mark.parametrize("out", [gp.bfloat16, gp.float32], ids=str)
@pytest.mark.parametrize("mkn", [(64, 128, 96), (1, 4096, 512), (33, 48, 17), (256, 512, 1024), (6, 160, 64)], ids=str)
@pytest.mark.parametrize("mode", ["row", "block"])
def test_rowwise_and_block_scales(rng, mode, out, mkn):
    (a, b, sa, sb), ref = _scaled_case(rng, mode, *mkn)
    impl = _expected(mode, a, b, out)
    assert gp.ops.which("scaled_mm", a, b, sa, sb, out_dtype=out) == impl
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=out)
    assert got.dtype == out and got.shape == ref.shape
    assert _rel(got.to_numpy(), ref) < _tol(out, impl)


@pytest.mark.parametrize("mode", ["row", "block"])
def test_scales_with_bias_and_e5m2(rng, mode):
    (a, b, sa, sb), ref = _scaled_case(rng, mode, 128, 320, 192, E4M3, E5M2)  # K and N not multiples of 128
    bias = rng.standard_normal(192).astype(gp.bfloat16)
    got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=gp.from_numpy(bias))
    assert gp.ops.which("scaled_mm", a, b, sa, sb, bias=gp.from_numpy(bias)) == _expected(mode, a, b)
    assert _rel(got.to_numpy(), ref + bias.astype(np.float64)) < 1e-2
    (a, b, sa, sb), ref = _scaled_case(rng, mode, 64, 256, 128, E5M2, E5M2)  # no tensor cores for e5m2 with e5m2
    assert gp.ops.which("scaled_mm", a, b, sa, sb) == "gemm:reference"
    assert _rel(gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.float32).to_numpy(), ref) < 1e-5


def test_scale_layouts_give_the_same_product(rng):
    """Scales in the layouts cuBLASLt reads are taken as they are, others copied:
    the same product either way."""
    (a, b, sa, sb), _ = _scaled_case(rng, "block", 64, 320, 192)  # 3 K blocks: b's scales need a padded stride
    want = gp.ops.scaled_mm(a, b, sa, sb).to_numpy()
    sa_m_major = gp.from_numpy(sa.to_numpy().T.copy()).T
    padded = np.zeros((2, 4), np.float32)
    padded[:, :3] = sb.to_numpy().T
    sb_k_major = gp.from_numpy(padded)[:, :3].T
    assert sa_m_major.shape == sa.shape and sb_k_major.shape == sb.shape
    np.testing.assert_array_equal(gp.ops.scaled_mm(a, b, sa_m_major, sb_k_major).to_numpy(), want)
    (a, b, sa, sb), _ = _scaled_case(rng, "row", 64, 128, 96)
    want = gp.ops.scaled_mm(a, b, sa, sb).to_numpy()
    strided = gp.from_numpy(np.repeat(sa.to_numpy(), 2, axis=1))[:, :1]  # (M, 1) with a stride of 2
    assert not strided.is_contiguous
    np.testing.assert_array_equal(gp.ops.scaled_mm(a, b, strided, sb).to_numpy(), want)


@pytest.mark.parametrize("mkn", [(128, 1024, 512), (100, 704, 320), (36, 700, 300), (1, 384, 256)], ids=str)
def test_deepgemm_recipe_against_unquantized(rng, mkn):
    """quantize_fp8 with 1x128 activation and 128x128 weight blocks, then
    scaled_mm, against the float64 product of the original inputs."""
    from pygpukit_gemm import quantize_fp8

    m, k, n = mkn
    x = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.1, 10, (m, 1)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    xq = quantize_fp8(gp.from_numpy(x), granularity="block", block=(1, 128))
    wq = quantize_fp8(gp.from_numpy(w), granularity="block", block=(128, 128))
    got = gp.ops.scaled_mm(xq.data, wq.data.T, xq.scale, wq.scale.T, out_dtype=gp.float32)
    assert gp.ops.which("scaled_mm", xq.data, wq.data.T, xq.scale, wq.scale.T) == _expected("block", xq.data, wq.data.T)
    # e4m3 keeps 3 mantissa bits: rounding leaves a relative rms error of about
    # 2.5% on each input, so about 3.5% norm-wise on the product (measured 3.4%
    # to 4.0% at these shapes); the accumulation adds nothing visible
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert np.linalg.norm(got.to_numpy().astype(np.float64) - ref) / np.linalg.norm(ref) < 5e-2


def test_predicates():
    """cuBLASLt's fp8 path takes per-tensor scales with k and n multiples of 16,
    not e5m2 with e5m2; row-wise and block scales go to the reference."""
    from pygpukit_gemm import scaled

    def ops(m, k, n, mode, da=E4M3, db=E4M3):
        kb, nb = -(-k // 128), -(-n // 128)
        shapes = {"tensor": ((), ()), "row": ((m, 1), (1, n)), "block": ((m, kb), (kb, nb))}[mode]
        return (gp.zeros((m, k), da), gp.zeros((n, k), db).T, *(gp.ones(s, gp.float32) for s in shapes))

    assert scaled.fits_tensor_cores(*ops(64, 256, 128, "tensor")) and scaled.fits_tensor_cores(*ops(1, 256, 128, "tensor"))
    assert not scaled.fits_tensor_cores(*ops(64, 40, 128, "tensor"))  # k % 16
    assert not scaled.fits_tensor_cores(*ops(64, 256, 120, "tensor"))  # n % 16
    assert not scaled.fits_tensor_cores(*ops(64, 256, 128, "tensor", E5M2, E5M2))
    assert not scaled.fits_tensor_cores(*ops(64, 256, 128, "row")) and not scaled.fits_tensor_cores(*ops(64, 256, 128, "block"))
    # the own e4m3 kernel: per-tensor and row-wise scales, both e4m3, k % 16, a bf16 / fp16 output
    assert scaled.fits_own_kernel(*ops(64, 256, 128, "row")) and scaled.fits_own_kernel(*ops(1, 32, 120, "tensor"))
    assert scaled.fits_own_kernel(*ops(64, 256, 128, "row"), out_dtype=gp.float16)
    assert not scaled.fits_own_kernel(*ops(64, 256, 128, "row"), out_dtype=gp.float32)
    assert not scaled.fits_own_kernel(*ops(64, 256, 128, "block")) and not scaled.fits_own_kernel(*ops(64, 40, 128, "row"))
    assert not scaled.fits_own_kernel(*ops(64, 256, 128, "row", E4M3, E5M2))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("mkn", [(256, 512, 1024), (1, 4096, 512), (33, 48, 17), (300, 1024, 200)], ids=str)
def test_own_kernel_routed(rng, mode, mkn):
    """The own e4m3 kernel (routed to it where cuBLASLt would win) against float64
    and the reference, with a bias and into float16; the same bits twice."""
    if _sm() < 89:
        pytest.skip("e4m3 tensor cores need SM 89+")
    m, k, n = mkn
    if mode == "tensor":
        (a, b, sa, sb), ref = _case(rng, m, k, n)
    else:
        (a, b, sa, sb), ref = _scaled_case(rng, mode, m, k, n)
    bias = gp.from_numpy(rng.standard_normal(n).astype(np.float32) * float(np.abs(ref).max()))
    with gp.routing(scaled_mm="gemm:mma_fp8"):
        got = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=bias)
        again = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=bias)
        half = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.float16)
    with_bias = ref + bias.to_numpy().astype(np.float64)
    assert _rel(got.to_numpy(), with_bias) < 1e-2 and _rel(half.to_numpy(), ref) < 2e-3
    np.testing.assert_array_equal(again.to_numpy(), got.to_numpy())
    with gp.routing(scaled_mm="gemm:reference"):
        want = gp.ops.scaled_mm(a, b, sa, sb, out_dtype=gp.bfloat16, bias=bias)
    assert _rel(got.to_numpy(), want.to_numpy().astype(np.float64)) < 1e-2
