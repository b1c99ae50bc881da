"""Next-token sampling on the GPU: temperature, top-k, top-p, min-p, greedy
argmax and seeded draws over logits (B, V), plus repetition / presence /
frequency penalties and the per-row token counts they take.

Filters apply in the order of Hugging Face transformers' samplers (vLLM's
penalties first): penalties (``apply_penalties``, a separate call) ->
temperature -> top-k -> top-p -> min-p, each on the result of the previous:

- temperature T: logits / T; T = 0 (or ``greedy=True``) is argmax, the lowest
  index on a tie (torch.argmax).
- top-k: keep the tokens whose logit is >= the k-th largest (ties with it are
  all kept, as transformers' TopKLogitsWarper); 0 (or k >= V) keeps all.
- top-p: on the softmax of what top-k kept, keep token i iff the mass of the
  tokens strictly more likely than i is < top_p (the smallest set of top
  tokens reaching top_p; tokens tied with its last one are kept); 1 keeps all.
- min-p: keep token i iff p_i >= min_p * p_max; 0 keeps all.
The token is drawn from the softmax of the kept logits. Every parameter is a
scalar or a (B,) GPUArray (float for temperature / top_p / min_p, integer for
top_k), so one batch can mix requests. Scalars are checked; array values are
clamped instead (no host synchronization): temperature <= 0 or NaN -> greedy,
top_k <= 0 or >= V -> off, top_p >= 1 -> off, top_p <= 0 or NaN -> the most
likely token(s) only, min_p <= 0 or NaN -> off, min_p > 1 -> 1.

Randomness: ``generator`` is a ``gp.random.Generator`` (each call uses its
key and offset, then advances the offset by one), an int seed (a fresh
generator: the same seed gives the same tokens on every call), or None
(pygpukit.random's global generator, which ``gp.random.seed(n)`` reseeds).
The kernel keys Philox4x32-10 with key XOR SAMPLING_TAG at counter (token / 4,
row, offset, round): a token depends only on its row's logits and parameters,
the key, the offset and the row index, not on the batch size or the launch.
The reference (the CPU backend, and float64 logits) draws the same
distribution from its own Philox stream, not the same tokens.

Penalties (``apply_penalties``) follow transformers (repetition: divide a
positive logit by the penalty, multiply a non-positive one, for each token
with count > 0) and vLLM / OpenAI (``- frequency * count - presence * (count >
0)``), in that order, in float32 rounded once to the logits' dtype (float64
stays float64); the kernel rounds each step as NumPy's float32 operations do,
so the results match NumPy bit for bit. vLLM applies repetition to the
prompt's and the output's tokens but presence / frequency to the output's
only: call it twice (counts of both with repetition, then counts of the
output with presence and frequency). ``token_counts`` builds the (B, V) int32
counts from previous ids (B, L) on the GPU.

The sampling kernel (kernels/sampling.cu) spreads a row over up to 32 blocks
that meet at a software barrier between passes, so a row's blocks must be
able to run at the same time: the launch keeps B * blocks-per-row <= the SM
count (one block per row, no barrier, once B > SM count / 2), which holds on
a whole GPU or a MIG slice; an MPS client limited to fewer SMs than a row's
blocks would wait forever (route "sample" to the reference there).
Passes: the row max (greedy stops here); for top-k an exact radix select of
the k-th logit, 8 bits of the key per pass; then rejection rounds for top-p
(a draw, then the mass above it; typically 2 passes). The kernel never
synchronizes with the host; NaN and +inf logits count as -inf there, and a
row without a finite logit yields -1 (the reference raises ValueError).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from ._kernels import rows_of
from .checks import FLOATS, is_int

KERNEL_DTYPES = ["float32", "float16", "bfloat16"]
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
_ID_CTYPES = {np.dtype(gp.int32): "int", np.dtype(gp.int64): "long long"}
SAMPLING_TAG = 0x73616D706C696E67  # b"sampling": the sampler's Philox key is the generator's key XOR this
THREADS = 512  # kSampleThreads
MAX_PARTS = 32  # blocks per row at most: merging more partials per pass would cost more than their share saves
MIN_QUADS = 512  # a block's share of a row is at least 512 quads (2048 logits)
MAX_VOCAB = 1 << 26  # the kernel's 2^-38 fixed-point masses of a row (< MAX_VOCAB tokens) fit 64 bits
_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1


# -- public API ----------------------------------------------------------------------


def sample(
    logits: gp.GPUArray,
    *,
    temperature: float | gp.GPUArray = 1.0,
    top_k: int | gp.GPUArray = 0,
    top_p: float | gp.GPUArray = 1.0,
    min_p: float | gp.GPUArray = 0.0,
    greedy: bool = False,
    generator: Any = None,
) -> gp.GPUArray:
    """One token id per row of ``logits`` (B, V) (float16 / bfloat16 / float32 /
    float64): int32 (B,), left on the device (reading it is the one sync).

    The filters apply in the order temperature -> top-k -> top-p -> min-p
    (module docstring); each parameter is a scalar or a (B,) GPUArray.
    ``greedy=True`` (or temperature 0) takes the argmax. ``generator``: a
    ``gp.random.Generator`` (advanced by one per call), an int seed, or None
    for pygpukit.random's global generator.
    """
    gen, key, offset = _generator(generator)
    token = ext.op("sample")(logits, 0.0 if greedy else temperature, top_k, top_p, min_p, key, offset)
    gen.state = {"bit_generator": gp.random.BIT_GENERATOR, "key": key, "offset": (offset + 1) & ((1 << 128) - 1)}
    return token


def apply_penalties(
    logits: gp.GPUArray,
    counts: gp.GPUArray | None = None,
    *,
    ids: gp.GPUArray | None = None,
    repetition_penalty: float | gp.GPUArray = 1.0,
    presence_penalty: float | gp.GPUArray = 0.0,
    frequency_penalty: float | gp.GPUArray = 0.0,
    pad_id: int = -1,
    out: gp.GPUArray | None = None,
) -> gp.GPUArray:
    """Penalized logits (B, V): for tokens with count > 0, a positive logit is
    divided by ``repetition_penalty`` and a non-positive one multiplied by it;
    then ``- frequency_penalty * count - presence_penalty * (count > 0)``.

    Give ``counts`` (B, V) integers, or ``ids`` (B, L) previous token ids
    (``pad_id`` entries skipped), not both. Penalties are scalars or (B,)
    float GPUArrays. ``out`` (may be ``logits`` itself: in place) receives the
    result; otherwise a new array is returned.
    """
    if (counts is None) == (ids is None):
        raise TypeError("apply_penalties: give exactly one of counts (B, V) and ids (B, L)")
    if ids is not None:
        _check_logits("apply_penalties", logits)
        counts = token_counts(ids, logits.shape[1], pad_id)
    return ext.op("apply_penalties")(logits, counts, repetition_penalty, presence_penalty, frequency_penalty, out)


def token_counts(ids: gp.GPUArray, vocab_size: int, pad_id: int = -1) -> gp.GPUArray:
    """How often each token occurs in each row of ``ids`` (B, L) (integers):
    int32 (B, vocab_size). Entries equal to ``pad_id`` are skipped; other ids
    must lie in [0, vocab_size) (the reference raises ValueError; the kernel,
    which does not read them back, skips them)."""
    return ext.op("token_counts")(ids, vocab_size, pad_id)


# -- checks --------------------------------------------------------------------------


def _generator(generator: Any) -> tuple[gp.random.Generator, int, int]:
    if generator is None:
        gen = gp.random.default_generator()
    elif isinstance(generator, gp.random.Generator):
        gen = generator
    elif isinstance(generator, (int, np.integer)) and not isinstance(generator, (bool, np.bool_)):
        gen = gp.random.Generator(int(generator))
    else:
        raise TypeError(f"sample: generator must be a pygpukit.random.Generator, an int seed or None, got {type(generator).__name__}")
    st = gen.state
    return gen, st["key"], st["offset"]


def _check_logits(op: str, logits: Any) -> tuple[int, int]:
    if not isinstance(logits, gp.GPUArray):
        raise TypeError(f"{op}: logits must be a GPUArray, got {type(logits).__name__}")
    if logits.dtype not in FLOATS:
        raise TypeError(f"{op}: logits must be float16, bfloat16, float32 or float64, got {logits.dtype}")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"{op}: logits must have shape (batch, vocab) with vocab >= 1, got {logits.shape}")
    return logits.shape


def _row_param(op: str, name: str, value: Any, b: int, integer: bool) -> Any:
    """A per-row parameter: a (b,) GPUArray (integer or float as asked), or a Python int / float."""
    if isinstance(value, gp.GPUArray):
        if value.shape != (b,):
            raise ValueError(f"{op}: {name} must be a scalar or have shape ({b},), got {value.shape}")
        if integer and value.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name} must be an integer array, got {value.dtype}")
        if not integer and value.dtype not in FLOATS:
            raise TypeError(f"{op}: {name} must be a float array, got {value.dtype}")
        return value
    if integer:
        if not is_int(value):
            raise TypeError(f"{op}: {name} must be an int or an integer GPUArray, got {type(value).__name__}")
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {name} must be a real number or a float GPUArray, got {type(value).__name__}")
    return float(value)


def _in_range(op: str, name: str, value: Any, ok: bool, want: str) -> None:
    if not isinstance(value, gp.GPUArray) and not ok:
        raise ValueError(f"{op}: {name} must be {want}, got {value!r}")


def _check_sample(logits: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, key: Any, offset: Any) -> tuple:
    """(b, v, temperature, top_k, top_p, min_p): scalars checked, arrays as given."""
    op = "sample"
    b, v = _check_logits(op, logits)
    t = _row_param(op, "temperature", temperature, b, False)
    k = _row_param(op, "top_k", top_k, b, True)
    p = _row_param(op, "top_p", top_p, b, False)
    mp = _row_param(op, "min_p", min_p, b, False)
    _in_range(op, "temperature", t, isinstance(t, float) and 0.0 <= t < np.inf, "a finite number >= 0 (0: greedy)")
    _in_range(op, "top_k", k, isinstance(k, int) and 0 <= k < 1 << 31, "an int >= 0 (0: off)")
    _in_range(op, "top_p", p, isinstance(p, float) and 0.0 < p <= 1.0, "in (0, 1] (1: off)")
    _in_range(op, "min_p", mp, isinstance(mp, float) and 0.0 <= mp <= 1.0, "in [0, 1] (0: off)")
    if not (is_int(key) and 0 <= key <= _MASK64 and is_int(offset) and offset >= 0):
        raise ValueError(f"sample: key must be an int in [0, 2**64) and offset an int >= 0, got {key!r}, {offset!r}")
    return b, v, t, k, p, mp


def _check_penalties(logits: Any, counts: Any, rep: Any, pres: Any, freq: Any, out: Any) -> tuple:
    """(b, v, repetition, presence, frequency): scalars checked, arrays as given."""
    op = "apply_penalties"
    b, v = _check_logits(op, logits)
    if not isinstance(counts, gp.GPUArray) or counts.dtype.kind not in "iu":
        what = counts.dtype if isinstance(counts, gp.GPUArray) else type(counts).__name__
        raise TypeError(f"apply_penalties: counts must be an integer GPUArray, got {what}")
    if counts.shape != (b, v):
        raise ValueError(f"apply_penalties: counts must have the logits' shape {(b, v)}, got {counts.shape}")
    r = _row_param(op, "repetition_penalty", rep, b, False)
    pr = _row_param(op, "presence_penalty", pres, b, False)
    fq = _row_param(op, "frequency_penalty", freq, b, False)
    _in_range(op, "repetition_penalty", r, isinstance(r, float) and 0.0 < r < np.inf, "a finite number > 0 (1: off)")
    _in_range(op, "presence_penalty", pr, isinstance(pr, float) and np.isfinite(pr), "finite")
    _in_range(op, "frequency_penalty", fq, isinstance(fq, float) and np.isfinite(fq), "finite")
    if out is not None:
        if not isinstance(out, gp.GPUArray):
            raise TypeError(f"apply_penalties: out must be a GPUArray or None, got {type(out).__name__}")
        if out.shape != (b, v) or out.dtype != logits.dtype:
            raise ValueError(f"apply_penalties: out must be {(b, v)} {logits.dtype} like logits, got {out.shape} {out.dtype}")
    return b, v, r, pr, fq


def _check_ids(ids: Any, vocab_size: Any, pad_id: Any) -> tuple[int, int]:
    op = "token_counts"
    if not isinstance(ids, gp.GPUArray) or ids.dtype.kind not in "iu":
        what = ids.dtype if isinstance(ids, gp.GPUArray) else type(ids).__name__
        raise TypeError(f"{op}: ids must be an integer GPUArray, got {what}")
    if ids.ndim != 2:
        raise ValueError(f"{op}: ids must have shape (batch, length), got {ids.shape}")
    if not is_int(vocab_size) or not 1 <= vocab_size < 1 << 31:
        raise ValueError(f"{op}: vocab_size must be an int in [1, 2**31), got {vocab_size!r}")
    if not is_int(pad_id):
        raise TypeError(f"{op}: pad_id must be an int, got {type(pad_id).__name__}")
    if not -(1 << 63) <= pad_id < 1 << 63:
        raise ValueError(f"{op}: pad_id must fit in int64, got {pad_id}")
    return int(vocab_size), int(pad_id)


# -- reference (any backend, any float dtype) -----------------------------------------


def _col(value: Any, b: int, dtype: Any) -> gp.GPUArray:
    """A per-row parameter as a (b, 1) column of ``dtype``."""
    if isinstance(value, gp.GPUArray):
        return value.astype(dtype).reshape(b, 1)
    return gp.full((b, 1), value, dtype=dtype)


def _bad_row(flags: gp.GPUArray) -> int | None:
    """The first row whose flag is set, or None (one read back)."""
    if not bool(gp.any(flags)):
        return None
    return int(np.argmax(flags.to_numpy()))


def reference_sample(logits: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, key: int, offset: int) -> gp.GPUArray:
    """Sorting reference in float64 (gp operations): the filters as masks, then a
    Gumbel-max draw from the reference's own Philox stream."""
    b, v, t, k, p, mp = _check_sample(logits, temperature, top_k, top_p, min_p, key, offset)
    if b == 0:
        return gp.empty((0,), gp.int32)
    f64, inf = gp.float64, np.inf
    x = logits.astype(f64)
    row = _bad_row(gp.any(gp.isnan(x) | (x == inf), axis=1))
    if row is not None:
        raise ValueError(f"sample: logits row {row} holds NaN or +inf (the kernel would treat them as -inf)")
    m = gp.max(x, axis=1, keepdims=True)
    row = _bad_row(m[:, 0] == -inf)
    if row is not None:
        raise ValueError(f"sample: logits row {row} has no finite value")
    tc = _col(t, b, f64)
    z = (x - m) / gp.where(tc > 0, tc, 1.0)  # max 0 in every row
    if isinstance(k, gp.GPUArray) or 0 < k < v:
        kc = _col(k, b, gp.int64)
        kth = gp.take_along_axis(gp.sort(z, axis=1, descending=True), gp.clip(kc, 1, v) - 1, axis=1)
        z = gp.where((kc > 0) & (kc < v) & (z < kth), -inf, z)
    if isinstance(p, gp.GPUArray) or p < 1:
        pc = _col(p, b, f64)
        s = gp.sort(z, axis=1, descending=True)
        e = gp.exp(s)
        cs = gp.cumsum(e, axis=1)
        before = (cs - e) / cs[:, -1:]  # mass strictly before each sorted position: a prefix is kept
        n_keep = gp.sum((before < pc) | (gp.arange(v) == 0), axis=1, keepdims=True)
        last = gp.take_along_axis(s, n_keep - 1, axis=1)
        z = gp.where(~(pc >= 1) & (z < last), -inf, z)
    if isinstance(mp, gp.GPUArray) or mp > 0:
        mc = _col(mp, b, f64)
        z = gp.where(gp.exp(z) < gp.where(mc > 0, gp.minimum(mc, 1.0), 0.0), -inf, z)
    gen = gp.random.Generator((key ^ SAMPLING_TAG) & _MASK64)
    gen.state = {"bit_generator": gp.random.BIT_GENERATOR, "key": (key ^ SAMPLING_TAG) & _MASK64, "offset": (offset % (1 << 56)) << 64}
    u = gen.random((b, v), dtype=f64)
    score = gp.where(z > -inf, z - gp.log(-gp.log1p(-u)), -inf)  # Gumbel-max: z + Gumbel noise
    token = gp.where(~(tc[:, 0] > 0), gp.argmax(x, axis=1), gp.argmax(score, axis=1))
    return token.astype(gp.int32)


