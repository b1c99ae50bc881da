"""gp.random: Philox4x32-10 known answers; every distribution checked value by value
against a scalar pure-Python Philox and the documented conversions (so on a GPU
these tests check the kernels); reproducibility; statistics with fixed seeds and
bounds of 6 sigma (deterministic: the streams are fixed bits); dtypes, shapes, errors."""

import math

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import FLOAT_DTYPES
from pygpukit._backend import random as gpr

M32 = 0xFFFFFFFF
INT_DTYPES = [gp.int8, gp.int16, gp.int32, gp.int64, gp.uint8, gp.uint16, gp.uint32, gp.uint64]


def philox_ref(ctr, key, rounds=10):
    """Philox4x32 from the paper, one block, Python ints."""
    c, k0, k1 = list(ctr), key & M32, key >> 32
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return c


def words_ref(key, offset, blocks):
    """The flat uint32 words of blocks offset, offset + 1, ... (128-bit counters, word 0 lowest)."""
    out = []
    for b in range(blocks):
        v = (offset + b) % 2**128
        out += philox_ref([(v >> s) & M32 for s in (0, 32, 64, 96)], key)
    return out


def gen_at(seed, offset):
    g = gp.random.Generator(seed)
    g.state = {"bit_generator": "Philox4x32-10", "key": seed, "offset": offset}
    return g


# Random123 tests/kat_vectors, the "philox4x32" lines: rounds, counter words, key words, expected words.
KAT = [
    (7, "00000000 00000000 00000000 00000000", "00000000 00000000", "5f6fb709 0d893f64 4f121f81 4f730a48"),
    (7, "ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "5207ddc2 45165e59 4d8ee751 8c52f662"),
    (7, "243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "4dfccaba 190a87f0 c47362ba b6b5242a"),
    (10, "00000000 00000000 00000000 00000000", "00000000 00000000", "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
    (10, "ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "408f276d 41c83b0e a20bc7c6 6d5451fd"),
    (10, "243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "d16cfe09 94fdcceb 5001e420 24126ea1"),
]


@pytest.mark.parametrize(("rounds", "ctr", "key", "expected"), KAT)
def test_philox_known_answers(rounds, ctr, key, expected):
    c = [int(x, 16) for x in ctr.split()]
    k0, k1 = (int(x, 16) for x in key.split())
    want = [int(x, 16) for x in expected.split()]
    assert philox_ref(c, k0 | k1 << 32, rounds) == want
    assert gpr.philox4x32(np.array([c], np.uint32), k0 | k1 << 32, rounds).tolist() == [want]


@pytest.mark.parametrize("key", [0, 1, 0xDEADBEEF12345678, 2**64 - 1])
@pytest.mark.parametrize("offset", [0, 7, 2**32 - 2, 2**64 - 2, 2**96 - 1, 2**128 - 2])
def test_numpy_twin_matches_scalar_philox(key, offset):
    got = gpr.philox_blocks(key, offset, 5)
    assert got.dtype == np.uint32 and got.shape == (5, 4)
    assert got.ravel().tolist() == words_ref(key, offset, 5)


# -- each distribution, value by value --------------------------------------------
@pytest.mark.parametrize("offset", [0, 2**64 - 3])  # the second crosses a carry into the counter's high half
def test_random_float32_is_top_24_bits(offset):
    g = gen_at(11, offset)
    x = g.random(37)
    w = words_ref(11, offset, 10)
    np.testing.assert_array_equal(x.to_numpy(), np.array([(v >> 8) * 2.0**-24 for v in w[:37]], np.float32))
    assert g.state["offset"] == offset + 10


def test_random_float64_is_53_bits_of_two_words():
    g = gen_at(12, 2**64 - 1)
    x = g.random((3, 7), dtype=gp.float64)
    w = words_ref(12, 2**64 - 1, 11)
    want = [((w[2 * i + 1] << 32 | w[2 * i]) >> 11) * 2.0**-53 for i in range(21)]
    np.testing.assert_array_equal(x.to_numpy(), np.array(want).reshape(3, 7))
    assert g.state["offset"] == 2**64 - 1 + 11


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16, gp.float8_e4m3fn, gp.float8_e5m2])
def test_random_small_floats_use_their_precision(dtype):
    bits = {gp.float16: 11, gp.bfloat16: 8, gp.float8_e4m3fn: 4, gp.float8_e5m2: 3}[dtype]
    x = gen_at(13, 5).random(50, dtype=dtype)
    w = words_ref(13, 5, 13)
    assert x.dtype == dtype
    np.testing.assert_array_equal(x.to_numpy(), np.array([(v >> (32 - bits)) * 2.0**-bits for v in w[:50]]).astype(dtype))
    big = gp.random.default_rng(1).random(20000, dtype=dtype).to_numpy().astype(np.float64)
    assert big.max() < 1.0 and big.min() == 0.0  # never rounds up to 1; 2^bits values, all reached


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64])
def test_uniform_is_low_plus_span_times_u(dtype):
    x = gen_at(14, 3).uniform(-2.5, 7.25, size=9, dtype=dtype).to_numpy()
    u = gen_at(14, 3).random(9, dtype=dtype).to_numpy()
    np.testing.assert_array_equal(x, dtype.type(-2.5) + dtype.type(9.75) * u)
    assert x.min() >= -2.5 and x.max() < 7.25


@pytest.mark.parametrize(("dtype", "low", "high"), [(gp.int16, -7, 1000), (gp.uint8, 0, 256), (gp.int8, -128, 127), (gp.bool_, 0, 2)])
def test_integers_small_range_is_multiply_high(dtype, low, high):
    r = high - low
    x = gen_at(15, 2**64 - 2).integers(low, high, size=21, dtype=dtype).to_numpy()
    w = words_ref(15, 2**64 - 2, 11)
    want = [low + (((w[2 * i + 1] << 32 | w[2 * i]) * r) >> 64) for i in range(21)]
    np.testing.assert_array_equal(x, np.array(want).astype(dtype))


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [(gp.int64, -(2**62), 2**62 + 12345), (gp.int64, -(2**63), 2**63), (gp.uint64, 0, 2**64), (gp.uint64, 5, 2**63)],
)
def test_integers_large_range_is_128_bit_multiply_high(dtype, low, high):
    r = high - low
    x = gen_at(16, 9).integers(low, high, size=6, dtype=dtype).to_numpy()
    w = words_ref(16, 9, 6)
    want = [low + ((sum(w[4 * i + j] << (32 * j) for j in range(4)) * r) >> 128) for i in range(6)]
    assert x.tolist() == want


