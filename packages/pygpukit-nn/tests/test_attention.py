"""Scaled dot-product attention against a float64 NumPy model: the reference on
every backend (CI), the flash kernel on the GPU (causal and not, prefixes,
GQA / MQA, windows, key lengths, odd sizes, every head_dim it takes, both
tile configs, strided bshd views, determinism, PyTorch), each SM 90 wgmma
kernel forced (flash_fwd_wgmma and the warp-specialized flash_fwd_ws), the config heuristic and NVRTC compilation of every
instantiation anywhere."""

import math

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import attention as A
from pygpukit_nn.attention import scaled_dot_product_attention as sdpa

HALF = [gp.bfloat16, gp.float16]
# Norm-wise relative error max|got - ref| / max|ref| of outputs rounded once:
# float32 ~1e-6 from the float32 sums; fp16 / bf16 the output rounding
# (2^-11 / 2^-8) plus, in the kernel, P rounded to the dtype before P V
# (as flash-attn; the errors of the ~Sk rounded weights average out).
TOL = {np.dtype(gp.float64): 1e-12, np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 2e-3, np.dtype(gp.bfloat16): 1e-2}


def np_sdpa(q, k, v, mask=None, causal=False, scale=None, window=None, kv_lens=None):
    """float64 model: q (B, Hq, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv)."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1:3]
    k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
    s = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(d) if scale is None else scale)
    pos = np.arange(sq)[:, None] + sk - sq  # each query's position among the keys
    j = np.arange(sk)[None, :]
    vis = np.ones((b, 1, sq, sk), bool)
    if causal:
        vis &= j <= pos
    left, right = window if window is not None else (None, None)
    if left is not None and left >= 0:
        vis &= j >= pos - left
    if right is not None and right >= 0:
        vis &= j <= pos + right
    if kv_lens is not None:
        vis &= j[None, None] < np.asarray(kv_lens)[:, None, None, None]
        v = v.copy()
        for i, n in enumerate(kv_lens):
            v[i, :, n:] = 0  # padding values are never read
    if mask is not None:
        if mask.dtype == np.bool_:
            vis = vis & mask
        else:
            s = s + mask
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total > 0, total, 1)) @ v


def _qkv(rng, b, hq, hkv, sq, sk, d, dtype, dv=None):
    return rand(rng, (b, hq, sq, d), dtype), rand(rng, (b, hkv, sk, d), dtype), rand(rng, (b, hkv, sk, dv or d), dtype)


def _gp(a, dtype):
    return gp.from_numpy(np.asarray(a).astype(dtype))


def _check(rng, dtype, b, hq, hkv, sq, sk, d, tol=None, dv=None, **kw):
    q, k, v = _qkv(rng, b, hq, hkv, sq, sk, d, dtype, dv)
    lens = kw.pop("kv_lens", None)
    got = sdpa(_gp(q, dtype), _gp(k, dtype), _gp(v, dtype), kv_lens=None if lens is None else _gp(lens, np.int32), **kw)
    ref = np_sdpa(q, k, v, kv_lens=lens, **kw)
    assert got.shape == ref.shape and got.dtype == np.dtype(dtype)
    err = rel_err(got.to_numpy(), ref)
    assert err < (tol or TOL[np.dtype(dtype)]), (dtype, b, hq, hkv, sq, sk, d, kw, err)
    return got


# Masking cases: (b, hq, hkv, sq, sk, keywords)
CASES = [
    (2, 4, 4, 9, 9, {}),
    (2, 4, 4, 9, 9, {"causal": True}),
    (1, 4, 2, 5, 12, {"causal": True}),  # prefill after a cached prefix
    (1, 2, 1, 12, 5, {"causal": True}),  # more queries than keys: the first 7 see none
    (2, 8, 2, 7, 7, {"causal": True, "scale": 0.3}),  # GQA 4:1
    (1, 6, 1, 6, 8, {}),  # MQA
    (1, 2, 2, 10, 10, {"window": (3, 0)}),
    (1, 2, 2, 10, 10, {"window": (2, 1), "causal": True}),
    (1, 2, 2, 10, 10, {"window": (None, 2)}),
    (3, 2, 1, 6, 9, {"kv_lens": [9, 4, 0], "causal": True}),
]


@pytest.mark.parametrize("dtype", [gp.float64, gp.float32, *HALF], ids=str)
def test_reference_against_float64(rng, dtype):
    for b, hq, hkv, sq, sk, kw in CASES:
        _check(rng, dtype, b, hq, hkv, sq, sk, 16, **kw)


def test_head_dims_and_value_dim(rng):
    for d in (64, 80, 128, 48):
        _check(rng, gp.float32, 1, 2, 1, 5, 7, d, causal=True)
    _check(rng, gp.float32, 2, 2, 2, 4, 6, 16, dv=24)  # v's head_dim may differ from q's


def test_boolean_and_additive_masks(rng):
    b, h, sq, sk, d = 2, 3, 6, 7, 16
    q, k, v = _qkv(rng, b, h, h, sq, sk, d, np.float32)
    keep = rng.random((b, 1, sq, sk)) < 0.6
    keep[1, 0, 2] = False  # a row that sees nothing
    bias = rng.standard_normal((sq, sk)).astype(np.float32).astype(np.float64)
    bias[0, 3] = -np.inf
    g = [_gp(x, np.float32) for x in (q, k, v)]
    got = sdpa(*g, gp.from_numpy(keep), causal=True)
    assert rel_err(got.to_numpy(), np_sdpa(q, k, v, keep, causal=True)) < 1e-5
    np.testing.assert_array_equal(got.to_numpy()[1, :, 2], 0)
    got = sdpa(*g, _gp(bias, np.float32))
    assert rel_err(got.to_numpy(), np_sdpa(q, k, v, bias)) < 1e-5
    assert gp.ops.which("sdpa", *[_gp(x, gp.bfloat16) for x in (q, k, v)], gp.from_numpy(keep)) == "nn:reference"


def test_rows_without_keys_are_zeros(rng):
    q, k, v = (_gp(x, np.float32) for x in _qkv(rng, 1, 2, 2, 6, 4, 8, np.float32))
    out = sdpa(q, k, v, causal=True).to_numpy()  # queries 0, 1 sit before the first key
    np.testing.assert_array_equal(out[:, :, :2], 0)
    assert np.all(np.abs(out[:, :, 2:]).sum(-1) > 0)
    np.testing.assert_array_equal(sdpa(q, k, v, kv_lens=gp.from_numpy(np.array([0], np.int32))).to_numpy(), 0)
    empty = sdpa(q, k[:, :, :0], v[:, :, :0])
    assert empty.shape == (1, 2, 6, 8) and not empty.to_numpy().any()
    assert sdpa(q[:, :, :0], k, v).shape == (1, 2, 0, 8)


def test_padding_keys_may_hold_nan(rng):
    q, k, v = _qkv(rng, 2, 2, 1, 5, 8, 16, np.float32)
    lens = [8, 3]
    k2, v2 = k.copy(), v.copy()
    k2[1, :, 3:] = np.nan
    v2[1, :, 3:] = np.nan
    got = sdpa(*(_gp(x, np.float32) for x in (q, k2, v2)), kv_lens=_gp(lens, np.int64)).to_numpy()
    assert np.isfinite(got).all()
    assert rel_err(got, np_sdpa(q, k, v, kv_lens=lens)) < 1e-5


def test_bshd_layout_and_strided_views(rng):
    b, s, h, d = 2, 7, 4, 16
    qkv = rand(rng, (b, s, 3, h, d), np.float32)  # a fused projection, split per head
    g = _gp(qkv, np.float32)
    q, k, v = g[:, :, 0], g[:, :, 1], g[:, :, 2]
    got = sdpa(q, k, v, causal=True, layout="bshd")
    ref = np_sdpa(*(qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)), causal=True).transpose(0, 2, 1, 3)
    assert got.shape == (b, s, h, d) and rel_err(got.to_numpy(), ref) < 1e-5
    got = sdpa(q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), causal=True)  # the same as bhsd views
    assert rel_err(got.to_numpy(), ref.transpose(0, 2, 1, 3)) < 1e-5


def test_reference_in_blocks_of_queries(rng, monkeypatch):
    monkeypatch.setattr(A, "REF_SCORES", 50)  # blocks of 2 queries
    _check(rng, gp.float32, 1, 2, 1, 9, 11, 16, causal=True, window=(4, 0))
    q, k, v = _qkv(rng, 1, 2, 2, 5, 6, 8, np.float32)
    keep = rng.random((1, 2, 5, 6)) < 0.5
    got = sdpa(*(_gp(x, np.float32) for x in (q, k, v)), gp.from_numpy(keep))
    assert rel_err(got.to_numpy(), np_sdpa(q, k, v, keep)) < 1e-5


def test_errors():
    x = gp.zeros((1, 4, 3, 8), gp.float32)
    kv = gp.zeros((1, 2, 5, 8), gp.float32)
    cases = [
        (lambda: sdpa(np.zeros((1, 4, 3, 8)), kv, kv), TypeError, "q must be a GPUArray"),
        (lambda: sdpa(x, kv.astype(gp.int32), kv), TypeError, "k must be float16"),
        (lambda: sdpa(x, kv.astype(gp.float16), kv), TypeError, "one dtype"),
        (lambda: sdpa(x[0], kv, kv), ValueError, r"q must be 4-d \(B, H, S, D\)"),
        (lambda: sdpa(x, kv, gp.zeros((1, 2, 6, 8), gp.float32)), ValueError, "k and v must agree"),
        (lambda: sdpa(x, gp.zeros((2, 2, 5, 8), gp.float32), gp.zeros((2, 2, 5, 8), gp.float32)), ValueError, "same batch size"),
        (lambda: sdpa(x, kv[..., :4], kv), ValueError, r"k's head_dim must equal q's \(8\)"),
        (lambda: sdpa(x, gp.zeros((1, 3, 5, 8), gp.float32), gp.zeros((1, 3, 5, 8), gp.float32)), ValueError, "mismatched heads"),
        (lambda: sdpa(x, kv, kv, layout="sbhd"), ValueError, "layout must be"),
        (lambda: sdpa(x, kv, kv, causal=1), TypeError, "causal must be a bool"),
        (lambda: sdpa(x, kv, kv, scale=float("nan")), ValueError, "scale must be a finite number"),
        (lambda: sdpa(x, kv, kv, window=3), TypeError, r"\(left, right\) pair"),
        (lambda: sdpa(x, kv, kv, window=(-2, 0)), ValueError, "window left must be >= 0"),
        (lambda: sdpa(x, kv, kv, window=(1.5, 0)), TypeError, "window left must be an int"),
        (lambda: sdpa(x, kv, kv, kv_lens=gp.zeros((1,), gp.float32)), TypeError, "kv_lens must be a GPUArray of integers"),
        (lambda: sdpa(x, kv, kv, kv_lens=gp.zeros((2,), gp.int32)), ValueError, r"kv_lens must have shape \(1,\)"),
        (lambda: sdpa(x, kv, kv, gp.zeros((1, 4, 3, 4), gp.bool_)), ValueError, r"does not broadcast to \(B, Hq, Sq, Sk\)"),
        (lambda: sdpa(x, kv, kv, gp.zeros((3, 5), gp.int32)), TypeError, "mask must be boolean"),
        (lambda: sdpa(x, kv, kv, [[True]]), TypeError, "mask must be a GPUArray"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_kernel_predicate():
    def arr(shape, dt=gp.bfloat16):
        return gp.zeros(shape, dt)

    q, kv = arr((1, 8, 4, 128)), arr((1, 2, 4, 128))
    assert A.kernel_applies(q, kv, kv, None, True, None, (3, 0), None, "bhsd")
    assert A.kernel_applies(arr((1, 4, 8, 64), gp.float16), arr((1, 4, 8, 64), gp.float16), arr((1, 4, 8, 64), gp.float16))
    assert not A.kernel_applies(q, kv, kv, arr((4, 4), gp.bool_))  # explicit masks: the reference
    assert not A.kernel_applies(q.astype(gp.float32), kv.astype(gp.float32), kv.astype(gp.float32))
    assert not A.kernel_applies(arr((1, 8, 4, 48)), arr((1, 2, 4, 48)), arr((1, 2, 4, 48)))  # head_dim 48: reference
    assert not A.kernel_applies(q, kv, arr((1, 2, 4, 64)))  # Dv != D
    assert not A.kernel_applies(q, kv, kv, None, False, -0.5)
    assert not A.kernel_applies(q, kv, kv.astype(gp.float16))
    assert not A.kernel_applies(q[0], kv, kv)


def test_config_heuristic(monkeypatch):
    monkeypatch.delenv("PYGPUKIT_ATTN_CONFIG", raising=False)
    A.choose.cache_clear()
    h100 = (132, 232448)
    assert A.key_tiles(A.CONFIGS[0], 256, 256, 512, 0) == [2, 4]  # causal: the diagonal tile pair ends each row of tiles
    assert A.key_tiles(A.CONFIGS[0], 300, 300, 3, 0) == [2, 3, 2]  # a 4-key window: a 128-row tile sees 131 keys
    assert A.key_tiles(A.CONFIGS[1], 64, 300, 1000, 0) == [5]  # a prefix of 236 keys, then the diagonal
    # (1, 32, S, 128) causal: one wave of 128-row tiles leaves the long ones alone at 1k; from 2k they pay
    assert A.choose(128, 32, 1024, 1024, 2048, 0, *h100).name == "64x64"
    assert A.choose(128, 32, 4096, 4096, 8192, 0, *h100).name == "128x64"
    assert A.choose(128, 32, 8192, 8192, 16384, 16384, *h100).name == "128x64"
    assert A.choose(128, 32, 4096, 4096, 8192, 0, 84, 101376).name == "64x64"  # 99 KiB (SM 8.6/8.9): 128 rows do not fit
    assert A.choose(128, 32, 4096, 4096, 8192, 0, 132, 40000) is None
    for cfg in A.CONFIGS:
        for d in A.HEAD_DIMS:
            assert cfg.smem(d) <= 227 * 1024 and A.blocks_per_sm(cfg, d, 232448) == 2
    # SM 90: the warp-specialized wgmma kernel for head_dim 64 / 128 at (1, 32, S, D), causal or not; never elsewhere
    for s in (1024, 2048, 4096, 8192):
        for d in A.WGMMA_DIMS:
            assert A.choose(d, 32, s, s, 2 * s, 0, *h100, True).name == "wgmma_ws128x128"
            assert A.choose(d, 32, s, s, 2 * s, 2 * s, *h100, True).name == "wgmma_ws128x128"
    assert A.choose(80, 32, 4096, 4096, 8192, 0, *h100, True).name == "128x64"  # no wgmma instantiation for 80
    ws, wg = A.WGMMA_CONFIGS
    # 3 stages of 128-key K and V at head_dim 128 (224 KiB + 48 bytes of mbarriers), 4 at 64; 384 threads at 168 registers
    assert (ws.name, ws.bm, ws.threads, ws.ring(128), ws.smem(128), ws.smem(64)) == ("wgmma_ws128x128", 128, 384, 3, 229424, 147520)
    assert A.blocks_per_sm(ws, 128, 232448) == A.blocks_per_sm(ws, 64, 232448) == 1
    assert (wg.name, wg.bm, wg.threads, wg.smem(128), A.blocks_per_sm(wg, 128, 232448)) == ("wgmma128x128", 128, 256, 163840, 1)
    monkeypatch.setenv("PYGPUKIT_ATTN_CONFIG", "64x64")
    A.choose.cache_clear()
    assert A.choose(128, 32, 8192, 8192, 16384, 0, *h100).name == "64x64"
    assert A.choose(128, 32, 8192, 8192, 16384, 0, *h100, True).name == "64x64"  # forced off wgmma on SM 90
    for name in ("wgmma128x128", "wgmma_ws128x128"):
        monkeypatch.setenv("PYGPUKIT_ATTN_CONFIG", name)
        A.choose.cache_clear()
        assert A.choose(64, 4, 17, 17, 34, 0, *h100, True).name == name
    with pytest.raises(ValueError, match="128x64, 64x64"):
        A.choose(128, 32, 8192, 8192, 16384, 0, *h100)  # not SM 90
    with pytest.raises(ValueError, match="not one of"):
        A.choose(96, 32, 8192, 8192, 16384, 0, *h100, True)
    monkeypatch.setenv("PYGPUKIT_ATTN_CONFIG", "32x32")
    A.choose.cache_clear()
    with pytest.raises(ValueError, match="128x64, 64x64"):
        A.choose(128, 32, 8192, 8192, 16384, 0, *h100)
    A.choose.cache_clear()


def test_kernels_compile_for_sm80_and_sm90(need_nvrtc):
    """Every head_dim and config for bfloat16, and float16, compile (no GPU needed)."""
    cases = [(d, cfg, "pgk::bfloat16") for d in A.HEAD_DIMS for cfg in A.CONFIGS]
    cases += [(128, cfg, "pgk::half") for cfg in A.CONFIGS]
    for case in cases:
        kern = A._kernel(*case)
        for sm in (80, 90):
            assert kern.compile(sm).image[:4] == b"\x7fELF", (case, sm)


def test_wgmma_kernels_compile_for_sm90a(need_nvrtc):
    """The SM 90 warpgroup kernels (sm_90a only: wgmma, setmaxnreg) for each config, head_dim and dtype."""
    for cfg in A.WGMMA_CONFIGS:
        for d in A.WGMMA_DIMS:
            for ct in A._CTYPES.values():
                kern = A._kernel(d, cfg, ct)
                assert kern.arch_suffix == "a"
                assert kern.compile(90).image[:4] == b"\x7fELF", (d, cfg, ct)


# -- the kernel (GPU) --------------------------------------------------------------


def _poison(shape, dtype):
    """Leave NaNs in the pool's free memory, where the next output may land."""
    junk = gp.full(shape, np.nan, dtype)
    del junk


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_kernel_is_chosen(dtype):
    q, kv = gp.zeros((1, 8, 4, 128), dtype), gp.zeros((1, 2, 4, 128), dtype)
    assert gp.ops.which("sdpa", q, kv, kv) == "nn:kernel"
    assert gp.ops.which("sdpa", q.astype(gp.float32), kv.astype(gp.float32), kv.astype(gp.float32)) == "nn:reference"
    assert gp.ops.which("sdpa", q, kv, kv, gp.zeros((4, 4), gp.bool_)) == "nn:reference"
    odd = gp.zeros((1, 2, 4, 48), dtype)
    assert gp.ops.which("sdpa", odd, odd, odd) == "nn:reference"
    assert sdpa(odd, odd, odd).shape == (1, 2, 4, 48)  # served by the reference


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_kernel_against_float64(rng, dtype, causal):
    # sizes off the 64 / 128 tiles, prefixes (Sk > Sq) and the reverse
    for sq, sk in [(1, 1), (17, 17), (129, 129), (1000, 1000), (1, 300), (100, 333), (300, 100)]:
        _poison((2, 4, sq, 128), dtype)
        _check(rng, dtype, 2, 4, 2, sq, sk, 128, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_kernel_head_dims_and_heads(rng, dtype):
    for d in A.HEAD_DIMS:
        _check(rng, dtype, 1, 4, 4, 200, 200, d, causal=True)
    _check(rng, dtype, 1, 32, 8, 257, 257, 128, causal=True)  # GQA 32 / 8
    _check(rng, dtype, 2, 6, 1, 130, 190, 64)  # MQA


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_kernel_windows_and_lengths(rng, dtype):
    for window in [(127, 0), (0, 0), (5, 70), (None, 3), (300, None)]:
        _check(rng, dtype, 1, 2, 2, 400, 400, 128, window=window)
        _check(rng, dtype, 1, 2, 1, 150, 390, 64, window=window, causal=True)
    lens = [1000, 1, 0, 777]
    got = _check(rng, dtype, 4, 4, 2, 1000, 1000, 128, kv_lens=lens, causal=True)
    np.testing.assert_array_equal(got.to_numpy()[2], 0)  # a sequence without keys
    _check(rng, dtype, 4, 2, 2, 64, 900, 80, kv_lens=lens, window=(200, 0), causal=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_kernel_rows_without_keys_and_nan_padding(rng, dtype):
    q, k, v = _qkv(rng, 2, 2, 2, 300, 130, 128, dtype)
    _poison((2, 2, 300, 128), dtype)
    got = sdpa(_gp(q, dtype), _gp(k, dtype), _gp(v, dtype), causal=True).to_numpy()
    np.testing.assert_array_equal(got[:, :, :170], 0)  # queries before the first key
    assert rel_err(got, np_sdpa(q, k, v, causal=True)) < TOL[np.dtype(dtype)]
    lens = [130, 70]
    k2, v2 = k.copy(), v.copy()
    k2[1, :, 70:] = np.nan
    v2[1, :, 70:] = np.inf
    got = sdpa(_gp(q, dtype), _gp(k2, dtype), _gp(v2, dtype), kv_lens=_gp(lens, np.int32)).to_numpy()
    assert np.isfinite(got).all() and rel_err(got, np_sdpa(q, k, v, kv_lens=lens)) < TOL[np.dtype(dtype)]


@pytest.mark.gpu
@pytest.mark.parametrize("config", [c.name for c in A.CONFIGS])
def test_kernel_each_config(rng, monkeypatch, config):
    monkeypatch.setenv("PYGPUKIT_ATTN_CONFIG", config)
    A.choose.cache_clear()
    A._plans.clear()
    try:
        for d in (64, 128):
            _check(rng, gp.bfloat16, 2, 4, 2, 333, 333, d, causal=True)
            _check(rng, gp.bfloat16, 1, 4, 1, 65, 200, d, window=(50, 0))
    finally:
        A.choose.cache_clear()
        A._plans.clear()


@pytest.mark.gpu
def test_kernel_strided_bshd_views_need_no_copy(rng):
    b, s, h, d = 2, 300, 8, 128
    qkv = rand(rng, (b, s, 3, h, d), gp.bfloat16)
    g = _gp(qkv, gp.bfloat16)
    q, k, v = g[:, :, 0], g[:, :, 1], g[:, :, 2]
    for x in (q, k, v):
        view = x.swapaxes(1, 2)
        assert A._operand(view) is view  # read in place
    got = sdpa(q, k, v, causal=True, layout="bshd")
    ref = np_sdpa(*(qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)), causal=True).transpose(0, 2, 1, 3)
    assert got.shape == (b, s, h, d) and rel_err(got.to_numpy(), ref) < 1e-2
    again = sdpa(q, k, v, causal=True, layout="bshd")  # the planned launch
    np.testing.assert_array_equal(again.to_numpy(), got.to_numpy())
    unaligned = gp.from_numpy(np.zeros((b, s, h, d + 4), np.float32)).astype(gp.bfloat16)[..., 4:]  # rows 8 bytes off 16
    unaligned[...] = q
    got2 = sdpa(unaligned, k, v, causal=True, layout="bshd")  # copied first
    np.testing.assert_array_equal(got2.to_numpy(), got.to_numpy())


@pytest.mark.gpu
def test_kernel_is_deterministic(rng):
    q, k, v = (_gp(x, gp.bfloat16) for x in _qkv(rng, 1, 8, 8, 1000, 1000, 128, gp.bfloat16))
    first = sdpa(q, k, v, causal=True).to_numpy()
    for _ in range(3):
        np.testing.assert_array_equal(sdpa(q, k, v, causal=True).to_numpy(), first)


@pytest.mark.gpu
def test_kernel_matches_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for sq, sk, hq, hkv in [(1024, 1024, 8, 8), (257, 257, 32, 8), (100, 612, 4, 4)]:
        q, k, v = _qkv(rng, 1, hq, hkv, sq, sk, 128, gp.bfloat16)
        tq, tk, tv = (torch.tensor(x, dtype=torch.float32).to("cuda", torch.bfloat16) for x in (q, k, v))
        tk, tv = tk.repeat_interleave(hq // hkv, 1), tv.repeat_interleave(hq // hkv, 1)
        causal = sq == sk  # torch's is_causal is top-left aligned; equal to ours only for Sq == Sk
        ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).float().cpu().numpy()
        got = sdpa(_gp(q, gp.bfloat16), _gp(k, gp.bfloat16), _gp(v, gp.bfloat16), causal=causal).to_numpy().astype(np.float32)
        assert rel_err(got, ref) < 1e-2, (sq, sk, hq, hkv)


_planned: set = set()  # (d, config, ctype) of each kernel a plan was made for, while a wgmma config is forced


@pytest.fixture(params=A.WGMMA_CONFIGS, ids=lambda c: c.name)
def wgmma_forced(request, monkeypatch):
    """Each wgmma kernel forced in turn (SM 90 only); yields its config."""
    from pygpukit import ext

    if ext.device().sm != 90:
        pytest.skip("the wgmma kernels run on SM 90 only")
    monkeypatch.setenv("PYGPUKIT_ATTN_CONFIG", request.param.name)
    kernel = A._kernel

    def recorded(d, cfg, ctype):
        _planned.add((d, cfg, ctype))
        return kernel(d, cfg, ctype)

    monkeypatch.setattr(A, "_kernel", recorded)
    A.choose.cache_clear()
    A._plans.clear()
    _planned.clear()
    yield request.param
    A.choose.cache_clear()
    A._plans.clear()


def _used(cfg, d, dtype):
    """Whether the launches planned since the config was forced ran cfg's kernel for head_dim d."""
    return (d, cfg, A._CTYPES[np.dtype(dtype)]) in _planned


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("d", [64, 128])
def test_wgmma_kernel_against_float64(rng, wgmma_forced, dtype, d):
    # odd lengths around the 128-row / 128-key tiles, prefixes (Sk > Sq) and the reverse, causal or not
    for sq, sk in [(1, 1), (17, 17), (129, 129), (1000, 1000), (1, 300), (100, 333), (333, 100), (250, 1000)]:
        for causal in (False, True):
            _poison((2, 4, sq, d), dtype)
            _check(rng, dtype, 2, 4, 2, sq, sk, d, causal=causal)
    assert _used(wgmma_forced, d, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_wgmma_kernel_long_sequences(rng, wgmma_forced, dtype):
    for d in (64, 128):
        _check(rng, dtype, 1, 2, 1, 4097, 4097, d, causal=True)  # 33 row tiles: a partial last one, the longest first
        _check(rng, dtype, 1, 2, 2, 1000, 4097, d)  # many key tiles per block, not causal
        assert _used(wgmma_forced, d, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_wgmma_kernel_heads_windows_and_lengths(rng, wgmma_forced, dtype):
    _check(rng, dtype, 1, 32, 8, 257, 257, 128, causal=True)  # GQA 32 / 8
    _check(rng, dtype, 2, 6, 1, 130, 190, 64)  # MQA
    for window in [(127, 0), (0, 0), (5, 70), (None, 3), (300, None), (129, 129)]:
        _check(rng, dtype, 1, 2, 2, 400, 400, 128, window=window)
        _check(rng, dtype, 1, 2, 1, 150, 390, 64, window=window, causal=True)
    lens = [1000, 1, 0, 777]
    got = _check(rng, dtype, 4, 4, 2, 1000, 1000, 128, kv_lens=lens, causal=True)
    np.testing.assert_array_equal(got.to_numpy()[2], 0)  # a sequence without keys
    _check(rng, dtype, 4, 2, 2, 64, 900, 64, kv_lens=lens, window=(200, 0), causal=True)
    q, k, v = _qkv(rng, 2, 2, 2, 300, 130, 128, dtype)
    _poison((2, 2, 300, 128), dtype)
    got = sdpa(_gp(q, dtype), _gp(k, dtype), _gp(v, dtype), causal=True).to_numpy()
    np.testing.assert_array_equal(got[:, :, :170], 0)  # queries before the first key
    k[1, :, 70:] = np.nan  # padding keys and values are never read
    v[1, :, 70:] = np.inf
    got = sdpa(_gp(q, dtype), _gp(k, dtype), _gp(v, dtype), kv_lens=_gp([130, 70], np.int32)).to_numpy()
    k[1, :, 70:] = v[1, :, 70:] = 0
    assert np.isfinite(got).all() and rel_err(got, np_sdpa(q, k, v, kv_lens=[130, 70])) < TOL[np.dtype(dtype)]
    assert _used(wgmma_forced, 128, dtype) and _used(wgmma_forced, 64, dtype)


@pytest.mark.gpu
def test_wgmma_kernel_strided_bshd_and_torch(rng, wgmma_forced):
    b, s, h, d = 2, 300, 8, 128
    qkv = rand(rng, (b, s, 3, h, d), gp.bfloat16)
    g = _gp(qkv, gp.bfloat16)
    q, k, v = g[:, :, 0], g[:, :, 1], g[:, :, 2]
    got = sdpa(q, k, v, causal=True, layout="bshd")
    ref = np_sdpa(*(qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3)), causal=True).transpose(0, 2, 1, 3)
    assert got.shape == (b, s, h, d) and rel_err(got.to_numpy(), ref) < 1e-2
    assert _used(wgmma_forced, d, gp.bfloat16)
    np.testing.assert_array_equal(sdpa(q, k, v, causal=True, layout="bshd").to_numpy(), got.to_numpy())  # deterministic
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for sq, hq, hkv in [(1024, 8, 8), (257, 32, 8)]:
        q, k, v = _qkv(rng, 1, hq, hkv, sq, sq, 128, gp.bfloat16)
        tq, tk, tv = (torch.tensor(x, dtype=torch.float32).to("cuda", torch.bfloat16) for x in (q, k, v))
        tk, tv = tk.repeat_interleave(hq // hkv, 1), tv.repeat_interleave(hq // hkv, 1)
        ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).float().cpu().numpy()
        got = sdpa(_gp(q, gp.bfloat16), _gp(k, gp.bfloat16), _gp(v, gp.bfloat16), causal=True).to_numpy().astype(np.float32)
        assert rel_err(got, ref) < 1e-2, (sq, hq, hkv)
