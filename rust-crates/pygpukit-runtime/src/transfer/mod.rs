//! The transfer engine: host <-> device copies of pageable host memory,
//! pipelined through a ring of pinned staging buffers on dedicated copy
//! streams.
//!
//! * Host to device: the source is cut into chunks of `chunk_bytes`. Each
//!   chunk takes a free staging buffer (waiting for the event of its previous
//!   copy), is copied into it on the host, and is queued with `memcpy_async`
//!   on the copy stream, followed by the buffer's event. So the host copy of
//!   chunk i+1 overlaps the DMA of chunk i. The call returns once every chunk
//!   is queued: the source may then be reused, the device copy completes
//!   when the [`Transfer`]'s event does.
//! * Device to host: as many chunks as there are free buffers are queued
//!   (DMA into staging), then the oldest is waited for and copied out while
//!   the others are in flight, and its buffer queued again. The call returns
//!   when the data is in the destination.
//! * Priorities: [`Priority::High`] transfers run on the high-priority copy
//!   stream and go first when threads wait for a staging buffer;
//!   [`Priority::Normal`] and [`Priority::Low`] share the low-priority stream,
//!   and a low-priority transfer never takes the last free buffer (a bulk
//!   prefetch cannot starve an interactive copy of staging).
//! * The copy streams are created by the caller (the driver table cannot
//!   create streams) and must outlive the engine. Ordering against other
//!   streams is the caller's business too: a device-to-host copy must be
//!   queued after the work that produces its source (make the copy stream
//!   wait for an event), and a consumer stream must wait for
//!   [`Transfer::event`] before it reads a host-to-device destination.
//!
//! The engine is `Sync`: one mutex guards the ring (held only to pick or
//! return a buffer); host copies, waits and driver calls run without it, so
//! several threads transfer at once. Host copies of large chunks are split
//! over `copy_threads` threads. Staging memory is allocated at the first
//! transfer. With the host driver table (CPU mode) every copy is a
//! synchronous memmove and every event is complete: the same code runs in CI.

mod error;
mod ring;
mod stats;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

pub use error::TransferError;
pub use stats::TransferStats;

use crate::driver::{Driver, Handle};
use ring::{Lease, Ring};
use stats::Counters;

/// Quality-of-service tier of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Priority {
    High,
    Normal,
    Low,
}

impl Priority {
    pub fn name(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }
}

impl std::str::FromStr for Priority {
    type Err = TransferError;

    fn from_str(s: &str) -> Result<Priority, TransferError> {
        match s {
            "high" => Ok(Priority::High),
            "normal" => Ok(Priority::Normal),
            "low" => Ok(Priority::Low),
            _ => Err(TransferError::InvalidArgument(format!(
                "priority must be 'high', 'normal' or 'low', got {s:?}"
            ))),
        }
    }
}

/// Direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToDevice,
    DeviceToHost,
}

/// Sizes of the staging ring and of the host copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferConfig {
    /// Bytes per chunk, and size of each staging buffer.
    pub chunk_bytes: u64,
    /// Number of pinned staging buffers in the ring.
    pub staging_buffers: usize,
    /// Threads that share the host copy of one chunk (1: the calling thread only).
    pub copy_threads: usize,
}

/// Largest accepted `chunk_bytes` and `staging_buffers * chunk_bytes` (pinned
/// memory is taken from the OS's page-locked budget).
pub const MAX_STAGING_BYTES: u64 = 4 << 30;
pub const MAX_STAGING_BUFFERS: usize = 64;
pub const MAX_COPY_THREADS: usize = 64;

impl Default for TransferConfig {
    /// 4 x 8 MiB: enough chunks in flight to hide one host copy behind one
    /// DMA, small enough that a short transfer still pipelines. Host copies
    /// use up to 4 threads: one thread's memcpy from pageable memory (about
    /// 10 GB/s) is slower than a PCIe 5 DMA.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        TransferConfig {
            chunk_bytes: 8 << 20,
            staging_buffers: 4,
            copy_threads: cores.min(4),
        }
    }
}

