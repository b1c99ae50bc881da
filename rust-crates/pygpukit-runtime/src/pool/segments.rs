//! Plain segments (one `mem_alloc` each): recording a new segment, handing
//! idle ones back to the driver, and tearing everything down at drop.

use super::config::PoolKind;
use super::history::TraceAction;
use super::state::{Node, NodeState, PoolState, Segment, SegmentFailure, NIL};
use crate::driver::{Driver, DriverError, Handle};

impl PoolState {
    /// Record a new segment at `ptr` whose one block (in `state`, not in any
    /// free set) covers it; returns the block's slot.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_segment(
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
    pub(super) fn new_segment(
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
}
