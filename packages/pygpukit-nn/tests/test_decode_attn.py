"""decode_attention against a float64 NumPy reference: contiguous and paged
caches (block sizes 16 and 256, non-contiguous tables, ragged batches),
1..8 query tokens, GQA / MQA / MHA, head_dim 64 / 80 / 96 / 128 / 256,
contexts 1, 17, 1000, 5000 (split-K), sliding windows, fp8 caches; every
error; NVRTC compilation of the kernel; on the GPU the kernel itself (and
PyTorch's SDPA where installed)."""

import math
import struct

import ml_dtypes
import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit.jit.signature import find_signature
from pygpukit_nn import decode_attn
from pygpukit_nn.decode_attn import decode_attention
from pygpukit_nn.kv_cache import KVCache, PagedKVCache

# Float32 softmax and sums, one rounding of the output to q's dtype: bf16 /
# fp16 outputs within half an ulp (2^-9 / 2^-12 of max|ref|) plus float32
# rounding; float32 within a few ulps of the sums; float64 (reference only) exact.
TOL = {np.dtype(gp.bfloat16): 1e-2, np.dtype(gp.float16): 2e-3, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def np_decode(q, k, v, lens, scale=None, window=None):
    """q (B, Tq, Hq, D); k, v (B, S, Hkv, D) with sequence b's tokens below lens[b]; float64."""
    b_, tq, hq, d = q.shape
    g = hq // k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = np.zeros(q.shape)
    for b in range(b_):
        n = lens[b]
        kb, vb = np.repeat(k[b, :n], g, axis=1), np.repeat(v[b, :n], g, axis=1)  # (n, Hq, D): query head h -> KV head h // g
        for t in range(tq):
            pos, j = n - tq + t, np.arange(n)
            vis = (j <= pos) & ((j > pos - window) if window else True)
            if not vis.any():
                continue  # no visible key: zeros
            s = np.einsum("hd,nhd->hn", q[b, t], kb) * scale
            s[:, ~vis] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[b, t] = np.einsum("hn,nhd->hd", p / p.sum(axis=1, keepdims=True), vb)
    return out


def _cache(paged, batch, max_seq, hkv, d, dtype, block_size=16, **kw):
    if paged:
        blocks = batch * -(-max_seq // block_size) + 3
        return PagedKVCache(blocks, block_size, hkv, d, dtype, batch=batch, max_seq=max_seq, **kw)
    return KVCache(batch, max_seq, hkv, d, dtype, **kw)


def _fill(cache, k, v, lens, piece=None):
    """Append sequence b's first lens[b] tokens of k, v (B, S, Hkv, D) in pieces
    (interleaving the sequences' blocks in a paged cache)."""
    s = k.shape[1]
    piece = piece or s
    for start in range(0, s, piece):
        counts = [int(np.clip(n - start, 0, piece)) for n in lens]
        if any(counts):
            gk = gp.from_numpy(k[:, start : start + piece].astype(cache.dtype))
            cache.append(gk, gp.from_numpy(v[:, start : start + piece].astype(cache.dtype)), counts=counts)


def _check(rng, dtype, lens, tq, hq, hkv, d, paged=False, block_size=16, window=None, scale=None, piece=None, qscale=1.0):
    b = len(lens)
    s = max(lens)
    k, v = rand(rng, (b, s, hkv, d), dtype), rand(rng, (b, s, hkv, d), dtype)
    q = rand(rng, (b, tq, hq, d), dtype, qscale)
    cache = _cache(paged, b, s + 5, hkv, d, dtype, block_size)
    _fill(cache, k, v, lens, piece)
    got = decode_attention(gp.from_numpy(q.astype(dtype)), cache, 0, scale, window)
    assert got.shape == q.shape and got.dtype == np.dtype(dtype)
    err = rel_err(got.to_numpy(), np_decode(q, k, v, lens, scale, window))
    assert err < TOL[np.dtype(dtype)], (dtype, lens, tq, hq, hkv, d, paged, block_size, window, err)
    return cache


# -- the op on any backend (the reference on the CPU, the kernel on a GPU) -----------------


@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float32])
@pytest.mark.parametrize("paged", [False, True])
def test_contexts_and_gqa(rng, dtype, paged):
    for lens in ([1], [17], [1000, 17, 1]):
        _check(rng, dtype, lens, 1, 32, 8, 128, paged, piece=300)  # GQA 32 / 8
    _check(rng, dtype, [5000], 1, 8, 2, 128, paged, block_size=256)  # a long context: split-K on the GPU