impl TransferConfig {
    pub fn validate(&self) -> Result<(), TransferError> {
        let bad = |m: String| Err(TransferError::InvalidConfig(m));
        if self.chunk_bytes == 0 {
            return bad("chunk_bytes must be > 0, got 0".into());
        }
        if self.staging_buffers == 0 || self.staging_buffers > MAX_STAGING_BUFFERS {
            return bad(format!(
                "staging_buffers must be in 1..={MAX_STAGING_BUFFERS}, got {}",
                self.staging_buffers
            ));
        }
        if self.copy_threads == 0 || self.copy_threads > MAX_COPY_THREADS {
            return bad(format!(
                "copy_threads must be in 1..={MAX_COPY_THREADS}, got {}",
                self.copy_threads
            ));
        }
        let total = self.chunk_bytes.checked_mul(self.staging_buffers as u64);
        if total.is_none_or(|t| t > MAX_STAGING_BYTES) {
            return bad(format!(
                "staging_buffers * chunk_bytes must be at most {MAX_STAGING_BYTES} bytes, \
                 got {} x {}",
                self.staging_buffers, self.chunk_bytes
            ));
        }
        Ok(())
    }
}

struct Inner {
    driver: Driver,
    config: TransferConfig,
    high_stream: Handle,
    low_stream: Handle,
    ring: Ring,
    counters: Counters,
}

/// Pipelined host <-> device copies (see the module documentation).
#[derive(Clone)]
pub struct TransferEngine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TransferEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferEngine")
            .field("config", &self.inner.config)
            .field("high_stream", &self.inner.high_stream)
            .field("low_stream", &self.inner.low_stream)
            .finish()
    }
}

impl TransferEngine {
    /// An engine over `driver` whose copies run on `high_stream` (high
    /// priority) and `low_stream` (normal and low). The streams must stay
    /// valid as long as the engine and its transfers live.
    pub fn new(
        driver: Driver,
        config: TransferConfig,
        high_stream: Handle,
        low_stream: Handle,
    ) -> Result<TransferEngine, TransferError> {
        config.validate()?;
        Ok(TransferEngine {
            inner: Arc::new(Inner {
                ring: Ring::new(config.staging_buffers),
                driver,
                config,
                high_stream,
                low_stream,
                counters: Counters::default(),
            }),
        })
    }

    pub fn config(&self) -> TransferConfig {
        self.inner.config
    }

    pub fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    /// The copy stream that carries transfers of `priority`.
    pub fn stream(&self, priority: Priority) -> Handle {
        match priority {
            Priority::High => self.inner.high_stream,
            Priority::Normal | Priority::Low => self.inner.low_stream,
        }
    }

    pub fn stats(&self) -> TransferStats {
        self.inner
            .counters
            .snapshot(self.inner.ring.staging_bytes(self.inner.config.chunk_bytes))
    }

