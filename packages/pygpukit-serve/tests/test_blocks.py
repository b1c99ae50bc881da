"""BlockManager: block tables, sharing by prefix hits, LRU eviction of cached
blocks, all-or-nothing failures; and a stateful property test against a small
reference model that also tracks what each block's rows hold."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pygpukit_serve.blocks import _SEED, BlockManager, OutOfBlocks, PrefixStats, _chain_hash

BS = 4


def snapshot(bm: BlockManager, seq_ids: list[Any]) -> tuple[Any, ...]:
    """Everything a failed call must leave as it was, public and internal."""
    return (
        {s: bm.blocks(s) for s in seq_ids},
        bm.free_blocks,
        bm.cached_blocks,
        bm.stats,
        list(bm._ref),
        sorted(bm._free),
        list(bm._cached),
        dict(bm._by_hash),
    )


def committed(bm: BlockManager, seq_id: Any, prompt: list[int]) -> int:
    """allocate + commit: the prompt's KV is written, as after a prefill."""
    cached = bm.allocate(seq_id, prompt)
    bm.commit(seq_id, prompt)
    return cached


# -- allocation and hits ------------------------------------------------------


def test_allocate_without_hits() -> None:
    bm = BlockManager(8, BS)
    assert (bm.free_blocks, bm.used_blocks) == (8, 0)
    assert bm.allocate("a", list(range(10))) == 0
    assert bm.blocks("a") == [0, 1, 2]
    assert (bm.free_blocks, bm.used_blocks) == (5, 3)
    assert bm.allocate("b", list(range(100, 104))) == 0  # a distinct prompt: no hit
    assert bm.blocks("b") == [3]
    assert "a" in bm and "z" not in bm
    assert bm.stats == PrefixStats(queries=14, hits=0, evictions=0)
    assert bm.stats.hit_rate == 0.0


def test_blocks_returns_a_copy() -> None:
    bm = BlockManager(4, BS)
    bm.allocate("a", [1, 2, 3])
    bm.blocks("a").append(99)
    assert bm.blocks("a") == [0]


@pytest.mark.parametrize(("n", "expect"), [(2 * BS, BS), (2 * BS + 3, 2 * BS), (BS, 0), (1, 0), (3 * BS - 1, 2 * BS)])
def test_identical_prompt_hits_all_full_blocks_but_the_last_token(n: int, expect: int) -> None:
    bm = BlockManager(16, BS)
    prompt = [7 * i + 1 for i in range(n)]
    assert committed(bm, "a", prompt) == 0
    a = bm.blocks("a")
    used = bm.used_blocks
    assert bm.allocate("b", prompt) == expect
    b = bm.blocks("b")
    k = expect // BS
    assert b[:k] == a[:k]  # shared: the same block ids
    assert not set(b[k:]) & set(a)  # the rest fresh, never another sequence's
    assert bm.used_blocks == used + len(b) - k
    for blk in a[:k]:
        assert bm._ref[blk] == 2
    assert bm.stats == PrefixStats(queries=2 * n, hits=expect, evictions=0)
    assert bm.stats.hit_rate == expect / (2 * n)
    bm.free("a")
    for blk in a[:k]:
        assert bm._ref[blk] == 1  # still b's
    assert bm.blocks("b") == b
    bm.free("b")
    assert bm._ref == [0] * 16
    assert bm.free_blocks == 16


def test_no_hit_before_commit() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(9))
    bm.allocate("a", prompt)
    assert bm.allocate("b", prompt) == 0
    bm.commit("a", prompt)
    assert bm.allocate("c", prompt) == 2 * BS
    assert bm.blocks("c")[:2] == bm.blocks("a")[:2]


def test_hit_stops_where_prompts_diverge_and_is_chained() -> None:
    bm = BlockManager(16, BS)
    x0, x1, x2 = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]
    committed(bm, "a", x0 + x1 + x2 + [0])
    a = bm.blocks("a")
    # diverges inside block 1 (its third token): only block 0 hits
    assert bm.allocate("b", x0 + [5, 6, 0, 8] + x2 + [0]) == BS
    assert bm.blocks("b")[0] == a[0] and bm.blocks("b")[1] != a[1]
    # x1 and x2 are registered, but after another block 0: no hit at all
    assert bm.allocate("c", [1, 2, 3, 5] + x1 + x2 + [0]) == 0
    assert not set(bm.blocks("c")) & set(a)
    # a prompt that is a strict prefix hits what it can
    assert bm.allocate("d", x0 + x1 + [9]) == 2 * BS


