"""KV caches (contiguous and paged, bf16 / fp16 / float32 and fp8) against a
NumPy model of their contents: append (uniform and ragged, across block
boundaries), gather / keys_values, reset, block allocation, capacity errors
(nothing written), the fp8 scales and rounding; NVRTC compilation of the
kernels anywhere, and the kernels themselves on the GPU."""

import struct

import ml_dtypes
import numpy as np
import pytest
from nn_testing import rand

import pygpukit as gp
from pygpukit.jit.signature import find_signature
from pygpukit_nn import kv_cache, kv_kernels
from pygpukit_nn.kv_cache import KVCache, PagedKVCache

F8 = np.dtype(gp.float8_e4m3fn)


class Model:
    """The expected contents: per (layer, sequence) the list of appended (Hkv, D) token rows."""

    def __init__(self, layers, batch):
        self.rows = [[[] for _ in range(batch)] for _ in range(layers)]

    def append(self, layer, k, v, counts=None):
        for b in range(k.shape[0]):
            n = k.shape[1] if counts is None else counts[b]
            self.rows[layer][b] += [(k[b, t], v[b, t]) for t in range(n)]

    def arrays(self, layer, b):
        r = self.rows[layer][b]
        if not r:
            return np.zeros((0, 0, 0)), np.zeros((0, 0, 0))
        return np.stack([x for x, _ in r], 1), np.stack([y for _, y in r], 1)  # (Hkv, n, D)


def _tokens(rng, shape, dtype):
    return rand(rng, shape, dtype), rand(rng, shape, dtype)


def _round(a, dtype):
    """a with values representable in dtype (after edits that may not be)."""
    return a.astype(dtype).astype(np.float64)


def _check_contents(cache, model, layer, quant=None):
    """gather() and keys_values() against the model (quant: the fp8 rounding of (k, v) rows)."""
    lens = [len(r) for r in model.rows[layer]]
    assert cache.seq_lengths(layer).tolist() == lens
    np.testing.assert_array_equal(cache.lengths(layer).to_numpy(), lens)
    k, v = cache.gather(layer)
    s = max(lens)
    assert k.shape == (cache.batch, cache.num_kv_heads, s, cache.head_dim) and k.dtype == cache.dtype
    gk, gv = k.to_numpy().astype(np.float64), v.to_numpy().astype(np.float64)
    for b, n in enumerate(lens):
        if n:
            mk, mv = model.arrays(layer, b)
            if quant is not None:
                mk, mv = quant(mk, mv)
            np.testing.assert_array_equal(gk[b, :, :n], mk.astype(cache.dtype).astype(np.float64))
            np.testing.assert_array_equal(gv[b, :, :n], mv.astype(cache.dtype).astype(np.float64))
        assert not gk[b, :, n:].any() and not gv[b, :, n:].any()  # zeros past the length
        kb, vb = cache.keys_values(b, layer)
        assert kb.shape == (1, cache.num_kv_heads, n, cache.head_dim)
        np.testing.assert_array_equal(kb.to_numpy().astype(np.float64), gk[b : b + 1, :, :n])
        np.testing.assert_array_equal(vb.to_numpy().astype(np.float64), gv[b : b + 1, :, :n])


@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32])
def test_contiguous_append_gather(rng, dtype):
    cache = KVCache(3, 40, 2, 64, dtype, num_layers=2)
    model = Model(2, 3)
    k, v = _tokens(rng, (3, 7, 2, 64), dtype)  # a prefill of 7 tokens in layer 1
    cache.append(gp.from_numpy(k.astype(dtype)), gp.from_numpy(v.astype(dtype)), layer=1)
    model.append(1, k, v)
    for step in range(3):  # decode steps, one ragged (sequence 2 idle)
        k, v = _tokens(rng, (3, 2, 2, 64), dtype)
        counts = [2, 1, 0] if step == 1 else None
        cache.append(gp.from_numpy(k.astype(dtype)), gp.from_numpy(v.astype(dtype)), layer=1, counts=counts)
        model.append(1, k, v, counts)
    _check_contents(cache, model, 1)
    assert cache.seq_lengths(0).tolist() == [0, 0, 0]  # layers keep their own lengths
    cache.reset(1)
    model.rows[1][1] = []
    _check_contents(cache, model, 1)
    k, v = _tokens(rng, (3, 1, 2, 64), dtype)
    cache.append(gp.from_numpy(k.astype(dtype)), gp.from_numpy(v.astype(dtype)), layer=1)
    model.append(1, k, v)
    _check_contents(cache, model, 1)
    cache.reset()
    assert cache.seq_lengths(1).tolist() == [0, 0, 0] and cache.lengths(1).to_numpy().tolist() == [0, 0, 0]