    /// Copy `nbytes` from host memory at `src` to device memory at `dst`.
    /// Returns when every chunk is queued (`src` may then be reused); the
    /// device copy is complete when the returned transfer's event is.
    ///
    /// # Safety
    /// `src` must be readable for `nbytes` and `dst` a device (or, with the
    /// host table, host) range of `nbytes` that stays valid until the
    /// transfer completes.
    pub unsafe fn host_to_device(
        &self,
        dst: Handle,
        src: *const u8,
        nbytes: u64,
        priority: Priority,
    ) -> Result<Transfer, TransferError> {
        check_range("destination", dst, nbytes)?;
        check_range("source", src as u64, nbytes)?;
        let started = Instant::now();
        let inner = &*self.inner;
        let stream = self.stream(priority);
        let transfer = self.new_transfer(Direction::HostToDevice, priority, nbytes)?;
        let mut off = 0u64;
        while off < nbytes {
            let len = inner.config.chunk_bytes.min(nbytes - off);
            let lease =
                inner
                    .ring
                    .acquire(&inner.driver, priority, true, inner.config.chunk_bytes)?;
            let lease = lease.expect("a blocking acquire returns a buffer");
            self.wait_for_buffer(&lease)?;
            let t = Instant::now();
            unsafe {
                host_copy(
                    lease.ptr as *mut u8,
                    src.add(off as usize),
                    len as usize,
                    inner.config.copy_threads,
                )
            };
            inner.counters.add_host_copy(t.elapsed());
            let queued = unsafe { inner.driver.memcpy_async(dst + off, lease.ptr, len, stream) }
                .and_then(|()| inner.driver.event_record(lease.event, stream));
            if let Err(e) = queued {
                // The buffer may still be read by the DMA: do not hand it on
                // before the stream is idle (best effort, the error is returned).
                let _ = inner.driver.stream_synchronize(stream);
                return Err(e.into());
            }
            drop(lease);
            inner.counters.add_chunk();
            off += len;
        }
        inner.driver.event_record(transfer.event, stream)?;
        inner
            .counters
            .finish(Direction::HostToDevice, nbytes, started.elapsed());
        Ok(transfer)
    }

