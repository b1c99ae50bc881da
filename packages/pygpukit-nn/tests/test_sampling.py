"""Sampling (temperature, top-k, top-p, min-p, greedy), penalties and token
counts: draws against the analytic filtered distributions of a fixed logits
vector (chi-square), greedy and penalties exactly against NumPy, token counts
against np.bincount, reproducibility, edge cases and errors. Tests without a
marker run the reference on the CPU backend and the kernel on a GPU; the gpu
tests add multi-block rows, odd and unaligned shapes, launch independence
and PyTorch; the compile test builds every instantiation with NVRTC."""

import math

import numpy as np
import pytest
from nn_testing import rand

import pygpukit as gp
from pygpukit_nn import sampling as S

DTYPES = [gp.float32, gp.float16, gp.bfloat16]
# V = 12, exact in bf16, with a tie (2.5) and a -inf token
LOGITS = np.array([3.0, 2.5, 2.5, 2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, -np.inf, -3.0])


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _np_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, strict=True):
    """The filtered distribution in float64, from the definitions (transformers'
    order): temperature -> top-k (ties kept) -> top-p -> min-p -> softmax.
    ``strict``: assert that the case keeps clear of the top-p / min-p
    boundaries, where float32 rounding could decide."""
    z = np.asarray(logits, np.float64) / temperature
    v = z.size
    if 0 < top_k < v:
        z = np.where(z < np.sort(z, kind="stable")[::-1][top_k - 1], -np.inf, z)
    if top_p < 1:
        pr = _softmax(z)
        order = np.argsort(-z, kind="stable")
        before = np.cumsum(pr[order]) - pr[order]  # mass strictly before each sorted position
        n_keep = max(1, int(np.sum(before < top_p)))
        assert not strict or n_keep == v or abs(before[n_keep] - top_p) > 1e-3
        z = np.where(z < z[order][n_keep - 1], -np.inf, z)
    if min_p > 0:
        pr = _softmax(z)
        assert not strict or np.all(np.abs(pr / pr.max() - min_p) > 1e-3)
        z = np.where(pr < min_p * pr.max(), -np.inf, z)
    return _softmax(z)