def test_contiguous_keys_values_are_views(rng):
    cache = KVCache(2, 16, 2, 80, gp.bfloat16)
    k, v = _tokens(rng, (2, 5, 2, 80), gp.bfloat16)
    cache.append(gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16)), counts=[5, 3])
    kb, _ = cache.keys_values(1)
    assert kb.shape == (1, 2, 3, 80) and not kb.is_contiguous  # a view of the (B, Hkv, max_seq, D) storage
    np.testing.assert_array_equal(kb.to_numpy()[0].astype(np.float64), k[1, :3].transpose(1, 0, 2))


@pytest.mark.parametrize("block_size", [16, 256])
def test_paged_append_across_blocks(rng, block_size):
    """Interleaved appends of several sequences give non-contiguous block tables;
    appends cross block boundaries; reset gives blocks back to the free list."""
    bs = block_size
    cache = PagedKVCache(12, bs, 2, 64, gp.bfloat16, batch=3, max_seq=4 * bs)
    model = Model(1, 3)
    lengths = [bs + 3, 2 * bs + 1, 5]
    piece = bs // 2 + 3  # not a divisor of the block size: pieces straddle blocks
    for start in range(0, max(lengths), piece):
        counts = [int(np.clip(n - start, 0, piece)) for n in lengths]
        k, v = _tokens(rng, (3, piece, 2, 64), gp.bfloat16)
        cache.append(gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16)), counts=counts)
        model.append(0, k, v, counts)
    _check_contents(cache, model, 0)
    blocks = [cache.blocks(b) for b in range(3)]
    assert [len(x) for x in blocks] == [2, 3, 1]
    assert any(np.any(np.diff(x) != 1) for x in blocks)  # not one run each
    held = [x for seq in blocks for x in seq]
    assert len(held) == len(set(held))  # no block shared
    assert cache.free_blocks == 12 - 6
    np.testing.assert_array_equal(cache.block_table.to_numpy()[1, :3], blocks[1])
    cache.reset(1)
    model.rows[0][1] = []
    assert cache.free_blocks == 12 - 3 and cache.blocks(1) == []
    k, v = _tokens(rng, (3, bs + 1, 2, 64), gp.bfloat16)
    cache.append(gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16)), counts=[0, bs + 1, 0])
    model.append(0, k, v, [0, bs + 1, 0])
    assert len(cache.blocks(1)) == 2 and set(cache.blocks(1)) <= set(blocks[1])  # the freed blocks, reused
    _check_contents(cache, model, 0)


