"""MoE routing against float64 NumPy: router top-k (ties, renormalize, both
scorings), permute / unpermute (stable expert order, empty experts, dropped
assignments, round trips) and moe_forward against a dense NumPy MoE; the
reference everywhere, the kernels on the GPU (and against PyTorch there),
NVRTC compilation of the kernels anywhere."""

import struct

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit.jit.signature import find_signature
from pygpukit_nn import moe

DTYPES = [gp.float32, gp.float16, gp.bfloat16]
# Router weights are float32 math on exactly representable logits: a few
# float32 ulps of exp and the sums. Combines: float32 sums of k products,
# one rounding to the output dtype (half an ulp: 2^-9 bf16, 2^-12 fp16).
W_TOL = 2e-6
TOL = {np.dtype(gp.float32): 2e-6, np.dtype(gp.float16): 1e-3, np.dtype(gp.bfloat16): 8e-3, np.dtype(gp.float64): 1e-13}


def _np_route(logits, k, renormalize, scoring):
    """(weights, ids) in float64: the k largest logits, lower expert id first on ties."""
    t, e = logits.shape
    ids = np.empty((t, k), np.int64)
    for r in range(t):
        ids[r] = np.lexsort((np.arange(e), -logits[r]))[:k]
    chosen = np.take_along_axis(logits, ids, 1)
    if scoring == "softmax":
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        w = np.take_along_axis(p / p.sum(axis=1, keepdims=True), ids, 1)
    else:
        w = 1 / (1 + np.exp(-chosen))
    if renormalize:
        w = w / w.sum(axis=1, keepdims=True)
    return w, ids