def _chi2_threshold(df: int, z: float = 5.0) -> float:
    """Upper quantile of chi-square(df) by the Wilson-Hilferty approximation
    (within ~1% here): z = 5 is a one-sided normal tail of 2.9e-7, so a correct
    sampler fails a given check about once in three million runs."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def _check_distribution(tokens, probs):
    """Tokens of zero probability never occur; the rest match by chi-square over
    the cells with at least 5 expected draws (the others pooled)."""
    n = tokens.size
    assert tokens.min() >= 0 and tokens.max() < probs.size
    counts = np.bincount(tokens, minlength=probs.size)
    assert counts[probs == 0].sum() == 0, (counts, probs)
    exp = n * probs
    big = exp >= 5
    obs_c, exp_c = list(counts[big]), list(exp[big])
    small = (~big) & (probs > 0)
    if small.any():
        if exp[small].sum() >= 5 or not exp_c:
            obs_c.append(counts[small].sum())
            exp_c.append(exp[small].sum())
        else:
            obs_c[-1] += counts[small].sum()
            exp_c[-1] += exp[small].sum()
    df = len(exp_c) - 1
    if df == 0:
        return
    stat = float(sum((o - e) ** 2 / e for o, e in zip(obs_c, exp_c)))
    assert stat < _chi2_threshold(df), (stat, df, counts, np.round(exp, 1))


def _rows(row, n, dtype):
    return gp.from_numpy(np.tile(np.asarray(row), (n, 1)).astype(dtype))


# -- distributions (reference on the CPU backend, kernel on a GPU) ---------------------

CASES = [
    {},
    {"temperature": 0.7},
    {"temperature": 1.8},
    {"top_k": 2},  # the 2nd largest is tied: 3 tokens kept
    {"top_k": 5},
    {"top_p": 0.8},
    {"top_p": 0.55},
    {"min_p": 0.1},
    {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 1.8, "top_k": 4, "top_p": 0.75},  # top-p on the renormalized top-k: 3 tokens (4 on the full softmax)
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_distribution_matches_analytic(kw):
    n = 20000
    probs = _np_probs(LOGITS, **kw)
    tokens = S.sample(_rows(LOGITS, n, np.float32), generator=1234, **kw).to_numpy()
    assert tokens.dtype == np.int32 and tokens.shape == (n,)
    _check_distribution(tokens, probs)


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16, gp.float64], ids=str)
def test_distribution_every_dtype(dtype):
    kw = {"temperature": 0.9, "top_k": 7, "top_p": 0.85}
    tokens = S.sample(_rows(LOGITS, 12000, dtype), generator=7, **kw).to_numpy()
    _check_distribution(tokens, _np_probs(LOGITS, **kw))


def test_per_row_parameters_mix_requests():
    """Even rows and odd rows ask for different filters in one call; greedy rows
    (temperature 0) take the argmax."""
    n = 24000
    x = _rows(LOGITS, n, np.float32)
    half = np.arange(n) % 2
    t = np.where(half, 1.3, 0.6).astype(np.float32)
    t[::10] = 0.0  # every 10th row (even): greedy
    k = np.where(half, 0, 6).astype(np.int32)
    p = np.where(half, 0.75, 1.0).astype(np.float32)
    mp = np.where(half, 0.0, 0.08).astype(np.float32)
    args = {"temperature": gp.from_numpy(t), "top_k": gp.from_numpy(k), "top_p": gp.from_numpy(p), "min_p": gp.from_numpy(mp)}
    tokens = S.sample(x, generator=99, **args).to_numpy()
    greedy = t == 0
    assert np.all(tokens[greedy] == 0)
    _check_distribution(tokens[(half == 0) & ~greedy], _np_probs(LOGITS, 0.6, 6, 1.0, 0.08))
    _check_distribution(tokens[half == 1], _np_probs(LOGITS, 1.3, 0, 0.75, 0.0))


def test_small_top_p_many_rejections(rng):
    """A flat row and a small top_p: the nucleus is a few tokens out of 500."""
    row = rng.uniform(-0.5, 0.5, 500).round(3)
    row[[10, 200, 333]] = [2.0, 1.9, 1.85]
    probs = _np_probs(row, top_p=0.02)
    assert 1 <= np.count_nonzero(probs) <= 3
    tokens = S.sample(_rows(row, 4000, np.float32), top_p=0.02, generator=5).to_numpy()
    _check_distribution(tokens, probs)


# -- greedy, edge cases, reproducibility ---------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_greedy_is_argmax_lowest_index(rng, dtype):
    x = rand(rng, (9, 1001), dtype, 2.0)
    x[3, [5, 700]] = 50.0  # a tie: the lowest index wins
    x[4, :] = -np.inf
    x[4, 998] = -1.0
    g = gp.from_numpy(x.astype(dtype))
    ref = np.argmax(x, axis=1)
    np.testing.assert_array_equal(S.sample(g, greedy=True).to_numpy(), ref)
    np.testing.assert_array_equal(S.sample(g, temperature=0.0, top_k=3, top_p=0.5).to_numpy(), ref)
    assert S.sample(g, greedy=True).to_numpy()[3] == 5


def test_edge_cases():
    x = _rows([1.0, 5.0, 5.0, 0.0, -2.0], 4000, np.float32)
    tokens = S.sample(x, top_k=1, generator=3).to_numpy()  # the tied maxima are both kept
    assert set(np.unique(tokens)) == {1, 2}
    assert set(np.unique(S.sample(x, top_p=1e-6, generator=3).to_numpy())) == {1, 2}
    assert set(np.unique(S.sample(x, min_p=1.0, generator=3).to_numpy())) == {1, 2}
    one = np.full(37, -np.inf)
    one[29] = -3.0
    np.testing.assert_array_equal(S.sample(_rows(one, 50, np.float32), temperature=2.0, generator=4).to_numpy(), 29)
    single = S.sample(gp.from_numpy(np.array([[0.5]], np.float32)), generator=1).to_numpy()
    np.testing.assert_array_equal(single, [0])
    cold = S.sample(_rows(LOGITS, 100, np.float32), temperature=1e-30, generator=2).to_numpy()  # tiny T: argmax
    np.testing.assert_array_equal(cold, 0)


def test_same_seed_same_tokens_and_generator_advances():
    x = _rows(LOGITS, 256, np.float32)
    a = S.sample(x, top_p=0.9, generator=2024).to_numpy()
    np.testing.assert_array_equal(a, S.sample(x, top_p=0.9, generator=2024).to_numpy())
    g = gp.random.Generator(11)
    state = g.state
    first = S.sample(x, generator=g).to_numpy()
    assert g.state["offset"] == state["offset"] + 1
    second = S.sample(x, generator=g).to_numpy()
    assert np.any(first != second)
    g.state = state
    np.testing.assert_array_equal(S.sample(x, generator=g).to_numpy(), first)
    gp.random.seed(5)
    c = S.sample(x).to_numpy()
    gp.random.seed(5)
    np.testing.assert_array_equal(S.sample(x).to_numpy(), c)


def test_filters_never_leak(rng):
    """Random rows of 1000 logits: every drawn token is in the filtered set."""
    x = rand(rng, (64, 1000), np.float32, 3.0)
    g = gp.from_numpy(x.astype(np.float32))
    for kw in ({"top_k": 10}, {"top_p": 0.5}, {"min_p": 0.2}, {"top_k": 40, "top_p": 0.3, "temperature": 0.5}):
        tokens = S.sample(g, generator=8, **kw).to_numpy()
        for r in range(0, 64, 7):
            assert _np_probs(x[r], strict=False, **kw)[tokens[r]] > 0, (kw, r)


def test_reference_rejects_nan_and_empty_rows():
    x = np.tile(LOGITS, (3, 1)).astype(np.float32)
    x[1, 4] = np.nan
    with gp.routing(sample="nn:reference"):
        with pytest.raises(ValueError, match="row 1 holds NaN"):
            S.sample(gp.from_numpy(x))
        x[1] = -np.inf
        with pytest.raises(ValueError, match="row 1 has no finite value"):
            S.sample(gp.from_numpy(x))


def test_sample_errors():
    x = gp.from_numpy(np.tile(LOGITS, (4, 1)).astype(np.float32))
    cases = [
        (lambda: S.sample(np.zeros((2, 3))), TypeError, "logits must be a GPUArray"),
        (lambda: S.sample(gp.zeros((2, 3), gp.int32)), TypeError, "float16, bfloat16, float32 or float64"),
        (lambda: S.sample(gp.zeros((3,), gp.float32)), ValueError, r"\(batch, vocab\)"),
        (lambda: S.sample(gp.zeros((2, 0), gp.float32)), ValueError, "vocab >= 1"),
        (lambda: S.sample(x, temperature=-1.0), ValueError, "temperature must be a finite number >= 0"),
        (lambda: S.sample(x, temperature=float("nan")), ValueError, "temperature"),
        (lambda: S.sample(x, temperature="hot"), TypeError, "temperature must be a real number"),
        (lambda: S.sample(x, top_k=-1), ValueError, "top_k must be an int >= 0"),
        (lambda: S.sample(x, top_k=2.5), TypeError, "top_k must be an int"),
        (lambda: S.sample(x, top_p=0.0), ValueError, r"top_p must be in \(0, 1\]"),
        (lambda: S.sample(x, top_p=1.5), ValueError, "top_p"),
        (lambda: S.sample(x, min_p=-0.1), ValueError, r"min_p must be in \[0, 1\]"),
        (lambda: S.sample(x, temperature=gp.ones((3,), gp.float32)), ValueError, r"shape \(4,\)"),
        (lambda: S.sample(x, top_k=gp.ones((4,), gp.float32)), TypeError, "top_k must be an integer array"),
        (lambda: S.sample(x, top_p=gp.ones((4,), gp.int32)), TypeError, "top_p must be a float array"),
        (lambda: S.sample(x, generator="seed"), TypeError, "generator must be"),
        (lambda: S.sample(x, generator=-1), ValueError, "seed"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    assert S.sample(gp.zeros((0, 5), gp.float32)).shape == (0,)


def test_blocks_per_row():
    assert S.blocks_per_row(8, 152064, 132) == 16  # the batch: 128 blocks of ~9.5k logits
    assert S.blocks_per_row(1, 152064, 132) == 32
    assert S.blocks_per_row(66, 152064, 132) == 2
    assert S.blocks_per_row(67, 152064, 132) == 1  # one block per row, no barrier
    assert S.blocks_per_row(4, 3000, 132) == 2  # at least 512 quads per block
    assert S.blocks_per_row(4, 12, 132) == 1
    for b in range(1, 140):
        assert b * S.blocks_per_row(b, 10**6, 132) <= 132 or S.blocks_per_row(b, 10**6, 132) == 1


# -- penalties and counts ----------------------------------------------------------------


def _np_penalties(x, counts, rep, pres, freq, dtype):
    """NumPy in float32 (float64 for float64), the steps of the docstring, one final rounding."""
    cdt = np.float64 if dtype == gp.float64 else np.float32
    x = x.astype(cdt)
    seen = counts > 0
    r, p, f = (np.asarray(a, cdt).reshape(-1, 1) if np.ndim(a) else cdt(a) for a in (rep, pres, freq))
    x = np.where(seen, np.where(x > 0, x / r, x * r), x)
    x = x - f * counts.astype(cdt)
    x = x - p * seen.astype(cdt)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64], ids=str)
def test_penalties_match_numpy_exactly(rng, dtype):
    b, v = 5, 1003
    x = rand(rng, (b, v), dtype, 4.0)
    x[0, :4] = [0.0, -0.0, 7.0, -7.0]
    counts = rng.integers(0, 4, (b, v)).astype(np.int32) * (rng.random((b, v)) < 0.3)
    counts[0, :4] = 2
    gx, gc = gp.from_numpy(x.astype(dtype)), gp.from_numpy(counts.astype(np.int32))
    rep = rng.uniform(0.8, 1.6, b).astype(np.float32)
    pres = rng.uniform(-0.5, 1.0, b).astype(np.float32)
    freq = rng.uniform(-0.3, 0.7, b).astype(np.float32)
    for args in [(1.3, 0.4, 0.25), (rep, pres, freq), (1.0, 0.0, 0.0)]:
        garg = [gp.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
        got = S.apply_penalties(gx, gc, repetition_penalty=garg[0], presence_penalty=garg[1], frequency_penalty=garg[2])
        ref = _np_penalties(x.astype(dtype), counts, *args, dtype)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.to_numpy().view(np.uint8), ref.view(np.uint8))  # bitwise


def test_penalties_from_ids_and_in_place(rng):
    b, v, n = 3, 50, 40
    x = rand(rng, (b, v), np.float32, 2.0).astype(np.float32)
    ids = rng.integers(0, v, (b, n)).astype(np.int32)
    ids[:, -5:] = -1  # padding
    counts = np.stack([np.bincount(r[r >= 0], minlength=v) for r in ids]).astype(np.int32)
    ref = _np_penalties(x, counts, 1.2, 0.3, 0.1, np.float32)
    gx = gp.from_numpy(x)
    got = S.apply_penalties(gx, ids=gp.from_numpy(ids), repetition_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.1)
    np.testing.assert_array_equal(got.to_numpy(), ref)
    same = S.apply_penalties(gx, gp.from_numpy(counts), repetition_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.1, out=gx)
    assert same is gx
    np.testing.assert_array_equal(gx.to_numpy(), ref)


@pytest.mark.parametrize("idtype", [np.int32, np.int64], ids=str)
def test_token_counts_match_bincount(rng, idtype):
    b, n, v = 6, 333, 97
    ids = rng.integers(0, v, (b, n)).astype(idtype)
    ids[2, :] = 7
    ids[4, 100:] = 96  # pad_id below: skipped
    got = S.token_counts(gp.from_numpy(ids), v, pad_id=96)
    ref = np.stack([np.bincount(r[r != 96], minlength=v) for r in ids])
    assert got.dtype == np.int32 and got.shape == (b, v)
    np.testing.assert_array_equal(got.to_numpy(), ref)
    assert S.token_counts(gp.zeros((2, 0), gp.int32), 5).to_numpy().sum() == 0


def test_penalty_and_count_errors():
    x = gp.zeros((2, 6), gp.float32)
    c = gp.zeros((2, 6), gp.int32)
    cases = [
        (lambda: S.apply_penalties(x), TypeError, "exactly one of counts"),
        (lambda: S.apply_penalties(x, c, ids=c), TypeError, "exactly one of counts"),
        (lambda: S.apply_penalties(x, gp.zeros((2, 6), gp.float32)), TypeError, "counts must be an integer GPUArray"),
        (lambda: S.apply_penalties(x, gp.zeros((2, 5), gp.int32)), ValueError, "counts must have the logits' shape"),
        (lambda: S.apply_penalties(x, c, repetition_penalty=0.0), ValueError, "repetition_penalty must be a finite number > 0"),
        (lambda: S.apply_penalties(x, c, presence_penalty=float("inf")), ValueError, "presence_penalty must be finite"),
        (lambda: S.apply_penalties(x, c, frequency_penalty=gp.zeros((3,), gp.float32)), ValueError, r"shape \(2,\)"),
        (lambda: S.apply_penalties(x, c, out=gp.zeros((2, 6), gp.float16)), ValueError, "out must be"),
        (lambda: S.token_counts(gp.zeros((2, 3), gp.float32), 5), TypeError, "ids must be an integer GPUArray"),
        (lambda: S.token_counts(gp.zeros((3,), gp.int32), 5), ValueError, r"\(batch, length\)"),
        (lambda: S.token_counts(c, 0), ValueError, "vocab_size"),
        (lambda: S.token_counts(c, 5, pad_id=1.5), TypeError, "pad_id must be an int"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
    with gp.routing(token_counts="nn:reference"):
        with pytest.raises(ValueError, match=r"ids\[1, 2\] = 9 is outside \[0, 5\)"):
            S.token_counts(gp.from_numpy(np.array([[0, 1, 2], [3, 4, 9]], np.int32)), 5)


def test_kernels_compile(need_nvrtc):
    for ct in S._CTYPES.values():
        kernels = [S._sample_kernel(ct, True), S._sample_kernel(ct, False), S._penalties_kernel(ct)]
        for kern in kernels:
            for sm in (80, 90):
                assert kern.compile(sm).image[:4] == b"\x7fELF", (kern, sm)
    for ct in S._ID_CTYPES.values():
        for sm in (80, 90):
            assert S._counts_kernel(ct).compile(sm).image[:4] == b"\x7fELF"


# -- the kernels (GPU) -----------------------------------------------------------------


@pytest.mark.gpu
def test_kernels_are_chosen():
    x = gp.zeros((2, 8), gp.bfloat16)
    c = gp.zeros((2, 8), gp.int32)
    assert gp.ops.which("sample", x, 1.0, 0, 1.0, 0.0, 0, 0) == "nn:kernel"
    assert gp.ops.which("apply_penalties", x, c, 1.0, 0.0, 0.0, None) == "nn:kernel"
    assert gp.ops.which("token_counts", c, 8, -1) == "nn:kernel"
    assert gp.ops.which("sample", gp.zeros((2, 8), gp.float64), 1.0, 0, 1.0, 0.0, 0, 0) == "nn:reference"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_multi_block_rows(dtype):
    """Rows of 40000 logits over several blocks (4 rows: 20 blocks each): 12
    likely tokens, a long tail (0.2% of the mass) and -inf tokens, 8000 draws;
    the top-p and min-p boundaries fall between likely tokens."""
    rng = np.random.default_rng(21)
    v, b, calls = 40000, 4, 2000
    row = rng.uniform(-14, -10, v)
    row[rng.choice(v, 12, replace=False)] = np.linspace(1.0, 4.0, 12)
    row[rng.choice(v, 100, replace=False)] = -np.inf
    row = row.astype(dtype).astype(np.float64)
    x = _rows(row, b, dtype)
    assert S.blocks_per_row(b, v, 132) == 20
    for kw in ({}, {"top_p": 0.9}, {"top_k": 50, "top_p": 0.9}, {"temperature": 0.7, "min_p": 0.035}, {"top_k": 7}):
        g = gp.random.Generator(17)
        tokens = np.concatenate([S.sample(x, generator=g, **kw).to_numpy() for _ in range(calls)])
        _check_distribution(tokens, _np_probs(row, **kw))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_odd_and_unaligned_rows(rng, dtype):
    """V not a multiple of 4, rows that start off a 16-byte boundary, tiny V:
    the drawn tokens are in the filtered set and greedy is exact."""
    for v in (1, 3, 4099, 20001):
        wide = rand(rng, (6, v + 1), dtype, 2.0)
        x = gp.from_numpy(wide.astype(dtype))[:, 1:]  # unaligned when v + 1 is odd
        ref = wide[:, 1:]
        np.testing.assert_array_equal(S.sample(x, greedy=True).to_numpy(), np.argmax(ref, axis=1))
        for kw in ({"top_k": 3}, {"top_p": 0.6, "min_p": 0.1}):
            tokens = S.sample(x, generator=v, **kw).to_numpy()
            for r in range(6):
                assert _np_probs(ref[r], strict=False, **kw)[tokens[r]] > 0, (v, kw, r)


@pytest.mark.gpu
def test_kernel_tokens_do_not_depend_on_the_batch():
    """A row's token is a function of its logits, parameters, key, offset and row
    index: the same row alone (1 row: 32 blocks) and in a batch of 8 (16
    blocks per row) or 100 (1 block per row) gives the same token."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((100, 100000)).astype(np.float32) * 2
    for kw in ({}, {"top_p": 0.9}, {"top_k": 40, "top_p": 0.8}):
        full = S.sample(gp.from_numpy(x), generator=77, **kw).to_numpy()
        eight = S.sample(gp.from_numpy(x[:8]), generator=77, **kw).to_numpy()
        one = S.sample(gp.from_numpy(x[:1]), generator=77, **kw).to_numpy()
        np.testing.assert_array_equal(full[:8], eight)
        assert one[0] == full[0]


