//! The caching memory pool behind every array, in GPU and CPU mode.
//!
//! A caching allocator in the spirit of PyTorch's CUDACachingAllocator:
//!
//! * Requests are rounded up to multiples of 512 B ([`config::round_size`]).
//!   Requests up to 1 MiB are served from 2 MiB "small" segments; larger
//!   ones from "large" segments (20 MiB for requests under 10 MiB, else the
//!   request rounded up to 2 MiB). The two pools never share segments.
//! * Expandable segments (the default where the driver table supports
//!   virtual memory; `PYGPUKIT_EXPANDABLE_SEGMENTS=0` turns them off): per
//!   stream and kind, one large range of addresses is reserved and pages of
//!   the table's granularity are mapped into it as blocks need them, next to
//!   the free blocks already there, so a large request after many small
//!   frees grows the segment instead of failing for fragmentation.
//!   [`Pool::empty_cache`] unmaps every page no block uses, in the middle of
//!   a segment too. Without them, segments come from `mem_alloc`.
//! * Segments come from the driver table's `mem_alloc`. A block is split when
//!   the rest is big enough ([`config::should_split`]); free blocks sit in
//!   ordered sets keyed by (stream, size, address) for best fit, and a freed
//!   block is merged with its free neighbours in the segment.
//! * Stream-aware reuse: a segment belongs to the stream it was allocated
//!   on and its blocks are reused only by allocations on that stream (work on
//!   one stream is ordered, so no synchronization is needed). A block used on
//!   other streams ([`Pool::record_stream`]) is parked at free until events
//!   recorded on those streams complete.
//! * Memory history ([`Pool::record_history`]): a bounded ring of events
//!   (alloc, free, segment map/unmap, oom) with the callers' stacks, in
//!   PyTorch's memory-snapshot terms.
//! * Cached blocks are reused without a driver call; [`Pool::empty_cache`]
//!   returns segments that hold no live block. On out of memory, or when a
//!   new segment would pass the limit, the cache is released and the
//!   allocation retried once before [`PoolError::OutOfMemory`].
//!
//! The pool is `Sync` (one mutex around the state; the alloc and free paths
//! are a few ordered-set operations). Policy above it (tasks, partitions,
//! quotas) can wrap [`Pool::alloc`]/[`Pool::free`] and account with the
//! [`Block`] descriptors, which carry size, stream and segment.

pub mod config;

mod block;
mod error;
mod history;
mod state;
mod stats;

// `PoolState`'s methods, by concern (see `state`).
mod expandable;
mod free_sets;
mod introspect;
mod segments;
mod stream_free;

#[cfg(test)]
mod tests;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use block::{Block, BlockSnapshot, BlockState, SegmentSnapshot};
pub use config::PoolKind;
pub use error::PoolError;
pub use history::{Frame, Frames, TraceAction, TraceEntry};
pub use stats::{format_bytes, PoolStats};

use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver::{Driver, DriverError, Handle};
use state::PoolState;