def _np_permute(x, ids, e):
    k = ids.shape[1]
    flat = ids.reshape(-1)
    bucket = np.where((flat >= 0) & (flat < e), flat, e)
    order = np.argsort(bucket, kind="stable")
    offs = np.array([np.sum(bucket <= j) for j in range(e)])
    return x[order // k], offs, order


def _np_unpermute(y, index_map, w):
    t, k = w.shape
    rows = np.empty((t * k, y.shape[1]))
    rows[index_map] = y
    return np.einsum("tk,tkd->td", w, rows.reshape(t, k, -1))


def _route(rng, dtype, t, e, k, renormalize, scoring, ties=False):
    logits = np.round(rng.standard_normal((t, e)) * 2) / 2 if ties else rand(rng, (t, e), dtype, 2.0)
    w, ids = moe.router_topk(gp.from_numpy(logits.astype(dtype)), k, renormalize=renormalize, scoring=scoring)
    assert w.shape == ids.shape == (t, k) and ids.dtype == np.int32
    assert w.dtype == (np.float64 if dtype == gp.float64 else np.float32)
    rw, rids = _np_route(logits, k, renormalize, scoring)
    np.testing.assert_array_equal(ids.to_numpy(), rids)
    return rel_err(w.to_numpy(), rw)


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
def test_router_against_float64(rng, dtype, renormalize, scoring):
    for t, e, k in [(1, 8, 2), (37, 8, 2), (5, 60, 4), (3, 4, 4), (6, 3, 1)]:
        assert _route(rng, dtype, t, e, k, renormalize, scoring) < (1e-13 if dtype == gp.float64 else W_TOL), (t, e, k)


@pytest.mark.parametrize("renormalize", [True, False])
def test_router_ties_lower_id_first(rng, renormalize):
    # logits on a grid of halves: many equal values per row
    assert _route(rng, gp.float32, 50, 16, 6, renormalize, "softmax", ties=True) < W_TOL
    logits = gp.from_numpy(np.array([[1.0, 3.0, 3.0, -0.0, 0.0, 3.0]], np.float32))
    _, ids = moe.router_topk(logits, 5, renormalize=renormalize)
    assert ids.to_numpy().tolist() == [[1, 2, 5, 0, 3]]  # -0.0 ties with +0.0


def test_router_leading_axes(rng):
    logits = rand(rng, (2, 3, 10), gp.float32, 2.0)
    w, ids = moe.router_topk(gp.from_numpy(logits.astype(np.float32)), 3)
    assert w.shape == ids.shape == (2, 3, 3)
    rw, rids = _np_route(logits.reshape(6, 10), 3, True, "softmax")
    np.testing.assert_array_equal(ids.to_numpy().reshape(6, 3), rids)
    assert rel_err(w.to_numpy().reshape(6, 3), rw) < W_TOL


def _ids(rng, t, k, e, drop=0.0, skip=()):
    """Distinct experts per token (as a router gives), avoiding ``skip``; a fraction ``drop`` set to -1 or E."""
    allowed = np.array([j for j in range(e) if j not in skip])
    ids = np.stack([rng.permutation(allowed)[:k] for _ in range(t)]) if t else np.zeros((0, k), np.int64)
    mask = rng.random(ids.shape) < drop
    ids[mask] = rng.choice([-1, e, e + 5], size=int(mask.sum()))
    return ids


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
@pytest.mark.parametrize("k", [1, 2])
def test_permute_unpermute_against_float64(rng, dtype, k):
    for t, e, d, skip, drop in [(37, 8, 24, (3, 6), 0.0), (1, 4, 8, (), 0.0), (23, 5, 13, (0,), 0.2), (64, 3, 16, (), 0.0)]:
        x = rand(rng, (t, d), dtype)
        ids = _ids(rng, t, k, e, drop, skip)
        xs, offs, im = moe.permute(gp.from_numpy(x.astype(dtype)), gp.from_numpy(ids.astype(np.int32)), e)
        rx, roffs, rim = _np_permute(x, ids, e)
        assert xs.dtype == np.dtype(dtype) and offs.dtype == im.dtype == np.int32
        np.testing.assert_array_equal(im.to_numpy(), rim)
        np.testing.assert_array_equal(offs.to_numpy(), roffs)
        np.testing.assert_array_equal(xs.to_numpy().astype(np.float64), rx)
        assert all(offs.to_numpy()[j] == offs.to_numpy()[j - 1] for j in skip if j)  # experts without tokens
        # unpermute of other rows, and the round trip sum_k w * x
        y = rand(rng, (t * k, d), dtype)
        w = rng.random((t, k))
        got = moe.unpermute(gp.from_numpy(y.astype(dtype)), im, gp.from_numpy(w.astype(np.float32)))
        assert got.shape == (t, d) and got.dtype == np.dtype(dtype)
        assert rel_err(got.to_numpy(), _np_unpermute(y, rim, w.astype(np.float32))) < TOL[np.dtype(dtype)]
        back = moe.unpermute(xs, im, gp.from_numpy(w.astype(np.float32))).to_numpy()
        w32 = w.astype(np.float32).astype(np.float64)
        assert rel_err(back, x * w32.sum(axis=1, keepdims=True)) < TOL[np.dtype(dtype)]


def test_permute_int64_ids_and_empty(rng):
    x = rand(rng, (9, 8), gp.float32)
    ids = _ids(rng, 9, 2, 6)
    xs, offs, im = moe.permute(gp.from_numpy(x.astype(np.float32)), gp.from_numpy(ids), 6)  # int64 ids
    rx, roffs, rim = _np_permute(x, ids, 6)
    np.testing.assert_array_equal(im.to_numpy(), rim)
    np.testing.assert_array_equal(offs.to_numpy(), roffs)
    np.testing.assert_array_equal(xs.to_numpy(), rx)
    xs, offs, im = moe.permute(gp.zeros((0, 8), gp.float32), gp.zeros((0, 2), gp.int32), 4)
    assert xs.shape == (0, 8) and im.shape == (0,) and offs.to_numpy().tolist() == [0, 0, 0, 0]
    assert moe.unpermute(xs, im, gp.zeros((0, 2), gp.float32)).shape == (0, 8)


def _np_moe(x, router_w, wgu, wd, k, activation="silu"):
    logits = x @ router_w.T
    w, ids = _np_route(logits, k, True, "softmax")
    inter = wd.shape[2]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        for s in range(k):
            h = wgu[ids[t, s]] @ x[t]
            g, u = h[:inter], h[inter:]
            if activation == "silu":
                a = g / (1 + np.exp(-g)) * u
            else:
                a = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))) * u
            out[t] += w[t, s] * (wd[ids[t, s]] @ a)
    return out