def test_paged_views_share_blocks(rng):
    """A server's use: a prompt written through a view of one sequence, then a
    view of two where the second sequence holds the first's two full blocks
    (a prefix hit) and one block of its own; both decode a token. The parent
    cache's storage is what the views write; the views take no blocks."""
    bs, dt = 16, gp.bfloat16
    cache = PagedKVCache(10, bs, 2, 64, dt, batch=1, max_seq=4 * bs, num_layers=2)
    one, two = cache.view(1), cache.view(2)
    assert cache.free_blocks == 10 and two.block_table.shape == (2, 4)
    model = Model(2, 2)
    one.assign([[3, 7, 1]], [0])
    k, v = _tokens(rng, (1, 2 * bs + 5, 2, 64), dt)
    for layer in (0, 1):
        one.append(gp.from_numpy(k.astype(dt)), gp.from_numpy(v.astype(dt)), layer=layer)
        model.append(layer, k, v)
    for layer in (0, 1):
        model.rows[layer][1] = model.rows[layer][0][: 2 * bs]  # the shared prefix
    two.assign([[3, 7, 1], [3, 7, 4]], [2 * bs + 5, 2 * bs])
    k, v = _tokens(rng, (2, 1, 2, 64), dt)
    for layer in (0, 1):
        two.append(gp.from_numpy(k.astype(dt)), gp.from_numpy(v.astype(dt)), layer=layer)
        model.append(layer, k, v)
    for layer in (0, 1):
        _check_contents(two, model, layer)
    np.testing.assert_array_equal(two.block_table.to_numpy(), [[3, 7, 1, 0], [3, 7, 4, 0]])
    assert cache.free_blocks == 10 and cache.max_length() == 0  # the parent's own table and lengths are untouched
    # row 1's token 32 sits at row 0 of block 4 in the parent's storage
    np.testing.assert_array_equal(cache.k.to_numpy()[1, 4, :, 0].astype(np.float64), _round(k[1, 0], dt))
    # an append past what the blocks hold writes nothing
    before = cache.k.to_numpy().copy()
    two.assign([[3], [4]], [bs, 0])
    with pytest.raises(ValueError, match=r"sequence 0 would hold 17 tokens, its blocks hold 16"):
        two.append(gp.from_numpy(k.astype(dt)), gp.from_numpy(v.astype(dt)))
    np.testing.assert_array_equal(cache.k.to_numpy(), before)
    assert two.seq_lengths().tolist() == [bs, 0]
    with pytest.raises(ValueError, match=r"sequence 1 must hold at most 4 block ids in \[0, 10\)"):
        two.assign([[0], [10]], [0, 0])
    with pytest.raises(ValueError, match=r"sequence 0's length must be an int in \[0, 16\]"):
        two.assign([[0], []], [17, 0])
    with pytest.raises(ValueError, match=r"blocks and lengths must have 2 entries"):
        two.assign([[0]], [0])
    assert two.seq_lengths().tolist() == [bs, 0]  # a refused assign changed nothing
    fp8 = PagedKVCache(4, bs, 2, 64, dt, batch=1, max_seq=bs, kv_dtype="fp8_e4m3")
    with pytest.raises(ValueError, match=r"needs k_scale and v_scale given"):
        fp8.view(1)
    assert "PagedKVCacheView(batch=2" in repr(two)


def test_paged_reserve_and_layers(rng):
    cache = PagedKVCache(8, 16, 1, 128, gp.float16, batch=2, max_seq=64, num_layers=3)
    cache.reserve(1, 33)
    assert len(cache.blocks(1)) == 3 and cache.free_blocks == 5
    model = Model(3, 2)
    for layer in (2, 0):
        k, v = _tokens(rng, (2, 20, 1, 128), gp.float16)
        cache.append(gp.from_numpy(k.astype(gp.float16)), gp.from_numpy(v.astype(gp.float16)), layer=layer)
        model.append(layer, k, v)
    assert len(cache.blocks(0)) == 2 and len(cache.blocks(1)) == 3  # the layers share the table
    for layer in (0, 2):
        _check_contents(cache, model, layer)
    assert cache.max_length(1) == 0


