"""pygpukit-gemm's cuBLASLt paths: operand layouts (CPU), then matmul and
linear against float64 NumPy on the GPU, for every dtype, odd shapes,
transposed, strided and broadcast operands, bias, TF32 and determinism."""

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import cublaslt
from pygpukit_gemm.cublaslt import OP_N, OP_T, OperandLayout, operand_layout

# norm-wise relative error bounds (max |C - ref| / max |ref|) by dtype
TOL = {gp.float16: 1e-2, gp.bfloat16: 1e-2, gp.float32: 1e-5, gp.float64: 1e-12}
FLOATS = list(TOL)


def _layout(arr):
    return operand_layout(arr.shape, arr.strides, arr.itemsize)


def test_operand_layouts():
    a = np.zeros((4, 6), np.float32)
    assert _layout(a) == OperandLayout(OP_N, 6, 4, 6, 0)  # row-major: its transpose, column-major
    assert _layout(a.T) == OperandLayout(OP_T, 6, 4, 6, 0)  # a transposed view: a transposed operation
    assert _layout(a[:, :3]) == OperandLayout(OP_N, 3, 4, 6, 0)  # a column slice keeps the leading dimension
    assert _layout(a[:, ::2]) is None  # no unit stride: copy first
    b = np.zeros((2, 3, 4, 6), np.float32)
    assert _layout(b) == OperandLayout(OP_N, 6, 4, 6, 24)  # two batch axes, one stride
    assert _layout(b[:, ::2]) is None  # batch axes that are not one stride
    assert _layout(np.broadcast_to(a, (5, 4, 6))) == OperandLayout(OP_N, 6, 4, 6, 0)  # broadcast batch
    assert _layout(np.zeros((1, 6), np.float32)[:, :]) == OperandLayout(OP_N, 6, 1, 6, 0)
    col = np.zeros((6, 4), np.float32)[:, :1]
    assert _layout(col) == OperandLayout(OP_N, 1, 6, 4, 0)  # one column: its stride is never read
    assert _layout(np.zeros((3, 1, 4, 6), np.float32)) == OperandLayout(OP_N, 6, 4, 6, 24)


def test_library_candidates(monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CUBLASLT_PATH", "/opt/my/libcublasLt.so")
    cands = cublaslt.candidates()
    assert cands[0] == "/opt/my/libcublasLt.so" and cands[-2:] == ["libcublasLt.so.13", "libcublasLt.so.12"]


def test_registered_above_core():
    rows = [r for r in gp.ops.table() if r.plugin == "gemm"]
    assert {(r.op, r.impl) for r in rows} >= {("matmul", "gemm:cublaslt"), ("matmul", "gemm:cublaslt_bf16"), ("linear", "gemm:cublaslt")}
    if gp.backend() == "cuda":
        assert all(r.status == "runs here" for r in rows if r.op == "matmul" and r.impl.startswith("gemm:cublaslt"))
        assert all(r.status.startswith("outranked by gemm:cublaslt") for r in rows if r.op == "matmul" and r.impl == "gemm:mma")
    else:
        assert all(r.status.startswith("not here:") for r in rows if r.backend == "cuda")
        cpu_ops = {
            "scaled_mm",
            "qlinear",
            "grouped_linear",
            "grouped_linear_masked",
            "grouped_scaled_linear",
            "grouped_scaled_linear_masked",
            "fused_linear",
        }
        assert {(r.op, r.status) for r in rows if r.backend == "cpu"} == {(op, "runs here") for op in cpu_ops}
    info = next(p for p in gp.plugins.plugins() if p.name == "gemm")
    assert info.status == "active" and info.info.name == "pygpukit-gemm"


def _rel(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize(
    "sa, sb",
    [((128, 256), (256, 64)), ((1, 4096), (4096, 1024)), ((33, 17), (17, 65)), ((7, 1), (1, 9)), ((5,), (5, 3)),
     ((4, 3), (3,)), ((3, 16, 24), (3, 24, 8)), ((2, 1, 9, 5), (4, 5, 7)), ((256, 1000), (1000, 130))],
)  # fmt: skip
def test_matmul_against_float64(rng, dtype, sa, sb):
    x, y = _rand(rng, sa, dtype), _rand(rng, sb, dtype)
    ref = np.matmul(x.astype(np.float64), y.astype(np.float64))
    got = gp.from_numpy(x) @ gp.from_numpy(y)
    assert got.dtype == dtype and got.shape == ref.shape
    assert _rel(got.to_numpy(), ref) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float32], ids=str)
