//! Memory history: a bounded ring of allocator events, in the terms of
//! PyTorch's memory snapshots (`torch.cuda.memory._snapshot()`), so that
//! pytorch.org/memory_viz can show them.
//!
//! Recording is off by default and costs one branch per event while off. The
//! stack frames are supplied by the caller (the Python bindings capture them);
//! this crate only stores them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// One frame of the stack an event was recorded from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub filename: Arc<str>,
    pub line: u32,
    pub name: Arc<str>,
}

/// A stack, innermost frame first (shared by the event and its block).
pub type Frames = Arc<[Frame]>;

/// What happened. The names are those of PyTorch's trace entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// A block was freed by its user.
    FreeRequested,
    /// A freed block became reusable (at once, or after other streams' events).
    FreeCompleted,
    /// A plain segment was allocated from the driver (`cuMemAlloc`).
    SegmentAlloc,
    /// A plain segment was returned to the driver.
    SegmentFree,
    /// Physical memory was mapped into an expandable segment.
    SegmentMap,
    /// Physical memory of an expandable segment was unmapped and released.
    SegmentUnmap,
    /// An allocation failed with out of memory (`size` is the request).
    Oom,
}

impl TraceAction {
    /// PyTorch's name of the action ("alloc", "free_requested", ...).
    pub fn name(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
        }
    }
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    pub action: TraceAction,
    /// Address of the block or mapped range (0 for `Oom`).
    pub addr: u64,
    /// Bytes of the block or range; the request for `Oom`.
    pub size: u64,
    pub stream: u64,
    /// Microseconds since the Unix epoch.
    pub time_us: u64,
    /// Free device memory the driver reported (`Oom` only, else 0).
    pub device_free: u64,
    pub frames: Option<Frames>,
}

/// The ring. Lives in the pool state, under the pool's lock.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) enabled: bool,
    max_entries: usize,
    entries: VecDeque<TraceEntry>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl History {
    /// Start (keeping at most `max_entries` events, at least one) or stop
    /// recording. Starting after a stop clears the old events; stopping
    /// keeps them for a snapshot.
    pub(super) fn set(&mut self, enabled: bool, max_entries: usize) {
        if enabled {
            if !self.enabled {
                self.entries.clear();
            }
            self.max_entries = max_entries.max(1);
            while self.entries.len() > self.max_entries {
                self.entries.pop_front();
            }
        }
        self.enabled = enabled;
    }

    #[inline]
    pub(super) fn push(
        &mut self,
        action: TraceAction,
        addr: u64,
        size: u64,
        stream: u64,
        frames: Option<Frames>,
    ) {
        if !self.enabled {
            return;
        }
        if self.entries.len() == self.max_entries {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us: now_us(),
            device_free: 0,
            frames,
        });
    }

    /// Set `device_free` of the last event (an `Oom` just pushed).
    pub(super) fn set_last_device_free(&mut self, bytes: u64) {
        if let Some(e) = self.entries.back_mut() {
            e.device_free = bytes;
        }
    }

    pub(super) fn entries(&self) -> Vec<TraceEntry> {
        self.entries.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_entries() {
        let mut h = History::default();
        h.push(TraceAction::Alloc, 1, 1, 0, None);
        assert!(h.entries().is_empty(), "off by default");
        h.set(true, 3);
        for i in 0..5 {
            h.push(TraceAction::Alloc, i, 512, 0, None);
        }
        let addrs: Vec<u64> = h.entries().iter().map(|e| e.addr).collect();
        assert_eq!(addrs, vec![2, 3, 4]);
        h.set(true, 2); // shrinking drops the oldest
        assert_eq!(h.entries()[0].addr, 3);
        h.set(false, 0); // stopping keeps the events
        h.push(TraceAction::Alloc, 9, 1, 0, None);
        assert_eq!(h.entries().len(), 2);
        h.set(true, 10); // a new start clears them
        assert!(h.entries().is_empty());
        assert_eq!(TraceAction::SegmentUnmap.name(), "segment_unmap");
        assert_eq!(TraceAction::FreeRequested.name(), "free_requested");
    }
}