def _np_fp8(x, scale):
    """x (Hkv, n, D) stored as e4m3 with per-head scales, as float64 (float32 division, saturated)."""
    s = scale.astype(np.float32).reshape(-1, 1, 1)
    q = np.clip(x.astype(np.float32) / s, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q.astype(np.float32) * s


@pytest.mark.parametrize("paged", [False, True])
def test_fp8_cache(rng, paged):
    kw = dict(kv_dtype="fp8_e4m3")
    cache = PagedKVCache(6, 16, 2, 128, gp.bfloat16, batch=2, max_seq=48, **kw) if paged else KVCache(2, 48, 2, 128, gp.bfloat16, **kw)
    assert cache.k.dtype == F8
    model = Model(1, 2)
    k, v = _tokens(rng, (2, 9, 2, 128), gp.bfloat16)
    k[:, :, 1] *= 50  # heads of very different ranges get their own scales
    v[1, 8] = 1e4  # past counts[1]: ignored by the scale and never stored
    k = _round(k, gp.bfloat16)
    cache.append(gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16)), counts=[9, 8])
    model.append(0, k, v, [9, 8])
    ks, vs = (s.to_numpy() for s in cache.scales())
    amax_k = np.abs(np.concatenate([k[0], k[1, :8]])).max(axis=(0, 2)).astype(np.float32)
    amax_v = np.abs(np.concatenate([v[0], v[1, :8]])).max(axis=(0, 2)).astype(np.float32)
    factor = np.float32(kv_cache.FP8_HEADROOM / kv_cache.FP8_MAX)
    np.testing.assert_array_equal(ks, amax_k * factor)
    np.testing.assert_array_equal(vs, amax_v * factor)
    for _ in range(2):  # later tokens keep the first scales; 3x the first range saturates at 448 * scale
        k, v = _tokens(rng, (2, 3, 2, 128), gp.bfloat16)
        k[0, 0, 0, :4] = 3 * amax_k[0] * np.array([1, -1, 1, -1])
        k = _round(k, gp.bfloat16)
        cache.append(gp.from_numpy(k.astype(gp.bfloat16)), gp.from_numpy(v.astype(gp.bfloat16)))
        model.append(0, k, v)
    _check_contents(cache, model, 0, quant=lambda a, b: (_np_fp8(a, ks), _np_fp8(b, vs)))
    got = cache.keys_values(0)[0].to_numpy()[0].astype(np.float64)
    assert np.abs(got[0, 9, :4]).max() == pytest.approx(448 * ks[0] * 1.0, rel=1e-2)  # saturated, not NaN
    # e4m3 keeps 3 mantissa bits: at most 2^-4 relative error, plus the subnormal step 2^-9 * scale near zero
    want = model.arrays(0, 0)[0][:, :9]
    err = np.abs(got[:, :9] - want)
    assert np.all(err <= np.abs(want) * (2.0**-4 + 2.0**-8) + ks.reshape(-1, 1, 1) * 2.0**-9)  # + the bf16 rounding of gather


def test_fp8_given_scales(rng):
    cache = KVCache(1, 8, 2, 64, gp.float16, num_layers=2, kv_dtype=gp.float8_e4m3fn, k_scale=0.5, v_scale=[[0.25, 1.0], [2.0, 4.0]])
    ks, vs = cache.scales(1)
    np.testing.assert_array_equal(ks.to_numpy(), [0.5, 0.5])
    np.testing.assert_array_equal(vs.to_numpy(), [2.0, 4.0])
    k, v = _tokens(rng, (1, 4, 2, 64), gp.float16)
    cache.append(gp.from_numpy(k.astype(gp.float16)), gp.from_numpy(v.astype(gp.float16)), layer=1)
    np.testing.assert_array_equal(cache.scales(1)[0].to_numpy(), [0.5, 0.5])  # given scales are kept
    model = Model(2, 1)
    model.append(1, k, v)
    _check_contents(cache, model, 1, quant=lambda a, b: (_np_fp8(a, np.array([0.5, 0.5])), _np_fp8(b, np.array([2.0, 4.0]))))