@pytest.mark.parametrize("tq", [1, 2, 5, 8])
def test_query_tokens(rng, tq):
    """Tq new tokens: causal among themselves, aligned bottom-right."""
    _check(rng, gp.bfloat16, [tq, 40, 300], tq, 8, 2, 64, paged=tq % 2 == 0, piece=7)


@pytest.mark.parametrize("heads", [(8, 1), (4, 4), (6, 2)])  # MQA, MHA, GQA of 3
@pytest.mark.parametrize("d", [64, 80, 96, 128, 256])
def test_heads_and_head_dims(rng, heads, d):
    _check(rng, gp.float16, [33, 130], 2, *heads, d, paged=d % 128 == 0, piece=11)


def test_window_scale_and_float64(rng):
    _check(rng, gp.bfloat16, [200, 50, 3], 3, 8, 2, 64, window=20)
    _check(rng, gp.bfloat16, [300], 1, 4, 1, 128, paged=True, window=1, scale=0.3)  # each query sees itself only
    _check(rng, gp.float32, [90, 64], 4, 4, 2, 80, window=64, scale=0.05, qscale=3.0)
    _check(rng, np.float32, [70], 2, 4, 2, 64, paged=True)
    # float64 queries go to the reference, computed in float64
    k, v = rand(rng, (1, 30, 2, 64), np.float32), rand(rng, (1, 30, 2, 64), np.float32)
    cache = _cache(False, 1, 30, 2, 64, np.float32)
    _fill(cache, k, v, [30])
    q = rand(rng, (1, 2, 4, 64), np.float64)
    assert rel_err(decode_attention(gp.from_numpy(q), cache).to_numpy(), np_decode(q, k, v, [30])) < 1e-12


def test_queries_without_keys_give_zeros(rng):
    """An empty sequence, and one holding fewer tokens than the queries."""
    k, v = rand(rng, (3, 4, 2, 64), gp.bfloat16), rand(rng, (3, 4, 2, 64), gp.bfloat16)
    cache = _cache(True, 3, 8, 2, 64, gp.bfloat16)
    _fill(cache, k, v, [4, 0, 2])
    q = rand(rng, (3, 3, 4, 64), gp.bfloat16)
    got = decode_attention(gp.from_numpy(q.astype(gp.bfloat16)), cache).to_numpy().astype(np.float64)
    assert not got[1].any() and not got[2, 0].any()
    assert rel_err(got, np_decode(q, k, v, [4, 0, 2])) < TOL[np.dtype(gp.bfloat16)]


def _np_fp8(x, scale):
    """x (B, S, Hkv, D) as the cache stores it: e4m3 of x / scale (float32, saturated) times scale."""
    s = scale.astype(np.float32).reshape(1, 1, -1, 1)
    return np.clip(x.astype(np.float32) / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * s.astype(np.float64)


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16])
def test_fp8_cache(rng, paged, dtype):
    lens = [700, 90]
    k, v = rand(rng, (2, 700, 2, 128), dtype), rand(rng, (2, 700, 2, 128), dtype)
    q = rand(rng, (2, 2, 8, 128), dtype)
    cache = _cache(paged, 2, 720, 2, 128, dtype, kv_dtype="fp8_e4m3")
    _fill(cache, k, v, lens, piece=350)
    got = decode_attention(gp.from_numpy(q.astype(dtype)), cache).to_numpy()
    ks, vs = (s.to_numpy() for s in cache.scales())
    # against the attention of the stored (rounded) values: the bf16 / fp16 tolerance
    assert rel_err(got, np_decode(q, _np_fp8(k, ks), _np_fp8(v, vs), lens)) < TOL[np.dtype(dtype)]
    # against unquantized K, V: e4m3 keeps 3 mantissa bits, up to 2^-4 relative error per element,
    # which moves both the weights and the averaged values; on these N(0, 1) data the output is
    # off by 0.03 to 0.07 of max|output| (measured over seeds): twice 2^-4 bounds it
    assert rel_err(got, np_decode(q, k, v, lens)) < 2 * 2.0**-4