def reference_apply_penalties(logits: Any, counts: Any, rep: Any, pres: Any, freq: Any, out: Any = None) -> gp.GPUArray:
    """The penalties as gp operations in float32 (float64 for float64 logits)."""
    b, _, r, pr, fq = _check_penalties(logits, counts, rep, pres, freq, out)
    cdt = ext.compute_dtype(logits.dtype)
    x = logits.astype(cdt)
    seen = counts > 0
    rc = _col(r, b, cdt)
    x = gp.where(seen, gp.where(x > 0, x / rc, x * rc), x)
    x = x - _col(fq, b, cdt) * counts.astype(cdt)
    x = x - _col(pr, b, cdt) * seen.astype(cdt)
    y = x.astype(logits.dtype)
    if out is None:
        return y
    out[...] = y
    return out


def reference_token_counts(ids: Any, vocab_size: int, pad_id: int = -1) -> gp.GPUArray:
    """A bincount of each row on the host (gp has no histogram)."""
    v, pad = _check_ids(ids, vocab_size, pad_id)
    a = ids.to_numpy().astype(np.int64)
    keep = a != pad
    bad = keep & ((a < 0) | (a >= v))
    if bad.any():
        r, j = (int(i[0]) for i in np.nonzero(bad))
        raise ValueError(f"token_counts: ids[{r}, {j}] = {a[r, j]} is outside [0, {v}) and is not pad_id {pad}")
    flat = (np.arange(a.shape[0], dtype=np.int64)[:, None] * v + a)[keep]
    counts = np.bincount(flat, minlength=a.shape[0] * v).astype(np.int32)
    return gp.from_numpy(counts.reshape(a.shape[0], v))


