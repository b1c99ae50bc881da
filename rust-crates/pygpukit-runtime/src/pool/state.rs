//! The allocator proper: segments, blocks and free lists. Everything here
//! runs under the pool's mutex; driver calls go through the `&Driver` that
//! the caller passes in.
//!
//! Two kinds of segment. A plain segment is one `mem_alloc`. An expandable
//! segment is a reserved range of addresses (`vmm_reserve`) in which
//! granularity-sized pages of physical memory are mapped as blocks need them
//! and unmapped by `empty_cache` where no block uses them. Its blocks cover the
//! whole range: live, cached and pending blocks lie on mapped pages only, and
//! `Unmapped` blocks (page-aligned, on unmapped pages only) hold the rest.
//!
//! The methods are spread by concern over sibling modules: `free_sets`
//! (free and unmapped sets, splitting and merging blocks), `segments`
//! (plain segments, cache release, teardown), `expandable` (mapping and
//! unmapping pages of expandable segments), `stream_free` (the free path,
//! with frees deferred on events for blocks used on other streams) and
//! `introspect` (stats and snapshots). This module holds the data, the
//! slab and the allocation path.

use std::collections::{BTreeMap, BTreeSet};

use super::block::Block;
use super::config::{round_size, segment_size, should_split, PoolKind};
use super::error::PoolError;
use super::history::{Frames, History, TraceAction};
use crate::driver::{Driver, DriverError, Handle};

/// "No neighbour" in the prev/next links.
pub(super) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NodeState {
    /// Slot not in use.
    Vacant,
    Live,
    /// Free and in the free set of its pool kind.
    Free,
    /// Freed by the user, waiting for events.
    Pending,
    /// Addresses of an expandable segment with no physical memory behind
    /// them; in the `unmapped` set.
    Unmapped,
}

/// A block of a segment (live, free or pending), kept in a slab.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) ptr: u64,
    pub(super) size: u64,
    pub(super) requested: u64,
    pub(super) stream: Handle,
    pub(super) segment: u64,
    /// Neighbours in the same segment, by address.
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) generation: u32,
    pub(super) kind: PoolKind,
    pub(super) state: NodeState,
    /// Streams other than `stream` that used the block (`record_stream`).
    pub(super) uses: Vec<Handle>,
    /// Stack of the allocation, while history is recorded with stacks.
    pub(super) frames: Option<Frames>,
}

/// Key of the free sets: best fit is the first key >= (stream, size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct FreeKey {
    pub(super) stream: Handle,
    pub(super) size: u64,
    pub(super) ptr: u64,
    pub(super) slot: u32,
}

/// Key of the unmapped sets: expandable ranges of (stream, kind) by address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct VaKey {
    pub(super) stream: Handle,
    pub(super) kind: PoolKind,
    pub(super) ptr: u64,
    pub(super) slot: u32,
}

#[derive(Debug)]
pub(super) struct Segment {
    pub(super) ptr: u64,
    pub(super) size: u64,
    pub(super) stream: Handle,
    pub(super) kind: PoolKind,
    /// Slot of the block at `ptr`; stable because merges keep the lower block.
    pub(super) head: u32,
    /// Expandable segments: the physical chunk mapped at each page (0: none).
    pub(super) chunks: Option<Vec<Handle>>,
    /// Bytes backed by physical memory (`size` for a plain segment).
    pub(super) mapped: u64,
}

#[derive(Debug)]
pub(super) struct PendingFree {
    pub(super) slot: u32,
    pub(super) events: Vec<Handle>,
}

/// Why a new segment could not be had.
pub(super) enum SegmentFailure {
    /// Over the limit, or the driver said out of memory.
    OutOfMemory,
    Driver(DriverError),
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) allocated: u64,
    pub(super) requested: u64,
    pub(super) reserved: u64,
    pub(super) peak_allocated: u64,
    pub(super) peak_reserved: u64,
    pub(super) alloc_calls: u64,
    pub(super) free_calls: u64,
    pub(super) driver_allocs: u64,
    pub(super) driver_frees: u64,
    pub(super) cached: u64,
    pub(super) pending: u64,
    pub(super) ooms: u64,
    /// Address space reserved by expandable segments, and the part mapped.
    pub(super) virtual_reserved: u64,
    pub(super) expandable_mapped: u64,
}

#[derive(Debug, Default)]
pub(super) struct PoolState {
    pub(super) nodes: Vec<Node>,
    pub(super) vacant: Vec<u32>,
    pub(super) small: BTreeSet<FreeKey>,
    pub(super) large: BTreeSet<FreeKey>,
    pub(super) unmapped: BTreeSet<VaKey>,
    pub(super) segments: BTreeMap<u64, Segment>,
    pub(super) next_segment: u64,
    pub(super) pending: Vec<PendingFree>,
    /// Completed events, ready to be recorded again.
    pub(super) idle_events: Vec<Handle>,
    pub(super) counters: Counters,
    pub(super) limit: Option<u64>,
    /// Page size of expandable segments; `None`: plain segments only.
    pub(super) granularity: Option<u64>,
    /// Addresses reserved for a new expandable segment (more if one request
    /// needs more).
    pub(super) va_reserve: u64,
    pub(super) history: History,
}

impl PoolState {
    /// `expandable`: `Some((granularity, va_reserve))` for expandable segments.
    pub(super) fn new(limit: Option<u64>, expandable: Option<(u64, u64)>) -> PoolState {
        PoolState {
            limit,
            next_segment: 1,
            granularity: expandable.map(|e| e.0),
            va_reserve: expandable.map_or(0, |e| e.1),
            ..PoolState::default()
        }
    }

