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

use std::collections::{BTreeMap, BTreeSet};

use super::block::{Block, BlockSnapshot, BlockState, SegmentSnapshot};
use super::config::{round_size, round_up, segment_size, should_split, PoolKind};
use super::error::PoolError;
use super::history::{Frames, History, TraceAction, TraceEntry};
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
    /// Addresses of an expandable segment with no physical memory behind
    /// them; in the `unmapped` set.
    Unmapped,
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
    /// Stack of the allocation, while history is recorded with stacks.
    frames: Option<Frames>,
}

/// Key of the free sets: best fit is the first key >= (stream, size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FreeKey {
    stream: Handle,
    size: u64,
    ptr: u64,
    slot: u32,
}

/// Key of the unmapped sets: expandable ranges of (stream, kind) by address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct VaKey {
    stream: Handle,
    kind: PoolKind,
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
    /// Expandable segments: the physical chunk mapped at each page (0: none).
    chunks: Option<Vec<Handle>>,
    /// Bytes backed by physical memory (`size` for a plain segment).
    mapped: u64,
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
    /// Address space reserved by expandable segments, and the part mapped.
    virtual_reserved: u64,
    expandable_mapped: u64,
}

#[derive(Debug, Default)]
pub(super) struct PoolState {
    nodes: Vec<Node>,
    vacant: Vec<u32>,
    small: BTreeSet<FreeKey>,
    large: BTreeSet<FreeKey>,
    unmapped: BTreeSet<VaKey>,
    segments: BTreeMap<u64, Segment>,
    next_segment: u64,
    pending: Vec<PendingFree>,
    /// Completed events, ready to be recorded again.
    idle_events: Vec<Handle>,
    counters: Counters,
    pub(super) limit: Option<u64>,
    /// Page size of expandable segments; `None`: plain segments only.
    granularity: Option<u64>,
    /// Addresses reserved for a new expandable segment (more if one request
    /// needs more).
    va_reserve: u64,
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
        node.frames = None;
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

    fn va_key(&self, slot: u32) -> VaKey {
        let n = self.node(slot);
        VaKey {
            stream: n.stream,
            kind: n.kind,
            ptr: n.ptr,
            slot,
        }
    }

    fn insert_unmapped(&mut self, slot: u32) {
        let key = self.va_key(slot);
        self.node_mut(slot).state = NodeState::Unmapped;
        let inserted = self.unmapped.insert(key);
        debug_assert!(inserted);
    }