    /// Copy `nbytes` from device memory at `src` to host memory at `dst`.
    /// Returns when the data is in `dst`. The caller orders the copy stream
    /// after the work that writes `src`.
    ///
    /// # Safety
    /// `dst` must be writable for `nbytes` and `src` a device (or, with the
    /// host table, host) range of `nbytes`, both valid for the call.
    pub unsafe fn device_to_host(
        &self,
        dst: *mut u8,
        src: Handle,
        nbytes: u64,
        priority: Priority,
    ) -> Result<Transfer, TransferError> {
        check_range("destination", dst as u64, nbytes)?;
        check_range("source", src, nbytes)?;
        let started = Instant::now();
        let inner = &*self.inner;
        let stream = self.stream(priority);
        let mut transfer = self.new_transfer(Direction::DeviceToHost, priority, nbytes)?;
        let mut in_flight: VecDeque<(Lease<'_>, u64, u64)> = VecDeque::new();
        let drained = (|| -> Result<(), TransferError> {
            let mut off = 0u64;
            loop {
                // Queue DMAs into every buffer we can take without waiting
                // (at least one, so that progress never depends on others).
                while off < nbytes {
                    let block = in_flight.is_empty();
                    let chunk = inner.config.chunk_bytes;
                    let Some(lease) = inner.ring.acquire(&inner.driver, priority, block, chunk)?
                    else {
                        break;
                    };
                    let len = chunk.min(nbytes - off);
                    self.wait_for_buffer(&lease)?;
                    unsafe { inner.driver.memcpy_async(lease.ptr, src + off, len, stream) }?;
                    inner.driver.event_record(lease.event, stream)?;
                    in_flight.push_back((lease, off, len));
                    off += len;
                }
                let Some((lease, at, len)) = in_flight.pop_front() else {
                    return Ok(());
                };
                self.wait_for_buffer(&lease)?;
                let t = Instant::now();
                unsafe {
                    host_copy(
                        dst.add(at as usize),
                        lease.ptr as *const u8,
                        len as usize,
                        inner.config.copy_threads,
                    )
                };
                inner.counters.add_host_copy(t.elapsed());
                inner.counters.add_chunk();
            }
        })();
        if let Err(e) = drained {
            // DMAs into the buffers still held may be pending (or a failed
            // record left them unguarded): let the stream drain before the
            // buffers go back to the ring.
            let _ = inner.driver.stream_synchronize(stream);
            drop(in_flight);
            return Err(e);
        }
        // The data is in `dst` now; the event (which also covers other
        // transfers queued earlier on the stream) only orders later device work.
        inner.driver.event_record(transfer.event, stream)?;
        transfer.landed = true;
        inner
            .counters
            .finish(Direction::DeviceToHost, nbytes, started.elapsed());
        Ok(transfer)
    }

    fn new_transfer(
        &self,
        direction: Direction,
        priority: Priority,
        nbytes: u64,
    ) -> Result<Transfer, TransferError> {
        let event = self.inner.driver.event_create()?;
        Ok(Transfer {
            inner: Arc::clone(&self.inner),
            event,
            direction,
            priority,
            nbytes,
            chunks: nbytes.div_ceil(self.inner.config.chunk_bytes),
            landed: false,
        })
    }

    /// Block until the previous copy through `lease`'s buffer is done.
    fn wait_for_buffer(&self, lease: &Lease<'_>) -> Result<(), TransferError> {
        let driver = &self.inner.driver;
        if driver.event_query(lease.event)? {
            return Ok(());
        }
        let t = Instant::now();
        driver.event_synchronize(lease.event)?;
        self.inner.counters.add_wait(t.elapsed());
        Ok(())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ring.teardown(&self.driver);
    }
}

fn check_range(what: &str, addr: u64, nbytes: u64) -> Result<(), TransferError> {
    if addr.checked_add(nbytes).is_none() || usize::try_from(nbytes).is_err() {
        return Err(TransferError::InvalidArgument(format!(
            "{what} range 0x{addr:x} + {nbytes} bytes wraps around the address space"
        )));
    }
    Ok(())
}

/// Below this many bytes per thread a split host copy costs more in thread
/// start-up than it gains.
const MIN_BYTES_PER_COPY_THREAD: usize = 1 << 20;

/// `memcpy` of `len` bytes, split over up to `threads` threads (page-aligned
/// parts) when the copy is large enough.
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes; the ranges do not overlap.
unsafe fn host_copy(dst: *mut u8, src: *const u8, len: usize, threads: usize) {
    let parts = threads.min(len / MIN_BYTES_PER_COPY_THREAD).max(1);
    if parts == 1 {
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let part = (len.div_ceil(parts) + 4095) & !4095;
    // Addresses as integers: raw pointers are not Send.
    let (d, s) = (dst as usize, src as usize);
    let copy = move |start: usize| {
        let n = part.min(len.saturating_sub(start));
        if n > 0 {
            unsafe {
                std::ptr::copy_nonoverlapping((s + start) as *const u8, (d + start) as *mut u8, n)
            };
        }
    };
    std::thread::scope(|scope| {
        for i in 1..parts {
            scope.spawn(move || copy(i * part));
        }
        copy(0);
    });
}

/// One queued transfer: its completion event, which a consumer stream can
/// wait on, and what it moved. Destroys the event when dropped (the driver
/// releases it once pending work completes).
pub struct Transfer {
    inner: Arc<Inner>,
    event: Handle,
    direction: Direction,
    priority: Priority,
    nbytes: u64,
    chunks: u64,
    /// Set when the call itself waited for every byte (device to host).
    landed: bool,
}

impl std::fmt::Debug for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transfer")
            .field("direction", &self.direction)
            .field("priority", &self.priority)
            .field("nbytes", &self.nbytes)
            .field("chunks", &self.chunks)
            .finish()
    }
}

impl Transfer {
    /// Event recorded on the copy stream after the last chunk.
    pub fn event(&self) -> Handle {
        self.event
    }

    /// The copy stream the transfer ran on.
    pub fn stream(&self) -> Handle {
        match self.priority {
            Priority::High => self.inner.high_stream,
            Priority::Normal | Priority::Low => self.inner.low_stream,
        }
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    pub fn priority(&self) -> Priority {
        self.priority
    }

    pub fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// Chunks the transfer was cut into.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// True once every byte has arrived.
    pub fn done(&self) -> Result<bool, TransferError> {
        Ok(self.landed || self.inner.driver.event_query(self.event)?)
    }

    /// Block until every byte has arrived.
    pub fn wait(&self) -> Result<(), TransferError> {
        if self.landed {
            return Ok(());
        }
        Ok(self.inner.driver.event_synchronize(self.event)?)
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        // Nobody to report to; a failure here means the context is gone.
        let _ = self.inner.driver.event_destroy(self.event);
    }
}
