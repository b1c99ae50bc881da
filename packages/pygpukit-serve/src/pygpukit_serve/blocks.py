"""Host-side bookkeeping of a paged KV cache's blocks, with prefix caching.

The KV cache is a pool of ``num_blocks`` blocks of ``block_size`` token rows;
a sequence's token j lives in block ``blocks[j // block_size]`` at row
``j % block_size``. ``BlockManager`` decides which blocks each sequence
holds; it never touches the GPU.

Prefix caching: a full block whose KV has been written (``commit``) is
registered under a chained hash of its content and of everything before it,
so a later prompt starting with the same tokens takes the same blocks
(reference count + 1) instead of recomputing them. A registered block whose
last holder is freed stays cached, evictable in least-recently-released
order, until a fresh block is needed and no never-used block is left.
Partial blocks are never registered or shared, and a registered block is
never written again: only its first owner wrote it, and every later holder
reads it.
"""

from __future__ import annotations

import heapq
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from hashlib import blake2b

# blake2b rather than hash(): a collision would silently hand a request another
# prompt's KV, and Python's hash of int tuples collides easily by construction.
_DIGEST_SIZE = 32
_SEED = blake2b(b"pygpukit-serve/prefix-cache/v1", digest_size=_DIGEST_SIZE).digest()


def _chain_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """Hash of one full block given its parent's hash: the chain makes a block
    hit only after the same content in every block before it."""
    h = blake2b(parent, digest_size=_DIGEST_SIZE)
    h.update(array("q", tokens).tobytes())
    return h.digest()


class OutOfBlocks(Exception):
    """Not enough free blocks for the request; nothing was changed, so the
    scheduler can wait, preempt another sequence, or reject."""

    def __init__(self, needed: int, available: int, num_blocks: int) -> None:
        super().__init__(f"need {needed} free KV-cache blocks, {available} available (of {num_blocks})")
        self.needed, self.available = needed, available


@dataclass(frozen=True)
class PrefixStats:
    """Counters for /metrics: ``queries`` prompt tokens looked up, ``hits``
    of them found cached, ``evictions`` cached blocks evicted to make room."""

    queries: int = 0
    hits: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


@dataclass
class _Seq:
    blocks: list[int]
    # Chain hashes of blocks[:len(hashes)], the committed full blocks; the last
    # one is the parent of the next block to commit, so commit never rehashes.
    hashes: list[bytes] = field(default_factory=list)