def test_integers_endpoint_and_high_none():
    a = gen_at(17, 0).integers(-3, 4, size=40, endpoint=True, dtype=gp.int32).to_numpy()
    b = gen_at(17, 0).integers(-3, 5, size=40, dtype=gp.int32).to_numpy()
    np.testing.assert_array_equal(a, b)
    c = gen_at(18, 0).integers(10, size=40).to_numpy()
    np.testing.assert_array_equal(c, gen_at(18, 0).integers(0, 10, size=40).to_numpy())
    assert c.dtype == np.int64
    assert gen_at(1, 0).integers(2**64 - 1, 2**64 - 1, size=3, dtype=gp.uint64, endpoint=True).to_numpy().tolist() == [2**64 - 1] * 3


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_bernoulli_compares_words_with_p(p):
    x = gen_at(19, 1).bernoulli(p, size=30).to_numpy()
    w = words_ref(19, 1, 8)
    assert x.dtype == np.bool_
    np.testing.assert_array_equal(x, np.array([v < round(p * 2**32) for v in w[:30]]))
    assert gen_at(19, 1).bernoulli(p, size=30, dtype=gp.float32).to_numpy().tolist() == x.astype(np.float32).tolist()


def _box_muller(u1, u2):
    r = np.sqrt(-2.0 * np.log(u1))
    t = 2.0 * np.pi * u2
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=-1).reshape(-1)


