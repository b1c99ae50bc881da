"""Embedding lookup against NumPy indexing (a gather is exact: bit equality),
its range check and check=False zeros, the tied lm_head against a float64
product, and the gather kernel (GPU) with its access widths and PyTorch."""

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import embedding as E
from pygpukit_nn.embedding import embedding, lm_head


@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32, gp.float64], ids=str)
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("shape", [(5,), (2, 3), (1, 1, 4), ()], ids=["1d", "2d", "3d", "scalar"])
def test_embedding_matches_numpy(rng, dtype, id_dtype, shape):
    w = rand(rng, (37, 24), dtype).astype(dtype)
    ids = rng.integers(0, 37, shape).astype(id_dtype)
    got = embedding(gp.from_numpy(ids), gp.from_numpy(w))
    assert got.shape == (*shape, 24) and got.dtype == dtype
    np.testing.assert_array_equal(got.to_numpy(), w[ids])


def test_embedding_range_check_and_zeros(rng):
    w = gp.from_numpy(rand(rng, (10, 8), np.float32).astype(np.float32))
    for bad in ([1, 10], [-1, 3], [[2, 3], [4, 11]]):
        want = min(v for v in np.ravel(bad) if v < 0) if min(np.ravel(bad)) < 0 else max(np.ravel(bad))
        with pytest.raises(IndexError, match=rf"embedding: id {want} is out of range for a vocabulary of 10 rows"):
            embedding(gp.from_numpy(np.array(bad)), w)
    ids = np.array([3, 10, -2, 9, 2**40])
    got = embedding(gp.from_numpy(ids), w, check=False).to_numpy()  # no sync; rows of zeros
    host = w.to_numpy()
    np.testing.assert_array_equal(got[[0, 3]], host[[3, 9]])
    np.testing.assert_array_equal(got[[1, 2, 4]], 0)


def test_embedding_errors():
    w = gp.zeros((4, 8), gp.float32)
    ids = gp.zeros(3, gp.int32)
    op = gp.ops.embedding
    for call, exc, match in (
        (lambda: op(np.zeros(3, np.int32), w, True), TypeError, "embedding: ids must be a GPUArray, got ndarray"),
        (lambda: op(ids.astype(gp.float32), w, True), TypeError, "ids must be int32 or int64, got float32"),
        (lambda: op(ids, w.to_numpy(), True), TypeError, "weight must be a GPUArray"),
        (lambda: op(ids, w[0], True), ValueError, r"weight must be 2-D \(vocab, dim\), got shape \(8,\)"),
        (lambda: op(ids, w, "yes"), TypeError, "check must be a bool"),
    ):
        with pytest.raises(exc, match=match):
            call()


def test_embedding_empty_and_strided(rng):
    w = gp.from_numpy(rand(rng, (6, 10), np.float32).astype(np.float32))
    assert embedding(gp.empty((0, 2), gp.int64), w).shape == (0, 2, 10)
    assert embedding(gp.from_numpy(np.array([-1, 5])), gp.zeros((0, 10), gp.float32), check=False).to_numpy().tolist() == [[0.0] * 10] * 2
    host = w.to_numpy()
    ids = np.array([[5, 0], [2, 2]])
    cols = w[:, 2:7]  # a row stride of 10 elements
    np.testing.assert_array_equal(embedding(gp.from_numpy(ids), cols).to_numpy(), host[:, 2:7][ids])
    strided_ids = gp.from_numpy(ids)[:, ::-1]  # non-contiguous ids
    np.testing.assert_array_equal(embedding(strided_ids, w).to_numpy(), host[ids[:, ::-1]])


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16], ids=str)
def test_lm_head_is_the_tied_projection(rng, dtype):
    w = rand(rng, (50, 32), dtype)
    x = rand(rng, (2, 3, 32), dtype)
    got = lm_head(gp.from_numpy(x.astype(dtype)), gp.from_numpy(w.astype(dtype)))
    assert got.shape == (2, 3, 50) and got.dtype == dtype
    # float32 accumulation of 32 products: ~1e-6; bf16 logits are rounded once: 2^-9
    assert rel_err(got.to_numpy(), x @ w.T) < (1e-5 if dtype == gp.float32 else 1e-2)


def test_gather_kernels_compile_for_sm80_and_sm90(need_nvrtc):
    for access in E.ACCESS:
        kernel = E.gather_kernel(access)
        for sm in (80, 90):
            assert kernel.compile(sm).image[:4] == b"\x7fELF", (access, sm)


def test_access_width_choice():
    """The widest access the row width, address and row stride allow (the kernel's plan)."""
    w = gp.zeros((4, 64), gp.bfloat16)
    assert E.access_bytes(w) == 16
    assert E.access_bytes(w[:, :36]) == 8  # 72-byte rows
    assert E.access_bytes(w[:, 2:34]) == 4  # starts 4 bytes in
    assert E.access_bytes(w[:, 1:34]) == 2
    assert E.access_bytes(gp.zeros((4, 5), gp.float32)) == 4
    assert E.access_bytes(w[:, ::2]) == 0  # not unit-stride along D: the reference


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32], ids=str)
@pytest.mark.parametrize(
    "cols", [slice(None), slice(0, 36), slice(2, 34), slice(1, 34), slice(0, 33)], ids=["16B", "8B", "4B", "2B", "odd"]
)
def test_embedding_kernel(rng, dtype, cols):
    w = gp.from_numpy(rand(rng, (1000, 64), dtype).astype(dtype))[:, cols]
    host = w.to_numpy()
    ids = rng.integers(0, 1000, (3, 41))
    for id_dtype in (np.int32, np.int64):
        g_ids = gp.from_numpy(ids.astype(id_dtype))
        assert gp.ops.which("embedding", g_ids, w, True) == "nn:kernel"
        np.testing.assert_array_equal(embedding(g_ids, w).to_numpy(), host[ids])
        np.testing.assert_array_equal(embedding(g_ids, w, False).to_numpy(), host[ids])  # the prepared launch
    out = embedding(gp.from_numpy(np.array([7, -1, 1000, 3])), w, check=False).to_numpy()
    np.testing.assert_array_equal(out[[0, 3]], host[[7, 3]])
    np.testing.assert_array_equal(out[[1, 2]], 0)


@pytest.mark.gpu
def test_embedding_kernel_against_torch(rng):
    torch = pytest.importorskip("torch")
    w = rand(rng, (32000, 512), gp.bfloat16).astype(gp.bfloat16)
    ids = rng.integers(0, 32000, (4, 333))
    got = embedding(gp.from_numpy(ids), gp.from_numpy(w))
    tw = torch.from_numpy(w.view(np.int16)).cuda().view(torch.bfloat16)  # torch takes no NumPy bfloat16: move the bits
    want = torch.nn.functional.embedding(torch.from_numpy(ids).cuda(), tw).view(torch.int16).cpu().numpy()
    np.testing.assert_array_equal(got.to_numpy().view(np.int16), want)