def test_overflow_raises_and_writes_nothing(rng):
    cache = KVCache(2, 10, 1, 64, gp.float32)
    k, v = _tokens(rng, (2, 8, 1, 64), gp.float32)
    gk, gv = gp.from_numpy(k.astype(np.float32)), gp.from_numpy(v.astype(np.float32))
    cache.append(gk, gv, counts=[8, 2])
    before = cache.gather()[0].to_numpy()
    with pytest.raises(ValueError, match=r"KVCache.append: sequence 0 would hold 11 tokens, past max_seq=10; nothing was written"):
        cache.append(gk[:, :3], gv[:, :3])
    assert cache.seq_lengths().tolist() == [8, 2]
    np.testing.assert_array_equal(cache.lengths().to_numpy(), [8, 2])
    np.testing.assert_array_equal(cache.gather()[0].to_numpy(), before)
    cache.append(gk[:, :3], gv[:, :3], counts=[2, 3])  # fits exactly
    assert cache.seq_lengths().tolist() == [10, 5]

    paged = PagedKVCache(3, 16, 1, 64, gp.float32, batch=2, max_seq=40)
    assert paged.max_seq == 48
    paged.append(gk, gv)
    paged.append(gk, gv)  # 16 tokens each: one block each, full
    table = paged.block_table.to_numpy().copy()
    with pytest.raises(ValueError, match=r"PagedKVCache.append: needs 2 more blocks, 1 of 3 are free; nothing was written"):
        paged.append(gk[:, :1], gv[:, :1])
    assert paged.seq_lengths().tolist() == [16, 16] and paged.free_blocks == 1
    np.testing.assert_array_equal(paged.block_table.to_numpy(), table)
    big = PagedKVCache(10, 16, 1, 64, gp.float32, batch=1, max_seq=16)
    with pytest.raises(ValueError, match=r"PagedKVCache.reserve: sequence 0 would hold 17 tokens, past max_seq=16"):
        big.reserve(0, 17)
    assert big.free_blocks == 10


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_staged_counts_and_advance_per_sequence(rng, paged):
    """What a captured ragged prefill relies on: appends read the staged counts'
    device buffer (ragged appends share one buffer, uploaded when the counts
    change), and advance() takes one count per sequence for the host mirror."""
    cache = PagedKVCache(8, 4, 2, 64, gp.float32, batch=2, max_seq=16) if paged else KVCache(2, 16, 2, 64, gp.float32)
    model = Model(1, 2)
    cache.stage_counts(np.array([5, 2]))
    staged = cache._counts_dev
    np.testing.assert_array_equal(staged.to_numpy(), [5, 2])
    for counts in ([5, 2], [1, 3], [1, 3]):
        k, v = _tokens(rng, (2, 5, 2, 64), gp.float32)
        cache.append(gp.from_numpy(k), gp.from_numpy(v), counts=counts)
        model.append(0, k, v, counts)
        assert cache._counts_dev is staged
        np.testing.assert_array_equal(staged.to_numpy(), counts)
    _check_contents(cache, model, 0)
    assert cache.seq_lengths().tolist() == [7, 8]
    cache.advance(np.array([2, 0]))  # as after a replay that appended 2 and 0 tokens
    assert cache.seq_lengths().tolist() == [9, 8] and cache.max_length() == 9
    cache.advance(1)
    assert cache.seq_lengths().tolist() == [10, 9]
    for bad in ([1], [-1, 0], [0.5, 1], [[1, 1]]):
        with pytest.raises(ValueError, match="advance: tokens must be an int >= 0 or 2 of them"):
            cache.advance(np.array(bad))
    with pytest.raises(ValueError, match="would pass max_seq=16"):
        cache.advance(np.array([7, 0]))
    assert cache.seq_lengths().tolist() == [10, 9]
    for bad in ([1, 2, 3], [-1, 0], [17, 0], [1.0, 2.0], None):
        with pytest.raises(ValueError, match=r"stage_counts: counts must be 2 ints in \[0, 16\]"):
            cache.stage_counts(bad)
    np.testing.assert_array_equal(staged.to_numpy(), [1, 3])  # a rejected call changed nothing


def test_ops_with_a_shuffled_block_table(rng):
    """gp.ops.kv_append / kv_gather on raw arrays: a block table of shuffled blocks, one sequence past a block."""
    pool_k, pool_v = gp.zeros((9, 2, 4, 64), gp.float32), gp.zeros((9, 2, 4, 64), gp.float32)
    table = np.array([[7, 2, 5], [0, 8, 3]], np.int32)
    lengths = gp.from_numpy(np.array([3, 0], np.int32))
    k, v = _tokens(rng, (2, 6, 2, 64), gp.float32)
    gp.ops.kv_append(gp.from_numpy(k.astype(np.float32)), gp.from_numpy(v.astype(np.float32)), pool_k, pool_v, lengths,
                     gp.from_numpy(np.array([6, 5], np.int32)), gp.from_numpy(table), None, None)  # fmt: skip
    np.testing.assert_array_equal(lengths.to_numpy(), [9, 5])
    pk = pool_k.to_numpy()
    np.testing.assert_array_equal(pk[7, :, 3], k[0, 0])  # position 3 of sequence 0: block 7, row 3
    np.testing.assert_array_equal(pk[2, :, :], k[0, 1:5].transpose(1, 0, 2))
    np.testing.assert_array_equal(pk[5, :, 0], k[0, 5])
    np.testing.assert_array_equal(pk[8, :, 0], k[1, 4])
    go, _ = gp.ops.kv_gather(pool_k, pool_v, lengths, gp.from_numpy(table), None, None, 10, None)
    assert go.shape == (2, 2, 10, 64)
    np.testing.assert_array_equal(go.to_numpy()[1, :, :5], k[1, :5].transpose(1, 0, 2))
    assert not go.to_numpy()[1, :, 5:].any()