def test_commit_of_generated_tokens_makes_a_continuation_hit() -> None:
    bm = BlockManager(16, BS)
    prompt = [3, 1, 4, 1, 5, 9]
    assert committed(bm, "a", prompt) == 0
    tokens = list(prompt)
    for t in [2, 6, 5, 3, 5, 8, 9]:  # decode: grow, write, commit the whole list each step
        bm.grow("a", len(tokens) + 1)
        tokens.append(t)
        bm.commit("a", tokens)
    assert len(tokens) == 13 and len(bm.blocks("a")) == 4
    a = bm.blocks("a")
    # the next turn of the conversation: everything so far plus the user's reply
    follow = tokens + [0, 0, 7]
    assert bm.allocate("b", follow) == 3 * BS  # three full blocks, two of them generated
    assert bm.blocks("b")[:3] == a[:3]
    bm.free("a")
    bm.free("b")
    assert bm.allocate("c", follow) == 3 * BS  # still cached after both are gone
    assert bm.blocks("c")[:3] == a[:3]


def test_commit_is_incremental_and_checks_the_length() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(6))
    bm.allocate("a", prompt)
    bm.commit("a", prompt[:3])  # no full block yet: nothing registered
    assert bm._by_hash == {}
    bm.commit("a", prompt)
    assert len(bm._by_hash) == 1 and len(bm._seqs["a"].hashes) == 1
    bm.commit("a", prompt[:2])  # a shorter list changes nothing
    assert len(bm._by_hash) == 1 and len(bm._seqs["a"].hashes) == 1
    with pytest.raises(ValueError, match="tokens"):
        bm.commit("a", list(range(9)))  # two blocks hold 8
    bm.grow("a", 9)
    bm.commit("a", list(range(9)))
    assert len(bm._by_hash) == 2
    with pytest.raises(KeyError):
        bm.commit("zz", prompt)


def test_commit_accepts_numpy_tokens() -> None:
    bm = BlockManager(8, BS)
    prompt = cast(Sequence[int], np.arange(9, dtype=np.int64))  # the engine may pass arrays
    bm.allocate("a", prompt)
    bm.commit("a", prompt)
    assert bm.allocate("b", list(range(9))) == 2 * BS


def test_duplicate_content_keeps_the_registered_block() -> None:
    bm = BlockManager(16, BS)
    prompt = list(range(9))
    bm.allocate("a", prompt)
    bm.allocate("b", prompt)  # before a commits: b computes its own copy
    a, b = bm.blocks("a"), bm.blocks("b")
    bm.commit("a", prompt)
    bm.commit("b", prompt)
    assert bm.blocks("b") == b  # nothing swapped under b
    assert bm.allocate("c", prompt) == 2 * BS
    assert bm.blocks("c")[:2] == a[:2]
    bm.free("b")  # b's unregistered copies go straight back to the free list
    assert bm.cached_blocks == 0
    assert bm.free_blocks == 16 - len(set(bm.blocks("a")) | set(bm.blocks("c")))


def test_all_blocks_hit_but_the_last_is_recomputed_in_a_fresh_block() -> None:
    bm = BlockManager(8, BS)
    prompt = list(range(2 * BS))
    committed(bm, "a", prompt)
    assert bm.allocate("b", prompt) == BS
    a, b = bm.blocks("a"), bm.blocks("b")
    assert b[0] == a[0] and b[1] != a[1]
    bm.commit("b", prompt)  # same content as a's registered block 1: a's stays registered
    assert bm._by_hash[bm._seqs["a"].hashes[1]] == a[1]
    assert bm._seqs["b"].hashes == bm._seqs["a"].hashes


def test_sharing_lowers_what_an_allocation_needs() -> None:
    bm = BlockManager(4, 2)
    committed(bm, "a", [1, 1, 2, 2, 3])  # blocks 0, 1, 2; one block left
    assert not bm.can_allocate([5, 5, 6, 6, 4])
    assert bm.can_allocate([1, 1, 2, 2, 4])  # two blocks shared, one fresh
    assert bm.allocate("b", [1, 1, 2, 2, 4]) == 4
    assert bm.free_blocks == 0


# -- free, LRU eviction, reset ------------------------------------------------