/// A caching allocator over one driver table (one device, or the host).
pub struct Pool {
    driver: Driver,
    state: Mutex<PoolState>,
    /// Mirror of the history's switch, read without the lock by callers
    /// that capture stacks only while recording.
    recording: AtomicBool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("driver", &self.driver)
            .field("limit", &self.limit())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pool {
    /// A pool over `driver`, optionally capping reserved bytes at `limit`,
    /// with expandable segments unless `PYGPUKIT_EXPANDABLE_SEGMENTS` says no
    /// (an unreadable value counts as unset) or the table cannot.
    pub fn new(driver: Driver, limit: Option<u64>) -> Pool {
        let expandable = config::expandable_from_env().unwrap_or(true);
        Pool::with_expandable(driver, limit, expandable)
    }

    /// [`Pool::new`] with expandable segments asked for (`true`) or not;
    /// asked for, they are used where the table supports virtual memory.
    pub fn with_expandable(driver: Driver, limit: Option<u64>, expandable: bool) -> Pool {
        let vmm = if expandable {
            vmm_config(&driver)
        } else {
            None
        };
        Pool {
            driver,
            state: Mutex::new(PoolState::new(limit, vmm)),
            recording: AtomicBool::new(false),
        }
    }

    /// A pool over the host table (CPU mode).
    pub fn host(limit: Option<u64>) -> Pool {
        Pool::new(Driver::host(), limit)
    }

    /// Whether the pool grows by mapping pages into expandable segments.
    pub fn expandable(&self) -> bool {
        self.lock().expandable()
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state is only mutated by code that does not panic midway; a
        // poisoned lock (a panic elsewhere while holding it) is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Allocate `nbytes` for use on `stream`.
    #[inline]
    pub fn alloc(&self, nbytes: u64, stream: Handle) -> Result<Block, PoolError> {
        self.lock().alloc(&self.driver, nbytes, stream, None)
    }

    /// [`Pool::alloc`] with the caller's stack for the memory history (kept
    /// only while recording).
    #[inline]
    pub fn alloc_traced(
        &self,
        nbytes: u64,
        stream: Handle,
        frames: Option<Frames>,
    ) -> Result<Block, PoolError> {
        self.lock().alloc(&self.driver, nbytes, stream, frames)
    }

    /// Free a block. Its memory is reused at once on its own stream, or once
    /// the other streams recorded with [`Pool::record_stream`] reach this
    /// point. On a driver error (recording an event) the block is still
    /// freed, after a device synchronize.
    #[inline]
    pub fn free(&self, block: &Block) -> Result<(), PoolError> {
        self.lock().free(&self.driver, block, None)
    }

    /// [`Pool::free`] with the caller's stack for the memory history.
    #[inline]
    pub fn free_traced(&self, block: &Block, frames: Option<Frames>) -> Result<(), PoolError> {
        self.lock().free(&self.driver, block, frames)
    }

    /// Start recording events (at most `max_entries` newest kept) or stop.
    /// Starting after a stop forgets the old events; stopping keeps them.
    pub fn record_history(&self, enabled: bool, max_entries: usize) {
        let mut st = self.lock();
        st.history.set(enabled, max_entries);
        self.recording.store(enabled, Ordering::Relaxed);
    }

    /// Whether events are being recorded (one relaxed load: callers check it
    /// before capturing a stack).
    #[inline]
    pub fn is_recording(&self) -> bool {
        self.recording.load(Ordering::Relaxed)
    }

    /// The recorded events, oldest first.
    pub fn history(&self) -> Vec<TraceEntry> {
        self.lock().history()
    }

    /// Note that `block` is used by work on `stream` as well as its own.
    pub fn record_stream(&self, block: &Block, stream: Handle) -> Result<(), PoolError> {
        self.lock().record_stream(block, stream)
    }

    /// Synchronize the device, finish pending frees and return every segment
    /// without live blocks to the driver. The synchronize runs without the
    /// pool lock, so other threads keep allocating meanwhile.
    pub fn empty_cache(&self) -> Result<(), DriverError> {
        self.driver.device_synchronize()?;
        let mut st = self.lock();
        st.process_pending(&self.driver)?;
        st.release_free_segments(&self.driver)
    }

    /// Free pending blocks whose events completed (alloc does this too).
    pub fn process_pending_frees(&self) -> Result<usize, DriverError> {
        self.lock().process_pending(&self.driver)
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats()
    }

    pub fn reset_peak_stats(&self) {
        self.lock().reset_peak_stats()
    }

    pub fn limit(&self) -> Option<u64> {
        self.lock().limit
    }

    /// Cap reserved bytes (`None`: no cap). Takes effect at the next segment
    /// allocation; memory already reserved is not released.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.lock().limit = limit;
    }

    /// Every segment and its blocks, for debugging and invariant checks.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        self.lock().snapshot()
    }
}

/// `(granularity, addresses per new segment)` when the table supports
/// virtual memory: a segment reserves the device's memory size, so one per
/// stream and kind is enough until the device is full.
fn vmm_config(driver: &Driver) -> Option<(u64, u64)> {
    let g = driver.vmm_granularity().ok().flatten()?;
    let total = driver
        .mem_get_info()
        .map_or(config::DEFAULT_VA_RESERVE, |(_, total)| total);
    let reserve = config::round_up(total.max(g), g)?;
    Some((g, reserve))
}

impl Drop for Pool {
    /// Synchronize, destroy the pooled events and free every segment.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        st.teardown(&self.driver);
    }
}