def test_paged_and_contiguous_agree_on_a_ragged_batch(rng):
    """Five sequences of different lengths appended token by token (interleaved blocks)."""
    lens = [1, 16, 17, 33, 64]
    k, v = rand(rng, (5, 64, 2, 64), gp.bfloat16), rand(rng, (5, 64, 2, 64), gp.bfloat16)
    q = gp.from_numpy(rand(rng, (5, 1, 4, 64), gp.bfloat16).astype(gp.bfloat16))
    paged = _cache(True, 5, 64, 2, 64, gp.bfloat16)
    _fill(paged, k, v, lens, piece=5)
    assert any(np.any(np.diff(paged.blocks(b)) != 1) for b in range(5))
    flat = _cache(False, 5, 64, 2, 64, gp.bfloat16)
    _fill(flat, k, v, lens)
    np.testing.assert_array_equal(decode_attention(q, paged).to_numpy(), decode_attention(q, flat).to_numpy())


def test_errors(rng):
    cache = _cache(False, 2, 16, 2, 64, gp.bfloat16)
    _fill(cache, *(rand(rng, (2, 4, 2, 64), gp.bfloat16) for _ in range(2)), [4, 4])
    q = gp.zeros((2, 1, 4, 64), gp.bfloat16)
    for call, exc, match in [
        (lambda: decode_attention(gp.zeros((2, 1, 5, 64), gp.bfloat16), cache), ValueError,
         r"decode_attention: the 5 query heads are not a multiple of the cache's 2 KV heads"),
        (lambda: decode_attention(gp.zeros((2, 1, 4, 128), gp.bfloat16), cache), ValueError,
         r"decode_attention: q has head_dim 128, the cache 64"),
        (lambda: decode_attention(gp.zeros((2, 9, 4, 64), gp.bfloat16), cache), ValueError,
         r"decode_attention: q must be \(batch, tokens, heads, head_dim\) with 1 to 8 tokens, got shape \(2, 9, 4, 64\)"),
        (lambda: decode_attention(gp.zeros((3, 1, 4, 64), gp.bfloat16), cache), ValueError, r"decode_attention: q has batch 3, the cache 2"),
        (lambda: decode_attention(gp.zeros((2, 1, 4, 64), gp.int32), cache), TypeError,
         r"decode_attention: q must be float16, bfloat16, float32 or float64, got int32"),
        (lambda: decode_attention(q, cache, window=0), ValueError, r"decode_attention: window must be None or a positive int, got 0"),
        (lambda: decode_attention(q, cache, scale=-1.0), ValueError,
         r"decode_attention: scale must be a positive finite number or None, got -1.0"),
        (lambda: decode_attention(q, cache, layer=1), ValueError, r"KVCache: layer must be an int in \[0, 1\), got 1"),
        (lambda: decode_attention(q, "cache"), TypeError, r"decode_attention: cache must be a KVCache or PagedKVCache, got str"),
        (lambda: gp.ops.decode_attention(q, gp.zeros((2, 2, 8, 72), gp.bfloat16), gp.zeros((2, 2, 8, 72), gp.bfloat16),
                                         gp.zeros((2,), gp.int32), None, None, None, 8, None, None), ValueError,
         r"decode_attention: head_dim must be one of 64, 80, 96, 128, 256, got 72"),
        (lambda: gp.ops.decode_attention(q, *cache.op_args()[:2], gp.zeros((3,), gp.int32), None, None, None, 8, None, None), ValueError,
         r"decode_attention: lengths must be \(2,\) int32, got \(3,\) int32"),
    ]:  # fmt: skip
        with pytest.raises(exc, match=match):
            call()


