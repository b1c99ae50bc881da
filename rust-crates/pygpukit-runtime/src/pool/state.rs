//! The allocator proper: segments, blocks and free lists. Everything here
//! runs under the pool's mutex; driver calls go through the `&Driver` that
//! the caller passes in.

use std::collections::{BTreeMap, BTreeSet};

use super::block::{Block, BlockSnapshot, BlockState, SegmentSnapshot};
use super::config::{round_size, segment_size, should_split, PoolKind};
use super::error::PoolError;
use super::stats::PoolStats;
use crate::driver::{Driver, DriverError, Handle};

/// "No neighbour" in the prev/next links.
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeState {
    /// Slot not in use.
    Vacant,
    Live,
    /// Free and in the free set of its pool kind.
    Free,
    /// Freed by the user, waiting for events.
    Pending,
}

/// A block of a segment (live, free or pending), kept in a slab.
#[derive(Debug)]
struct Node {
    ptr: u64,
    size: u64,
    requested: u64,
    stream: Handle,
    segment: u64,
    /// Neighbours in the same segment, by address.
    prev: u32,
    next: u32,
    generation: u32,
    kind: PoolKind,
    state: NodeState,
    /// Streams other than `stream` that used the block (`record_stream`).
    uses: Vec<Handle>,
}

/// Key of the free sets: best fit is the first key >= (stream, size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FreeKey {
    stream: Handle,
    size: u64,
    ptr: u64,
    slot: u32,
}

#[derive(Debug)]
struct Segment {
    ptr: u64,
    size: u64,
    stream: Handle,
    kind: PoolKind,
    /// Slot of the block at `ptr`; stable because merges keep the lower block.
    head: u32,
}

#[derive(Debug)]
struct PendingFree {
    slot: u32,
    events: Vec<Handle>,
}

/// Why a new segment could not be had.
enum SegmentFailure {
    /// Over the limit, or the driver said out of memory.
    OutOfMemory,
    Driver(DriverError),
}

#[derive(Debug, Default)]
struct Counters {
    allocated: u64,
    requested: u64,
    reserved: u64,
    peak_allocated: u64,
    peak_reserved: u64,
    alloc_calls: u64,
    free_calls: u64,
    driver_allocs: u64,
    driver_frees: u64,
    cached: u64,
    pending: u64,
    ooms: u64,
}

#[derive(Debug, Default)]
pub(super) struct PoolState {
    nodes: Vec<Node>,
    vacant: Vec<u32>,
    small: BTreeSet<FreeKey>,
    large: BTreeSet<FreeKey>,
    segments: BTreeMap<u64, Segment>,
    next_segment: u64,
    pending: Vec<PendingFree>,
    /// Completed events, ready to be recorded again.
    idle_events: Vec<Handle>,
    counters: Counters,
    pub(super) limit: Option<u64>,
}

impl PoolState {
    pub(super) fn new(limit: Option<u64>) -> PoolState {
        PoolState {
            limit,
            next_segment: 1,
            ..PoolState::default()
        }
    }

    // ----- slab -------------------------------------------------------------