    pub(super) fn expandable(&self) -> bool {
        self.granularity.is_some()
    }

    // ----- slab -------------------------------------------------------------

    pub(super) fn new_node(&mut self, mut node: Node) -> u32 {
        match self.vacant.pop() {
            Some(slot) => {
                node.generation = self.nodes[slot as usize].generation;
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                let slot = u32::try_from(self.nodes.len()).expect("more than 2^32 blocks");
                assert!(slot != NIL, "more than 2^32 blocks");
                self.nodes.push(node);
                slot
            }
        }
    }

    pub(super) fn release_node(&mut self, slot: u32) {
        let node = &mut self.nodes[slot as usize];
        node.state = NodeState::Vacant;
        node.prev = NIL;
        node.next = NIL;
        node.uses = Vec::new();
        node.frames = None;
        self.vacant.push(slot);
    }

    #[inline]
    pub(super) fn node(&self, slot: u32) -> &Node {
        &self.nodes[slot as usize]
    }

    #[inline]
    pub(super) fn node_mut(&mut self, slot: u32) -> &mut Node {
        &mut self.nodes[slot as usize]
    }

    // ----- alloc ------------------------------------------------------------

    pub(super) fn alloc(
        &mut self,
        drv: &Driver,
        nbytes: u64,
        stream: Handle,
        frames: Option<Frames>,
    ) -> Result<Block, PoolError> {
        if !self.pending.is_empty() {
            self.process_pending(drv)?;
        }
        let Some(rounded) = round_size(nbytes) else {
            return Err(self.out_of_memory(drv, nbytes));
        };
        let kind = PoolKind::for_size(rounded);
        let slot = match self.take_best_fit(kind, stream, rounded) {
            Some(slot) => slot,
            None => self.grow(drv, kind, stream, rounded, nbytes)?,
        };
        debug_assert!(self.node(slot).size >= rounded);

        let node_size = self.node(slot).size;
        if should_split(kind, node_size, rounded, self.granularity.is_some()) {
            let (ptr, segment, next) = {
                let n = self.node(slot);
                (n.ptr, n.segment, n.next)
            };
            let rest = self.new_node(Node {
                ptr: ptr + rounded,
                size: node_size - rounded,
                requested: 0,
                stream,
                segment,
                prev: slot,
                next,
                generation: 0,
                kind,
                state: NodeState::Free,
                uses: Vec::new(),
                frames: None,
            });
            if next != NIL {
                self.node_mut(next).prev = rest;
            }
            let n = self.node_mut(slot);
            n.next = rest;
            n.size = rounded;
            self.insert_free(rest);
        }

        let n = self.node_mut(slot);
        n.state = NodeState::Live;
        n.requested = nbytes;
        n.frames = frames;
        // A new generation per allocation: stale copies of freed blocks that
        // lay in this slot no longer match.
        n.generation = n.generation.wrapping_add(1);
        let block = Block {
            ptr: n.ptr,
            size: n.size,
            requested: nbytes,
            stream: n.stream,
            segment: n.segment,
            slot,
            generation: n.generation,
        };
        let c = &mut self.counters;
        c.allocated += block.size;
        c.requested += nbytes;
        c.peak_allocated = c.peak_allocated.max(c.allocated);
        c.alloc_calls += 1;
        if self.history.enabled {
            let frames = self.node(slot).frames.clone();
            self.history
                .push(TraceAction::Alloc, block.ptr, block.size, stream, frames);
        }
        Ok(block)
    }

    /// No cached block fits: get a new segment, releasing the cache and
    /// retrying once when out of memory (or over the limit).
    fn grow(
        &mut self,
        drv: &Driver,
        kind: PoolKind,
        stream: Handle,
        rounded: u64,
        nbytes: u64,
    ) -> Result<u32, PoolError> {
        match self.add_memory(drv, kind, stream, rounded) {
            Ok(slot) => return Ok(slot),
            Err(SegmentFailure::Driver(e)) => return Err(e.into()),
            Err(SegmentFailure::OutOfMemory) => {}
        }
        // Release everything cached (as empty_cache does), then retry once.
        drv.device_synchronize()?;
        self.process_pending(drv)?;
        self.release_free_segments(drv)?;
        if let Some(slot) = self.take_best_fit(kind, stream, rounded) {
            return Ok(slot);
        }
        match self.add_memory(drv, kind, stream, rounded) {
            Ok(slot) => Ok(slot),
            Err(SegmentFailure::Driver(e)) => Err(e.into()),
            Err(SegmentFailure::OutOfMemory) => Err(self.out_of_memory(drv, nbytes)),
        }
    }

    /// A free block (not in the free sets) of at least `rounded` bytes made
    /// of new memory: mapped into an expandable segment, or a new segment.
    fn add_memory(
        &mut self,
        drv: &Driver,
        kind: PoolKind,
        stream: Handle,
        rounded: u64,
    ) -> Result<u32, SegmentFailure> {
        if self.granularity.is_some() {
            return self.expand(drv, kind, stream, rounded);
        }
        let seg_size = segment_size(rounded).ok_or(SegmentFailure::OutOfMemory)?;
        self.new_segment(drv, kind, stream, seg_size)
    }

    fn out_of_memory(&mut self, drv: &Driver, nbytes: u64) -> PoolError {
        self.counters.ooms += 1;
        if self.history.enabled {
            self.history.push(TraceAction::Oom, 0, nbytes, 0, None);
            if let Ok((free, _)) = drv.mem_get_info() {
                self.history.set_last_device_free(free);
            }
        }
        PoolError::OutOfMemory {
            requested: nbytes,
            limit: self.limit,
            device: drv.device(),
            stats: Box::new(self.stats()),
        }
    }
}
