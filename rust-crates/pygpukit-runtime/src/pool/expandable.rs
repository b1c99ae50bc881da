//! Expandable segments: reserving address ranges, mapping pages in front of
//! free blocks as allocations need them, and unmapping the pages no block
//! uses when the cache is released.

use super::config::{round_up, PoolKind};
use super::history::TraceAction;
use super::state::{NodeState, PoolState, SegmentFailure, VaKey, NIL};
use crate::driver::{Driver, DriverError, Handle};

impl PoolState {
    // ----- expandable segments ----------------------------------------------

    /// Map pages into an expandable segment of (`kind`, `stream`) so that a
    /// free block of at least `rounded` bytes forms: the first unmapped range
    /// that, with the free blocks on either side, is large enough; else a new
    /// segment's address range.
    pub(super) fn expand(
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

    pub(super) fn release_expandable(&mut self, drv: &Driver) -> Result<(), DriverError> {
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
}