class BlockManager:
    """Which KV-cache blocks each live sequence holds, and which idle blocks
    still hold reusable prefixes. Every call costs O(blocks it touches)."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a positive power of two, got {block_size!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._ref = [0] * num_blocks
        # Unregistered blocks nobody holds; a heap so the lowest ids go out first
        # (a sorted list is already a heap).
        self._free = list(range(num_blocks))
        # Registered blocks nobody holds, least recently released first.
        self._cached: OrderedDict[int, None] = OrderedDict()
        self._by_hash: dict[bytes, int] = {}
        self._hash_of: list[bytes | None] = [None] * num_blocks
        self._seqs: dict[Hashable, _Seq] = {}
        self._stats = PrefixStats()

    # -- state --------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        """Blocks a request can get now, cached ones included (they are evicted on demand)."""
        return len(self._free) + len(self._cached)

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    @property
    def cached_blocks(self) -> int:
        """Idle blocks kept for prefix hits (counted in free_blocks too)."""
        return len(self._cached)

    @property
    def stats(self) -> PrefixStats:
        """A snapshot (the dataclass is frozen, so callers cannot skew the counters)."""
        return self._stats

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def blocks(self, seq_id: Hashable) -> list[int]:
        """The sequence's block table, a copy so the caller can keep it across calls."""
        return list(self._get(seq_id).blocks)

    # -- allocation ---------------------------------------------------------

    def can_allocate(self, prompt: Sequence[int]) -> bool:
        if len(prompt) == 0:
            return False
        hits, _ = self._lookup(prompt)
        return self._pool_need(len(prompt), hits) <= self.free_blocks

    def allocate(self, seq_id: Hashable, prompt: Sequence[int]) -> int:
        """Give a new sequence blocks for its whole prompt, reusing the longest
        cached prefix of full blocks; returns how many prompt tokens are
        already in the cache (a multiple of block_size, always < len(prompt),
        so the model still runs the last token and gets its logits)."""
        if seq_id in self._seqs:
            raise ValueError(f"seq_id {seq_id!r} already has blocks; free it first")
        n = len(prompt)
        if n == 0:
            raise ValueError("prompt must not be empty")
        hits, hashes = self._lookup(prompt)
        self._check_fits(self._pool_need(n, hits))
        for b in hits:
            if self._ref[b] == 0:
                del self._cached[b]
            self._ref[b] += 1
        blocks = hits + self._take_fresh(self._blocks_for(n) - len(hits))
        self._seqs[seq_id] = _Seq(blocks, hashes)
        cached = len(hits) * self.block_size
        s = self._stats
        self._stats = replace(s, queries=s.queries + n, hits=s.hits + cached)
        return cached

    def can_grow(self, seq_id: Hashable, num_tokens: int) -> bool:
        return self._blocks_for(num_tokens) - len(self._get(seq_id).blocks) <= self.free_blocks

    def grow(self, seq_id: Hashable, num_tokens: int) -> None:
        """Make the sequence hold blocks for num_tokens tokens in all (before
        the engine writes KV past its last block); never shrinks."""
        seq = self._get(seq_id)
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        need = self._blocks_for(num_tokens) - len(seq.blocks)
        if need <= 0:
            return
        self._check_fits(need)
        seq.blocks.extend(self._take_fresh(need))

    def commit(self, seq_id: Hashable, tokens: Sequence[int]) -> None:
        """Record that the sequence's KV now holds ``tokens`` (its whole token
        list so far), making its newly full blocks hittable. Only blocks not
        yet committed are hashed, so calling it every decode step is cheap.
        When the same content is already registered under another block, the
        registered one stays and this sequence keeps its own copy."""
        seq = self._get(seq_id)
        n = len(tokens)
        bs = self.block_size
        if n > len(seq.blocks) * bs:
            raise ValueError(f"tokens: {n} tokens but the sequence's {len(seq.blocks)} blocks hold {len(seq.blocks) * bs}; grow first")
        if not self.prefix_caching:
            return
        parent = seq.hashes[-1] if seq.hashes else _SEED
        for i in range(len(seq.hashes), n // bs):
            h = _chain_hash(parent, tokens[i * bs : (i + 1) * bs])
            seq.hashes.append(h)
            if h not in self._by_hash:
                b = seq.blocks[i]
                # An uncommitted block came fresh to this sequence alone, so it has no hash yet.
                assert self._hash_of[b] is None and self._ref[b] == 1
                self._by_hash[h] = b
                self._hash_of[b] = h
            parent = h

    def free(self, seq_id: Hashable) -> None:
        """Release the sequence's blocks; unknown ids are ignored (an abort can race the finish)."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return
        # Tail first: it becomes the least recently used, so eviction trims a
        # chain from its end and the shared beginnings of prompts survive longest
        # (a chain whose head is gone can never hit again).
        for b in reversed(seq.blocks):
            self._ref[b] -= 1
            if self._ref[b] == 0:
                if self._hash_of[b] is not None:
                    self._cached[b] = None
                else:
                    heapq.heappush(self._free, b)

    def reset_prefix_cache(self) -> None:
        """Forget every idle cached prefix (blocks held by live sequences keep
        their registration: they are still valid and still in use)."""
        for b in self._cached:
            self._unregister(b)
            heapq.heappush(self._free, b)
        self._cached.clear()

    # -- helpers ------------------------------------------------------------

    def _get(self, seq_id: Hashable) -> _Seq:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"unknown seq_id {seq_id!r}") from None

    def _blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _lookup(self, prompt: Sequence[int]) -> tuple[list[int], list[bytes]]:
        """Registered blocks matching the prompt's leading full blocks, never its
        last token's block; and their hashes. Changes nothing."""
        if not self.prefix_caching:
            return [], []
        bs = self.block_size
        blocks: list[int] = []
        hashes: list[bytes] = []
        parent = _SEED
        for i in range((len(prompt) - 1) // bs):
            h = _chain_hash(parent, prompt[i * bs : (i + 1) * bs])
            b = self._by_hash.get(h)
            if b is None:
                break
            blocks.append(b)
            hashes.append(h)
            parent = h
        return blocks, hashes

    def _pool_need(self, num_tokens: int, hits: list[int]) -> int:
        """Blocks the allocation takes out of free_blocks: fresh ones, plus hits
        that sit idle in the cache (they stop being evictable)."""
        return self._blocks_for(num_tokens) - len(hits) + sum(1 for b in hits if self._ref[b] == 0)

    def _check_fits(self, needed: int) -> None:
        if needed > self.free_blocks:
            raise OutOfBlocks(needed, self.free_blocks, self.num_blocks)

    def _take_fresh(self, n: int) -> list[int]:
        """n unregistered blocks at refcount 1: never-used or released ones
        first, then the least recently released cached ones (evicted)."""
        out = []
        evicted = 0
        for _ in range(n):
            if self._free:
                b = heapq.heappop(self._free)
            else:
                b, _ = self._cached.popitem(last=False)
                self._unregister(b)
                evicted += 1
            self._ref[b] = 1
            out.append(b)
        if evicted:
            self._stats = replace(self._stats, evictions=self._stats.evictions + evicted)
        return out

    def _unregister(self, b: int) -> None:
        h = self._hash_of[b]
        assert h is not None
        del self._by_hash[h]
        self._hash_of[b] = None