def test_normal_float32_is_box_muller():
    w = np.array(words_ref(20, 2**64 - 2, 6), np.int64)
    u1 = ((2**32 - w[0::2]).astype(np.float32) * np.float32(2.0**-32)).astype(np.float64)  # rounded to float once
    # the angle: the top 24 bits of the other word as a signed fraction of 2pi, in float32
    signed = np.where(w[1::2] >= 2**31, w[1::2] - 2**32, w[1::2]) // 256
    t = (signed.astype(np.float32) * (np.float32(2 * np.pi) * np.float32(2.0**-24))).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1))
    z = np.stack([r * np.cos(t), r * np.sin(t)], axis=-1).reshape(-1)[:23]
    x = gen_at(20, 2**64 - 2).normal(1.5, 2.0, size=23).to_numpy()
    assert x.dtype == np.float32
    # the device's fast sin/cos: within 2^-21.4 absolute, times r <= 6.7
    np.testing.assert_allclose(x, 1.5 + 2.0 * z, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gen_at(20, 2**64 - 2).standard_normal(23).to_numpy(), z, rtol=1e-5, atol=5e-6)


def test_normal_float64_is_box_muller_on_53_bit_uniforms():
    w = words_ref(21, 4, 5)
    x64 = [(w[2 * i + 1] << 32 | w[2 * i]) >> 11 for i in range(10)]
    u1 = np.array([(2**53 - v) * 2.0**-53 for v in x64[0::2]])
    u2 = np.array([v * 2.0**-53 for v in x64[1::2]])
    x = gen_at(21, 4).normal(-1.0, 0.5, size=9, dtype=gp.float64).to_numpy()
    np.testing.assert_allclose(x, -1.0 + 0.5 * _box_muller(u1, u2)[:9], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16])
def test_normal_small_floats_are_float32_rounded(dtype):
    x = gen_at(22, 0).normal(size=64, dtype=dtype).to_numpy().astype(np.float32)
    ref = gen_at(22, 0).normal(size=64).to_numpy()
    # the same float32 values, rounded once; a device/libm difference of a few
    # float32 ulp can flip a rounding: allow one ulp of the small dtype
    np.testing.assert_allclose(x, ref, rtol=2.0 ** -(gp.finfo(dtype).nmant), atol=1e-6)


# -- the stream: the same on every backend and launch shape ------------------------
CASES = [
    ("random", (), gp.float32),
    ("random", (), gp.float64),
    ("random", (), gp.bfloat16),
    ("uniform", (-1.0, 3.0), gp.float32),
    ("normal", (0.5, 2.0), gp.float32),
    ("normal", (0.5, 2.0), gp.float64),
    ("integers", (-5, 100), gp.int32),
    ("integers", (0, 2**40), gp.int64),
    ("bernoulli", (0.25,), gp.uint8),
]


def _draw(g, method, args, n, dtype):
    return getattr(g, method)(*args, size=n, dtype=dtype).to_numpy()


@pytest.mark.parametrize(("method", "args", "dtype"), CASES)
def test_values_do_not_depend_on_request_size(method, args, dtype):
    short = _draw(gp.random.default_rng(5), method, args, 1001, dtype)
    long = _draw(gp.random.default_rng(5), method, args, 300007, dtype)
    np.testing.assert_array_equal(short, long[:1001])


def test_large_request_matches_the_numpy_twin():
    """2^22 + 3 values: on a GPU, more blocks than threads (the grid-stride loop) and a tail."""
    n = (1 << 22) + 3
    x = gp.random.default_rng(6).random(n).to_numpy()
    np.testing.assert_array_equal(x, gpr.UNIFORM_F[24].values(6, 0, n, 0.0, 1.0))
    z = gp.random.default_rng(6).standard_normal(n).to_numpy()
    np.testing.assert_allclose(z, gpr.NORMAL_F.values(6, 0, n, 0.0, 1.0), rtol=1e-5, atol=1e-5)


def test_consecutive_requests_continue_the_stream():
    g = gp.random.default_rng(7)
    parts = np.concatenate([g.random(8).to_numpy(), g.random(12).to_numpy()])
    np.testing.assert_array_equal(parts, gp.random.default_rng(7).random(20).to_numpy())