def test_launch_shape():
    """Rows in chunks of at most 4; splits fill 132 SMs 2 times in one wave, at least four steps of keys each, and
    none where the keys make fewer than four such splits."""

    def cuda_cores(step):  # the CUDA-core kernel's knobs, at a given block step
        return decode_attn.Knobs(
            decode_attn.ROWS_MAX, decode_attn.WARPS, decode_attn.STAGES, decode_attn.BLOCKS_PER_SM, step, decode_attn.MIN_SPLIT_STEPS
        )

    assert decode_attn.launch_shape(1, 8, 32, 1, 8192, cuda_cores(16), 132) == (1, 4, 33)  # 264 blocks of 264 places
    assert decode_attn.launch_shape(1, 8, 64, 1, 8192, cuda_cores(16), 132) == (2, 4, 16)  # G = 8: two chunks of 4
    assert decode_attn.launch_shape(1, 8, 32, 3, 8192, cuda_cores(16), 132) == (3, 4, 11)  # 12 rows
    assert decode_attn.launch_shape(1, 8, 24, 2, 8192, cuda_cores(16), 132) == (2, 3, 16)  # 6 rows: two chunks of 3
    assert decode_attn.launch_shape(1, 8, 32, 1, 1024, cuda_cores(16), 132) == (1, 4, 16)  # short: four steps per split
    assert decode_attn.launch_shape(1, 2, 14, 1, 144, cuda_cores(32), 132) == (2, 4, 1)  # Qwen2-0.5B at 144 keys: not two splits
    assert decode_attn.launch_shape(1, 2, 14, 1, 512, cuda_cores(32), 132) == (2, 4, 4)
    assert decode_attn.launch_shape(8, 8, 32, 1, 8192, cuda_cores(16), 132) == (1, 4, 4)  # 33 blocks a sequence: 4 splits
    assert decode_attn.launch_shape(16, 8, 32, 1, 8192, cuda_cores(16), 132) == (1, 4, 2)  # long keys: two splits are worth a merge
    assert decode_attn.launch_shape(1, 8, 32, 1, 192, cuda_cores(16), 132) == (1, 4, 1)  # 192 keys make three splits of four steps: none
    assert decode_attn.launch_shape(1, 8, 32, 1, 256, cuda_cores(16), 132) == (1, 4, 4)
    assert decode_attn.launch_shape(64, 8, 32, 1, 8192, cuda_cores(16), 132) == (1, 4, 1)  # a big batch fills the GPU alone
    assert decode_attn.launch_shape(1, 1, 32, 1, 1 << 20, cuda_cores(16), 132) == (8, 4, 33)
    assert decode_attn.launch_shape(1, 1, 1, 1, 1 << 20, cuda_cores(16), 132) == (1, 1, 128)  # at most MAX_SPLITS
    cases = ((64, False), (128, False), (256, False), (128, True), (80, True), (256, True))
    assert [decode_attn.knobs(d, f, 512).step for d, f in cases] == [64, 64, 8, 64, 64, 16]  # fp8 up to head_dim 128 on tensor cores


