"""Positional encodings: rotary embeddings (RoPE) and ALiBi.

Frequencies (``rope_frequencies``) are computed on the host in float64 with
the formulas of Hugging Face transformers' rope init functions
(``modeling_rope_utils``): "default", "linear", "dynamic" (NTK, for a given
sequence length), "llama3" and "yarn", from a ``rope_scaling`` /
``rope_parameters`` dict as a transformers config gives it.
``RotaryEmbedding`` holds the float32 cos/sin cache on the device.

``gp.ops.rope(q, k, cos_sin, positions, layout, rotary_dim)`` rotates q
(T, Hq, D) and k (T, Hk, D) (or (B, S, H, D) each, positions (B, S) or (S,))
in place and returns (q, k); k may be None. ``cos_sin`` is the cache
(max_positions, 2, rotary_dim / 2): [p, 0] = cos(p * inv_freq) and
[p, 1] = sin(p * inv_freq), times the attention factor. Layout "neox" rotates
the pairs (x[j], x[j + rotary_dim / 2]) (GPT-NeoX, Llama: transformers'
``rotate_half``), "gptj" the pairs (x[2j], x[2j + 1]) (GPT-J, interleaved),
each pair (a, b) by angle j: (a cos - b sin, b cos + a sin). Dims at and
beyond rotary_dim are not touched. Math in float32 (float64 for float64
inputs), each output rounded once. A position outside [0, max_positions)
leaves its token's q and k unchanged (positions on the device are not
checked: that would synchronize; ``apply_rope`` checks host positions).

The CUDA kernel (bfloat16, float16, float32, SM 80+) does q and k in one
launch; it takes q and k with unit stride along D and any strides per batch,
token and head (views of a fused qkv projection included), a contiguous
float32 cache and int32/int64 positions with any strides. Other layouts,
float64, and a float64 cache run the reference (core array ops).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .checks import ROPE_LAYOUTS as LAYOUTS
from .checks import check_rope, is_int

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")
_CTYPES = {np.dtype(gp.bfloat16): "pgk::bfloat16", np.dtype(gp.float16): "pgk::half", np.dtype(gp.float32): "float"}
_F32 = np.dtype(np.float32)


# -- frequencies ----------------------------------------------------------------------------------


def _need(scaling: Mapping[str, Any], key: str, rope_type: str) -> Any:
    value = scaling.get(key)
    if value is None:
        raise ValueError(f"rope_frequencies: {rope_type} scaling needs {key!r} in the scaling dict, got keys {sorted(scaling)}")
    return value


def rope_type_of(scaling: Mapping[str, Any] | None) -> str:
    """The rope type of a ``rope_scaling`` / ``rope_parameters`` dict ("rope_type",
    or the legacy "type"; "default" for None)."""
    if scaling is None:
        return "default"
    if not isinstance(scaling, Mapping):
        raise TypeError(f"rope scaling must be a dict (transformers' rope_scaling / rope_parameters) or None, got {type(scaling).__name__}")
    rope_type = scaling.get("rope_type", scaling.get("type")) or "default"
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope scaling type {rope_type!r} is not supported; supported: {', '.join(ROPE_TYPES)}")
    return rope_type


def rope_frequencies(
    rotary_dim: int,
    base: float | None = None,
    scaling: Mapping[str, Any] | None = None,
    *,
    max_position_embeddings: int | None = None,
    seq_len: int | None = None,
) -> tuple[np.ndarray, float]:
    """The inverse frequencies (rotary_dim / 2,) float64 and the attention factor
    of a rotary embedding, as transformers' rope init functions compute them.

    ``base`` is rope_theta (default: ``scaling["rope_theta"]`` if the dict
    has it, as transformers 5 ``rope_parameters`` do, else 10000).
    ``scaling`` selects the type by "rope_type" (or "type"):

    - "default": inv_freq[j] = base ** (-2j / rotary_dim); factor 1.
    - "linear": inv_freq / factor.
    - "dynamic" (NTK): base * (factor * L / M - (factor - 1)) ** (d / (d - 2))
      with L = max(seq_len, M) and M = ``max_position_embeddings`` (the
      model's trained context, required); so the default frequencies up to M.
    - "llama3": factor, low_freq_factor, high_freq_factor,
      original_max_position_embeddings: wavelengths above orig / low are
      divided by factor, below orig / high kept, and smoothly mixed between.
    - "yarn": factor (None: max_position_embeddings / original), beta_fast
      (32), beta_slow (1), original_max_position_embeddings (default
      max_position_embeddings), truncate (True: the correction range is
      rounded to whole dims), attention_factor (default 0.1 ln(factor) + 1,
      or get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
      when both are set, as DeepSeek-V3); the factor scales cos and sin.
    """
    if not is_int(rotary_dim) or rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"rope_frequencies: rotary_dim must be an even int >= 2, got {rotary_dim!r}")
    rope_type = rope_type_of(scaling)
    sc: Mapping[str, Any] = scaling or {}
    theta = float(sc.get("rope_theta", 10000.0) if base is None else base)
    if not theta > 1.0:
        raise ValueError(f"rope_frequencies: base (rope_theta) must be > 1, got {theta}")
    dim = int(rotary_dim)
    exps = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv_freq = 1.0 / theta**exps
    attention = 1.0
    if rope_type == "linear":
        inv_freq = inv_freq / float(_need(sc, "factor", rope_type))
    elif rope_type == "dynamic":
        factor = float(_need(sc, "factor", rope_type))
        if max_position_embeddings is None:
            raise ValueError("rope_frequencies: dynamic scaling needs max_position_embeddings (the model's trained context)")
        if dim == 2:
            raise ValueError("rope_frequencies: dynamic scaling needs rotary_dim > 2 (its exponent is d / (d - 2))")
        length = max(seq_len or 0, max_position_embeddings)
        scaled = theta * (factor * length / max_position_embeddings - (factor - 1)) ** (dim / (dim - 2))
        inv_freq = 1.0 / scaled**exps
    elif rope_type == "llama3":
        inv_freq = _llama3(inv_freq, sc)
    elif rope_type == "yarn":
        inv_freq, attention = _yarn(dim, theta, exps, sc, max_position_embeddings)
    return inv_freq, float(attention)


def _llama3(inv_freq: np.ndarray, sc: Mapping[str, Any]) -> np.ndarray:
    factor = float(_need(sc, "factor", "llama3"))
    low = float(_need(sc, "low_freq_factor", "llama3"))
    high = float(_need(sc, "high_freq_factor", "llama3"))
    old = float(_need(sc, "original_max_position_embeddings", "llama3"))
    if high == low:
        raise ValueError(f"rope_frequencies: llama3 needs high_freq_factor != low_freq_factor, got {high} and {low}")
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled)


def _yarn(dim: int, theta: float, exps: np.ndarray, sc: Mapping[str, Any], max_pos: int | None) -> tuple[np.ndarray, float]:
    original = sc.get("original_max_position_embeddings") or max_pos
    if original is None:
        raise ValueError("rope_frequencies: yarn needs original_max_position_embeddings in the dict or max_position_embeddings")
    factor = sc.get("factor")
    if factor is None:
        if max_pos is None:
            raise ValueError("rope_frequencies: yarn without 'factor' needs max_position_embeddings (factor = it / original)")
        factor = max_pos / original
    factor = float(factor)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = sc.get("attention_factor")
    if attention is None:
        m, m_all = sc.get("mscale"), sc.get("mscale_all_dim")
        attention = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    beta_fast = float(sc.get("beta_fast") or 32)
    beta_slow = float(sc.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if sc.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # 1: keep the original frequency, 0: interpolate (divide by factor)
    pos_freqs = theta**exps
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention)


def rope_cos_sin(inv_freq: Any, max_positions: int, attention_factor: float = 1.0) -> gp.GPUArray:
    """The cache (max_positions, 2, len(inv_freq)) float32: [p, 0] = cos(p * inv_freq)
    and [p, 1] = sin(p * inv_freq), times ``attention_factor``. The angles are
    taken in float64 on the host (transformers forms them in float32, which
    is off by up to p * 2^-24 radians at position p)."""
    freq = np.asarray(inv_freq, dtype=np.float64)
    if freq.ndim != 1 or freq.size == 0:
        raise ValueError(f"rope_cos_sin: inv_freq must be a non-empty 1-D array, got shape {freq.shape}")
    if not is_int(max_positions) or max_positions < 1:
        raise ValueError(f"rope_cos_sin: max_positions must be an int >= 1, got {max_positions!r}")
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * freq[None, :]
    table = np.stack([np.cos(angles), np.sin(angles)], axis=1) * float(attention_factor)
    return gp.from_numpy(table.astype(np.float32))


class RotaryEmbedding:
    """A rotary embedding and its cos/sin cache on the device.

    ``RotaryEmbedding(head_dim, max_positions, base=None, rotary_dim=None,
    partial_rotary_factor=None, scaling=None, layout="neox",
    max_position_embeddings=None)``: rotary_dim defaults to
    int(head_dim * partial_rotary_factor) (factor from the argument, else the
    scaling dict, else 1), base to the dict's rope_theta or 10000; scaling is
    a transformers ``rope_scaling`` / ``rope_parameters`` dict (see
    ``rope_frequencies``). ``max_position_embeddings`` is the model's trained
    context (dynamic and yarn read it; default max_positions). The dynamic
    type's frequencies depend on the sequence length: the cache holds those of
    a max_positions-long sequence (transformers recomputes them as the
    sequence grows past max_position_embeddings; ``grow`` follows it).

    ``rope(q, k, positions)`` rotates q and k in place (``apply_rope``).
    The cache never grows by itself: ``grow(n)`` recomputes it for n positions.
    """

    def __init__(
        self,
        head_dim: int,
        max_positions: int,
        *,
        base: float | None = None,
        rotary_dim: int | None = None,
        partial_rotary_factor: float | None = None,
        scaling: Mapping[str, Any] | None = None,
        layout: str = "neox",
        max_position_embeddings: int | None = None,
    ) -> None:
        if not is_int(head_dim) or head_dim < 2:
            raise ValueError(f"RotaryEmbedding: head_dim must be an int >= 2, got {head_dim!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"RotaryEmbedding: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        rope_type_of(scaling)
        sc = dict(scaling or {})
        if rotary_dim is None:
            factor = partial_rotary_factor if partial_rotary_factor is not None else sc.get("partial_rotary_factor", 1.0)
            rotary_dim = int(head_dim * float(factor))
        if not is_int(rotary_dim) or not 2 <= rotary_dim <= head_dim or rotary_dim % 2:
            raise ValueError(f"RotaryEmbedding: rotary_dim must be an even int in [2, head_dim={head_dim}], got {rotary_dim!r}")
        self.head_dim = int(head_dim)
        self.rotary_dim = int(rotary_dim)
        self.base = float(sc.get("rope_theta", 10000.0) if base is None else base)
        self.scaling = sc
        self.rope_type = rope_type_of(sc)
        self.layout = layout
        self.max_position_embeddings = max_position_embeddings
        self.inv_freq = np.empty(0)
        self.attention_factor = 1.0
        self.cos_sin = gp.empty((0, 2, self.rotary_dim // 2), gp.float32)
        self.grow(max_positions)

    @classmethod
    def from_config(cls, config: Any, max_positions: int | None = None, layout: str = "neox") -> RotaryEmbedding:
        """From a transformers config (object or dict): head_dim (or hidden_size //
        num_attention_heads), rope_theta, partial_rotary_factor,
        max_position_embeddings and rope_scaling or rope_parameters."""

        def get(name: str, default: Any = None) -> Any:
            value = config.get(name, default) if isinstance(config, Mapping) else getattr(config, name, default)
            return default if value is None else value

        head_dim = get("head_dim") or get("hidden_size") // get("num_attention_heads")
        scaling = dict(get("rope_parameters") or get("rope_scaling") or {})
        if get("rope_theta") is not None:
            scaling.setdefault("rope_theta", get("rope_theta"))
        if get("partial_rotary_factor") is not None:
            scaling.setdefault("partial_rotary_factor", get("partial_rotary_factor"))
        max_pos = get("max_position_embeddings")
        return cls(
            head_dim, max_positions or max_pos or 2048, scaling=scaling or None, layout=layout, max_position_embeddings=max_pos,
        )  # fmt: skip

    @property
    def max_positions(self) -> int:
        """Positions the cache covers."""
        return self.cos_sin.shape[0]

    def grow(self, max_positions: int) -> None:
        """Recompute the cache for ``max_positions`` positions if that is more than
        it has (for the dynamic type, with the frequencies of that length)."""
        if not is_int(max_positions) or max_positions < 1:
            raise ValueError(f"RotaryEmbedding.grow: max_positions must be an int >= 1, got {max_positions!r}")
        if max_positions <= self.max_positions:
            return
        self.inv_freq, self.attention_factor = rope_frequencies(
            self.rotary_dim, self.base, self.scaling or None,
            max_position_embeddings=self.max_position_embeddings or int(max_positions), seq_len=int(max_positions),
        )  # fmt: skip
        self.cos_sin = rope_cos_sin(self.inv_freq, int(max_positions), self.attention_factor)

    def __call__(self, q: gp.GPUArray, k: gp.GPUArray | None, positions: Any) -> tuple[gp.GPUArray, gp.GPUArray | None]:
        """``apply_rope(q, k, self.cos_sin, positions, self.layout, self.rotary_dim)``."""
        return apply_rope(q, k, self.cos_sin, positions, self.layout, self.rotary_dim)

    def __repr__(self) -> str:
        return (
            f"RotaryEmbedding(head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, "
            f"type={self.rope_type!r}, layout={self.layout!r}, max_positions={self.max_positions})"
        )


# -- rope op ----------------------------------------------------------------------------------------


def reference(q: Any, k: Any, cos_sin: Any, positions: Any, layout: str, rotary_dim: int) -> tuple[gp.GPUArray, gp.GPUArray | None]:
    """RoPE in place with core array ops (any backend, any float dtype)."""
    lead, half = check_rope(q, k, cos_sin, positions, layout, rotary_dim)
    n = cos_sin.shape[0]
    if math.prod(lead) == 0 or n == 0:
        return q, k
    cdt = ext.compute_dtype(cos_sin.dtype if cos_sin.dtype == np.float64 else q.dtype)  # a float64 cache computes in float64
    table = cos_sin.astype(cdt, copy=False)
    pos = positions if positions.shape == lead else gp.broadcast_to(positions, lead)
    valid = (pos >= 0) & (pos < n)  # positions outside the table leave the token as it is
    cos = gp.take(table[:, 0], pos, axis=0, mode="clip")[..., None, :]  # (*lead, 1, half): one angle per token, every head
    sin = gp.take(table[:, 1], pos, axis=0, mode="clip")[..., None, :]
    keep = valid[..., None, None]
    for x in (q, k):
        if x is None or x.size == 0:
            continue
        part = x[..., :rotary_dim]
        v = part.astype(cdt)
        a, b = (v[..., :half], v[..., half:]) if layout == "neox" else (v[..., 0::2], v[..., 1::2])
        ra, rb = a * cos - b * sin, b * cos + a * sin
        out = gp.concatenate([ra, rb], axis=-1) if layout == "neox" else gp.stack([ra, rb], axis=-1).reshape(v.shape)
        part[...] = gp.where(keep, out, v)
    return q, k


# -- rope kernel ------------------------------------------------------------------------------------

_SIGNATURE = (
    "void* q, void* k, const float* cs, const void* pos, long long qb, long long qs, long long qh, long long kb, long long ks, "
    "long long kh, long long pb, long long ps, int pos64, int seq, int tokens, int hq, int hk, int half, int max_pos"
)
_INT_MAX = 2**31 - 1
# items (16-byte accesses of one head) per thread, their loads in flight together, by layout (fastest on an H100)
ROPE_ITEMS = {"neox": 2, "gptj": 4}
ROPE_THREADS = 256  # threads per block to aim for (several tokens share a block when a token has few items)


def vec_choices(itemsize: int, layout: str) -> tuple[int, ...]:
    """The elements per access the kernel is instantiated for, widest first."""
    return tuple(v for v in (16 // itemsize, 2, 1) if layout == "neox" or v >= 2)


@cache
def rope_kernel(ctype: str, vec: int, layout: str) -> Any:
    """The kernel for element type ``ctype``, ``vec`` elements per access and ``layout``."""
    gptj = "true" if layout == "gptj" else "false"
    return ext.Kernel(
        ext.kernel_source(__name__, "rope"),
        f"pgk::rope_inplace<{ctype}, {vec}, {gptj}, {ROPE_ITEMS[layout]}>",
        signature=_SIGNATURE,
        name="rope.cu",
        dependent_launch=True,
    )


def _elem_strides(x: gp.GPUArray, lead_ndim: int) -> tuple[int, int, int] | None:
    """(batch, token, head) strides in elements, or None if D is not unit-stride.
    An axis of length 1 gets stride 0 (its stride is arbitrary and never used)."""
    isz = x.itemsize
    st = tuple(0 if n == 1 else s for s, n in zip(x.strides, x.shape))
    if (x.shape[-1] > 1 and st[-1] != isz) or any(s % isz for s in st):
        return None
    e = [s // isz for s in st]
    return (0, e[0], e[1]) if lead_ndim == 1 else (e[0], e[1], e[2])


@dataclass(frozen=True, slots=True)
class _Plan:
    """Whether the kernel takes a call's operands; if it does, its launch (None:
    nothing to rotate) and the launch's scalar arguments."""

    fits: bool
    launch: ext.Launch | None = None
    scalars: tuple[int, ...] = ()