def test_errors(rng):
    with pytest.raises(ValueError, match=r"KVCache: head_dim must be one of 64, 80, 96, 128, 256, got 72"):
        KVCache(1, 8, 2, 72)
    with pytest.raises(TypeError, match=r"KVCache: dtype must be bfloat16, float16 or float32, got int32"):
        KVCache(1, 8, 2, 64, gp.int32)
    with pytest.raises(ValueError, match=r"kv_dtype must be None \(the dtype\) or 'fp8_e4m3', got 'int4'"):
        KVCache(1, 8, 2, 64, kv_dtype="int4")
    with pytest.raises(ValueError, match=r"k_scale and v_scale apply to an fp8 cache"):
        KVCache(1, 8, 2, 64, k_scale=1.0, v_scale=1.0)
    with pytest.raises(ValueError, match=r"give both k_scale and v_scale"):
        KVCache(1, 8, 2, 64, kv_dtype="fp8_e4m3", k_scale=1.0)
    with pytest.raises(ValueError, match=r"v_scale must broadcast to \(num_layers, num_kv_heads\) = \(1, 2\), got shape \(3,\)"):
        KVCache(1, 8, 2, 64, kv_dtype="fp8_e4m3", k_scale=1.0, v_scale=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"PagedKVCache: block_size must be a power of two, got 24"):
        PagedKVCache(4, 24, 2, 64, batch=1, max_seq=48)
    with pytest.raises(ValueError, match=r"KVCache: max_seq must be a positive int, got 0"):
        KVCache(1, 0, 2, 64)
    cache = KVCache(2, 8, 2, 64, gp.bfloat16)
    k = gp.zeros((2, 1, 2, 64), gp.bfloat16)
    with pytest.raises(ValueError, match=r"KVCache.append: k has 4 KV heads, the cache 2"):
        cache.append(gp.zeros((2, 1, 4, 64), gp.bfloat16), gp.zeros((2, 1, 4, 64), gp.bfloat16))
    with pytest.raises(ValueError, match=r"KVCache.append: k has head_dim 128, the cache 64"):
        cache.append(gp.zeros((2, 1, 2, 128), gp.bfloat16), gp.zeros((2, 1, 2, 128), gp.bfloat16))
    with pytest.raises(ValueError, match=r"KVCache.append: k and v must be \(batch, tokens, kv_heads, head_dim\) of one shape"):
        cache.append(k, gp.zeros((2, 2, 2, 64), gp.bfloat16))
    with pytest.raises(ValueError, match=r"KVCache.append: counts must be 2 ints in \[0, 1\], got \[2, 0\]"):
        cache.append(k, k, counts=[2, 0])
    with pytest.raises(ValueError, match=r"KVCache: layer must be an int in \[0, 1\), got 1"):
        cache.append(k, k, layer=1)
    with pytest.raises(ValueError, match=r"KVCache: seq must be an int in \[0, 2\), got 2"):
        cache.reset(2)
    with pytest.raises(TypeError, match=r"KVCache.append: k must be float16, bfloat16, float32 or float64, got int32"):
        cache.append(gp.zeros((2, 1, 2, 64), gp.int32), k)
    assert cache.seq_lengths().tolist() == [0, 0]  # none of these wrote anything
    args = cache.op_args()
    with pytest.raises(ValueError, match=r"kv_append: lengths must be \(2,\) int32, got \(2,\) int64"):
        gp.ops.kv_append(k, k, args[0], args[1], gp.zeros((2,), gp.int64), None, None, None, None)
    with pytest.raises(ValueError, match=r"kv_gather: an fp8 cache needs the dtype to dequantize to"):
        f8 = KVCache(1, 8, 2, 64, kv_dtype="fp8_e4m3")
        gp.ops.kv_gather(*f8.op_args(), 1, None)
    with pytest.raises(ValueError, match=r"kv_gather: an fp8 cache needs k_scale \(2,\) float32"):
        gp.ops.kv_gather(f8.k[0], f8.v[0], f8.lengths(), None, None, None, 1, gp.bfloat16)
    with pytest.raises(ValueError, match=r"kv_gather: the block size \(k_cache.shape\[2\]\) must be a power of two, got 12"):
        gp.ops.kv_gather(gp.zeros((2, 2, 12, 64), gp.float32), gp.zeros((2, 2, 12, 64), gp.float32), gp.zeros((1,), gp.int32),
                         gp.zeros((1, 2), gp.int32), None, None, 1, None)  # fmt: skip


