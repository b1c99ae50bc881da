//! The transfer engine: host <-> device copies of pageable host memory,
//! pipelined through a ring of pinned staging buffers on dedicated copy
//! streams.
//!
//! * Host to device: the source is cut into chunks of up to `chunk_bytes`
//!   ([`TransferEngine::plan`]). Each
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
//! several threads transfer at once. Each transfer is worked by up to
//! `copy_threads` threads (the caller's and scoped helpers) that take chunks
//! from a shared counter, so host copies of different chunks run in
//! parallel while the DMAs follow each other. Staging memory is allocated
//! at the first transfer. With the host driver table (CPU mode) every copy is a
//! synchronous memmove and every event is complete: the same code runs in CI.

mod error;
mod ring;
mod stats;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
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
    /// Threads that work one transfer, each copying whole chunks (1: the
    /// calling thread only).
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

    /// How a transfer of `nbytes` is cut: (chunk size, chunks, workers).
    /// Up to `copy_threads` workers copy whole chunks in parallel; a
    /// transfer is cut into at least as many chunks as workers while chunks
    /// stay at least [`MIN_WORKER_CHUNK`], so that mid-sized arrays use
    /// every worker too. More workers than buffers would only wait.
    pub fn plan(&self, nbytes: u64) -> (u64, u64, usize) {
        let c = &self.inner.config;
        let threads = c.copy_threads.min(c.staging_buffers) as u64;
        let chunk = c
            .chunk_bytes
            .min(MIN_WORKER_CHUNK.max(nbytes.div_ceil(threads)));
        let chunks = nbytes.div_ceil(chunk);
        (chunk, chunks, threads.min(chunks).max(1) as usize)
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
        let stream = self.stream(priority);
        let (chunk, chunks, workers) = self.plan(nbytes);
        let transfer = self.new_transfer(Direction::HostToDevice, priority, nbytes, chunks)?;
        // An address, not a pointer: workers run on other threads.
        let src = src as u64;
        self.run_workers(chunks, workers, |queue| {
            while let Some(i) = queue.take() {
                let off = i * chunk;
                let len = chunk.min(nbytes - off);
                // SAFETY: within the caller's ranges.
                unsafe { self.h2d_chunk(dst + off, (src + off) as *const u8, len, priority) }?;
            }
            Ok(())
        })?;
        self.inner.driver.event_record(transfer.event, stream)?;
        self.inner
            .counters
            .finish(Direction::HostToDevice, nbytes, started.elapsed());
        Ok(transfer)
    }

    /// One chunk of a host-to-device transfer: into a staging buffer on the
    /// host, then a DMA and the buffer's event on the copy stream.
    unsafe fn h2d_chunk(
        &self,
        dst: Handle,
        src: *const u8,
        len: u64,
        priority: Priority,
    ) -> Result<(), TransferError> {
        let inner = &*self.inner;
        let stream = self.stream(priority);
        let lease = inner
            .ring
            .acquire(&inner.driver, priority, true, inner.config.chunk_bytes)?;
        let lease = lease.expect("a blocking acquire returns a buffer");
        self.wait_for_buffer(&lease)?;
        let t = Instant::now();
        unsafe { std::ptr::copy_nonoverlapping(src, lease.ptr as *mut u8, len as usize) };
        inner.counters.add_host_copy(t.elapsed());
        let queued = unsafe { inner.driver.memcpy_async(dst, lease.ptr, len, stream) }
            .and_then(|()| inner.driver.event_record(lease.event, stream));
        if let Err(e) = queued {
            // The DMA may still read the buffer and its event does not say
            // so: let the stream drain before the buffer goes back (best
            // effort, the error is returned).
            let _ = inner.driver.stream_synchronize(stream);
            return Err(e.into());
        }
        inner.counters.add_chunk();
        Ok(())
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
        let stream = self.stream(priority);
        let (chunk, chunks, workers) = self.plan(nbytes);
        let mut transfer = self.new_transfer(Direction::DeviceToHost, priority, nbytes, chunks)?;
        let dst = dst as u64;
        self.run_workers(chunks, workers, |queue| {
            // SAFETY: within the caller's ranges.
            unsafe { self.d2h_worker(queue, dst, src, nbytes, chunk, priority) }
        })?;
        // The data is in `dst` now; the event (which also covers other
        // transfers queued earlier on the stream) only orders later device work.
        self.inner.driver.event_record(transfer.event, stream)?;
        transfer.landed = true;
        self.inner
            .counters
            .finish(Direction::DeviceToHost, nbytes, started.elapsed());
        Ok(transfer)
    }

    /// One worker of a device-to-host transfer: queues DMAs of chunks into
    /// every buffer it can take without waiting (at least one, so progress
    /// never depends on other threads), then copies its oldest chunk out
    /// once that DMA is done, and repeats.
    unsafe fn d2h_worker(
        &self,
        queue: &ChunkQueue,
        dst: u64,
        src: Handle,
        nbytes: u64,
        chunk: u64,
        priority: Priority,
    ) -> Result<(), TransferError> {
        let inner = &*self.inner;
        let stream = self.stream(priority);
        let mut in_flight: VecDeque<(Lease<'_>, u64, u64)> = VecDeque::new();
        let result = (|| -> Result<(), TransferError> {
            loop {
                while queue.has_more() {
                    let block = in_flight.is_empty();
                    let Some(lease) = inner.ring.acquire(
                        &inner.driver,
                        priority,
                        block,
                        inner.config.chunk_bytes,
                    )?
                    else {
                        break;
                    };
                    let Some(i) = queue.take() else {
                        break; // another worker took the last chunk
                    };
                    let (off, len) = (i * chunk, chunk.min(nbytes - i * chunk));
                    self.wait_for_buffer(&lease)?;
                    unsafe { inner.driver.memcpy_async(lease.ptr, src + off, len, stream) }?;
                    inner.driver.event_record(lease.event, stream)?;
                    in_flight.push_back((lease, off, len));
                }
                let Some((lease, off, len)) = in_flight.pop_front() else {
                    return Ok(());
                };
                self.wait_for_buffer(&lease)?;
                let t = Instant::now();
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        lease.ptr as *const u8,
                        (dst + off) as *mut u8,
                        len as usize,
                    )
                };
                inner.counters.add_host_copy(t.elapsed());
                inner.counters.add_chunk();
            }
        })();
        if result.is_err() {
            // DMAs into the buffers still held may be pending (or a failed
            // record left them unguarded): let the stream drain before the
            // buffers go back to the ring.
            let _ = inner.driver.stream_synchronize(stream);
        }
        result
    }

    /// Run `work` on `workers` threads (the caller's and scoped ones) that
    /// share one queue of `chunks`; the first error stops the others and is
    /// returned.
    fn run_workers<F>(&self, chunks: u64, workers: usize, work: F) -> Result<(), TransferError>
    where
        F: Fn(&ChunkQueue) -> Result<(), TransferError> + Sync,
    {
        let queue = ChunkQueue::new(chunks);
        let run = || {
            let r = work(&queue);
            if r.is_err() {
                queue.stop();
            }
            r
        };
        if workers <= 1 {
            return run();
        }
        std::thread::scope(|s| {
            let helpers: Vec<_> = (1..workers).map(|_| s.spawn(run)).collect();
            let mut result = run();
            for h in helpers {
                let r = h.join().expect("a transfer worker panicked");
                if result.is_ok() {
                    result = r;
                }
            }
            result
        })
    }

    fn new_transfer(
        &self,
        direction: Direction,
        priority: Priority,
        nbytes: u64,
        chunks: u64,
    ) -> Result<Transfer, TransferError> {
        let event = self.inner.driver.event_create()?;
        Ok(Transfer {
            inner: Arc::clone(&self.inner),
            event,
            direction,
            priority,
            nbytes,
            chunks,
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

/// Chunk indices handed out to the workers of one transfer.
struct ChunkQueue {
    next: AtomicU64,
    chunks: u64,
    stopped: AtomicBool,
}

impl ChunkQueue {
    fn new(chunks: u64) -> ChunkQueue {
        ChunkQueue {
            next: AtomicU64::new(0),
            chunks,
            stopped: AtomicBool::new(false),
        }
    }

    fn has_more(&self) -> bool {
        !self.stopped.load(Relaxed) && self.next.load(Relaxed) < self.chunks
    }

    fn take(&self) -> Option<u64> {
        if self.stopped.load(Relaxed) {
            return None;
        }
        let i = self.next.fetch_add(1, Relaxed);
        (i < self.chunks).then_some(i)
    }

    fn stop(&self) {
        self.stopped.store(true, Relaxed);
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

/// Smallest chunk a transfer is cut into to give every worker one: below
/// about 1 MiB a thread's start-up costs more than its share of the copy.
pub const MIN_WORKER_CHUNK: u64 = 1 << 20;

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