_UNFIT = _Plan(False)  # the reference serves (and reports bad input)


def _plan(q: Any, k: Any, cos_sin: Any, positions: Any, layout: str, rotary_dim: int) -> _Plan:
    """The kernel's plan for these operands, or _UNFIT when it does not take them."""
    try:
        lead, half = check_rope(q, k, cos_sin, positions, layout, rotary_dim)
    except (TypeError, ValueError):
        return _UNFIT
    if q.dtype not in _CTYPES or cos_sin.dtype != _F32 or not cos_sin.is_contiguous or cos_sin.data_ptr % 16:
        return _UNFIT
    tokens = math.prod(lead)
    if tokens > _INT_MAX or cos_sin.shape[0] > _INT_MAX:
        return _UNFIT
    qst = _elem_strides(q, len(lead))
    kst = (0, 0, 0) if k is None else _elem_strides(k, len(lead))
    pis = positions.itemsize
    if qst is None or kst is None or any(s % pis for s in positions.strides):
        return _UNFIT
    pst = [0 if n == 1 else s // pis for s, n in zip(positions.strides, positions.shape)]
    pb, ps = (0, pst[0]) if positions.ndim == 1 else (pst[0], pst[1])
    isz = q.itemsize
    byte_values = [q.data_ptr, *(s * isz for s in qst)]
    if k is not None:
        byte_values += [k.data_ptr, *(s * isz for s in kst)]
    for vec in vec_choices(isz, layout):
        pairs = vec // 2 if layout == "gptj" else vec
        if half % pairs == 0 and all(v % (vec * isz) == 0 for v in byte_values):
            break
    else:
        return _UNFIT
    hq, hk = q.shape[-2], 0 if k is None else k.shape[-2]
    items = (hq + hk) * (half // pairs)
    if not items:
        return _Plan(True)
    bx = min(max(-(-items // (32 * ROPE_ITEMS[layout])) * 32, 32), 512)
    by = max(1, min(ROPE_THREADS // bx, tokens))
    seq = lead[-1]
    scalars = (*qst, *kst, pb, ps, int(positions.dtype == np.int64), seq, tokens, hq, hk, half, cos_sin.shape[0])
    launch = rope_kernel(_CTYPES[q.dtype], vec, layout).launcher(-(-tokens // by), (bx, by)) if tokens else None
    return _Plan(True, launch, scalars)


# Plans by call signature: a repeated call skips validation and planning.
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.positional.rope")


def _lookup(q: Any, k: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any) -> _Plan:
    """The plan of a call (positions at any address: the kernel needs no alignment of them)."""
    key = (ext.layout_key(q), ext.layout_key(k), ext.layout_key(cos_sin), ext.layout_key(positions, 1), layout, rotary_dim)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans.put(key, _plan(q, k, cos_sin, positions, layout, rotary_dim))
    return plan


def kernel_fits(q: Any, k: Any, cos_sin: Any, positions: Any, layout: Any, rotary_dim: Any) -> bool:
    """Predicate of the kernel: operands it takes as they are (see the module docstring)."""
    try:
        return _lookup(q, k, cos_sin, positions, layout, rotary_dim).fits
    except (AttributeError, TypeError):  # not arrays, or an unhashable argument: the reference reports it
        return False


def rope_cuda(q: Any, k: Any, cos_sin: Any, positions: Any, layout: str, rotary_dim: int) -> tuple[gp.GPUArray, gp.GPUArray | None]:
    """RoPE on q and k in one launch of ``kernels/rope.cu``."""
    plan = _lookup(q, k, cos_sin, positions, layout, rotary_dim)
    if not plan.fits:  # only when called directly, past the predicate
        return reference(q, k, cos_sin, positions, layout, rotary_dim)
    if plan.launch is not None:
        plan.launch(q, k, cos_sin, positions, *plan.scalars)
    return q, k


def _device_positions(positions: Any, cos_sin: Any) -> Any:
    """Host positions (NumPy array, sequence, range) checked against the cache and
    copied to the device; a GPUArray as it is."""
    if isinstance(positions, gp.GPUArray):
        return positions
    if not isinstance(positions, (np.ndarray, Sequence, range)):
        raise TypeError(f"rope: positions must be a GPUArray, a NumPy array or a sequence of ints, got {type(positions).__name__}")
    host = np.asarray(positions)
    if host.size == 0:
        host = host.astype(np.int64)
    if host.dtype.kind not in "iu":
        raise TypeError(f"rope: positions must be integers, got {host.dtype}")
    n = cos_sin.shape[0] if isinstance(cos_sin, gp.GPUArray) and cos_sin.ndim else None
    if host.size and n is not None:
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise ValueError(f"rope: position {bad} is outside the cos/sin cache of {n} positions (RotaryEmbedding.grow extends it)")
    return gp.from_numpy(host.astype(np.int32 if host.size == 0 or int(host.max()) <= _INT_MAX else np.int64))


def apply_rope(
    q: gp.GPUArray,
    k: gp.GPUArray | None,
    cos_sin: gp.GPUArray,
    positions: Any,
    layout: str = "neox",
    rotary_dim: int | None = None,
) -> tuple[gp.GPUArray, gp.GPUArray | None]:
    """Rotate q and k in place by their tokens' positions; returns (q, k).

    q: (T, Hq, D) or (B, S, Hq, D); k: the same with Hk heads, or None.
    cos_sin: the cache (max_positions, 2, rotary_dim / 2) (``RotaryEmbedding.cos_sin``
    or ``rope_cos_sin``). positions: int32/int64 (T,), or (B, S) or (S,) for
    4-D q; on the device (not checked) or on the host (NumPy array or ints:
    checked against the cache, ValueError past it). layout: "neox" (half
    split) or "gptj" (interleaved). rotary_dim: dims rotated (default the
    cache's 2 * cos_sin.shape[2]); the rest of each head is not touched.
    q and k must not overlap. See the module docstring for the math and
    which operands the CUDA kernel takes.
    """
    if rotary_dim is None and isinstance(cos_sin, gp.GPUArray) and cos_sin.ndim == 3:
        rotary_dim = 2 * cos_sin.shape[2]
    return ext.op("rope")(q, k, cos_sin, _device_positions(positions, cos_sin), layout, rotary_dim)


# -- ALiBi ------------------------------------------------------------------------------------------


def alibi_slopes(num_heads: int) -> gp.GPUArray:
    """ALiBi slopes (num_heads,) float32, as BLOOM's ``build_alibi_tensor``: for
    n = the largest power of two <= num_heads, head h < n gets
    2 ** (-8 (h + 1) / n); the remaining heads take every other slope of 2n
    heads: 2 ** (-8 (2i + 1) / (2n)) for i < num_heads - n."""
    if not is_int(num_heads) or num_heads < 1:
        raise ValueError(f"alibi_slopes: num_heads must be an int >= 1, got {num_heads!r}")
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = 2.0 ** (-8.0 * np.arange(1, n + 1, dtype=np.float64) / n)
    if n != num_heads:
        extra = 2.0 ** (-8.0 * np.arange(1, 2 * (num_heads - n), 2, dtype=np.float64) / (2 * n))
        slopes = np.concatenate([slopes, extra])
    return gp.from_numpy(slopes.astype(np.float32))


def alibi_bias(slopes: Any, q_len: int, k_len: int, dtype: Any = gp.float32) -> gp.GPUArray:
    """The additive ALiBi bias (H, q_len, k_len): bias[h, i, j] = slopes[h] * (j - i'),
    i' = i + k_len - q_len: query i sits at absolute position i' (the queries
    are the last q_len of the k_len keys, as with a KV cache). It is 0 on the
    diagonal and negative for earlier keys; it is positive for later keys,
    which a causal mask removes. Add it to the attention scores (as a float
    mask). BLOOM's slopes[h] * j differs by a constant per row, which softmax
    does not see. Computed in float32 (float64 for float64), then cast."""
    if not isinstance(slopes, gp.GPUArray):
        slopes = gp.from_numpy(np.asarray(slopes, dtype=np.float32))
    if slopes.ndim != 1:
        raise ValueError(f"alibi_bias: slopes must be 1-D (heads,), got shape {slopes.shape}")
    for name, v in (("q_len", q_len), ("k_len", k_len)):
        if not is_int(v) or v < 0:
            raise ValueError(f"alibi_bias: {name} must be an int >= 0, got {v!r}")
    dt = ext.compute_dtype(dtype)
    rel = gp.arange(k_len)[None, :] - (gp.arange(q_len) + (k_len - q_len))[:, None]
    return (slopes.astype(dt, copy=False)[:, None, None] * rel.astype(dt)[None]).astype(dtype, copy=False)


# -- registration -------------------------------------------------------------------------------------


def register(registry: Any) -> None:
    ext.register_family(
        registry, "rope", nkey=1, doc=__doc__ or "", reference=reference, cuda=rope_cuda, dtypes=list(_CTYPES), min_sm=80,
        predicate=kernel_fits,
    )  # fmt: skip