def test_launch_params_match_signatures():
    """The launches' arguments pack (by the signatures the kernels are built
    with) to the bytes of kv_cache.cu's parameter lists (P a pointer, q long
    long, i int, in struct's native layout), and those signatures agree with
    the parameter lists in the source."""
    cases = [
        (kv_kernels._append_kernel("pgk::bfloat16", "pgk::float8_e4m3", True, False), "@PP6q7P6i",
         (0x1000, 0x2000, 1, 2, 3, 4, 5, 6, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000, 0x9000, 7, 8, 128, 9, 4, 10)),
        (kv_kernels._advance_kernel(), "@PPii", (0x1000, 0x2000, 300, 2)),
        (kv_kernels._append_rope_kernel("float", True, False), "@3P9q2P2q3i5P7i",
         (0x1000, 0x2000, 0x3000, *range(1, 10), 0x4000, 0x5000, 10, 11, 1, 64, 4096, 0x6000, 0x7000, 0x8000, 0x9000, 0xA000,
          1, 32, 8, 128, 0, 4, 16)),
        (kv_kernels._gather_kernel("pgk::float8_e4m3", "pgk::bfloat16", False), "@8P7i",
         (0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0, 0x6000, 0x7000, 2, 8, 128, 300, 320, 0, 0)),
    ]  # fmt: skip
    for kern, fmt, args in cases:
        assert kern._packer.pack(args) == struct.pack(fmt, *args), kern.func
        declared = find_signature(kern.source, kern.func.partition("<")[0].rpartition("::")[2])  # pointers agree as pointers
        assert [(p.code, p.pointer or p.ctype) for p in kern.params] == [(p.code, p.pointer or p.ctype) for p in declared], kern.func


