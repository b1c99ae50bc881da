//! Invariant checks shared by the integration tests.

#![allow(dead_code)]

use std::collections::HashMap;

use pygpukit_runtime::pool::{Block, BlockState, Pool};

/// Check every structural and accounting invariant of `pool`, given the
/// blocks the test believes are live. Returns a description of the first
/// violation.
pub fn check_invariants(pool: &Pool, live: &[Block], limit: Option<u64>) -> Result<(), String> {
    let stats = pool.stats();
    let snap = pool.snapshot();

    let mut segs: Vec<_> = snap.iter().collect();
    segs.sort_by_key(|s| s.ptr);
    for w in segs.windows(2) {
        if w[0].ptr + w[0].size > w[1].ptr {
            return Err(format!("segments {} and {} overlap", w[0].id, w[1].id));
        }
    }

    let mut live_in_snap: HashMap<u64, (u64, u64, u64)> = HashMap::new(); // ptr -> (size, segment, requested)
    let (mut cached, mut pending, mut allocated) = (0u64, 0u64, 0u64);
    let (mut n_cached, mut n_pending) = (0u64, 0u64);
    let mut largest = 0u64;
    for seg in &snap {
        // Every byte of the segment is in exactly one block, in address order.
        let mut at = seg.ptr;
        let mut prev_cached = false;
        let mut prev_unmapped = false;
        let mut backed = 0u64;
        for b in &seg.blocks {
            if b.ptr != at {
                return Err(format!(
                    "segment {}: gap or overlap at 0x{:x} (block at 0x{:x})",
                    seg.id, at, b.ptr
                ));
            }
            if b.size == 0 || b.size % 512 != 0 {
                return Err(format!("block 0x{:x} has size {}", b.ptr, b.size));
            }
            at += b.size;
            if b.state != BlockState::Unmapped {
                backed += b.size;
            }
            match b.state {
                BlockState::Live => {
                    allocated += b.size;
                    live_in_snap.insert(b.ptr, (b.size, seg.id, b.requested));
                }
                BlockState::Cached => {
                    if prev_cached {
                        return Err(format!(
                            "segment {}: adjacent free blocks not coalesced",
                            seg.id
                        ));
                    }
                    cached += b.size;
                    n_cached += 1;
                    largest = largest.max(b.size);
                }
                BlockState::Pending => {
                    pending += b.size;
                    n_pending += 1;
                }
                BlockState::Unmapped => {
                    if !seg.expandable || prev_unmapped {
                        return Err(format!(
                            "segment {}: unmapped block 0x{:x} misplaced",
                            seg.id, b.ptr
                        ));
                    }
                }
            }
            prev_cached = b.state == BlockState::Cached;
            prev_unmapped = b.state == BlockState::Unmapped;
        }
        if backed != seg.mapped {
            return Err(format!(
                "segment {}: {} bytes in mapped blocks, {} mapped",
                seg.id, backed, seg.mapped
            ));
        }
        if seg.expandable && seg.chunks > 0 && seg.mapped % seg.chunks != 0 {
            return Err(format!("segment {}: uneven chunks", seg.id));
        }
        if at != seg.ptr + seg.size {
            return Err(format!(
                "segment {}: blocks end at 0x{:x}, segment at 0x{:x}",
                seg.id,
                at,
                seg.ptr + seg.size
            ));
        }
    }

    if live_in_snap.len() != live.len() {
        return Err(format!(
            "{} live blocks in the pool, {} expected",
            live_in_snap.len(),
            live.len()
        ));
    }
    let mut requested = 0;
    for b in live {
        match live_in_snap.get(&b.ptr) {
            Some(&(size, seg, req)) if size == b.size && seg == b.segment && req == b.requested => {
            }
            other => {
                return Err(format!(
                    "live block {b:?} does not match the pool's {other:?}"
                ))
            }
        }
        requested += b.requested;
    }

    let reserved: u64 = snap.iter().map(|s| s.mapped).sum();
    let chunks: u64 = snap.iter().map(|s| s.chunks).sum();
    let expect = [
        ("allocated_bytes", stats.allocated_bytes, allocated),
        ("requested_bytes", stats.requested_bytes, requested),
        ("reserved_bytes", stats.reserved_bytes, reserved),
        ("cached_bytes", stats.cached_bytes, cached),
        ("pending_bytes", stats.pending_bytes, pending),
        ("num_cached_blocks", stats.num_cached_blocks, n_cached),
        ("num_pending_frees", stats.num_pending_frees, n_pending),
        ("num_segments", stats.num_segments, snap.len() as u64),
        ("largest_free_block", stats.largest_free_block, largest),
        (
            "num_driver_allocs - num_driver_frees",
            stats.num_driver_allocs - stats.num_driver_frees,
            chunks,
        ),
        (
            "fragmentation_bytes",
            stats.fragmentation_bytes,
            reserved - allocated,
        ),
    ];
    for (name, got, want) in expect {
        if got != want {
            return Err(format!("{name} is {got}, recomputed {want}"));
        }
    }
    if stats.peak_allocated_bytes < stats.allocated_bytes
        || stats.peak_reserved_bytes < stats.reserved_bytes
    {
        return Err("peak below current".into());
    }
    if let Some(limit) = limit {
        if stats.reserved_bytes > limit {
            return Err(format!(
                "reserved {} above the limit {limit}",
                stats.reserved_bytes
            ));
        }
    }
    Ok(())
}