def test_launch_shape_on_tensor_cores():
    """The tensor-core kernel: 16 rows a block, splits of at least two steps, none below four of them."""

    def shape(batch, heads, q_heads, tokens, keys):
        kn = decode_attn.knobs(128, False, keys)
        return decode_attn.launch_shape(batch, heads, q_heads, tokens, keys, kn, 132)

    assert decode_attn.knobs(128, False, 512) == (16, 4, 3, 2, 64, 2)  # short: 4 warps, two blocks an SM, splits of two steps
    assert decode_attn.knobs(128, False, 2048) == (16, 4, 3, 2, 64, 1)  # middle: splits of one step
    assert decode_attn.knobs(64, False, 4096) == (16, 8, 2, 1, 128, 2)  # long: 8 warps, one block an SM
    assert shape(1, 8, 32, 1, 8192) == (1, 4, 16)  # GQA 32 / 8: one chunk of 4 rows, 8 x 16 blocks of 132 places
    assert shape(1, 8, 32, 8, 8192) == (2, 16, 8)  # 32 rows: two chunks of 16
    assert shape(1, 8, 32, 1, 1024) == (1, 4, 16)  # 64 keys a split at least
    assert shape(1, 2, 14, 1, 256) == (1, 7, 1)  # Qwen2-0.5B to 256 keys: unsplit (128 keys a split at least)
    assert shape(1, 2, 14, 1, 512) == (1, 7, 4)
    assert [decode_attn.tensor_cores(d) for d in (64, 80, 96, 128, 256, 72)] == [True, True, True, True, False, False]


def test_launch_params_match_signature():
    """A launch's arguments pack (by the signature the kernels are built with)
    to the bytes of decode_attn.cu's parameter list (q, its strides, nine
    pointers, nine ints, the qk scale), and the signature agrees with the
    parameter lists in the source."""
    args = (0x1000, 1, 2, 3, *range(0x2000, 0xB000, 0x1000), 32, 8, 1, 1, 4, 4096, 0, 0, 0, 0.125)
    for kern in (decode_attn._kernel("pgk::half", "pgk::float8_e4m3", 256, 4, False, 4, 2, 4, 2),
                 decode_attn._tc_kernel("pgk::bfloat16", "pgk::bfloat16", 128, True, 4, 3, 2, 0)):  # fmt: skip
        assert kern._packer.pack(args) == struct.pack("@P3q9P9if", *args), kern.func
        declared = find_signature(kern.source, kern.func.partition("<")[0].rpartition("::")[2])  # pointers agree as pointers
        assert [(p.code, p.pointer or p.ctype) for p in kern.params] == [(p.code, p.pointer or p.ctype) for p in declared], kern.func


def test_kernel_compiles_for_sm80_sm89_and_sm90(need_nvrtc):
    knobs = (decode_attn.WARPS, decode_attn._keys_per_step(False), decode_attn.STAGES, decode_attn.BLOCKS_PER_SM)
    fp8 = (decode_attn.WARPS, decode_attn._keys_per_step(True), decode_attn.STAGES, decode_attn.BLOCKS_PER_SM)
    cases = [("pgk::bfloat16", "pgk::bfloat16", 128, 4, False, *knobs), ("pgk::half", "pgk::half", 64, 1, True, *knobs),
             ("pgk::half", "pgk::float8_e4m3", 256, 4, False, *fp8), ("pgk::bfloat16", "pgk::float8_e4m3", 256, 3, True, *fp8)]  # fmt: skip
    tc = (decode_attn.TC_WARPS, decode_attn.TC_STAGES, decode_attn.TC_BLOCKS_PER_SM)
    long = (decode_attn.TC_LONG_WARPS, decode_attn.TC_LONG_STAGES, decode_attn.TC_LONG_BLOCKS_PER_SM)
    b16, f16, f8 = "pgk::bfloat16", "pgk::half", "pgk::float8_e4m3"
    kernels = [decode_attn._kernel(*case) for case in cases] + [decode_attn._tc_kernel(b16, b16, 128, True, *long, 0), decode_attn._tc_kernel(f16, f16, 64, False, *long, 256)] + [
        decode_attn._tc_kernel(t, kt, d, paged, *tc, pf) for t, kt, d, paged, pf in ((b16, b16, 128, False, 256), (f16, f16, 64, True, 0), (b16, b16, 80, True, 64),
                                                                           (f16, f16, 96, False, 0))
    ] + [decode_attn._tc_kernel(t, f8, d, paged, *kn, pf) for t, d, paged, kn, pf in ((b16, 128, False, long, 128), (f16, 80, True, tc, 0),
                                                                               (b16, 96, True, long, 0), (f16, 64, False, tc, 128))]  # fmt: skip
    for kern in kernels:
        for sm in (80, 89, 90):
            assert kern.compile(sm).image[:4] == b"\x7fELF", (kern, sm)


