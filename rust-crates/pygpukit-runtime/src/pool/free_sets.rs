//! The free sets (best fit per stream and kind), the unmapped sets of
//! expandable segments, and splitting and merging blocks within a segment.
//! Split out of `state` so that the bookkeeping every path shares sits in
//! one place.

use std::collections::BTreeSet;

use super::config::PoolKind;
use super::state::{FreeKey, Node, NodeState, PoolState, VaKey, NIL};
use crate::driver::Handle;

impl PoolState {
    // ----- free sets --------------------------------------------------------

    #[inline]
    fn free_set(&mut self, kind: PoolKind) -> &mut BTreeSet<FreeKey> {
        match kind {
            PoolKind::Small => &mut self.small,
            PoolKind::Large => &mut self.large,
        }
    }

    fn free_key(&self, slot: u32) -> FreeKey {
        let n = self.node(slot);
        FreeKey {
            stream: n.stream,
            size: n.size,
            ptr: n.ptr,
            slot,
        }
    }

    pub(super) fn insert_free(&mut self, slot: u32) {
        let key = self.free_key(slot);
        let kind = self.node(slot).kind;
        let node = self.node_mut(slot);
        node.state = NodeState::Free;
        node.requested = 0;
        self.counters.cached += key.size;
        let inserted = self.free_set(kind).insert(key);
        debug_assert!(inserted);
    }

    pub(super) fn remove_free(&mut self, slot: u32) {
        let key = self.free_key(slot);
        let kind = self.node(slot).kind;
        let removed = self.free_set(kind).remove(&key);
        debug_assert!(removed);
        self.counters.cached -= key.size;
    }

    fn va_key(&self, slot: u32) -> VaKey {
        let n = self.node(slot);
        VaKey {
            stream: n.stream,
            kind: n.kind,
            ptr: n.ptr,
            slot,
        }
    }

    pub(super) fn insert_unmapped(&mut self, slot: u32) {
        let key = self.va_key(slot);
        self.node_mut(slot).state = NodeState::Unmapped;
        let inserted = self.unmapped.insert(key);
        debug_assert!(inserted);
    }

    pub(super) fn remove_unmapped(&mut self, slot: u32) {
        let key = self.va_key(slot);
        let removed = self.unmapped.remove(&key);
        debug_assert!(removed);
    }

    /// Best fit: the smallest free block of `stream` with at least `size` bytes.
    pub(super) fn take_best_fit(
        &mut self,
        kind: PoolKind,
        stream: Handle,
        size: u64,
    ) -> Option<u32> {
        let from = FreeKey {
            stream,
            size,
            ptr: 0,
            slot: 0,
        };
        let set = self.free_set(kind);
        let key = *set.range(from..).next()?;
        if key.stream != stream {
            return None;
        }
        set.remove(&key);
        self.counters.cached -= key.size;
        Some(key.slot)
    }

    /// Split `slot` at `at` bytes from its start; the upper part becomes a new
    /// block in `state`, put in the matching set. Returns the new slot.
    pub(super) fn split_off(&mut self, slot: u32, at: u64, state: NodeState) -> u32 {
        let (ptr, size, stream, segment, next, kind) = {
            let n = self.node(slot);
            (n.ptr, n.size, n.stream, n.segment, n.next, n.kind)
        };
        let upper = self.new_node(Node {
            ptr: ptr + at,
            size: size - at,
            requested: 0,
            stream,
            segment,
            prev: slot,
            next,
            generation: 0,
            kind,
            state,
            uses: Vec::new(),
            frames: None,
        });
        if next != NIL {
            self.node_mut(next).prev = upper;
        }
        let n = self.node_mut(slot);
        n.next = upper;
        n.size = at;
        match state {
            NodeState::Free => self.insert_free(upper),
            NodeState::Unmapped => self.insert_unmapped(upper),
            _ => unreachable!("split_off into {state:?}"),
        }
        upper
    }

    /// Make `slot` unmapped and merge it with unmapped neighbours.
    pub(super) fn insert_unmapped_merged(&mut self, slot: u32) {
        let slot = self.merge_neighbours(slot, NodeState::Unmapped);
        self.insert_unmapped(slot);
    }

    /// Merge `slot` with its neighbours in the segment that are in `state`
    /// (taking them out of that state's set); returns the merged block.
    fn merge_neighbours(&mut self, slot: u32, state: NodeState) -> u32 {
        debug_assert!(matches!(state, NodeState::Free | NodeState::Unmapped));
        let take = |st: &mut Self, s: u32| {
            if state == NodeState::Unmapped {
                st.remove_unmapped(s)
            } else {
                st.remove_free(s)
            }
        };
        let mut slot = slot;
        let prev = self.node(slot).prev;
        if prev != NIL && self.node(prev).state == state {
            take(self, prev);
            self.absorb_next(prev);
            slot = prev;
        }
        let next = self.node(slot).next;
        if next != NIL && self.node(next).state == state {
            take(self, next);
            self.absorb_next(slot);
        }
        slot
    }

    /// Return a block to the free set of its stream, merging it with free
    /// neighbours of the same segment; returns the merged block.
    pub(super) fn free_node(&mut self, slot: u32) -> u32 {
        let slot = self.merge_neighbours(slot, NodeState::Free);
        self.insert_free(slot);
        slot
    }

    /// Merge `slot`'s next neighbour into `slot` (the lower block survives).
    fn absorb_next(&mut self, slot: u32) {
        let next = self.node(slot).next;
        let (size, after) = {
            let n = self.node(next);
            (n.size, n.next)
        };
        let n = self.node_mut(slot);
        n.size += size;
        n.next = after;
        if after != NIL {
            self.node_mut(after).prev = slot;
        }
        self.release_node(next);
    }
}
