"""KV caches for decoding: ``KVCache`` (contiguous per layer) and
``PagedKVCache`` (a pool of fixed-size blocks and a block table), with the
ops that write and read them: ``kv_append`` (new tokens at each sequence's
length, advancing it) and ``kv_gather`` (a cache as contiguous
(B, Hkv, S, D) arrays). The ops and their references are in kv_ops.py, their
CUDA kernels in kv_kernels.py, the checks of a layer's arrays in
kv_layout.py; this module holds the cache objects and registers the ops.
``PagedKVCache.view(batch)`` is a second block table and set of lengths over
a paged cache's blocks, for a caller that hands out (and shares) the blocks
itself: a server's engine, whose batch changes at every step.

Layouts, per layer: K and V of a contiguous cache are (B, Hkv, max_seq, D),
so the keys of one (sequence, KV head) lie in one run of memory that decode
reads front to back; a paged cache holds (num_blocks, Hkv, block_size, D)
blocks, token j of sequence b in block ``block_table[b, j // block_size]``
at row ``j % block_size``. Sequence lengths are int32 (B,) on the device (the
kernels read them, so a captured CUDA graph stays right as sequences grow)
and mirrored on the host, which checks capacity and allocates blocks
without a synchronization. Each layer has its own lengths: ``append(k, v,
layer)`` writes at that layer's lengths and advances them; the layers of a
paged cache share one block table.

An fp8 cache (``kv_dtype="fp8_e4m3"``) stores float8_e4m3fn values
``e4m3(clamp(x / scale, -448, 448))`` with a float32 scale per (layer, KV
head), for K and V apart: given by the user, or computed at the layer's
first append as ``2 * amax / 448`` over the appended tokens of that head (the
factor 2 is headroom for later tokens, costing nothing but the bottom of the
subnormal range). Values are dequantized as ``fp8 * scale``; e4m3 keeps 3
mantissa bits, a relative error of at most 2^-4 per element.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .kv_kernels import (
    APPEND_TILE_ITEMS,
    ROPE_APPEND_TOKENS,
    append_applies,
    append_rope_applies,
    gather_applies,
    kernel_kv_append,
    kernel_kv_append_rope,
    kernel_kv_gather,
)
from .kv_layout import F8, FP8, FP8_HEADROOM, FP8_MAX, HEAD_DIMS, STORE, Layout, cache_rows, check_cache, check_tokens, dequantize
from .kv_ops import (
    kv_append,
    kv_append_rope,
    kv_gather,
    reference_kv_append,
    reference_kv_append_rope,
    reference_kv_gather,
)
from .positional import _device_positions

__all__ = [
    "APPEND_TILE_ITEMS",
    "FP8",
    "FP8_HEADROOM",
    "FP8_MAX",
    "HEAD_DIMS",
    "ROPE_APPEND_TOKENS",
    "KVCache",
    "Layout",
    "PagedKVCache",
    "cache_rows",
    "check_cache",
    "dequantize",
    "kernel_kv_append",
    "kernel_kv_append_rope",
    "kernel_kv_gather",
    "kv_append",
    "kv_append_rope",
    "kv_gather",
    "reference_kv_append",
    "reference_kv_append_rope",
    "reference_kv_gather",
    "register",
]


def _positive(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)


class _Cache(abc.ABC):
    """What both caches share: per-layer device lengths with a host mirror,
    fp8 scales, append / gather / reset."""

    max_seq: int  # tokens a sequence can hold (set by the subclass)

    def __init__(self, owner: str, batch: Any, num_kv_heads: Any, head_dim: Any, dtype: Any, num_layers: Any, kv_dtype: Any,
                 k_scale: Any, v_scale: Any) -> None:  # fmt: skip
        self._owner = owner
        self.batch = _positive(owner, "batch", batch)
        self.num_kv_heads = _positive(owner, "num_kv_heads", num_kv_heads)
        self.num_layers = _positive(owner, "num_layers", num_layers)
        if isinstance(head_dim, bool) or head_dim not in HEAD_DIMS:
            raise ValueError(f"{owner}: head_dim must be one of {', '.join(map(str, HEAD_DIMS))}, got {head_dim!r}")
        self.head_dim = int(head_dim)
        self.dtype = gp.result_type(dtype)
        if self.dtype not in STORE:
            raise TypeError(f"{owner}: dtype must be bfloat16, float16 or float32, got {self.dtype}")
        self.kv_dtype = self._kv_dtype(kv_dtype)
        self.fp8 = self.kv_dtype == F8
        layers, heads = self.num_layers, self.num_kv_heads
        self._lengths = gp.zeros((layers, self.batch), gp.int32)
        self._host = np.zeros((layers, self.batch), np.int64)
        self._top = [0] * layers  # the longest sequence of each layer (decode's launch plan needs it every call)
        # Decode plans its launch (split-K over the keys) for the capacity instead of the longest sequence:
        # every step then makes the same launch, as a CUDA graph needs, and a graph replay and an eager step
        # split the keys alike, so they agree bit for bit. The kernels cut each sequence's work from its
        # device length either way; the cost is blocks that find no keys.
        self.plan_capacity = False
        self._checked: set = set()  # (shape, dtype) of k and v that passed the append checks
        # a ragged append's counts on the device, in one buffer uploaded only when they change: a prefill's
        # layers share one copy, and a captured prefill reads the buffer on every replay (stage_counts)
        self._counts_dev = gp.zeros((self.batch,), gp.int32)
        self._counts_held: np.ndarray | None = None
        self._k_scale = self._v_scale = None
        self._scaled = np.zeros(layers, bool)  # whether each layer's fp8 scales are set
        if self.fp8:
            ks, vs = self._scale_arg("k_scale", k_scale), self._scale_arg("v_scale", v_scale)
            if (ks is None) != (vs is None):
                raise ValueError(f"{owner}: give both k_scale and v_scale, or neither (computed at each layer's first append)")
            ones = np.ones((layers, heads), np.float32)
            self._k_scale = gp.from_numpy(ones if ks is None else ks)
            self._v_scale = gp.from_numpy(ones if vs is None else vs)
            self._scaled[:] = ks is not None
        elif k_scale is not None or v_scale is not None:
            raise ValueError(f"{owner}: k_scale and v_scale apply to an fp8 cache (kv_dtype={FP8!r}) only")

    def _kv_dtype(self, kv_dtype: Any) -> np.dtype:
        if kv_dtype is None:
            return self.dtype
        if isinstance(kv_dtype, str) and kv_dtype == FP8:
            return F8
        try:
            dt = gp.result_type(kv_dtype)
        except (TypeError, ValueError):
            dt = None
        if dt not in (self.dtype, F8):
            raise ValueError(f"{self._owner}: kv_dtype must be None (the dtype) or {FP8!r}, got {kv_dtype!r}")
        return dt

    def _scale_arg(self, name: str, s: Any) -> np.ndarray | None:
        if s is None:
            return None
        a = np.asarray(s.to_numpy() if isinstance(s, gp.GPUArray) else s, dtype=np.float64)
        try:
            a = np.broadcast_to(a, (self.num_layers, self.num_kv_heads))
        except ValueError:
            raise ValueError(f"{self._owner}: {name} must broadcast to (num_layers, num_kv_heads) = "
                             f"({self.num_layers}, {self.num_kv_heads}), got shape {a.shape}") from None  # fmt: skip
        if not np.all(np.isfinite(a) & (a > 0)):
            raise ValueError(f"{self._owner}: {name} must be positive and finite")
        return np.ascontiguousarray(a, dtype=np.float32)

    def _finish(self) -> None:
        """After the subclass made its storage: each layer's op arguments, made once
        (views are not free, and append and decode take them every step)."""
        self._args = []
        for i in range(self.num_layers):
            k, v, table = self._storage(i)
            ks = None if self._k_scale is None else self._k_scale[i]
            vs = None if self._v_scale is None else self._v_scale[i]
            self._args.append((k, v, self._lengths[i], table, ks, vs))
        self._lay = check_cache(self._owner, *self._args[0])

    @abc.abstractmethod
    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray | None]:
        """(k_cache, v_cache, block_table or None) of one layer."""

    @abc.abstractmethod
    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        """Make room for ``need`` tokens per sequence (at most ``top``), or raise ValueError and change nothing."""

    @abc.abstractmethod
    def _release(self, seq: int | None) -> None:
        """Give back what sequence ``seq`` (or every one) holds."""

    # -- what the ops take --------------------------------------------------------------

    def _layer(self, layer: Any) -> int:
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.num_layers:
            raise ValueError(f"{self._owner}: layer must be an int in [0, {self.num_layers}), got {layer!r}")
        return int(layer)

    def _seq(self, seq: Any) -> int:
        if isinstance(seq, bool) or not isinstance(seq, (int, np.integer)) or not 0 <= seq < self.batch:
            raise ValueError(f"{self._owner}: seq must be an int in [0, {self.batch}), got {seq!r}")
        return int(seq)

    def op_args(self, layer: int = 0) -> tuple[Any, ...]:
        """(k_cache, v_cache, lengths, block_table, k_scale, v_scale) of one
        layer, as the ops (kv_append, kv_gather, decode_attention) take them."""
        return self._args[self._layer(layer)]

    def lengths(self, layer: int = 0) -> gp.GPUArray:
        """The layer's sequence lengths, (batch,) int32 on the device (a view)."""
        return self._lengths[self._layer(layer)]

    def seq_lengths(self, layer: int = 0) -> np.ndarray:
        """The layer's sequence lengths from the host mirror (no synchronization)."""
        return self._host[self._layer(layer)].copy()

    def plan_bound(self, layer: int = 0) -> int:
        """The longest sequence decode plans its launch for: the capacity when
        ``plan_capacity`` is set, else the layer's longest sequence."""
        return self.max_seq if self.plan_capacity else self._top[self._layer(layer)]

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Wrap a CUDA graph capture of steps that append to this cache: decode is
        planned for the capacity meanwhile (``plan_capacity``), and afterwards
        the lengths (device and host) are what they were before (a capture on
        the CPU backend runs the block once). A paged cache must hold its blocks
        ahead (``reserve``): a replay takes none. After each replay, ``advance``
        the host mirror by what the graph appended."""
        saved = (self._lengths.copy(), self._host.copy(), list(self._top), self.plan_capacity)
        self.plan_capacity = True
        try:
            yield
        finally:
            self._lengths[...] = saved[0]
            self._host[:], self._top, self.plan_capacity = saved[1], saved[2], saved[3]

    def advance(self, tokens: Any = 1) -> None:
        """Record on the host that every sequence of every layer gained ``tokens``
        on the device (a graph replay appended them): one int for all, or one
        per sequence (a captured ragged prefill's counts); checks the capacity."""
        t = np.asarray(tokens)
        if t.dtype.kind not in "iu" or t.shape not in ((), (self.batch,)) or (t < 0).any():
            raise ValueError(f"{self._owner}.advance: tokens must be an int >= 0 or {self.batch} of them, got {tokens!r}")
        need = self._host + t.astype(np.int64)
        if int(need.max()) > self.max_seq:
            raise ValueError(f"{self._owner}.advance: a sequence would pass max_seq={self.max_seq}")
        self._host[:] = need
        self._top = need.max(axis=1).tolist()

    def max_length(self, layer: int = 0) -> int:
        """The longest sequence of the layer, from the host mirror."""
        return self._top[self._layer(layer)]

    def scales(self, layer: int = 0) -> tuple[gp.GPUArray | None, gp.GPUArray | None]:
        """(k_scale, v_scale), each (num_kv_heads,) float32, of an fp8 cache's layer, else (None, None)."""
        return self._args[self._layer(layer)][4:]

    # -- writing ------------------------------------------------------------------------

    def _counts(self, counts: Any, t: int, what: str = "append") -> np.ndarray | None:
        if counts is None:
            return None
        c = np.asarray(counts.to_numpy() if isinstance(counts, gp.GPUArray) else counts)
        if c.shape != (self.batch,) or c.dtype.kind not in "iu" or (c.size and (c.min() < 0 or c.max() > t)):
            raise ValueError(f"{self._owner}.{what}: counts must be {self.batch} ints in [0, {t}], got {counts!r}")
        return c.astype(np.int64)

    def stage_counts(self, counts: Any) -> None:
        """Put a ragged append's ``counts`` (batch ints >= 0) in the cache's device
        buffer now, where appends with these counts read them: call it before
        capturing such appends in a CUDA graph (the capture then copies nothing
        from the host) and again with each replay's counts before the replay."""
        if counts is None:
            raise ValueError(f"{self._owner}.stage_counts: counts must be {self.batch} ints in [0, {self.max_seq}], got None")
        self._device_counts(self._counts(counts, self.max_seq, "stage_counts"))

    def _device_counts(self, c: np.ndarray) -> gp.GPUArray:
        if self._counts_held is None or not np.array_equal(c, self._counts_held):
            self._counts_dev[...] = c.astype(np.int32)
            self._counts_held = c.copy()
        return self._counts_dev

    def append(self, k: gp.GPUArray, v: gp.GPUArray, layer: int = 0, counts: Any = None) -> None:
        """Append new tokens k, v (batch, T, num_kv_heads, head_dim) to a layer at
        each sequence's length; ``counts`` (batch ints, default T each) takes
        only the first counts[b] tokens of sequence b (a ragged batch). Raises
        ValueError before writing anything if a sequence would pass its
        capacity (or a paged cache runs out of blocks)."""
        self._append(k, v, layer, counts, None)

    def append_rotated(self, q: gp.GPUArray, k: gp.GPUArray, v: gp.GPUArray, rope: Any, positions: Any, layer: int = 0,
                       counts: Any = None) -> None:  # fmt: skip
        """``rope(q, k, positions)`` then ``append(k, v, layer, counts)``, except
        that k itself may be left unrotated (only the cache's copy is): for
        decode, where one kernel (``kv_append_rope``) rotates q in place and
        writes the rotated k and v into the cache. ``rope`` is a
        ``RotaryEmbedding``. An fp8 cache rotates first (its scales come from
        the rotated k)."""
        if self.fp8:
            rope(q, k, positions)
            self._append(k, v, layer, counts, None)
        else:
            self._append(k, v, layer, counts, (q, rope, positions))

    def _append(self, k: Any, v: Any, layer: Any, counts: Any, rotate: tuple | None) -> None:
        i = self._layer(layer)
        try:
            sig = (k.shape, k.dtype, v.shape, v.dtype)
        except AttributeError:
            sig = None
        if sig not in self._checked:  # before any block is taken
            check_tokens(f"{self._owner}.append", k, v, None, self._lay)
            self._checked.add(sig)
        t = k.shape[1]
        c = self._counts(counts, t)
        need = self._host[i] + (t if c is None else c)
        top = int(need.max())
        self._grow(need, top, "append")
        if self.fp8 and not self._scaled[i] and t and (c is None or c.any()):
            self._set_scales(i, k, v, c)
        args = self._args[i]
        dc = None if c is None else self._device_counts(c)
        if rotate is None:
            ext.op("kv_append")(k, v, args[0], args[1], args[2], dc, *args[3:])
        else:
            q, rope, positions = rotate
            pos = _device_positions(positions, rope.cos_sin)
            ext.op("kv_append_rope")(q, k, v, rope.cos_sin, pos, rope.layout, rope.rotary_dim, args[0], args[1], args[2], dc, args[3])
        self._host[i] = need
        self._top[i] = top

    def _set_scales(self, i: int, k: Any, v: Any, counts: np.ndarray | None) -> None:
        """Layer i's fp8 scales from its first append: FP8_HEADROOM * amax / FP8_MAX per KV head (1 where all zero)."""
        mask = None
        if counts is not None:
            rows = (np.arange(k.shape[1])[None, :] < counts[:, None]).astype(np.float32)
            mask = gp.from_numpy(rows.reshape(self.batch, k.shape[1], 1, 1))
        for src, dst in ((k, self._k_scale), (v, self._v_scale)):
            a = gp.abs(src.astype(gp.float32))
            if mask is not None:
                a = a * mask
            amax = gp.max(a, axis=(0, 1, 3))
            dst[i] = gp.where(amax > 0, amax * (FP8_HEADROOM / FP8_MAX), 1.0).astype(gp.float32)
        self._scaled[i] = True

    # -- reading ------------------------------------------------------------------------

    def gather(self, layer: int = 0) -> tuple[gp.GPUArray, gp.GPUArray]:
        """The layer's K and V as new contiguous (batch, num_kv_heads, S, head_dim)
        arrays of ``dtype`` (fp8 dequantized), S the longest sequence; rows past
        a sequence's length are zeros."""
        i = self._layer(layer)
        return kv_gather(*self._args[i], self._top[i], self.dtype)

    def keys_values(self, seq: int, layer: int = 0) -> tuple[gp.GPUArray, gp.GPUArray]:
        """Sequence ``seq``'s K and V, (1, num_kv_heads, length, head_dim) of
        ``dtype``: views into a contiguous cache of that dtype, else copies."""
        i, b = self._layer(layer), self._seq(seq)
        n = int(self._host[i, b])
        k, v, lengths, table, ks, vs = self._args[i]
        if table is None and not self.fp8:
            return k[b : b + 1, :, :n], v[b : b + 1, :, :n]
        if table is None:
            k, v = k[b : b + 1], v[b : b + 1]
        else:
            table = table[b : b + 1]
        return kv_gather(k, v, lengths[b : b + 1], table, ks, vs, n, self.dtype)

    def reset(self, seq: int | None = None) -> None:
        """Empty sequence ``seq`` (every sequence when None) in every layer. fp8 scales stay."""
        if seq is None:
            self._host[:] = 0
            self._lengths[...] = 0
        else:
            b = self._seq(seq)
            self._host[:, b] = 0
            self._lengths[:, b] = 0
        self._top = self._host.max(axis=1).tolist()
        self._release(seq)


class KVCache(_Cache):
    """A contiguous KV cache: per layer, K and V of (batch, num_kv_heads,
    max_seq, head_dim), so decode reads each head's keys as one run of memory.

    ``dtype`` is the compute dtype (bfloat16, float16, float32) and the storage
    dtype unless ``kv_dtype="fp8_e4m3"`` (then ``k_scale`` / ``v_scale``, each a
    float or broadcastable to (num_layers, num_kv_heads), or None: computed at
    each layer's first append; see the module doc)."""

    def __init__(
        self,
        batch: int,
        max_seq: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: Any = gp.bfloat16,
        *,
        num_layers: int = 1,
        kv_dtype: Any = None,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        super().__init__("KVCache", batch, num_kv_heads, head_dim, dtype, num_layers, kv_dtype, k_scale, v_scale)
        self.max_seq = _positive("KVCache", "max_seq", max_seq)
        shape = (self.num_layers, self.batch, self.num_kv_heads, self.max_seq, self.head_dim)
        self.k = gp.empty(shape, self.kv_dtype)
        self.v = gp.empty(shape, self.kv_dtype)
        self._finish()

    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, None]:
        return self.k[layer], self.v[layer], None

    def _release(self, seq: int | None) -> None:
        pass  # a contiguous cache holds its memory for good

    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        if top > self.max_seq:
            b = int(np.argmax(need))
            raise ValueError(f"KVCache.{what}: sequence {b} would hold {int(need[b])} tokens, past max_seq={self.max_seq}; "
                             "nothing was written")  # fmt: skip

    def __repr__(self) -> str:
        return (f"KVCache(batch={self.batch}, max_seq={self.max_seq}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, "
                f"dtype={self.dtype}, kv_dtype={self.kv_dtype}, num_layers={self.num_layers})")  # fmt: skip


class PagedKVCache(_Cache):
    """A paged KV cache: per layer a pool of ``num_blocks`` blocks of K and V,
    (num_blocks, num_kv_heads, block_size, head_dim), and one block table
    (batch, ceil(max_seq / block_size)) int32 shared by the layers. Blocks come
    from a host free list as sequences grow (append) and go back on reset;
    ``reserve`` takes them ahead (a CUDA graph must not allocate). block_size
    is a power of two. dtype, kv_dtype and scales as in KVCache."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: Any = gp.bfloat16,
        *,
        batch: int,
        max_seq: int,
        num_layers: int = 1,
        kv_dtype: Any = None,
        k_scale: Any = None,
        v_scale: Any = None,
    ) -> None:
        super().__init__("PagedKVCache", batch, num_kv_heads, head_dim, dtype, num_layers, kv_dtype, k_scale, v_scale)
        self.num_blocks = _positive("PagedKVCache", "num_blocks", num_blocks)
        self.block_size = _positive("PagedKVCache", "block_size", block_size)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"PagedKVCache: block_size must be a power of two, got {block_size}")
        width = -(-_positive("PagedKVCache", "max_seq", max_seq) // self.block_size)
        self.max_seq = width * self.block_size
        shape = (self.num_layers, self.num_blocks, self.num_kv_heads, self.block_size, self.head_dim)
        self.k = gp.empty(shape, self.kv_dtype)
        self.v = gp.empty(shape, self.kv_dtype)
        self.block_table = gp.zeros((self.batch, width), gp.int32)
        self._table = np.zeros((self.batch, width), np.int32)
        self._owned = np.zeros(self.batch, np.int64)  # blocks held by each sequence (the first entries of its table row)
        self._held = np.zeros(self.batch, np.int64)  # tokens those blocks hold
        self._free = list(range(self.num_blocks - 1, -1, -1))  # a stack: pop() hands out 0, 1, 2, ... first
        self._finish()

    @property
    def free_blocks(self) -> int:
        """Blocks not held by any sequence."""
        return len(self._free)

    def blocks(self, seq: int) -> list[int]:
        """The blocks sequence ``seq`` holds, in table order."""
        b = self._seq(seq)
        return self._table[b, : self._owned[b]].tolist()

    def reserve(self, seq: int, tokens: int) -> None:
        """Hold enough blocks for sequence ``seq`` to reach ``tokens`` tokens."""
        need = self._held.copy()
        b = self._seq(seq)
        need[b] = max(int(need[b]), _positive("PagedKVCache.reserve", "tokens", tokens))
        self._grow(need, int(need.max()), "reserve")

    def _storage(self, layer: int) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
        return self.k[layer], self.v[layer], self.block_table

    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        if (need <= self._held).all():
            return
        blocks = -(-need // self.block_size)
        width = self._table.shape[1]
        over = np.nonzero(blocks > width)[0]
        if over.size:
            b = int(over[0])
            raise ValueError(f"PagedKVCache.{what}: sequence {b} would hold {int(need[b])} tokens, past max_seq={self.max_seq}; "
                             "nothing was written")  # fmt: skip
        extra = np.maximum(blocks - self._owned, 0)
        total = int(extra.sum())
        if total > len(self._free):
            raise ValueError(f"PagedKVCache.{what}: needs {total} more blocks, {len(self._free)} of {self.num_blocks} are free; "
                             "nothing was written")  # fmt: skip
        for b in np.nonzero(extra)[0].tolist():
            n0, n = int(self._owned[b]), int(extra[b])
            self._table[b, n0 : n0 + n] = [self._free.pop() for _ in range(n)]
            self._owned[b] = n0 + n
            self.block_table[b, n0 : n0 + n] = gp.from_numpy(self._table[b, n0 : n0 + n])
        self._held = self._owned * self.block_size

    def _release(self, seq: int | None) -> None:
        for b in range(self.batch) if seq is None else (seq,):
            self._free.extend(reversed(self._table[b, : self._owned[b]].tolist()))
            self._owned[b] = 0
        self._held = self._owned * self.block_size

    def view(self, batch: int) -> PagedKVCacheView:
        """A cache of ``batch`` sequences over this cache's blocks (the same K, V
        and fp8 scales) with its own block table and lengths, for a caller that
        manages the blocks itself (a server sharing blocks between requests with
        the same prompt prefix): ``assign`` says which blocks each sequence holds.
        Build views once and keep them (each holds a few device arrays)."""
        return PagedKVCacheView(self, batch)

    def __repr__(self) -> str:
        return (f"PagedKVCache(num_blocks={self.num_blocks}, block_size={self.block_size}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, dtype={self.dtype}, kv_dtype={self.kv_dtype}, batch={self.batch}, max_seq={self.max_seq}, "
                f"num_layers={self.num_layers}, free_blocks={self.free_blocks})")  # fmt: skip


class PagedKVCacheView(PagedKVCache):
    """``PagedKVCache.view``: it never takes or gives back a block, so blocks may
    be shared between sequences (a shared block must hold the same tokens for
    each, which only a full, finished block can). An append past the blocks
    ``assign`` gave a sequence is a ValueError that writes nothing. An fp8
    parent must have its scales given (a view cannot set the shared scales)."""

    def __init__(self, parent: PagedKVCache, batch: int) -> None:
        if parent.fp8 and not parent._scaled.all():
            raise ValueError("PagedKVCache.view: an fp8 cache needs k_scale and v_scale given at construction to have views")
        _Cache.__init__(self, "PagedKVCacheView", batch, parent.num_kv_heads, parent.head_dim, parent.dtype, parent.num_layers, None,
                        None, None)  # fmt: skip
        self.kv_dtype, self.fp8 = parent.kv_dtype, parent.fp8
        self._k_scale, self._v_scale, self._scaled = parent._k_scale, parent._v_scale, parent._scaled
        self.parent, self.num_blocks, self.block_size, self.max_seq = parent, parent.num_blocks, parent.block_size, parent.max_seq
        self.k, self.v = parent.k, parent.v
        width = parent.block_table.shape[1]
        self.block_table = gp.zeros((self.batch, width), gp.int32)
        self._table = np.zeros((self.batch, width), np.int32)
        self._owned = np.zeros(self.batch, np.int64)
        self._held = np.zeros(self.batch, np.int64)
        self._free = []
        self._finish()

    def assign(self, blocks: Any, lengths: Any) -> None:
        """Sequence b holds ``blocks[b]`` (block ids, in token order) whose first
        ``lengths[b]`` tokens are already written: one upload of the block table
        and one of the lengths, for every layer. Checked before anything changes."""
        if len(blocks) != self.batch or len(lengths) != self.batch:
            raise ValueError(
                f"PagedKVCacheView.assign: blocks and lengths must have {self.batch} entries, got {len(blocks)} and {len(lengths)}"
            )
        width = self._table.shape[1]
        table = np.zeros_like(self._table)
        owned = np.zeros(self.batch, np.int64)
        for b, (row, n) in enumerate(zip(blocks, lengths)):
            ids = np.asarray(row, dtype=np.int64)
            if ids.ndim != 1 or ids.size > width or (ids.size and (ids.min() < 0 or ids.max() >= self.num_blocks)):
                raise ValueError(f"PagedKVCacheView.assign: sequence {b} must hold at most {width} block ids in [0, {self.num_blocks}), "
                                 f"got {list(row)!r}")  # fmt: skip
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= ids.size * self.block_size:
                raise ValueError(f"PagedKVCacheView.assign: sequence {b}'s length must be an int in [0, {ids.size * self.block_size}] "
                                 f"(what its {ids.size} blocks hold), got {n!r}")  # fmt: skip
            table[b, : ids.size] = ids
            owned[b] = ids.size
        self._table[:] = table
        self.block_table[...] = table
        self._owned, self._held = owned, owned * self.block_size
        self._host[:] = np.asarray(lengths, np.int64)[None, :]
        self._lengths[...] = self._host.astype(np.int32)
        self._top = self._host.max(axis=1).tolist()

    def _grow(self, need: np.ndarray, top: int, what: str) -> None:
        over = np.nonzero(need > self._held)[0]
        if over.size:
            b = int(over[0])
            raise ValueError(f"PagedKVCacheView.{what}: sequence {b} would hold {int(need[b])} tokens, its blocks hold {int(self._held[b])}; "
                             "a view takes no blocks (assign more); nothing was written")  # fmt: skip

    def _release(self, seq: int | None) -> None:
        rows = slice(None) if seq is None else seq
        self._owned[rows] = 0
        self._held = self._owned * self.block_size

    def __repr__(self) -> str:
        return f"PagedKVCacheView(batch={self.batch}, of {self.parent!r})"


def register(registry: Any) -> None:
    kernel_dtypes = ["float32", "float16", "bfloat16"]
    for op, public, reference, kernel, dtypes, applies in (
        ("kv_append", kv_append, reference_kv_append, kernel_kv_append, kernel_dtypes, append_applies),
        ("kv_append_rope", kv_append_rope, reference_kv_append_rope, kernel_kv_append_rope, kernel_dtypes, append_rope_applies),
        ("kv_gather", kv_gather, reference_kv_gather, kernel_kv_gather, [*kernel_dtypes, "float8_e4m3fn"], gather_applies),
    ):
        ext.register_family(registry, op, nkey=1, doc=public.__doc__ or "", reference=reference, cuda=kernel, dtypes=dtypes, min_sm=80,
                            priority=10, predicate=applies)  # fmt: skip