def test_transposed_strided_and_broadcast_operands(rng, dtype):
    a = _rand(rng, (96, 80), dtype)
    b = _rand(rng, (64, 96), dtype)
    ga, gb = gp.from_numpy(a), gp.from_numpy(b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cases = [
        (ga.T, gb.T, a64.T @ b64.T),  # both read transposed, no copies
        (ga[:, ::2].T, gb.T[:, ::2], a64[:, ::2].T @ b64.T[:, ::2]),  # no unit stride: copied; a strided transpose: read as is
        (ga[:, 5:69], gp.from_numpy(b[:64, :40].copy()), a64[:, 5:69] @ b64[:64, :40]),  # a column slice (offset pointer)
        (gp.broadcast_to(ga[:48, :64], (3, 48, 64)), gp.from_numpy(np.ascontiguousarray(b[:, :20])), a64[:48, :64] @ b64[:, :20]),
    ]
    for x, y, ref in cases:
        got = gp.matmul(x, y).to_numpy()
        assert got.shape == np.broadcast_shapes(got.shape, ref.shape)
        assert _rel(got, np.broadcast_to(ref, got.shape)) < TOL[dtype]


@pytest.mark.gpu
def test_edges_and_errors(rng):
    a = gp.from_numpy(_rand(rng, (4, 0), np.float32))
    b = gp.from_numpy(_rand(rng, (0, 3), np.float32))
    np.testing.assert_array_equal((a @ b).to_numpy(), np.zeros((4, 3), np.float32))  # K = 0
    assert (gp.from_numpy(_rand(rng, (0, 5), np.float32)) @ gp.from_numpy(_rand(rng, (5, 2), np.float32))).shape == (0, 2)
    with pytest.raises(ValueError, match="mismatch in its core dimension"):
        gp.from_numpy(_rand(rng, (4, 5), np.float32)) @ gp.from_numpy(_rand(rng, (4, 5), np.float32))
    mixed = gp.matmul(gp.from_numpy(_rand(rng, (8, 8), np.float16)), gp.from_numpy(_rand(rng, (8, 8), np.float32)))
    assert mixed.dtype == np.float32


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_linear_with_bias_epilogue(rng, dtype):
    x, w, bias = _rand(rng, (2, 7, 96), dtype), _rand(rng, (40, 96), dtype), _rand(rng, (40,), dtype)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    got = gp.linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(bias))
    assert got.shape == (2, 7, 40) and got.dtype == dtype
    assert _rel(got.to_numpy(), ref) < TOL[dtype]
    nob = gp.linear(gp.from_numpy(x), gp.from_numpy(w))
    assert _rel(nob.to_numpy(), ref - bias.astype(np.float64)) < TOL[dtype]
    with pytest.raises(ValueError, match=r"bias must have shape \(40,\)"):
        gp.linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(bias[:5]))


@pytest.mark.gpu
def test_tf32_only_when_asked_and_deterministic(rng):
    x, y = _rand(rng, (512, 1024), np.float32), _rand(rng, (1024, 512), np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    gx, gy = gp.from_numpy(x), gp.from_numpy(y)
    exact = (gx @ gy).to_numpy()
    assert _rel(exact, ref) < 1e-5
    assert np.array_equal(exact, (gx @ gy).to_numpy())  # the same bits twice
    gp.set_matmul_precision("tf32")
    try:
        fast = (gx @ gy).to_numpy()
    finally:
        gp.set_matmul_precision("highest")
    assert 1e-5 < _rel(fast, ref) < 1e-3  # TF32 rounds the inputs to 10 mantissa bits
    assert np.array_equal(exact, (gx @ gy).to_numpy())


@pytest.mark.gpu
def test_routing_back_to_core_gives_the_same_answer(rng):
    x, y = gp.from_numpy(_rand(rng, (64, 48), np.float32)), gp.from_numpy(_rand(rng, (48, 32), np.float32))
    fast = (x @ y).to_numpy()
    with gp.routing(matmul="pygpukit"):
        ref = (x @ y).to_numpy()
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-5)