# -- CUDA kernels --------------------------------------------------------------------


@functools.cache
def _sample_kernel(ct: str, aligned: bool) -> Any:
    return ext.Kernel(
        ext.kernel_source(__name__, "sampling"),
        f"pgk::sample_rows<{ct}, {'true' if aligned else 'false'}>",
        signature="const void* logits, long long stride, int V, int bpr, int chunk_q, const void* temps, float temp_s, "
        "const void* topks, int topk_s, const void* topps, float topp_s, const void* minps, float minp_s, "
        "unsigned int key0, unsigned int key1, unsigned int off_lo, unsigned int off_hi, void* sync, void* ghist, void* parts, void* out",
        name="sampling.cu",
    )


@functools.cache
def _penalties_kernel(ct: str) -> Any:
    return ext.Kernel(
        ext.kernel_source(__name__, "sampling"),
        f"pgk::apply_penalties<{ct}>",
        signature="const void* logits, long long ls, const void* counts, long long cs, void* out, long long os, int V, long long rows, "
        "const void* reps, float rep_s, const void* pres, float pres_s, const void* freqs, float freq_s",
        name="sampling.cu",
    )


@functools.cache
def _counts_kernel(ct: str) -> Any:
    return ext.Kernel(
        ext.kernel_source(__name__, "sampling"),
        f"pgk::token_counts<{ct}>",
        signature="const void* ids, long long is, int L, long long rows, int V, long long pad, void* counts",
        name="sampling.cu",
    )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def blocks_per_row(b: int, v: int, sms: int) -> int:
    """Blocks sharing a row: as many as keep every SM busy (B * bpr <= sms, so a
    row's blocks are resident together), at most MAX_PARTS, each with at least
    MIN_QUADS quads; 1 (no barrier) once B > sms / 2."""
    if 2 * b > sms:
        return 1
    return max(1, min(MAX_PARTS, sms // b, _cdiv(_cdiv(v, 4), MIN_QUADS)))


_PART_BYTES = 24  # sizeof(SamplePart)


@dataclass(frozen=True, slots=True)
class _Plan:
    """A planned sample_rows launch: blocks per row, quads per block, and the
    scratch it needs (bytes in all; the barrier counters first, then the top-k
    histograms at ``ghist``, both zeroed, then the partials at ``parts``)."""

    launch: ext.Launch
    bpr: int
    chunk_q: int
    ghist: int
    parts: int
    total: int


# Planned launches by call signature (rows, vocabulary, dtype, alignment, top-k or not).
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.sampling")


def _plan(b: int, v: int, dt: np.dtype, aligned: bool, topk: bool) -> _Plan:
    bpr = blocks_per_row(b, v, ext.device().multiprocessor_count)
    chunk_q = _cdiv(_cdiv(v, 4), bpr)
    sync_bytes = _cdiv(4 * b, 256) * 256
    ghist_bytes = b * dt.itemsize * 1024 if topk else 0  # rows x digit passes (key bytes) x 256 bins x 4 bytes
    zeroed = sync_bytes + ghist_bytes
    total = zeroed + b * 2 * bpr * _PART_BYTES
    return _Plan(_sample_kernel(_CTYPES[dt], aligned).launcher(b * bpr, THREADS), bpr, chunk_q, sync_bytes, zeroed, total)


def _row_array(value: Any, dtype: Any) -> gp.GPUArray | None:
    """A per-row array as contiguous ``dtype``; None for a scalar."""
    if not isinstance(value, gp.GPUArray):
        return None
    if value.dtype != np.dtype(dtype):
        value = value.astype(dtype)
    if not value.is_contiguous:
        value = value.copy()
    return value


def kernel_sample(logits: Any, temperature: Any, top_k: Any, top_p: Any, min_p: Any, key: int, offset: int) -> gp.GPUArray:
    b, v, t, k, p, mp = _check_sample(logits, temperature, top_k, top_p, min_p, key, offset)
    xv, xs = rows_of(logits)
    dt = xv.dtype
    aligned = xv.data_ptr % (4 * dt.itemsize) == 0 and xs % 4 == 0
    pkey = (b, v, dt, aligned, isinstance(k, gp.GPUArray) or 0 < k < v)
    plan = _plans.get(pkey) or _plans.put(pkey, _plan(*pkey))
    ta, ka, pa, ma = (_row_array(a, d) for a, d in ((t, gp.float32), (k, gp.int32), (p, gp.float32), (mp, gp.float32)))
    # the partials need no zeros, but one memset of the whole scratch is cheaper than a second allocation
    scratch = gp.zeros((plan.total,), gp.uint8)
    out = ext.empty((b,), np.dtype(gp.int32))
    sk = (key ^ SAMPLING_TAG) & _MASK64
    base = scratch.data_ptr
    plan.launch(
        xv, xs, v, plan.bpr, plan.chunk_q,
        ta, 0.0 if ta is not None else t, ka, 0 if ka is not None else k,
        pa, 0.0 if pa is not None else p, ma, 0.0 if ma is not None else mp,
        sk & _MASK32, sk >> 32, offset & _MASK32, (offset >> 32) & 0xFFFFFF,
        scratch, base + plan.ghist, base + plan.parts, out,
    )  # fmt: skip
    return out


def _grid2d(rows: int, cols: int) -> tuple[int, int]:
    """(blocks over columns, blocks over rows) of 256 threads: about 8 blocks per SM."""
    sms = ext.device().multiprocessor_count
    gy = min(rows, 65535)
    return max(1, min(-(-cols // 256), (8 * sms) // gy)), gy


def kernel_apply_penalties(logits: Any, counts: Any, rep: Any, pres: Any, freq: Any, out: Any = None) -> gp.GPUArray:
    b, v, r, pr, fq = _check_penalties(logits, counts, rep, pres, freq, out)
    xv, xs = rows_of(logits)
    cv = counts if counts.dtype == np.dtype(gp.int32) and counts.is_contiguous else counts.astype(gp.int32).copy()
    ov, os_ = rows_of(out) if out is not None else (None, v)
    direct = out is not None and ov is out  # out's rows are written where they are (in place when out is logits)
    if not direct:
        ov, os_ = gp.empty((b, v), logits.dtype), v
    ra, pa, fa = (_row_array(a, gp.float32) for a in (r, pr, fq))
    gx, gy = _grid2d(b, v)
    _penalties_kernel(_CTYPES[np.dtype(logits.dtype)])(
        (gx, gy), 256, xv, xs, cv, v, ov, os_, v, b,
        ra, 0.0 if ra is not None else r, pa, 0.0 if pa is not None else pr, fa, 0.0 if fa is not None else fq,
    )  # fmt: skip
    if out is not None and not direct:
        out[...] = ov
        return out
    return ov


def kernel_token_counts(ids: Any, vocab_size: int, pad_id: int = -1) -> gp.GPUArray:
    v, pad = _check_ids(ids, vocab_size, pad_id)
    b, n = ids.shape
    counts = gp.zeros((b, v), gp.int32)
    if b and n:
        iv, istride = rows_of(ids)
        gx, gy = _grid2d(b, n)
        _counts_kernel(_ID_CTYPES[np.dtype(ids.dtype)])((gx, gy), 256, iv, istride, n, b, v, pad, counts)
    return counts


def _sample_ok(logits: Any, *rest: Any) -> bool:
    """The kernel takes float16 / bfloat16 / float32 rows of 1 to MAX_VOCAB - 1 logits."""
    return (
        isinstance(logits, gp.GPUArray)
        and logits.dtype in _CTYPES
        and logits.ndim == 2
        and logits.shape[0] > 0
        and 0 < logits.shape[1] < MAX_VOCAB
    )


def _penalties_ok(logits: Any, counts: Any, *rest: Any) -> bool:
    return (
        isinstance(logits, gp.GPUArray)
        and logits.dtype in _CTYPES
        and logits.ndim == 2
        and logits.size > 0
        and isinstance(counts, gp.GPUArray)
        and counts.dtype.kind in "iu"
    )


def _counts_ok(ids: Any, *rest: Any) -> bool:
    return isinstance(ids, gp.GPUArray) and ids.dtype in _ID_CTYPES and ids.ndim == 2


def register(registry: Any) -> None:
    ops = (
        ("sample", sample.__doc__, reference_sample, kernel_sample, KERNEL_DTYPES, _sample_ok),
        ("apply_penalties", apply_penalties.__doc__, reference_apply_penalties, kernel_apply_penalties, KERNEL_DTYPES, _penalties_ok),
        ("token_counts", token_counts.__doc__, reference_token_counts, kernel_token_counts, ["int32", "int64"], _counts_ok),
    )
    for op, doc, ref, kern, dtypes, ok in ops:
        ext.register_family(registry, op, nkey=1, doc=doc or "", reference=ref, cuda=kern, dtypes=dtypes, min_sm=80, predicate=ok)