def _moe_case(rng, t=13, d=16, inter=8, e=4):
    # x and router_w on small grids: the logits are exact in every dtype, so the
    # route does not depend on the dtype's rounding
    x = rng.integers(-3, 4, (t, d)) / 2.0
    router_w = rng.integers(-2, 3, (e, d)).astype(np.float64)
    wgu = rng.standard_normal((e, 2 * inter, d)) / np.sqrt(d)
    wd = rng.standard_normal((e, d, inter)) / np.sqrt(inter)
    return x, router_w, wgu, wd


# bf16 / fp16: the gate_up output, the activation and the down output are each
# rounded to the dtype (three roundings of ~2^-9 / 2^-12, relative to the largest value)
MOE_TOL = {np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 5e-3, np.dtype(gp.bfloat16): 3e-2}


@pytest.mark.parametrize("dtype", DTYPES)
def test_moe_forward_against_dense(rng, dtype):
    x, router_w, wgu, wd = _moe_case(rng)
    wgu, wd = wgu.astype(dtype).astype(np.float64), wd.astype(dtype).astype(np.float64)
    args = [gp.from_numpy(a.astype(dtype)) for a in (x, router_w, wgu, wd)]
    got = moe.moe_forward(*args, 2)
    assert got.shape == x.shape and got.dtype == np.dtype(dtype)
    assert rel_err(got.to_numpy(), _np_moe(x, router_w, wgu, wd, 2)) < MOE_TOL[np.dtype(dtype)]
    # separate gate / up weights (Mixtral's w1 / w3) and GeGLU (tanh) with leading axes
    inter = wd.shape[2]
    gate, up = (gp.from_numpy(a.astype(dtype)) for a in (wgu[:, :inter], wgu[:, inter:]))
    got = moe.moe_forward(args[0], args[1], gate, args[3], 2, w_up=up)
    assert rel_err(got.to_numpy(), _np_moe(x, router_w, wgu, wd, 2)) < MOE_TOL[np.dtype(dtype)]
    got = moe.moe_forward(args[0].reshape(1, 13, 16), *args[1:], 3, activation="gelu_tanh")
    assert got.shape == (1, 13, 16)
    assert rel_err(got.to_numpy()[0], _np_moe(x, router_w, wgu, wd, 3, "gelu_tanh")) < MOE_TOL[np.dtype(dtype)]