@pytest.mark.parametrize("offset", [0, 1])
def test_strided_queries(rng, offset):
    """q as a view of a fused qkv projection (batch rows apart): read as it is,
    or copied first where a row is not 16-byte aligned (offset 1); the same
    result as a contiguous q."""
    cache = _check(rng, gp.bfloat16, [40, 300, 7], 2, 8, 2, 64, paged=offset == 1, piece=100)
    qkv = gp.from_numpy(rand(rng, (3, 2, 1 + 12 * 64), gp.bfloat16).astype(gp.bfloat16))
    q = qkv[:, :, offset : offset + 8 * 64].reshape(3, 2, 8, 64)
    assert not q.is_contiguous
    np.testing.assert_array_equal(decode_attention(q, cache).to_numpy(), decode_attention(q.copy(), cache).to_numpy())


# -- the kernel (GPU) --------------------------------------------------------------------------


@pytest.mark.gpu
def test_kernel_chosen():
    for dtype in (gp.bfloat16, gp.float16):
        for paged in (False, True):
            for kv in (None, "fp8_e4m3"):
                cache = _cache(paged, 1, 32, 2, 128, dtype, kv_dtype=kv)
                q = gp.zeros((1, 1, 8, 128), dtype)
                assert gp.ops.which("decode_attention", q, *cache.op_args(), 1, None, None) == "nn:kernel", (dtype, paged, kv)
    f32 = _cache(False, 1, 32, 2, 128, np.float32)
    assert gp.ops.which("decode_attention", gp.zeros((1, 1, 8, 128), gp.float32), *f32.op_args(), 1, None, None) == "nn:reference"


@pytest.mark.gpu
def test_dependent_launches():
    """Dependent launches (SM 90) for the tensor-core kernel with any cache; the
    CUDA-core kernel over an fp8 cache (head_dim 256) ran slower as one."""
    from pygpukit import ext
    from pygpukit.jit import kernel

    dep = {}
    on = ext.device().sm >= 90 and kernel.DEPENDENT_LAUNCH
    for kv, d in ((None, 128), ("fp8_e4m3", 128), (None, 256), ("fp8_e4m3", 256)):
        decode_attn._plans.clear()
        q, cache = gp.zeros((1, 1, 8, d), gp.bfloat16), _cache(False, 1, 32, 2, d, gp.bfloat16, kv_dtype=kv)
        decode_attention(q, cache)
        assert len(decode_attn._plans) == 1
        plan = decode_attn._plan(q, *cache.op_args(), 0, None, None, 1)  # the plan of that call (no keys yet)
        dep[kv, d] = plan.launch.kernel.dependent_launch and on  # what the Launch passes as its dependent flag
    assert dep == {(None, 128): on, ("fp8_e4m3", 128): on, (None, 256): on, ("fp8_e4m3", 256): False}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16])
def test_kernel_matrix(rng, dtype):
    """Every template dimension: head dims, row counts 1..4 and chunks, paged
    block sizes, split-K lengths, windows, ragged batches."""
    for d in (64, 80, 96, 128, 256):
        _check(rng, dtype, [1, 17, 1000], 1, 8, 2, d, paged=d != 80, piece=250)
    for tq, heads in ((1, (32, 8)), (8, (32, 8)), (3, (6, 2)), (1, (16, 16)), (2, (32, 1)), (5, (8, 4))):
        _check(rng, dtype, [tq + 3, 600, 2000], tq, *heads, 128, paged=tq % 2 == 1, block_size=256, piece=700)
    _check(rng, dtype, [5000, 4096], 1, 32, 8, 128, paged=True, piece=1000)
    _check(rng, dtype, [5000, 33], 4, 32, 8, 128, window=1000)
    _check(rng, dtype, [32768], 1, 32, 8, 128)