@pytest.mark.gpu
def test_kernel_non_finite_logits():
    """The kernel reads nothing back: NaN and +inf count as -inf; a row without a
    finite logit gives -1."""
    x = np.tile(LOGITS, (4, 1)).astype(np.float32)
    x[0, 0] = np.nan
    x[1, 1] = np.inf
    x[2, :] = np.nan
    x[3, :] = -np.inf
    tokens = S.sample(gp.from_numpy(x), generator=1).to_numpy()
    assert tokens[0] != 0 and tokens[1] != 1 and tokens[0] >= 0 and tokens[1] >= 0
    np.testing.assert_array_equal(tokens[2:], [-1, -1])
    np.testing.assert_array_equal(S.sample(gp.from_numpy(x), greedy=True).to_numpy(), [1, 0, -1, -1])
    ids = gp.from_numpy(np.array([[0, 1, 9, -3, 1]], np.int32))
    np.testing.assert_array_equal(S.token_counts(ids, 5).to_numpy(), [[1, 2, 0, 0, 0]])  # out-of-range ids skipped


@pytest.mark.gpu
def test_kernel_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 152064)).astype(np.float32)
    x[2, [10, 90000]] = 9.0  # a tie
    tx = torch.from_numpy(x).cuda()
    np.testing.assert_array_equal(S.sample(gp.from_numpy(x), greedy=True).to_numpy(), tx.argmax(-1).cpu().numpy())
    counts = rng.integers(0, 3, x.shape).astype(np.int32)
    tc = torch.from_numpy(counts).cuda()
    rep = torch.tensor(1.2, device="cuda")  # a tensor: torch divides by a Python scalar through its reciprocal
    t = torch.where(tc > 0, torch.where(tx > 0, tx / rep, tx * rep), tx) - 0.5 * tc.float() - 0.25 * (tc > 0).float()
    got = S.apply_penalties(gp.from_numpy(x), gp.from_numpy(counts), repetition_penalty=1.2, frequency_penalty=0.5, presence_penalty=0.25)
    np.testing.assert_array_equal(got.to_numpy(), t.cpu().numpy())