def test_free_unknown_is_a_no_op_and_freeing_twice_too() -> None:
    bm = BlockManager(4, BS)
    bm.free("nobody")
    bm.allocate("a", [1, 2, 3, 4, 5])
    bm.free("a")
    bm.free("a")
    assert bm.free_blocks == 4 and bm._ref == [0] * 4


def test_freed_registered_blocks_stay_cached_until_evicted() -> None:
    bm = BlockManager(3, 2)
    committed(bm, "a", [1, 1, 7])  # block 0 registered, block 1 partial
    bm.free("a")
    assert (bm.free_blocks, bm.cached_blocks, bm.used_blocks) == (3, 1, 0)
    assert bm.allocate("a2", [1, 1, 8]) == 2  # revived from the cache
    assert bm.blocks("a2")[0] == 0
    assert bm.cached_blocks == 0


def lru_pool() -> BlockManager:
    """Three blocks of 2; prefix [1, 1] cached in block 0, then [2, 2] in block 1
    released after it; block 2 free."""
    bm = BlockManager(3, 2)
    committed(bm, "a", [1, 1, 7])
    bm.free("a")
    committed(bm, "b", [2, 2, 7])
    assert bm.blocks("b") == [1, 2]
    bm.free("b")
    assert list(bm._cached) == [0, 1] and bm._free == [2]
    return bm


def test_eviction_takes_the_least_recently_released_block() -> None:
    bm = lru_pool()
    assert bm.allocate("c", [5, 5, 5]) == 0  # block 2, then evicts block 0 ([1, 1])
    assert bm.blocks("c") == [2, 0]
    assert bm.stats.evictions == 1
    bm.free("c")
    assert bm.allocate("a2", [1, 1, 7]) == 0  # evicted: no longer findable
    bm.free("a2")
    assert bm.allocate("b2", [2, 2, 7]) == 2  # survived


def test_a_hit_makes_a_block_recently_used() -> None:
    bm = lru_pool()
    assert bm.allocate("a2", [1, 1, 9]) == 2  # revives block 0, takes block 2
    bm.free("a2")  # block 0 back in the cache, now the most recently released
    assert list(bm._cached) == [1, 0]
    assert bm.allocate("c", [5, 5, 5]) == 0  # evicts block 1 ([2, 2])
    bm.free("c")
    assert bm.allocate("b2", [2, 2, 7]) == 0
    bm.free("b2")
    assert bm.allocate("a3", [1, 1, 7]) == 2


def test_eviction_trims_chains_from_their_end() -> None:
    bm = BlockManager(4, 2)
    committed(bm, "a", [1, 1, 2, 2, 3, 3, 4])  # blocks 0, 1, 2 registered, 3 partial
    bm.free("a")
    assert list(bm._cached) == [2, 1, 0]
    assert bm.allocate("b", [9, 9, 9]) == 0  # block 3, then evicts block 2: the tail
    assert bm.blocks("b") == [3, 2]
    bm.free("b")
    assert bm.allocate("c", [1, 1, 2, 2, 3, 3, 4]) == 4  # the two leading blocks still hit


def test_reset_prefix_cache_drops_idle_blocks_only() -> None:
    bm = BlockManager(8, BS)
    committed(bm, "a", list(range(9)))
    committed(bm, "b", list(range(50, 59)))
    bm.free("a")
    assert bm.cached_blocks == 2
    bm.reset_prefix_cache()
    assert bm.cached_blocks == 0 and bm.free_blocks == 8 - 3
    assert bm.allocate("a2", list(range(9))) == 0
    assert bm.allocate("b2", list(range(50, 59))) == 2 * BS  # b still holds its blocks: they still hit
    assert bm.stats.evictions == 0


def test_prefix_caching_off_never_hits() -> None:
    bm = BlockManager(8, BS, prefix_caching=False)
    prompt = list(range(9))
    committed(bm, "a", prompt)
    bm.free("a")
    assert bm.cached_blocks == 0 and bm.free_blocks == 8
    assert bm.allocate("b", prompt) == 0
    assert bm.stats == PrefixStats(queries=18, hits=0, evictions=0)


# -- grow and OutOfBlocks -----------------------------------------------------