    fn new_node(&mut self, mut node: Node) -> u32 {
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

    fn release_node(&mut self, slot: u32) {
        let node = &mut self.nodes[slot as usize];
        node.state = NodeState::Vacant;
        node.prev = NIL;
        node.next = NIL;
        node.uses = Vec::new();
        self.vacant.push(slot);
    }

    #[inline]
    fn node(&self, slot: u32) -> &Node {
        &self.nodes[slot as usize]
    }

    #[inline]
    fn node_mut(&mut self, slot: u32) -> &mut Node {
        &mut self.nodes[slot as usize]
    }

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

    fn insert_free(&mut self, slot: u32) {
        let key = self.free_key(slot);
        let kind = self.node(slot).kind;
        let node = self.node_mut(slot);
        node.state = NodeState::Free;
        node.requested = 0;
        self.counters.cached += key.size;
        let inserted = self.free_set(kind).insert(key);
        debug_assert!(inserted);
    }

    fn remove_free(&mut self, slot: u32) {
        let key = self.free_key(slot);
        let kind = self.node(slot).kind;
        let removed = self.free_set(kind).remove(&key);
        debug_assert!(removed);
        self.counters.cached -= key.size;
    }

    /// Best fit: the smallest free block of `stream` with at least `size` bytes.
    fn take_best_fit(&mut self, kind: PoolKind, stream: Handle, size: u64) -> Option<u32> {
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

    // ----- alloc ------------------------------------------------------------

    pub(super) fn alloc(
        &mut self,
        drv: &Driver,
        nbytes: u64,
        stream: Handle,
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

        let node_size = self.node(slot).size;
        if should_split(kind, node_size, rounded) {
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
        let Some(seg_size) = segment_size(rounded) else {
            return Err(self.out_of_memory(drv, nbytes));
        };
        match self.new_segment(drv, kind, stream, seg_size) {
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
        match self.new_segment(drv, kind, stream, seg_size) {
            Ok(slot) => Ok(slot),
            Err(SegmentFailure::Driver(e)) => Err(e.into()),
            Err(SegmentFailure::OutOfMemory) => Err(self.out_of_memory(drv, nbytes)),
        }
    }

    fn out_of_memory(&mut self, drv: &Driver, nbytes: u64) -> PoolError {
        self.counters.ooms += 1;
        PoolError::OutOfMemory {
            requested: nbytes,
            limit: self.limit,
            device: drv.device(),
            stats: Box::new(self.stats()),
        }
    }

    /// A new segment as one free block (not in the free sets).
    fn new_segment(
        &mut self,
        drv: &Driver,
        kind: PoolKind,
        stream: Handle,
        size: u64,
    ) -> Result<u32, SegmentFailure> {
        if let Some(limit) = self.limit {
            if self.counters.reserved.saturating_add(size) > limit {
                return Err(SegmentFailure::OutOfMemory);
            }
        }
        let ptr = match drv.mem_alloc(size) {
            Ok(ptr) => ptr,
            Err(e) if e.is_oom() => return Err(SegmentFailure::OutOfMemory),
            Err(e) => return Err(SegmentFailure::Driver(e)),
        };
        let id = self.next_segment;
        self.next_segment += 1;
        let slot = self.new_node(Node {
            ptr,
            size,
            requested: 0,
            stream,
            segment: id,
            prev: NIL,
            next: NIL,
            generation: 0,
            kind,
            state: NodeState::Free,
            uses: Vec::new(),
        });
        self.segments.insert(
            id,
            Segment {
                ptr,
                size,
                stream,
                kind,
                head: slot,
            },
        );
        let c = &mut self.counters;
        c.reserved += size;
        c.peak_reserved = c.peak_reserved.max(c.reserved);
        c.driver_allocs += 1;
        Ok(slot)
    }

    // ----- free -------------------------------------------------------------

    fn live_slot(&self, block: &Block) -> Result<u32, PoolError> {
        match self.nodes.get(block.slot as usize) {
            Some(n)
                if n.state == NodeState::Live
                    && n.generation == block.generation
                    && n.ptr == block.ptr =>
            {
                Ok(block.slot)
            }
            _ => Err(PoolError::InvalidBlock { ptr: block.ptr }),
        }
    }

    pub(super) fn record_stream(&mut self, block: &Block, stream: Handle) -> Result<(), PoolError> {
        let slot = self.live_slot(block)?;
        let n = self.node_mut(slot);
        if stream != n.stream && !n.uses.contains(&stream) {
            n.uses.push(stream);
        }
        Ok(())
    }

    pub(super) fn free(&mut self, drv: &Driver, block: &Block) -> Result<(), PoolError> {
        let slot = self.live_slot(block)?;
        let (size, requested, has_uses) = {
            let n = self.node(slot);
            (n.size, n.requested, !n.uses.is_empty())
        };
        let c = &mut self.counters;
        c.allocated -= size;
        c.requested -= requested;
        c.free_calls += 1;
        if has_uses {
            self.free_after_events(drv, slot)
        } else {
            self.free_node(slot);
            Ok(())
        }
    }

    /// The block was used on other streams: record an event on each and park
    /// the block until they complete.
    fn free_after_events(&mut self, drv: &Driver, slot: u32) -> Result<(), PoolError> {
        let uses = std::mem::take(&mut self.node_mut(slot).uses);
        let mut events = Vec::with_capacity(uses.len());
        for &stream in &uses {
            match self.record_event(drv, stream) {
                Ok(event) => events.push(event),
                Err(e) => {
                    // Cannot fence the block: wait for the whole device, then
                    // free it; report the failure.
                    self.idle_events.extend(events);
                    let _ = drv.device_synchronize();
                    self.free_node(slot);
                    return Err(e.into());
                }
            }
        }
        let n = self.node_mut(slot);
        n.state = NodeState::Pending;
        let size = n.size;
        self.counters.pending += size;
        self.pending.push(PendingFree { slot, events });
        Ok(())
    }

    fn record_event(&mut self, drv: &Driver, stream: Handle) -> Result<Handle, DriverError> {
        let event = match self.idle_events.pop() {
            Some(e) => e,
            None => drv.event_create()?,
        };
        if let Err(e) = drv.event_record(event, stream) {
            self.idle_events.push(event);
            return Err(e);
        }
        Ok(event)
    }

    /// Free pending blocks whose events all completed; returns how many.
    pub(super) fn process_pending(&mut self, drv: &Driver) -> Result<usize, DriverError> {
        let mut done = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let mut ready = true;
            for &event in &self.pending[i].events {
                if !drv.event_query(event)? {
                    ready = false;
                    break;
                }
            }
            if !ready {
                i += 1;
                continue;
            }
            let p = self.pending.swap_remove(i);
            self.idle_events.extend(p.events);
            self.counters.pending -= self.node(p.slot).size;
            self.free_node(p.slot);
            done += 1;
        }
        Ok(done)
    }

    /// Return a block to the free set of its stream, merging it with free
    /// neighbours of the same segment.
    fn free_node(&mut self, slot: u32) {
        let mut slot = slot;
        let prev = self.node(slot).prev;
        if prev != NIL && self.node(prev).state == NodeState::Free {
            self.remove_free(prev);
            self.absorb_next(prev);
            slot = prev;
        }
        let next = self.node(slot).next;
        if next != NIL && self.node(next).state == NodeState::Free {
            self.remove_free(next);
            self.absorb_next(slot);
        }
        self.insert_free(slot);
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

    // ----- cache release ----------------------------------------------------

    /// `mem_free` every segment that is one free block. Keeps going after a
    /// failure (that segment stays) and returns the first error.
    pub(super) fn release_free_segments(&mut self, drv: &Driver) -> Result<(), DriverError> {
        let idle: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| {
                let head = self.node(s.head);
                head.state == NodeState::Free && head.size == s.size
            })
            .map(|(&id, _)| id)
            .collect();
        let mut first_err = None;
        for id in idle {
            let (ptr, size, head) = {
                let s = &self.segments[&id];
                (s.ptr, s.size, s.head)
            };
            // SAFETY: the segment came from this driver and holds no live block.
            match unsafe { drv.mem_free(ptr) } {
                Ok(()) => {
                    self.remove_free(head);
                    self.release_node(head);
                    self.segments.remove(&id);
                    self.counters.reserved -= size;
                    self.counters.driver_frees += 1;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Give everything back at pool drop (blocks still live are released too).
    pub(super) fn teardown(&mut self, drv: &Driver) {
        let _ = drv.device_synchronize();
        for p in std::mem::take(&mut self.pending) {
            self.idle_events.extend(p.events);
        }
        for event in std::mem::take(&mut self.idle_events) {
            let _ = drv.event_destroy(event);
        }
        for (_, seg) in std::mem::take(&mut self.segments) {
            // SAFETY: the device is idle and the pool is going away.
            let _ = unsafe { drv.mem_free(seg.ptr) };
        }
        self.nodes.clear();
        self.vacant.clear();
        self.small.clear();
        self.large.clear();
    }

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
        }
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
                        NodeState::Vacant => unreachable!("vacant slot linked into segment {id}"),
                    };
                    blocks.push(BlockSnapshot {
                        ptr: n.ptr,
                        size: n.size,
                        requested: n.requested,
                        state,
                    });
                    slot = n.next;
                }
                SegmentSnapshot {
                    id,
                    ptr: s.ptr,
                    size: s.size,
                    stream: s.stream,
                    kind: s.kind,
                    blocks,
                }
            })
            .collect()
    }
}