def test_errors():
    f32 = gp.float32
    lg = gp.zeros((4, 8), f32)
    x = gp.zeros((4, 16), f32)
    ids = gp.zeros((4, 2), gp.int32)
    y = gp.zeros((8, 16), f32)
    im = gp.arange(8, dtype=gp.int32)
    w = gp.zeros((4, 2), f32)
    rw, wgu, wd = gp.zeros((8, 16), f32), gp.zeros((8, 12, 16), f32), gp.zeros((8, 16, 6), f32)
    cases = [
        (lambda: moe.router_topk([1.0], 1), TypeError, "logits must be a GPUArray"),
        (lambda: moe.router_topk(gp.zeros((4, 8), gp.int32), 1), TypeError, "logits must be float16"),
        (lambda: moe.router_topk(gp.zeros((4, 0), f32), 1), ValueError, "E >= 1"),
        (lambda: moe.router_topk(lg, 9), ValueError, r"k must be in \[1, 8\], got 9"),
        (lambda: moe.router_topk(lg, 0), ValueError, "k must be in"),
        (lambda: moe.router_topk(lg, 2.0), TypeError, "k must be an integer"),
        (lambda: moe.router_topk(lg, 2, renormalize=1), TypeError, "renormalize must be a bool"),
        (lambda: moe.router_topk(lg, 2, scoring="relu"), ValueError, "scoring must be 'softmax' or 'sigmoid'"),
        (lambda: moe.permute(x, ids.astype(f32), 8), TypeError, "expert_ids must be int32 or int64"),
        (lambda: moe.permute(x.reshape(64), ids, 8), ValueError, r"x must be \(tokens, hidden\)"),
        (lambda: moe.permute(x, gp.zeros((3, 2), gp.int32), 8), ValueError, "expert_ids must be"),
        (lambda: moe.permute(x, ids, 0), ValueError, "num_experts must be in"),
        (lambda: moe.permute(x, ids, True), TypeError, "num_experts must be an integer"),
        (lambda: moe.unpermute(y, im, gp.zeros((4, 3), f32)), ValueError, "weights must be"),
        (lambda: moe.unpermute(y, gp.arange(7, dtype=gp.int32), w), ValueError, "index_map must have shape"),
        (lambda: moe.unpermute(y, im.astype(f32), w), TypeError, "index_map must be int32"),
        (lambda: moe.unpermute(y.reshape(8, 4, 4), im, w), ValueError, "y_sorted must be"),
        (lambda: moe.moe_forward(x, rw, wgu, wd, 9), ValueError, "k must be in"),
        (lambda: moe.moe_forward(x, rw[:, :8], wgu, wd, 2), ValueError, "router_w must be"),
        (lambda: moe.moe_forward(x, rw, gp.zeros((8, 13, 16), f32), wd, 2), ValueError, "must be even"),
        (lambda: moe.moe_forward(x, rw, wgu, gp.zeros((8, 16, 5), f32), 2), ValueError, "w_down must have shape"),
        (lambda: moe.moe_forward(x, rw, wgu, wd, 2, w_up=gp.zeros((8, 6, 16), f32)), ValueError, "w_up must match"),
        (lambda: moe.moe_forward(x, rw, wgu.astype(gp.float16), wd, 2), TypeError, "w_gate_up must have x's dtype"),
        (lambda: moe.moe_forward(x, rw, wgu, wd, 2, activation="relu"), ValueError, "activation must be"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    # The reference reads the index map on the host and checks it; the kernel
    # cannot without a sync (it clamps, never reading out of bounds).
    with gp.routing(moe_unpermute="nn:reference"):
        with pytest.raises(ValueError, match="must be a permutation"):
            moe.unpermute(y, gp.zeros((8,), gp.int32), w)


def test_tiles():
    for n, nb in [(1, 9), (8192, 9), (300, 3), (256 * 1000, 9), (10**6, 1025), (257, 2)]:
        tiles, tile_len = moe._tiles(n, nb)
        assert tile_len % moe.PERM_THREADS == 0 and (tiles - 1) * tile_len < n <= tiles * tile_len
        assert tiles <= moe.MAX_TILES and (tiles == 1 or tiles * nb <= 32768)


def test_launch_params_match_signatures():
    """The launches' arguments pack (by the signatures the kernels are built
    with) to the bytes of moe.cu's parameter lists (P a pointer, q long long,
    i int, in struct's native layout), and those signatures agree with the
    parameter lists in the source."""
    cases = [
        (moe._router_kernel("float", 1, 0, True), "@PqqiiPP", (0x1000, 33, 77, 8, 2, 0x2000, 0x3000)),
        (moe._count_kernel("int"), "@PqiqP", (0x1000, 5000, 8, 512, 0x2000)),
        (moe._scan_kernel(), "@PiiP", (0x1000, 7, 8, 0x2000)),
        (moe._rank_kernel("int"), "@PqiqPP", (0x1000, 5000, 8, 512, 0x2000, 0x3000)),
        (moe._gather_kernel("float", 4), "@PqPiiP", (0x1000, 40, 0x2000, 2, 12, 0x3000)),
        (moe._invert_kernel(), "@PqP", (0x1000, 99, 0x2000)),
        (moe._combine_kernel("float", 4), "@PqPPiqiP", (0x1000, 40, 0x2000, 0x3000, 2, 99, 12, 0x4000)),
    ]
    for kern, fmt, args in cases:
        assert kern._packer.pack(args) == struct.pack(fmt, *args), kern.func
        declared = find_signature(kern.source, kern.func.partition("<")[0].rpartition("::")[2])  # pointers agree as pointers
        assert [(p.code, p.pointer or p.ctype) for p in kern.params] == [(p.code, p.pointer or p.ctype) for p in declared], kern.func


def test_kernels_compile(need_nvrtc):
    """The module's kernels in one NVRTC program per SM: every dtype, scoring and
    renormalization of the router at its smallest and largest logits per lane
    (and every width in between once), every copy width."""
    from pygpukit.jit import compiler

    cts = ("float", "pgk::half", "pgk::bfloat16")
    kernels = [moe._router_kernel(ct, epl, sc, rn) for ct in cts for epl in (1, 32) for sc in (0, 1) for rn in (True, False)]
    kernels += [moe._router_kernel("float", epl, 0, True) for epl in (2, 4, 8, 16)]
    kernels += [f(it) for f in (moe._count_kernel, moe._rank_kernel) for it in ("int", "long long")]
    kernels += [moe._scan_kernel(), moe._invert_kernel()]
    for ct, size in zip(cts, (4, 2, 2)):
        kernels += [f(ct, v) for f in (moe._gather_kernel, moe._combine_kernel) for v in (1, 2, 4, 8) if v * size <= 16]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "moe.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)


# -- the kernels (GPU) -------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_router(rng, dtype):
    lg = gp.zeros((4, 8), dtype)
    assert gp.ops.which("moe_route", lg, 2, True, "softmax") == "nn:kernel"
    for renormalize in (True, False):
        for scoring in ("softmax", "sigmoid"):
            # odd token counts, E from 1 logit per lane to 32, k up to 32
            for t, e, k in [(1, 8, 2), (333, 8, 2), (77, 60, 8), (5, 1024, 32), (9, 33, 1), (40, 128, 8), (3, 5, 5)]:
                assert _route(rng, dtype, t, e, k, renormalize, scoring) < W_TOL, (t, e, k, renormalize, scoring)
    assert _route(rng, gp.float32, 300, 64, 6, True, "softmax", ties=True) < W_TOL
    # a strided view of wider rows
    full = rand(rng, (16, 40), gp.float32, 2.0)
    w, ids = moe.router_topk(gp.from_numpy(full.astype(np.float32))[:, 3:35], 4)
    rw, rids = _np_route(full[:, 3:35], 4, True, "softmax")
    np.testing.assert_array_equal(ids.to_numpy(), rids)
    assert rel_err(w.to_numpy(), rw) < W_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_permute_unpermute(rng, dtype):
    x = gp.zeros((4, 16), dtype)
    assert gp.ops.which("moe_permute", x, gp.zeros((4, 2), gp.int32), 8) == "nn:kernel"
    assert gp.ops.which("moe_unpermute", x, gp.zeros((4,), gp.int32), gp.zeros((2, 2), gp.float32)) == "nn:kernel"
    # many tiles, one tile, odd widths (scalar copies), a dropped fraction, many experts, int64 ids
    cases = [
        (4096, 8, 2, 64, 0.0),
        (1, 8, 2, 8, 0.0),
        (777, 60, 4, 13, 0.1),
        (3001, 128, 8, 40, 0.0),
        (50, 1024, 6, 24, 0.3),
        (999, 3, 1, 7, 0.0),
    ]
    for t, e, k, d, drop in cases:
        x = rand(rng, (t, d), dtype)
        ids = _ids(rng, t, k, e, drop, skip=(1,))
        for idt in (np.int32, np.int64):
            xs, offs, im = moe.permute(gp.from_numpy(x.astype(dtype)), gp.from_numpy(ids.astype(idt)), e)
            rx, roffs, rim = _np_permute(x, ids, e)
            np.testing.assert_array_equal(im.to_numpy(), rim)
            np.testing.assert_array_equal(offs.to_numpy(), roffs)
            np.testing.assert_array_equal(xs.to_numpy().astype(np.float64), rx)
        w = rng.random((t, k)).astype(np.float32)
        y = rand(rng, (t * k, d), dtype)
        got = moe.unpermute(gp.from_numpy(y.astype(dtype)), im, gp.from_numpy(w))
        assert rel_err(got.to_numpy(), _np_unpermute(y, rim, w)) < TOL[np.dtype(dtype)], (t, e, k, d)
    # a strided x (a slice of wider rows) and an unaligned start
    wide = rand(rng, (100, 40), dtype)
    ids = _ids(rng, 100, 2, 8)
    xs, _, _ = moe.permute(gp.from_numpy(wide.astype(dtype))[:, 1:33], gp.from_numpy(ids.astype(np.int32)), 8)
    np.testing.assert_array_equal(xs.to_numpy().astype(np.float64), _np_permute(wide[:, 1:33], ids, 8)[0])


@pytest.mark.gpu
def test_kernel_deterministic(rng):
    x = gp.from_numpy(rand(rng, (2048, 256), gp.bfloat16).astype(gp.bfloat16))
    w, ids = moe.router_topk(gp.from_numpy(rng.standard_normal((2048, 8)).astype(np.float32)), 2)
    first = None
    for _ in range(3):
        xs, _, im = moe.permute(x, ids, 8)
        out = moe.unpermute(xs, im, w).to_numpy().view(np.uint16)
        if first is None:
            first = (im.to_numpy(), out)
        np.testing.assert_array_equal(im.to_numpy(), first[0])
        np.testing.assert_array_equal(out, first[1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16])
def test_kernel_moe_forward(rng, dtype):
    x, router_w, wgu, wd = _moe_case(rng, t=300, d=64, inter=32, e=8)
    wgu, wd = wgu.astype(dtype).astype(np.float64), wd.astype(dtype).astype(np.float64)
    got = moe.moe_forward(*[gp.from_numpy(a.astype(dtype)) for a in (x, router_w, wgu, wd)], 2)
    assert rel_err(got.to_numpy(), _np_moe(x, router_w, wgu, wd, 2)) < MOE_TOL[np.dtype(dtype)]


@pytest.mark.gpu
def test_kernel_matches_torch(rng):
    torch = pytest.importorskip("torch")
    t, e, k, d, inter = 200, 8, 2, 64, 32
    # logits x0 * r_j + j / 8 with x0 in [-3, 3] and distinct integers r_j: no ties, and
    # exact in bf16 (multiples of 1/8 below 32), so both sides route alike
    x = torch.randn(t, d, device="cuda").to(torch.bfloat16)
    x[:, 0] = torch.randint(-3, 4, (t,), device="cuda").to(torch.bfloat16)
    x[:, 1] = 1
    router_w = torch.zeros(e, d, device="cuda", dtype=torch.bfloat16)
    router_w[:, 0] = torch.randperm(e, device="cuda").to(torch.bfloat16)
    router_w[:, 1] = torch.arange(e, device="cuda").to(torch.bfloat16) / 8
    w1, w3 = (torch.randn(e, inter, d, device="cuda", dtype=torch.bfloat16) / 8 for _ in range(2))
    w2 = torch.randn(e, d, inter, device="cuda", dtype=torch.bfloat16) / 6
    # Mixtral's sparse MoE block (transformers), in float32 from the bf16 inputs
    logits = x.float() @ router_w.float().T
    probs = torch.softmax(logits, dim=-1)
    tw, tids = torch.topk(probs, k, dim=-1)
    tw = tw / tw.sum(dim=-1, keepdim=True)
    ref = torch.zeros(t, d, device="cuda")
    for j in range(e):
        tok, slot = torch.where(tids == j)
        h = x[tok].float()
        a = torch.nn.functional.silu(h @ w1[j].float().T) * (h @ w3[j].float().T)
        ref.index_add_(0, tok, (a @ w2[j].float().T) * tw[tok, slot, None])
    g = gp.from_dlpack
    gw, gids = moe.router_topk(g(logits.contiguous()), k)
    np.testing.assert_array_equal(gids.to_numpy(), tids.int().cpu().numpy())
    assert rel_err(gw.to_numpy(), tw.cpu().numpy()) < 1e-5
    got = moe.moe_forward(g(x), g(router_w), g(w1), g(w2), k, w_up=g(w3))
    assert rel_err(got.to_numpy().astype(np.float32), ref.cpu().numpy()) < 3e-2