@pytest.mark.parametrize(
    ("method", "args", "dtype", "per_block"),
    [("random", (), gp.float32, 4), ("random", (), gp.float64, 2), ("random", (), gp.float16, 4), ("normal", (), gp.float32, 4),
     ("normal", (), gp.float64, 2), ("integers", (0, 7), gp.int8, 2), ("integers", (0, 2**33), gp.int64, 1),
     ("bernoulli", (0.5,), gp.bool_, 4)],
)  # fmt: skip
def test_offset_advances_by_the_blocks_used(method, args, dtype, per_block):
    g = gp.random.default_rng(8)
    for n, total in ((13, -(-13 // per_block)), (0, -(-13 // per_block)), (4, -(-13 // per_block) + -(-4 // per_block))):
        getattr(g, method)(*args, size=n, dtype=dtype)
        assert g.state["offset"] == total


def test_reproducible_sequences_and_different_seeds():
    def run(seed):
        g = gp.random.default_rng(seed)
        return [g.random(10), g.normal(size=5, dtype=gp.float64), g.integers(0, 1000, 7), g.random(3), g.bernoulli(0.5, 9)]

    for a, b in zip(run(123), run(123)):
        np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    first, other = run(123), run(124)
    assert not np.array_equal(first[0].to_numpy(), other[0].to_numpy())
    assert not np.array_equal(first[0].to_numpy()[:3], first[3].to_numpy())  # the stream moved on
    g = gp.random.default_rng(9)
    assert not np.array_equal(g.random(16).to_numpy(), g.random(16).to_numpy())


def test_state_round_trip_replays():
    g = gp.random.default_rng(10)
    g.random(5)
    saved = g.state
    a = g.normal(size=11).to_numpy()
    g.state = saved
    np.testing.assert_array_equal(g.normal(size=11).to_numpy(), a)
    assert saved == {"bit_generator": "Philox4x32-10", "key": 10, "offset": 2}
    assert repr(gen_at(10, 2)) == "Generator(Philox4x32-10, key=0xa, offset=2)"


def test_seeds_and_default_rng():
    g = gp.random.default_rng(np.uint64(2**64 - 1))
    assert g.state["key"] == 2**64 - 1
    assert gp.random.default_rng(g) is g
    a, b = gp.random.default_rng(), gp.random.default_rng()  # from os.urandom: equal with probability 2^-64
    assert a.state["key"] != b.state["key"]
    np.testing.assert_array_equal(gp.random.Generator(3).random(5).to_numpy(), gp.random.default_rng(3).random(5).to_numpy())


def test_module_functions_use_the_seeded_default_generator():
    gp.random.seed(42)
    got = [gp.random.rand(2, 3), gp.random.randn(4), gp.random.randint(5, size=3), gp.random.uniform(1, 2, 3), gp.random.normal(size=2)]
    got += [gp.random.random(2, dtype=gp.float64), gp.random.standard_normal(3), gp.random.bernoulli(0.5, 4)]
    g = gp.random.default_rng(42)
    want = [g.random((2, 3)), g.standard_normal(4), g.integers(0, 5, 3), g.uniform(1, 2, 3), g.normal(size=2)]
    want += [g.random(2, dtype=gp.float64), g.standard_normal(3), g.bernoulli(0.5, 4)]
    for x, y in zip(got, want):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x.to_numpy(), y.to_numpy())
    assert gp.random.rand().shape == () and gp.random.rand(3, dtype=gp.float64).dtype == np.float64
    assert gp.random.randint(2, 9, size=(2, 2), dtype=gp.uint16).dtype == np.uint16


# -- statistics: fixed seeds, 6-sigma bounds ----------------------------------------
N = 1_000_000


def _check_mean_var(x, mean, var, fourth_central):
    x = x.astype(np.float64)
    assert abs(x.mean() - mean) < 6 * math.sqrt(var / len(x))
    assert abs(x.var() - var) < 6 * math.sqrt((fourth_central - var**2) / len(x))


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64])
def test_uniform_statistics(dtype):
    x = gp.random.default_rng(100).random(N, dtype=dtype).to_numpy()
    assert x.min() >= 0.0 and x.max() < 1.0
    _check_mean_var(x, 0.5, 1 / 12, 1 / 80)
    counts, _ = np.histogram(x, bins=100, range=(0.0, 1.0))
    assert np.all(np.abs(counts - N / 100) < 6 * math.sqrt(N * 0.01 * 0.99))
    y = gp.random.default_rng(101).uniform(-3.0, 5.0, N, dtype=dtype).to_numpy()
    _check_mean_var(y, 1.0, 64 / 12, 64**2 / 80)


