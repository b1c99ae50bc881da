//! Counters of the transfer engine.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::Direction;

/// A snapshot of the engine's counters since it was created. Times are
/// host wall time summed over calls (concurrent calls add up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    pub h2d_transfers: u64,
    pub h2d_bytes: u64,
    pub d2h_transfers: u64,
    pub d2h_bytes: u64,
    /// Chunks moved through staging buffers.
    pub chunks: u64,
    /// Times a thread found its staging buffer still in use and waited for it.
    pub staging_waits: u64,
    /// Pinned staging memory allocated.
    pub staging_bytes: u64,
    /// Time inside transfer calls.
    pub busy_ns: u64,
    /// Time spent copying between pageable and staging memory.
    pub host_copy_ns: u64,
    /// Time spent waiting for staging buffers (the DMA was the bottleneck).
    pub wait_ns: u64,
}

impl TransferStats {
    /// Every counter by name, in a stable order (for dicts and logs).
    pub fn fields(&self) -> [(&'static str, u64); 10] {
        [
            ("h2d_transfers", self.h2d_transfers),
            ("h2d_bytes", self.h2d_bytes),
            ("d2h_transfers", self.d2h_transfers),
            ("d2h_bytes", self.d2h_bytes),
            ("chunks", self.chunks),
            ("staging_waits", self.staging_waits),
            ("staging_bytes", self.staging_bytes),
            ("busy_ns", self.busy_ns),
            ("host_copy_ns", self.host_copy_ns),
            ("wait_ns", self.wait_ns),
        ]
    }
}

#[derive(Default)]
pub(super) struct Counters {
    h2d_transfers: AtomicU64,
    h2d_bytes: AtomicU64,
    d2h_transfers: AtomicU64,
    d2h_bytes: AtomicU64,
    chunks: AtomicU64,
    staging_waits: AtomicU64,
    busy_ns: AtomicU64,
    host_copy_ns: AtomicU64,
    wait_ns: AtomicU64,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Counters {
    pub fn add_chunk(&self) {
        self.chunks.fetch_add(1, Relaxed);
    }

    pub fn add_host_copy(&self, d: Duration) {
        self.host_copy_ns.fetch_add(ns(d), Relaxed);
    }

    pub fn add_wait(&self, d: Duration) {
        self.staging_waits.fetch_add(1, Relaxed);
        self.wait_ns.fetch_add(ns(d), Relaxed);
    }

    pub fn finish(&self, direction: Direction, nbytes: u64, busy: Duration) {
        let (count, bytes) = match direction {
            Direction::HostToDevice => (&self.h2d_transfers, &self.h2d_bytes),
            Direction::DeviceToHost => (&self.d2h_transfers, &self.d2h_bytes),
        };
        count.fetch_add(1, Relaxed);
        bytes.fetch_add(nbytes, Relaxed);
        self.busy_ns.fetch_add(ns(busy), Relaxed);
    }

    pub fn snapshot(&self, staging_bytes: u64) -> TransferStats {
        TransferStats {
            h2d_transfers: self.h2d_transfers.load(Relaxed),
            h2d_bytes: self.h2d_bytes.load(Relaxed),
            d2h_transfers: self.d2h_transfers.load(Relaxed),
            d2h_bytes: self.d2h_bytes.load(Relaxed),
            chunks: self.chunks.load(Relaxed),
            staging_waits: self.staging_waits.load(Relaxed),
            staging_bytes,
            busy_ns: self.busy_ns.load(Relaxed),
            host_copy_ns: self.host_copy_ns.load(Relaxed),
            wait_ns: self.wait_ns.load(Relaxed),
        }
    }
}
