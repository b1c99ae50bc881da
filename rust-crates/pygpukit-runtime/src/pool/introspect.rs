//! Read-only views of the pool state: counters as [`PoolStats`], the
//! recorded history, and per-segment snapshots.

use super::block::{BlockSnapshot, BlockState, SegmentSnapshot};
use super::history::TraceEntry;
use super::state::{NodeState, PoolState, NIL};
use super::stats::PoolStats;

impl PoolState {
    // ----- introspection ----------------------------------------------------

    pub(super) fn reset_peak_stats(&mut self) {
        let c = &mut self.counters;
        c.peak_allocated = c.allocated;
        c.peak_reserved = c.reserved;
    }

    pub(super) fn stats(&self) -> PoolStats {
        let c = &self.counters;
        let largest = self
            .small
            .iter()
            .chain(self.large.iter())
            .map(|k| k.size)
            .max()
            .unwrap_or(0);
        PoolStats {
            allocated_bytes: c.allocated,
            requested_bytes: c.requested,
            reserved_bytes: c.reserved,
            peak_allocated_bytes: c.peak_allocated,
            peak_reserved_bytes: c.peak_reserved,
            num_segments: self.segments.len() as u64,
            num_alloc_calls: c.alloc_calls,
            num_free_calls: c.free_calls,
            num_driver_allocs: c.driver_allocs,
            num_driver_frees: c.driver_frees,
            num_cached_blocks: (self.small.len() + self.large.len()) as u64,
            cached_bytes: c.cached,
            largest_free_block: largest,
            num_ooms: c.ooms,
            num_pending_frees: self.pending.len() as u64,
            pending_bytes: c.pending,
            fragmentation_bytes: c.reserved - c.allocated,
            num_expandable_segments: self
                .segments
                .values()
                .filter(|s| s.chunks.is_some())
                .count() as u64,
            expandable_mapped_bytes: c.expandable_mapped,
            expandable_virtual_bytes: c.virtual_reserved,
        }
    }

    pub(super) fn history(&self) -> Vec<TraceEntry> {
        self.history.entries()
    }

    pub(super) fn snapshot(&self) -> Vec<SegmentSnapshot> {
        self.segments
            .iter()
            .map(|(&id, s)| {
                let mut blocks = Vec::new();
                let mut slot = s.head;
                while slot != NIL {
                    let n = self.node(slot);
                    let state = match n.state {
                        NodeState::Live => BlockState::Live,
                        NodeState::Free => BlockState::Cached,
                        NodeState::Pending => BlockState::Pending,
                        NodeState::Unmapped => BlockState::Unmapped,
                        NodeState::Vacant => unreachable!("vacant slot linked into segment {id}"),
                    };
                    blocks.push(BlockSnapshot {
                        ptr: n.ptr,
                        size: n.size,
                        requested: n.requested,
                        state,
                        // A free block's stack is stale (dropped at reuse,
                        // not at free: the free path stays as short as it was).
                        frames: match n.state {
                            NodeState::Live | NodeState::Pending => n.frames.clone(),
                            _ => None,
                        },
                    });
                    slot = n.next;
                }
                SegmentSnapshot {
                    id,
                    ptr: s.ptr,
                    size: s.size,
                    stream: s.stream,
                    kind: s.kind,
                    expandable: s.chunks.is_some(),
                    mapped: s.mapped,
                    chunks: s
                        .chunks
                        .as_ref()
                        .map_or(1, |c| c.iter().filter(|&&h| h != 0).count() as u64),
                    blocks,
                }
            })
            .collect()
    }
}