@pytest.mark.parametrize("dtype", [gp.float32, gp.float64])
def test_normal_statistics_and_cdf(dtype):
    z = gp.random.default_rng(102).standard_normal(N, dtype=dtype).to_numpy().astype(np.float64)
    _check_mean_var(z, 0.0, 1.0, 3.0)
    z.sort()
    for t in np.arange(-3.0, 3.01, 0.25):  # empirical CDF against Phi, KS-like
        phi = 0.5 * (1 + math.erf(t / math.sqrt(2)))
        assert abs(np.searchsorted(z, t) / N - phi) < 6 * math.sqrt(phi * (1 - phi) / N) + 1e-6
    assert np.abs(z).max() < 8.6  # u1 >= 2^-32 (float32) or 2^-53 (float64)
    y = gp.random.default_rng(103).normal(10.0, 3.0, N, dtype=dtype).to_numpy()
    _check_mean_var(y, 10.0, 9.0, 3 * 81)


def test_integers_cover_the_range_uniformly():
    x = gp.random.default_rng(104).integers(-3, 7, 100_000, dtype=gp.int16).to_numpy()
    values, counts = np.unique(x, return_counts=True)
    assert values.tolist() == list(range(-3, 7))  # never 7
    assert np.all(np.abs(counts - 10_000) < 6 * math.sqrt(100_000 * 0.1 * 0.9))
    full = gp.random.default_rng(105).integers(0, 256, 100_000, dtype=gp.uint8).to_numpy()
    assert np.unique(full).size == 256
    big = gp.random.default_rng(106).integers(0, 3 * 2**62, N, dtype=gp.uint64).to_numpy()
    assert abs((big >= 2**63).mean() - 1 / 3) < 6 * math.sqrt(2 / 9 / N)
    assert big.max() < 3 * 2**62


def test_bernoulli_statistics():
    x = gp.random.default_rng(107).bernoulli(0.3, N).to_numpy()
    assert abs(x.mean() - 0.3) < 6 * math.sqrt(0.21 / N)


# -- dtypes, shapes -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_dtypes_and_shapes(dtype):
    g = gp.random.default_rng(30)
    for method in ("random", "standard_normal"):
        a = getattr(g, method)((2, 3), dtype=dtype)
        assert a.shape == (2, 3) and a.dtype == dtype and np.isfinite(a.to_numpy().astype(np.float32)).all()
    u = g.uniform(-1.0, 1.0, size=100, dtype=dtype).to_numpy().astype(np.float32)
    assert u.min() >= -1.0 and u.max() <= 1.0
    n = g.normal(2.0, 0.1, size=100, dtype=dtype).to_numpy().astype(np.float32)
    assert 1.0 < n.min() and n.max() < 3.0


@pytest.mark.parametrize("dtype", [*INT_DTYPES, gp.bool_])
def test_integer_dtypes(dtype):
    lo, hi = (0, 2) if dtype == gp.bool_ else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max) + 1)
    x = gp.random.default_rng(31).integers(lo, hi, size=(4, 50), dtype=dtype)
    assert x.dtype == dtype and x.shape == (4, 50)
    v = x.to_numpy()
    assert v.min() >= lo and v.max() < hi and np.unique(v).size > 1
    small = gp.random.default_rng(31).integers(1, 4, size=200, dtype=dtype if dtype != gp.bool_ else gp.int8).to_numpy()
    assert set(small.tolist()) == {1, 2, 3}


@pytest.mark.parametrize("size", [None, 0, (3, 0), (), 5, (2, 1, 3)])
def test_sizes(size):
    g = gp.random.default_rng(32)
    shape = () if size is None else (size,) if isinstance(size, int) else size
    for x in (g.random(size), g.normal(size=size, dtype=gp.float64), g.integers(9, size=size), g.bernoulli(0.5, size)):
        assert x.shape == shape
        assert np.isfinite(x.to_numpy().astype(np.float64)).all()
    if math.prod(shape) == 0:
        assert g.state["offset"] == 0