@pytest.mark.gpu
def test_kernel_merges_more_splits_than_one_batch(rng):
    """The last block folds the splits' partials 16 at a time: more splits than
    that, and a count that leaves a partial batch (an fp8 cache of head_dim 256
    at 8192 keys on the CUDA-core kernel: 33 splits on 132 SMs; bf16 and fp8
    MQA caches on tensor cores at 2048 keys: 32)."""
    from pygpukit import ext

    sms = ext.device().multiprocessor_count
    for dtype, kv, hq, hkv, n, d in ((gp.bfloat16, "fp8_e4m3", 32, 8, 8192, 256), (gp.float16, None, 8, 1, 2048, 128),
                                     (gp.bfloat16, "fp8_e4m3", 8, 1, 2048, 128)):  # fmt: skip
        splits = decode_attn.launch_shape(1, hkv, hq, 1, n, decode_attn.knobs(d, kv is not None, n), sms)[2]
        assert splits > 16, (kv, d, splits)
        k, v = rand(rng, (1, n, hkv, d), dtype), rand(rng, (1, n, hkv, d), dtype)
        q = rand(rng, (1, 1, hq, d), dtype)
        cache = _cache(False, 1, n, hkv, d, dtype, **({"kv_dtype": kv} if kv else {}))
        _fill(cache, k, v, [n], piece=4096)
        got = decode_attention(gp.from_numpy(q.astype(dtype)), cache).to_numpy()
        if kv:
            ks, vs = (s.to_numpy() for s in cache.scales())
            k, v = _np_fp8(k, ks), _np_fp8(v, vs)
        assert rel_err(got, np_decode(q, k, v, [n])) < TOL[np.dtype(dtype)], (kv, d, splits)


@pytest.mark.gpu
def test_kernel_deterministic_and_writes_every_output(rng):
    """Two runs give the same bits (the split merge is ordered); outputs land in
    memory the pool held NaN in."""
    k, v = rand(rng, (2, 3000, 8, 128), gp.bfloat16), rand(rng, (2, 3000, 8, 128), gp.bfloat16)
    cache = _cache(True, 2, 3000, 8, 128, gp.bfloat16)
    _fill(cache, k, v, [3000, 2500])
    q = gp.from_numpy(rand(rng, (2, 2, 32, 128), gp.bfloat16).astype(gp.bfloat16))
    poison = gp.full((1 << 22,), np.nan, gp.float32)
    del poison
    a = decode_attention(q, cache).to_numpy()
    b = decode_attention(q, cache).to_numpy()
    assert np.isfinite(a.astype(np.float32)).all()
    np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("tq", [1, 4])
def test_kernel_against_torch_sdpa(rng, tq):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    n = 4096
    k, v = rand(rng, (2, n, 8, 128), gp.bfloat16), rand(rng, (2, n, 8, 128), gp.bfloat16)
    q = rand(rng, (2, tq, 32, 128), gp.bfloat16)
    cache = _cache(False, 2, n, 8, 128, gp.bfloat16)
    _fill(cache, k, v, [n, n])
    got = decode_attention(gp.from_numpy(q.astype(gp.bfloat16)), cache).to_numpy().astype(np.float64)

    def t(a):  # (B, S, H, D) -> (B, H, S, D) bf16 on the GPU
        return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16).transpose(1, 2)

    mask = torch.ones(tq, n, dtype=torch.bool, device="cuda").tril(n - tq)  # bottom-right causal
    ref = torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=mask, enable_gqa=True)
    ref = ref.transpose(1, 2).float().cpu().numpy().astype(np.float64)
    want = np_decode(q, k, v, [n, n])
    assert rel_err(got, want) < TOL[np.dtype(gp.bfloat16)]
    assert rel_err(got, ref) < 2 * TOL[np.dtype(gp.bfloat16)]  # both within bf16 rounding of the float64 result