def test_kernels_compile_for_sm80_and_sm90(need_nvrtc):
    kernels = [
        kv_kernels._append_kernel("pgk::bfloat16", "pgk::bfloat16", False, True),
        kv_kernels._append_kernel("float", "pgk::float8_e4m3", True, False),
        kv_kernels._append_kernel("pgk::half", "pgk::float8_e4m3", False, True),
        kv_kernels._append_kernel("float", "float", True, True),
        kv_kernels._advance_kernel(),
        kv_kernels._gather_kernel("pgk::float8_e4m3", "pgk::bfloat16", True),
        kv_kernels._gather_kernel("pgk::half", "pgk::half", False),
        kv_kernels._gather_kernel("float", "float", True),
        kv_kernels._append_rope_kernel("pgk::bfloat16", False, False),
        kv_kernels._append_rope_kernel("pgk::half", True, True),
        kv_kernels._append_rope_kernel("float", True, False),
    ]
    for kern in kernels:
        for sm in (80, 90):
            assert kern.compile(sm).image[:4] == b"\x7fELF", kern


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("layout,rotary", [("neox", 128), ("gptj", 128), ("neox", 64), ("gptj", 32)])
def test_append_rotated_equals_rope_then_append(rng, paged, layout, rotary):
    """append_rotated (decode's RoPE + append, one kernel on the GPU) against
    rope then append: the same q and the same cache, over steps of 1 and 3
    tokens (a ragged step, device and host positions, one past the table:
    left unrotated); on the GPU the kernel serves it, for bf16 and float32."""
    from pygpukit_nn.positional import RotaryEmbedding

    rope = RotaryEmbedding(128, 20, rotary_dim=rotary, layout=layout)
    for dtype in (gp.bfloat16, gp.float32):
        caches = [PagedKVCache(8, 16, 2, 128, dtype, batch=2, max_seq=64) if paged else KVCache(2, 64, 2, 128, dtype) for _ in range(2)]
        for t, counts, pos in ((1, None, [[3], [7]]), (3, [3, 1], [[4, 5, 6], [8, 9, 20]]), (1, None, np.array([5]))):
            qkv = rand(rng, (2, t, 8 * 128), dtype)  # q 4 heads, k 2, v 2
            views = []
            for _ in range(2):
                g = gp.from_numpy(qkv.astype(dtype))
                views.append((g[:, :, : 4 * 128].reshape(2, t, 4, 128), g[:, :, 4 * 128 : 6 * 128].reshape(2, t, 2, 128),
                              g[:, :, 6 * 128 :].reshape(2, t, 2, 128)))  # fmt: skip
            p = gp.from_numpy(np.asarray(pos, np.int32)) if isinstance(pos, list) else pos
            (q0, k0, v0), (q1, k1, v1) = views
            if isinstance(pos, list) and gp.backend() == "cuda":
                args = caches[1].op_args()
                want = "nn:kernel"
                assert gp.ops.which("kv_append_rope", q1, k1, v1, rope.cos_sin, p, layout, rotary, *args[:3], None, args[3]) == want
            rope(q0, k0, p)
            caches[0].append(k0, v0, counts=counts)
            caches[1].append_rotated(q1, k1, v1, rope, p, counts=counts)
            np.testing.assert_array_equal(q1.to_numpy(), q0.to_numpy())
            for a, b in zip(caches[1].gather(), caches[0].gather()):
                np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


# -- the kernels (GPU) ---------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("kv_dtype", [None, "fp8_e4m3"])
def test_kernels_chosen_and_strided_tokens(rng, paged, kv_dtype):
    """The kernels serve bf16 / fp16 / float32 caches and fp8; k and v as strided
    views of a fused qkv projection; a prefill long enough for several tiles."""
    for dtype in (gp.bfloat16, gp.float16, gp.float32):
        if paged:
            cache = PagedKVCache(40, 16, 4, 128, dtype, batch=2, max_seq=320, kv_dtype=kv_dtype)
        else:
            cache = KVCache(2, 320, 4, 128, dtype, kv_dtype=kv_dtype)
        model = Model(1, 2)
        for t, counts in ((300, [300, 257]), (3, None), (1, [1, 0])):  # 300 x 4 x 16 items: several tiles, then the advance kernel
            qkv = rand(rng, (2, t, 12 * 128), dtype)  # (q 4 heads, k 4 heads, v 4 heads) per token
            g = gp.from_numpy(qkv.astype(dtype))
            k, v = g[:, :, 4 * 128 : 8 * 128].reshape(2, t, 4, 128), g[:, :, 8 * 128 :].reshape(2, t, 4, 128)
            args = cache.op_args()
            assert gp.ops.which("kv_append", k, v, args[0], args[1], args[2], None, *args[3:]) == "nn:kernel"
            cache.append(k, v, counts=counts)
            model.append(0, qkv[:, :, 4 * 128 : 8 * 128].reshape(2, t, 4, 128), qkv[:, :, 8 * 128 :].reshape(2, t, 4, 128), counts)
        assert gp.ops.which("kv_gather", *cache.op_args(), 4, dtype) == "nn:kernel"
        quant = None
        if kv_dtype:
            ks, vs = (s.to_numpy() for s in cache.scales())
            quant = lambda a, b, ks=ks, vs=vs: (_np_fp8(a, ks), _np_fp8(b, vs))
        _check_contents(cache, model, 0, quant)