def test_array_parameters_broadcast():
    low = np.array([0.0, 10.0, 100.0])
    x = gp.random.default_rng(33).uniform(low, 200.0, size=(2, 3))
    u = gp.random.default_rng(33).random((2, 3)).to_numpy()
    np.testing.assert_allclose(x.to_numpy(), low + (200.0 - low) * u, rtol=1e-6)
    assert x.dtype == np.float32
    n = gp.random.default_rng(34).normal(gp.asarray(np.array([1.0, 2.0, 3.0])), np.array([[1.0], [0.0]]), dtype=gp.float64)
    z = gp.random.default_rng(34).standard_normal((2, 3), dtype=gp.float64).to_numpy()
    assert n.shape == (2, 3) and n.dtype == np.float64
    np.testing.assert_allclose(n.to_numpy(), np.array([1.0, 2.0, 3.0]) + np.array([[1.0], [0.0]]) * z, rtol=1e-12)
    h = gp.random.default_rng(35).uniform(np.zeros(4), 1.0, dtype=gp.float16)
    assert h.shape == (4,) and h.dtype == np.float16
    with pytest.raises(ValueError):
        gp.random.default_rng(1).uniform(np.zeros(3), 1.0, size=(4,))
    with pytest.raises(ValueError, match="scale"):
        gp.random.default_rng(1).normal(0.0, np.array([1.0, -1.0]))


# -- bad input --------------------------------------------------------------------
def test_errors():
    g = gp.random.default_rng(1)
    with pytest.raises(ValueError):
        g.random(-1)
    with pytest.raises(ValueError):
        g.normal(size=(2, -3))
    with pytest.raises(TypeError):
        g.random(2.5)
    with pytest.raises(TypeError):
        g.random(3, dtype=gp.int32)
    with pytest.raises(TypeError):
        g.normal(size=3, dtype=gp.bool_)
    with pytest.raises(TypeError):
        g.uniform(size=3, dtype=gp.uint8)
    with pytest.raises(ValueError, match="scale"):
        g.normal(0.0, -1.0)
    with pytest.raises(ValueError, match="scale"):
        g.normal(0.0, float("nan"))
    with pytest.raises(OverflowError):
        g.uniform(0.0, float("inf"))
    with pytest.raises(OverflowError):
        g.uniform(-3e38, 3e38, dtype=gp.float32)
    with pytest.raises(TypeError):
        g.uniform("a", 1.0)
    with pytest.raises(ValueError, match="low >= high"):
        g.integers(5, 5)
    with pytest.raises(ValueError, match="low > high"):
        g.integers(5, 4, endpoint=True)
    with pytest.raises(ValueError, match="low >= high"):
        g.integers(0)
    with pytest.raises(ValueError, match="out of bounds"):
        g.integers(0, 300, dtype=gp.uint8)
    with pytest.raises(ValueError, match="out of bounds"):
        g.integers(-1, 3, dtype=gp.uint32)
    with pytest.raises(ValueError, match="out of bounds"):
        g.integers(0, 3, dtype=gp.bool_)
    with pytest.raises(TypeError):
        g.integers(0, 10, dtype=gp.float32)
    with pytest.raises(TypeError):
        g.integers(0.5, 10)
    with pytest.raises(TypeError):
        g.integers(np.zeros(2, np.int64), 10)
    with pytest.raises(ValueError):
        g.bernoulli(1.5)
    with pytest.raises(ValueError):
        g.bernoulli(float("nan"))
    for bad in (-1, 2**64):
        with pytest.raises(ValueError):
            gp.random.Generator(bad)
    with pytest.raises(TypeError):
        gp.random.default_rng(1.5)
    with pytest.raises(ValueError):
        g.state = {"bit_generator": "PCG64", "key": 1, "offset": 0}
    with pytest.raises(ValueError):
        g.state = {"bit_generator": "Philox4x32-10", "key": 1, "offset": -1}
    assert g.state["offset"] == 0  # nothing was drawn by the failed calls


def test_default_generator_is_what_seed_replaces():
    gp.random.seed(123)
    g = gp.random.default_generator()
    assert g is gp.random.default_generator()
    a = gp.random.rand(8).to_numpy()
    gp.random.seed(123)
    assert gp.random.default_generator() is not g
    np.testing.assert_array_equal(gp.random.rand(8).to_numpy(), a)