    fn remove_unmapped(&mut self, slot: u32) {
        let key = self.va_key(slot);
        let removed = self.unmapped.remove(&key);
        debug_assert!(removed);
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

    /// Record a new segment at `ptr` whose one block (in `state`, not in any
    /// free set) covers it; returns the block's slot.
    #[allow(clippy::too_many_arguments)]
    fn add_segment(
        &mut self,
        ptr: u64,
        size: u64,
        stream: Handle,
        kind: PoolKind,
        state: NodeState,
        chunks: Option<Vec<Handle>>,
        mapped: u64,
    ) -> u32 {
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
            state,
            uses: Vec::new(),
            frames: None,
        });
        self.segments.insert(
            id,
            Segment {
                ptr,
                size,
                stream,
                kind,
                head: slot,
                chunks,
                mapped,
            },
        );
        slot
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
        let slot = self.add_segment(ptr, size, stream, kind, NodeState::Free, None, size);
        let c = &mut self.counters;
        c.reserved += size;
        c.peak_reserved = c.peak_reserved.max(c.reserved);
        c.driver_allocs += 1;
        self.history
            .push(TraceAction::SegmentAlloc, ptr, size, stream, None);
        Ok(slot)
    }

    // ----- expandable segments ----------------------------------------------

    /// Map pages into an expandable segment of (`kind`, `stream`) so that a
    /// free block of at least `rounded` bytes forms: the first unmapped range
    /// that, with the free blocks on either side, is large enough; else a new
    /// segment's address range.
    fn expand(
        &mut self,
        drv: &Driver,
        kind: PoolKind,
        stream: Handle,
        rounded: u64,
    ) -> Result<u32, SegmentFailure> {
        let g = self
            .granularity
            .expect("expand without expandable segments");
        let from = VaKey {
            stream,
            kind,
            ptr: 0,
            slot: 0,
        };
        let free_size = |st: &PoolState, slot: u32| {
            if slot != NIL && st.node(slot).state == NodeState::Free {
                st.node(slot).size
            } else {
                0
            }
        };
        let fit = self
            .unmapped
            .range(from..)
            .take_while(|k| k.stream == stream && k.kind == kind)
            .find_map(|k| {
                let u = self.node(k.slot);
                let before = free_size(self, u.prev);
                let after = free_size(self, u.next);
                if before + u.size + after < rounded {
                    return None;
                }
                // Map from the range's start to the page that holds the end
                // of the block (which starts at the free block before).
                let need = rounded.saturating_sub(before).clamp(1, u.size);
                Some((k.slot, round_up(need, g)?.min(u.size)))
            });
        let (slot, len) = match fit {
            Some(fit) => fit,
            None => {
                let len = round_up(rounded, g).ok_or(SegmentFailure::OutOfMemory)?;
                // Over the limit: do not reserve addresses that cannot be mapped.
                if self
                    .limit
                    .is_some_and(|l| self.counters.reserved.saturating_add(len) > l)
                {
                    return Err(SegmentFailure::OutOfMemory);
                }
                let slot = self.new_expandable_segment(drv, kind, stream, len)?;
                (slot, len)
            }
        };
        self.map_front(drv, slot, len)
    }

    /// Reserve addresses for a new expandable segment of at least `min_size`
    /// bytes; returns its one `Unmapped` block.
    fn new_expandable_segment(
        &mut self,
        drv: &Driver,
        kind: PoolKind,
        stream: Handle,
        min_size: u64,
    ) -> Result<u32, SegmentFailure> {
        let size = self.va_reserve.max(min_size);
        let ptr = match drv.vmm_reserve(size) {
            Ok(ptr) => ptr,
            Err(e) if e.is_oom() => return Err(SegmentFailure::OutOfMemory),
            Err(e) => return Err(SegmentFailure::Driver(e)),
        };
        let pages = (size / self.granularity.unwrap_or(size)) as usize;
        let slot = self.add_segment(
            ptr,
            size,
            stream,
            kind,
            NodeState::Unmapped,
            Some(vec![0; pages]),
            0,
        );
        self.insert_unmapped(slot);
        self.counters.virtual_reserved += size;
        Ok(slot)
    }

    /// Map the first `len` bytes (whole pages) of the unmapped block `slot`
    /// and merge them with the free blocks around; returns the merged free
    /// block, taken out of the free sets.
    fn map_front(&mut self, drv: &Driver, slot: u32, len: u64) -> Result<u32, SegmentFailure> {
        let g = self
            .granularity
            .expect("map_front without expandable segments");
        if let Some(limit) = self.limit {
            if self.counters.reserved.saturating_add(len) > limit {
                return Err(SegmentFailure::OutOfMemory);
            }
        }
        let (ptr, size, seg_id, stream) = {
            let n = self.node(slot);
            (n.ptr, n.size, n.segment, n.stream)
        };
        let base = self.segments[&seg_id].ptr;
        let mut handles = Vec::with_capacity((len / g) as usize);
        for at in (ptr..ptr + len).step_by(g as usize) {
            // SAFETY: an unmapped page of a range reserved by this driver.
            match unsafe { drv.vmm_map(at, g) } {
                Ok(h) => handles.push(h),
                Err(e) => {
                    for (i, &h) in handles.iter().enumerate().rev() {
                        // SAFETY: mapped just now and not handed out.
                        let _ = unsafe { drv.vmm_unmap(ptr + i as u64 * g, g, h) };
                    }
                    return Err(if e.is_oom() {
                        SegmentFailure::OutOfMemory
                    } else {
                        SegmentFailure::Driver(e)
                    });
                }
            }
        }
        let seg = self.segments.get_mut(&seg_id).expect("segment of a block");
        let first = ((ptr - base) / g) as usize;
        let chunks = seg.chunks.as_mut().expect("map_front on a plain segment");
        chunks[first..first + handles.len()].copy_from_slice(&handles);
        seg.mapped += len;
        let c = &mut self.counters;
        c.reserved += len;
        c.expandable_mapped += len;
        c.peak_reserved = c.peak_reserved.max(c.reserved);
        c.driver_allocs += handles.len() as u64;
        self.history
            .push(TraceAction::SegmentMap, ptr, len, stream, None);

        self.remove_unmapped(slot);
        if len < size {
            self.split_off(slot, len, NodeState::Unmapped);
        }
        self.node_mut(slot).state = NodeState::Free;
        let merged = self.free_node(slot);
        self.remove_free(merged);
        Ok(merged)
    }

    /// Split `slot` at `at` bytes from its start; the upper part becomes a new
    /// block in `state`, put in the matching set. Returns the new slot.
    fn split_off(&mut self, slot: u32, at: u64, state: NodeState) -> u32 {
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

    /// Unmap the whole pages inside the free block `slot` of an expandable
    /// segment. The block is split into its free head, the unmapped pages
    /// (merged with unmapped neighbours) and its free tail. Stops at the
    /// first driver failure (the pages after it stay mapped).
    fn unmap_free_pages(&mut self, drv: &Driver, slot: u32) -> Result<(), DriverError> {
        let g = self.granularity.expect("unmap without expandable segments");
        let (ptr, size, seg_id, stream) = {
            let n = self.node(slot);
            (n.ptr, n.size, n.segment, n.stream)
        };
        let base = self.segments[&seg_id].ptr;
        let p0 = base + round_up(ptr - base, g).expect("page of a segment");
        let p1 = base + (ptr + size - base) / g * g;
        if p1 <= p0 {
            return Ok(());
        }
        let mut done = p0;
        let mut result = Ok(());
        while done < p1 {
            let page = ((done - base) / g) as usize;
            let seg = self.segments.get_mut(&seg_id).expect("segment of a block");
            let chunks = seg.chunks.as_mut().expect("unmap on a plain segment");
            // SAFETY: a mapped page inside a free block: no block uses it.
            if let Err(e) = unsafe { drv.vmm_unmap(done, g, chunks[page]) } {
                result = Err(e);
                break;
            }
            chunks[page] = 0;
            seg.mapped -= g;
            done += g;
        }
        if done == p0 {
            return result;
        }
        let len = done - p0;
        let c = &mut self.counters;
        c.reserved -= len;
        c.expandable_mapped -= len;
        c.driver_frees += len / g;
        self.history
            .push(TraceAction::SegmentUnmap, p0, len, stream, None);

        self.remove_free(slot);
        let mut hole = slot;
        if p0 > ptr {
            hole = self.split_off(slot, p0 - ptr, NodeState::Free);
            self.remove_free(hole);
        }
        if done < ptr + size {
            self.split_off(hole, len, NodeState::Free);
        }
        if hole != slot {
            self.insert_free(slot);
        }
        self.insert_unmapped_merged(hole);
        result
    }

    /// Make `slot` unmapped and merge it with unmapped neighbours.
    fn insert_unmapped_merged(&mut self, slot: u32) {
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

    pub(super) fn free(
        &mut self,
        drv: &Driver,
        block: &Block,
        frames: Option<Frames>,
    ) -> Result<(), PoolError> {
        let slot = self.live_slot(block)?;
        let (size, requested, has_uses) = {
            let n = self.node(slot);
            (n.size, n.requested, !n.uses.is_empty())
        };
        let c = &mut self.counters;
        c.allocated -= size;
        c.requested -= requested;
        c.free_calls += 1;
        if self.history.enabled {
            let frames = frames.or_else(|| self.node(slot).frames.clone());
            self.history.push(
                TraceAction::FreeRequested,
                block.ptr,
                size,
                block.stream,
                frames,
            );
        }
        if has_uses {
            self.free_after_events(drv, slot)
        } else {
            self.complete_free(slot);
            Ok(())
        }
    }

    /// The block is reusable now: record it and return it to the free sets.
    fn complete_free(&mut self, slot: u32) {
        if self.history.enabled {
            let n = self.node(slot);
            let frames = n.frames.clone();
            let (ptr, size, stream) = (n.ptr, n.size, n.stream);
            self.history
                .push(TraceAction::FreeCompleted, ptr, size, stream, frames);
        }
        self.free_node(slot);
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
                    self.complete_free(slot);
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
            self.complete_free(p.slot);
            done += 1;
        }
        Ok(done)
    }

    /// Return a block to the free set of its stream, merging it with free
    /// neighbours of the same segment; returns the merged block.
    fn free_node(&mut self, slot: u32) -> u32 {
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

    // ----- cache release ----------------------------------------------------

    /// `mem_free` every plain segment that is one free block; unmap the free
    /// pages of expandable segments and release the address range of those
    /// left without a mapped page. Keeps going after a failure (that memory
    /// stays) and returns the first error.
    pub(super) fn release_free_segments(&mut self, drv: &Driver) -> Result<(), DriverError> {
        let mut first_err = None;
        if self.granularity.is_some() {
            if let Err(e) = self.release_expandable(drv) {
                first_err.get_or_insert(e);
            }
        }
        let idle: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| {
                let head = self.node(s.head);
                s.chunks.is_none() && head.state == NodeState::Free && head.size == s.size
            })
            .map(|(&id, _)| id)
            .collect();
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
                    let seg = self.segments.remove(&id).expect("idle segment");
                    self.counters.reserved -= size;
                    self.counters.driver_frees += 1;
                    self.history
                        .push(TraceAction::SegmentFree, ptr, size, seg.stream, None);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn release_expandable(&mut self, drv: &Driver) -> Result<(), DriverError> {
        let mut first_err = None;
        let ids: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| s.chunks.is_some())
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let mut free = Vec::new();
            let mut slot = self.segments[&id].head;
            while slot != NIL {
                if self.node(slot).state == NodeState::Free {
                    free.push(slot);
                }
                slot = self.node(slot).next;
            }
            // Free blocks are never adjacent, so splitting one (and merging
            // its hole with unmapped neighbours) leaves the others in place.
            for slot in free {
                if let Err(e) = self.unmap_free_pages(drv, slot) {
                    first_err.get_or_insert(e);
                }
            }
            let (ptr, size, head) = {
                let s = &self.segments[&id];
                (s.ptr, s.size, s.head)
            };
            if self.node(head).state != NodeState::Unmapped || self.node(head).size != size {
                continue;
            }
            // SAFETY: nothing is mapped in the range any more.
            match unsafe { drv.vmm_free_range(ptr, size) } {
                Ok(()) => {
                    self.remove_unmapped(head);
                    self.release_node(head);
                    self.segments.remove(&id);
                    self.counters.virtual_reserved -= size;
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
            match seg.chunks {
                None => {
                    let _ = unsafe { drv.mem_free(seg.ptr) };
                }
                Some(chunks) => {
                    let g = self.granularity.unwrap_or(seg.size);
                    for (i, &h) in chunks.iter().enumerate() {
                        if h != 0 {
                            let _ = unsafe { drv.vmm_unmap(seg.ptr + i as u64 * g, g, h) };
                        }
                    }
                    let _ = unsafe { drv.vmm_free_range(seg.ptr, seg.size) };
                }
            }
        }
        self.nodes.clear();
        self.vacant.clear();
        self.small.clear();
        self.large.clear();
        self.unmapped.clear();
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