def test_grow_appends_and_never_shrinks() -> None:
    bm = BlockManager(8, BS)
    bm.allocate("a", [1, 2, 3])
    bm.grow("a", 4)  # still fits block 0
    assert bm.blocks("a") == [0]
    bm.grow("a", 5)
    assert bm.blocks("a") == [0, 1]
    bm.grow("a", 13)
    assert bm.blocks("a") == [0, 1, 2, 3]
    bm.grow("a", 1)
    bm.grow("a", 0)
    assert bm.blocks("a") == [0, 1, 2, 3]
    assert bm.can_grow("a", 4 * 8) and not bm.can_grow("a", 4 * 8 + 1)
    with pytest.raises(KeyError):
        bm.grow("zz", 4)


def test_allocate_out_of_blocks_changes_nothing() -> None:
    bm = BlockManager(4, 2)
    committed(bm, "a", [1, 1, 2, 2, 9])  # blocks 0, 1 registered
    bm.free("a")
    committed(bm, "b", [3])
    ids = ["b"]
    before = snapshot(bm, ids)
    # hits both cached blocks (which would leave the cache) and needs three fresh: 5 > 3
    prompt = [1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert not bm.can_allocate(prompt)
    with pytest.raises(OutOfBlocks, match=r"need 5 .* 3 available") as e:
        bm.allocate("c", prompt)
    assert (e.value.needed, e.value.available) == (5, 3)
    assert snapshot(bm, ids) == before
    assert "c" not in bm
    with pytest.raises(OutOfBlocks):
        bm.allocate("c", list(range(100, 108)))  # no hit, 4 fresh > 3
    assert snapshot(bm, ids) == before
    assert bm.allocate("c", [1, 1, 2, 2, 5]) == 4  # the cache survived the failures


def test_grow_out_of_blocks_changes_nothing() -> None:
    bm = BlockManager(4, 2)
    committed(bm, "a", [1, 1, 2])
    committed(bm, "b", [5, 5, 6])
    bm.free("b")  # one cached block, one free
    before = snapshot(bm, ["a"])
    assert not bm.can_grow("a", 9)
    with pytest.raises(OutOfBlocks, match="need 3"):
        bm.grow("a", 9)
    assert snapshot(bm, ["a"]) == before
    bm.grow("a", 8)  # takes the free block and evicts the cached one
    assert bm.free_blocks == 0 and bm.stats.evictions == 1


def test_can_allocate_has_no_side_effects() -> None:
    bm = BlockManager(4, 2)
    committed(bm, "a", [1, 1, 2])
    bm.free("a")
    before = snapshot(bm, [])
    assert bm.can_allocate([1, 1, 5])
    assert not bm.can_allocate([])
    assert snapshot(bm, []) == before


# -- arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_blocks", "block_size", "name"),
    [
        (0, 4, "num_blocks"),
        (-1, 4, "num_blocks"),
        (True, 4, "num_blocks"),
        (4, 0, "block_size"),
        (4, 3, "block_size"),
        (4, -2, "block_size"),
        (4, 6, "block_size"),
    ],
)
def test_bad_constructor_arguments(num_blocks: int, block_size: int, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        BlockManager(num_blocks, block_size)


def test_bad_call_arguments() -> None:
    bm = BlockManager(4, BS)
    with pytest.raises(ValueError, match="prompt"):
        bm.allocate("a", [])
    bm.allocate("a", [1])
    with pytest.raises(ValueError, match="seq_id"):
        bm.allocate("a", [2])
    with pytest.raises(ValueError, match="num_tokens"):
        bm.grow("a", -1)
    with pytest.raises(KeyError, match="seq_id"):
        bm.blocks("b")
    assert bm.blocks("a") == [0] and bm.stats.queries == 1


# -- property test against a reference model ----------------------------------


class BlockMachine(RuleBasedStateMachine):
    """Drives a BlockManager the way the engine does (allocate and write the
    prompt's uncached rows, grow and write one row per decode step, commit,
    free) while a reference model predicts every hit, every fresh block and
    every eviction from plain prefix tuples instead of hashes, and tracks what
    every row of every block holds."""

    @initialize(num_blocks=st.integers(1, 12), bs=st.sampled_from([1, 2, 4]), caching=st.sampled_from([True, True, True, False]))
    def setup(self, num_blocks: int, bs: int, caching: bool) -> None:
        self.bm = BlockManager(num_blocks, bs, prefix_caching=caching)
        self.n, self.bs, self.caching = num_blocks, bs, caching
        self.seqs: dict[int, dict[str, Any]] = {}  # id -> tokens written, blocks, blocks committed
        self.rows: dict[int, list[int | None]] = {}  # block -> what its rows hold
        self.reg: dict[tuple[int, ...], int] = {}  # whole prefix up to a block's end -> block
        self.key_of: dict[int, tuple[int, ...]] = {}
        self.lru: list[int] = []  # idle registered blocks, oldest first
        self.free: set[int] = set(range(num_blocks))
        self.history: list[list[int]] = []
        self.stats = PrefixStats()
        self.next_id = 0

    # model helpers

    def held(self) -> Counter[int]:
        return Counter(b for s in self.seqs.values() for b in s["blocks"])

    def take_fresh(self, fresh: list[int]) -> None:
        """Fresh blocks come from the free set first, then the oldest cached ones."""
        k = min(len(fresh), len(self.free))
        assert set(fresh[:k]) <= self.free and len(set(fresh[:k])) == k
        evicted = fresh[k:]
        assert evicted == self.lru[: len(evicted)]
        self.free -= set(fresh[:k])
        del self.lru[: len(evicted)]
        for b in evicted:
            del self.reg[self.key_of.pop(b)]
        for b in fresh:
            self.rows[b] = [None] * self.bs  # stale content does not count
        self.stats = PrefixStats(self.stats.queries, self.stats.hits, self.stats.evictions + len(evicted))

    def write(self, sid: int, pos: int, tok: int) -> None:
        """The engine writing one KV row: never into a shared or registered block."""
        b = self.seqs[sid]["blocks"][pos // self.bs]
        assert self.held()[b] == 1 and b not in self.key_of
        self.rows[b][pos % self.bs] = tok

    def check_unchanged(self, call: Any) -> None:
        before = snapshot(self.bm, list(self.seqs))
        try:
            call()
        except OutOfBlocks:
            pass
        else:
            raise AssertionError("expected OutOfBlocks")
        assert snapshot(self.bm, list(self.seqs)) == before

    # rules

    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        tail = data.draw(st.lists(st.integers(0, 1), max_size=2 * self.bs + 1))
        if self.history and data.draw(st.booleans()):
            base = data.draw(st.sampled_from(self.history))  # a conversation continued, or a shared system prompt
            k = len(base) if data.draw(st.booleans()) else data.draw(st.integers(0, len(base)))
            prompt = base[:k] + tail
        else:
            prompt = tail
        if not prompt:
            prompt = [0]
        n, bs = len(prompt), self.bs
        hits: list[int] = []
        if self.caching:
            for i in range((n - 1) // bs):
                b = self.reg.get(tuple(prompt[: (i + 1) * bs]))
                if b is None:
                    break
                hits.append(b)
        need = -(-n // bs) - len(hits) + sum(b in self.lru for b in hits)
        fits = need <= len(self.free) + len(self.lru)
        assert self.bm.can_allocate(prompt) == fits
        sid = self.next_id
        self.next_id += 1
        if not fits:
            self.check_unchanged(lambda: self.bm.allocate(sid, prompt))
            return
        cached = self.bm.allocate(sid, prompt)
        assert cached == len(hits) * bs < n
        blocks = self.bm.blocks(sid)
        assert blocks[: len(hits)] == hits and len(blocks) == -(-n // bs)
        for i, b in enumerate(hits):  # a hit holds exactly the prompt's tokens
            assert self.rows[b] == prompt[i * bs : (i + 1) * bs]
        self.lru = [b for b in self.lru if b not in hits]
        self.take_fresh(blocks[len(hits) :])
        self.stats = PrefixStats(self.stats.queries + n, self.stats.hits + cached, self.stats.evictions)
        self.seqs[sid] = {"tokens": list(prompt), "blocks": blocks, "committed": len(hits)}
        for pos in range(cached, n):
            self.write(sid, pos, prompt[pos])
        if data.draw(st.booleans()):
            self.commit_tokens(sid, n)  # as the engine does after the prefill

    @precondition(lambda self: self.seqs)
    @rule(data=st.data(), tok=st.integers(0, 2), ahead=st.sampled_from([0, 0, 0, 1, 3]))
    def decode(self, data: st.DataObject, tok: int, ahead: int) -> None:
        sid = data.draw(st.sampled_from(sorted(self.seqs)))
        s = self.seqs[sid]
        total = len(s["tokens"]) + 1 + ahead  # the engine may reserve a few steps ahead
        need = -(-total // self.bs) - len(s["blocks"])
        fits = need <= len(self.free) + len(self.lru)
        assert self.bm.can_grow(sid, total) == fits
        if not fits:
            self.check_unchanged(lambda: self.bm.grow(sid, total))
            return
        self.bm.grow(sid, total)
        blocks = self.bm.blocks(sid)
        assert blocks[: len(s["blocks"])] == s["blocks"]
        self.take_fresh(blocks[len(s["blocks"]) :])
        s["blocks"] = blocks
        s["tokens"].append(tok)
        self.write(sid, len(s["tokens"]) - 1, tok)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.seqs)))
        s = self.seqs[sid]
        k = data.draw(st.integers(0, len(s["tokens"])))
        if data.draw(st.booleans()):
            k = len(s["tokens"])  # what the engine does
        self.commit_tokens(sid, k)

    def commit_tokens(self, sid: int, k: int) -> None:
        s = self.seqs[sid]
        toks = s["tokens"][:k]
        self.bm.commit(sid, toks)
        if not self.caching:
            return
        for i in range(s["committed"], k // self.bs):
            key = tuple(toks[: (i + 1) * self.bs])
            if key not in self.reg:
                b = s["blocks"][i]
                self.reg[key] = b
                self.key_of[b] = key
        s["committed"] = max(s["committed"], k // self.bs)
        if k >= self.bs:
            self.history.append(toks)

    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from([*sorted(self.seqs), -1]))  # -1: never allocated
        self.bm.free(sid)
        s = self.seqs.pop(sid, None)
        if s is None:
            return
        self.release(s["blocks"])

    def release(self, blocks: list[int]) -> None:
        """A freed sequence's blocks, tail first: idle registered ones to the LRU end, the rest free."""
        held = self.held()
        for b in reversed(blocks):
            if not held[b]:
                if b in self.key_of:
                    self.lru.append(b)
                else:
                    self.free.add(b)

    @precondition(lambda self: self.seqs)
    @rule()
    def finish_oldest(self) -> None:
        """Requests finish about as often as they arrive, or the pool only fills."""
        sid = min(self.seqs)
        self.bm.free(sid)
        s = self.seqs.pop(sid)
        self.release(s["blocks"])

    @rule()
    def reset(self) -> None:
        self.bm.reset_prefix_cache()
        for b in self.lru:
            del self.reg[self.key_of.pop(b)]
        self.free |= set(self.lru)
        self.lru = []

    # invariants

    @invariant()
    def consistent(self) -> None:
        bm = self.bm
        held = self.held()
        assert bm._ref == [held[b] for b in range(self.n)]  # refcount == live holders
        assert all(sid in bm for sid in self.seqs) and len(bm._seqs) == len(self.seqs)
        for sid, s in self.seqs.items():
            assert bm.blocks(sid) == s["blocks"]
            for pos, tok in enumerate(s["tokens"]):  # nobody overwrote what a sequence wrote
                assert self.rows[s["blocks"][pos // self.bs]][pos % self.bs] == tok
        assert bm.free_blocks == len(self.free) + len(self.lru)
        assert bm.free_blocks + len(held) == self.n
        assert bm.used_blocks == len(held)
        assert not (self.free & set(held)) and not (set(self.lru) & set(held)) and not (self.free & set(self.lru))
        assert sorted(bm._free) == sorted(self.free) and list(bm._cached) == self.lru
        assert bm.cached_blocks == len(self.lru)
        # every registered hash is the chain hash of its block's whole prefix, and the block holds that content
        assert len(bm._by_hash) == len(self.reg)
        for key, b in self.reg.items():
            h = _SEED
            for i in range(0, len(key), self.bs):
                h = _chain_hash(h, key[i : i + self.bs])
            assert bm._by_hash[h] == b
            assert self.rows[b] == list(key[-self.bs :])
        assert bm.stats == self.stats

    def teardown(self) -> None:
        if not hasattr(self, "bm"):
            return
        for sid in list(self.seqs):
            self.bm.free(sid)
        assert self.bm.free_blocks == self.n  # no leak
        assert self.bm._ref == [0] * self.n
        self.bm.reset_prefix_cache()
        assert self.bm._by_hash == {} and sorted(self.bm._free) == list(range(self.n))


TestBlockMachine = BlockMachine.TestCase
TestBlockMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
