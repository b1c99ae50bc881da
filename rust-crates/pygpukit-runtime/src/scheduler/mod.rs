//! The GPU scheduler: partitions, QoS tiers, admission, quotas, eviction to
//! host memory and launch pacing, over one [`Pool`].
//!
//! * Every allocation goes through [`Scheduler::alloc`]: it is charged to the
//!   task that owns the stream it is made on (streams of a task are
//!   registered with [`Scheduler::add_stream`]), or to the default partition
//!   outside tasks, and checked against the task's limit, the partition's
//!   quota and the capacity (see [`state`] for the accounting). Over a limit,
//!   evictable buffers of idle tasks in the same scope are spilled to pinned
//!   host memory, least recently used and lowest tier first, never those of a
//!   higher tier than the requester's; then the allocation fails with a
//!   [`SchedError::Quota`] that names the limit.
//! * Tasks are admitted in order (tier, then submission), a reservation is
//!   committed from admission on and can never be used by another task.
//! * [`pacing::Pacer`] is the gate of every launch.
//!
//! Lock order: the scheduler state, then the pool. Pacing has its own locks.

pub mod error;
pub mod pacing;
pub mod state;
pub mod types;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use error::{Holder, Limit, SchedError};
pub use pacing::{Gate, LaneCounters, Pacer, PacingConfig};
pub use state::{Owner, Partition, PartitionId, Task, TaskId, DEFAULT_PARTITION};
pub use types::{Qos, TaskState};

use crate::driver::Handle;
use crate::pool::{config::round_size, Block, Frames, Pool, PoolError};
use state::{Shortfall, State};

pub type BufferId = u64;

/// An evictable allocation: on the device, or spilled to pinned host memory.
#[derive(Clone, Debug)]
pub struct Buffer {
    pub owner: Owner,
    pub charged: u64,
    pub requested: u64,
    pub stream: Handle,
    pub resident: Option<Block>,
    pub host: Option<u64>,
    pub last_use: u64,
    pub touched: Instant,
}

/// Eviction and restore counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EvictionStats {
    pub evictions: u64,
    pub restores: u64,
    pub evicted_bytes: u64,
    pub restored_bytes: u64,
}

struct Inner {
    st: State,
    /// Charged live blocks (not evictable buffers): address -> (owner, bytes).
    blocks: HashMap<u64, (Owner, u64)>,
    buffers: BTreeMap<BufferId, Buffer>,
    next_buffer: BufferId,
    tick: u64,
    eviction: EvictionStats,
    /// Buffers used more recently than this are not spilled: an op of
    /// another thread may hold their address between reading it and its
    /// launch (the GIL can switch threads in between).
    grace: Duration,
}

pub struct Scheduler {
    pool: Arc<Pool>,
    inner: Mutex<Inner>,
    admitted: Condvar,
    pacer: Pacer,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("pool", &self.pool)
            .finish()
    }
}

/// Whether an evictable buffer may be spilled now (for example: no view of
/// it is alive on the Python side).
pub type CanEvict<'a> = &'a dyn Fn(BufferId) -> bool;

impl Scheduler {
    /// A scheduler over `pool`; `capacity` bounds the sum of reservations
    /// and live allocations (None: only the device limits it).
    pub fn new(pool: Arc<Pool>, capacity: Option<u64>) -> Scheduler {
        let is_host = pool.driver().is_host();
        Scheduler {
            pool,
            inner: Mutex::new(Inner {
                st: State::new(capacity),
                blocks: HashMap::new(),
                buffers: BTreeMap::new(),
                next_buffer: 1,
                tick: 0,
                eviction: EvictionStats::default(),
                grace: Duration::from_millis(50),
            }),
            admitted: Condvar::new(),
            pacer: Pacer::new(is_host),
        }
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// Read the state under the lock (snapshots, tests).
    pub fn with_state<R>(&self, f: impl FnOnce(&State, &EvictionStats) -> R) -> R {
        let g = self.lock();
        f(&g.st, &g.eviction)
    }

    pub fn set_capacity(&self, capacity: Option<u64>) -> Result<(), SchedError> {
        let mut g = self.lock();
        if let Some(c) = capacity {
            if c < g.st.committed {
                return Err(SchedError::Invalid(format!(
                    "capacity {} is below what is committed now ({})",
                    crate::pool::format_bytes(c),
                    crate::pool::format_bytes(g.st.committed)
                )));
            }
        }
        g.st.capacity = capacity;
        self.admit_ready(&mut g);
        Ok(())
    }

    /// How long after its last use a buffer is safe from spilling.
    pub fn set_eviction_grace(&self, grace: Duration) {
        self.lock().grace = grace;
    }

    pub fn partition(
        &self,
        name: &str,
        quota: Option<u64>,
        compute: f64,
    ) -> Result<PartitionId, SchedError> {
        self.lock().st.partition(name, quota, compute)
    }

    // ----- tasks ---------------------------------------------------------

    pub fn submit(
        &self,
        name: &str,
        qos: Qos,
        partition: &str,
        reservation: u64,
        limit: Option<u64>,
    ) -> Result<TaskId, SchedError> {
        let mut g = self.lock();
        let p = g.st.partition_id(partition)?;
        g.st.submit(name, qos, p, reservation, limit)
    }

    fn admit_ready(&self, g: &mut Inner) {
        if !g.st.queue.is_empty() && !g.st.admit_ready().is_empty() {
            self.admitted.notify_all();
        }
    }

    fn admission_error(g: &Inner, id: TaskId, reason: &'static str) -> SchedError {
        let t = &g.st.tasks[&id];
        let (free, limit) = g.st.headroom(t.partition);
        let limit = limit.unwrap_or(Limit::Device { capacity: u64::MAX });
        let scope = match limit {
            Limit::Partition { .. } => Some(t.partition),
            _ => None,
        };
        SchedError::Admission {
            task: t.name.clone(),
            asked: t.reservation,
            free,
            limit,
            holders: g.st.holders(scope),
            reason,
        }
    }

    /// Wait until the task is admitted: `timeout` None waits for ever, zero
    /// does not wait. On failure the task is Failed and the error says what
    /// was asked, what is free and who holds it.
    pub fn admit(&self, id: TaskId, timeout: Option<Duration>) -> Result<(), SchedError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut g = self.lock();
        let state = g.st.task(id)?.state;
        if state != TaskState::Pending {
            return if state.holds_reservation() {
                Ok(())
            } else {
                Err(SchedError::IllegalTransition {
                    task: g.st.tasks[&id].name.clone(),
                    from: state,
                    to: TaskState::Admitted,
                })
            };
        }
        if let Err((_, limit)) = g.st.can_ever_fit(id) {
            let mut e = Self::admission_error(&g, id, "it can never fit");
            if let SchedError::Admission { limit: l, .. } = &mut e {
                *l = limit;
            }
            let _ = g.st.set_state(id, TaskState::Failed);
            return Err(e);
        }
        self.admit_ready(&mut g);
        loop {
            match g.st.task(id)?.state {
                TaskState::Pending => {}
                TaskState::Admitted | TaskState::Running => return Ok(()),
                s => {
                    return Err(SchedError::IllegalTransition {
                        task: g.st.tasks[&id].name.clone(),
                        from: s,
                        to: TaskState::Admitted,
                    })
                }
            }
            let now = Instant::now();
            let wait = match deadline {
                Some(d) if now >= d => {
                    let reason = if timeout == Some(Duration::ZERO) {
                        "no room now and timeout=0"
                    } else {
                        "timed out waiting for room"
                    };
                    let e = Self::admission_error(&g, id, reason);
                    let _ = g.st.set_state(id, TaskState::Failed);
                    // The queue head may have been this task: let the next try.
                    self.admit_ready(&mut g);
                    return Err(e);
                }
                Some(d) => d - now,
                None => Duration::from_secs(3600),
            };
            g = self
                .admitted
                .wait_timeout(g, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Move a task to `to` (Running, Admitted, Completed, Failed, Cancelled).
    pub fn set_state(
        &self,
        id: TaskId,
        to: TaskState,
        error: Option<String>,
    ) -> Result<(), SchedError> {
        let mut g = self.lock();
        g.st.set_state(id, to)?;
        if let Some(e) = error {
            if let Some(t) = g.st.tasks.get_mut(&id) {
                t.error = Some(e);
            }
        }
        if to.is_terminal() {
            self.admit_ready(&mut g);
            // A cancelled pending task may be waited on in admit().
            self.admitted.notify_all();
        }
        Ok(())
    }

    /// Register `stream` as a stream of task `id`: allocations on it are
    /// charged to the task and its launches pass the task's pacing lane.
    pub fn add_stream(&self, id: TaskId, stream: Handle) -> Result<(), SchedError> {
        let (qos, share) = {
            let mut g = self.lock();
            let (qos, partition) = {
                let t = g.st.task(id)?;
                (t.qos, t.partition)
            };
            if let Some(&other) = g.st.streams.get(&stream) {
                if other != id {
                    return Err(SchedError::Invalid(format!(
                        "stream 0x{stream:x} belongs to task {other} already"
                    )));
                }
            }
            g.st.streams.insert(stream, id);
            if let Some(t) = g.st.tasks.get_mut(&id) {
                if !t.streams.contains(&stream) {
                    t.streams.push(stream);
                }
            }
            (qos, g.st.partitions[partition].compute)
        };
        self.pacer.add_lane(
            stream,
            id,
            qos == Qos::BestEffort,
            qos == Qos::Guaranteed,
            share,
        );
        Ok(())
    }

    /// Forget a task's stream (before destroying it). Memory allocated on it
    /// stays charged to the task until freed.
    pub fn remove_stream(&self, stream: Handle) -> Option<(TaskId, LaneCounters)> {
        {
            let mut g = self.lock();
            if let Some(id) = g.st.streams.remove(&stream) {
                if let Some(t) = g.st.tasks.get_mut(&id) {
                    t.streams.retain(|s| *s != stream);
                }
            }
        }
        self.pacer.remove_lane(self.pool.driver(), stream)
    }

    // ----- memory --------------------------------------------------------

    fn requester_qos(g: &Inner, owner: Owner) -> Qos {
        match owner {
            Owner::Task(id) => g.st.tasks.get(&id).map_or(Qos::BestEffort, |t| t.qos),
            Owner::Untasked(_) => Qos::BestEffort,
        }
    }

    /// Charge `bytes` to `owner`, spilling evictable buffers when a limit is
    /// short; on failure nothing is charged.
    fn charge(
        &self,
        g: &mut Inner,
        owner: Owner,
        bytes: u64,
        exclude: Option<BufferId>,
        can_evict: CanEvict<'_>,
    ) -> Result<(), SchedError> {
        loop {
            let short = match g.st.try_charge(owner, bytes) {
                Ok(()) => return Ok(()),
                Err(s) => s,
            };
            let freed = match short.limit {
                // A task's own limit: only its own idle buffers could help,
                // and a task that allocates is not idle.
                Limit::Task { .. } => 0,
                _ => self.evict_some(g, owner, &short, exclude, can_evict)?,
            };
            if freed == 0 {
                let task = match owner {
                    Owner::Task(id) => g.st.tasks.get(&id).map(|t| t.name.clone()),
                    Owner::Untasked(_) => None,
                };
                return Err(SchedError::Quota {
                    task,
                    asked: bytes,
                    used: short.used,
                    limit: short.limit,
                    holders: g.st.holders(short.scope),
                });
            }
        }
    }

    /// Spill buffers in the shortfall's scope until `missing` bytes are free
    /// (or nothing more can go). Candidates: resident buffers of tasks that
    /// are not running, not of a higher tier than the requester, lowest tier
    /// first, then least recently used.
    fn evict_some(
        &self,
        g: &mut Inner,
        requester: Owner,
        short: &Shortfall,
        exclude: Option<BufferId>,
        can_evict: CanEvict<'_>,
    ) -> Result<u64, SchedError> {
        let tier = Self::requester_qos(g, requester);
        let now = Instant::now();
        let mut candidates: Vec<(Qos, u64, BufferId)> = g
            .buffers
            .iter()
            .filter(|(id, b)| {
                if b.resident.is_none()
                    || Some(**id) == exclude
                    || b.owner == requester
                    || now.saturating_duration_since(b.touched) < g.grace
                {
                    return false;
                }
                let Owner::Task(tid) = b.owner else {
                    return false;
                };
                let Some(t) = g.st.tasks.get(&tid) else {
                    return false;
                };
                t.state != TaskState::Running
                    && t.qos >= tier
                    && short.scope.is_none_or(|p| t.partition == p)
            })
            .map(|(id, b)| {
                let q = match b.owner {
                    Owner::Task(t) => g.st.tasks[&t].qos,
                    Owner::Untasked(_) => Qos::BestEffort,
                };
                (q, b.last_use, *id)
            })
            .collect();
        // Lowest tier (largest Qos) first, then oldest use.
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut freed = 0u64;
        for (_, _, id) in candidates {
            if freed >= short.missing {
                break;
            }
            if !can_evict(id) {
                continue;
            }
            freed += self.evict(g, id)?;
        }
        Ok(freed)
    }

    /// Copy a buffer to pinned host memory and free its device block.
    fn evict(&self, g: &mut Inner, id: BufferId) -> Result<u64, SchedError> {
        let driver = self.pool.driver();
        let b = g.buffers.get(&id).ok_or(SchedError::UnknownBuffer(id))?;
        let Some(block) = b.resident else {
            return Ok(0);
        };
        let (owner, charged, requested) = (b.owner, b.charged, b.requested);
        let host = driver.host_alloc(requested.max(1))?;
        // SAFETY: the block is live and `host` holds `requested` bytes.
        let copied = unsafe { driver.memcpy_async(host, block.ptr, requested, block.stream) }
            .and_then(|()| driver.stream_synchronize(block.stream));
        if let Err(e) = copied {
            // SAFETY: `host` came from host_alloc and nothing uses it.
            let _ = unsafe { driver.host_free(host) };
            return Err(e.into());
        }
        self.pool.free(&block)?;
        let b = g.buffers.get_mut(&id).expect("looked up above");
        b.resident = None;
        b.host = Some(host);
        g.st.uncharge(owner, charged);
        if let Owner::Task(t) = owner {
            if let Some(t) = g.st.tasks.get_mut(&t) {
                t.evictions += 1;
            }
        }
        g.eviction.evictions += 1;
        g.eviction.evicted_bytes += requested;
        Ok(charged)
    }

    #[allow(clippy::too_many_arguments)]
    fn pool_alloc(
        &self,
        g: &mut Inner,
        owner: Owner,
        nbytes: u64,
        stream: Handle,
        frames: Option<Frames>,
        exclude: Option<BufferId>,
        can_evict: CanEvict<'_>,
    ) -> Result<Block, SchedError> {
        match self.pool.alloc_traced(nbytes, stream, frames.clone()) {
            Ok(b) => Ok(b),
            Err(PoolError::OutOfMemory { .. }) => {
                // The pool released its cache already; spill what may go, retry once.
                let short = Shortfall {
                    limit: Limit::Device { capacity: 0 },
                    used: 0,
                    missing: round_size(nbytes).unwrap_or(nbytes),
                    scope: None,
                };
                self.evict_some(g, owner, &short, exclude, can_evict)?;
                Ok(self.pool.alloc_traced(nbytes, stream, frames)?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Allocate `nbytes` on `stream`, charged to the stream's task.
    pub fn alloc(
        &self,
        nbytes: u64,
        stream: Handle,
        can_evict: CanEvict<'_>,
    ) -> Result<Block, SchedError> {
        self.alloc_charged(nbytes, stream, stream, can_evict)
    }

    /// Allocate `nbytes` on `stream`, charged to the task of `charge_stream`
    /// (a copy stream's block filled for a task's stream, for example).
    pub fn alloc_charged(
        &self,
        nbytes: u64,
        stream: Handle,
        charge_stream: Handle,
        can_evict: CanEvict<'_>,
    ) -> Result<Block, SchedError> {
        self.alloc_traced(nbytes, stream, charge_stream, None, can_evict)
    }

    /// [`Scheduler::alloc_charged`] with the caller's stack for the pool's history.
    pub fn alloc_traced(
        &self,
        nbytes: u64,
        stream: Handle,
        charge_stream: Handle,
        frames: Option<Frames>,
        can_evict: CanEvict<'_>,
    ) -> Result<Block, SchedError> {
        let charged = round_size(nbytes).ok_or_else(|| {
            SchedError::Invalid(format!("cannot allocate {nbytes} bytes: too large"))
        })?;
        let mut g = self.lock();
        let owner = g.st.owner_of_stream(charge_stream);
        self.charge(&mut g, owner, charged, None, can_evict)?;
        match self.pool_alloc(&mut g, owner, nbytes, stream, frames, None, can_evict) {
            Ok(b) => {
                g.blocks.insert(b.ptr, (owner, charged));
                Ok(b)
            }
            Err(e) => {
                g.st.uncharge(owner, charged);
                Err(e)
            }
        }
    }

    /// Free a block from [`Scheduler::alloc`].
    pub fn free(&self, block: &Block) -> Result<(), SchedError> {
        self.free_traced(block, None)
    }

    /// [`Scheduler::free`] with the caller's stack for the pool's history.
    pub fn free_traced(&self, block: &Block, frames: Option<Frames>) -> Result<(), SchedError> {
        {
            let mut g = self.lock();
            if let Some((owner, charged)) = g.blocks.remove(&block.ptr) {
                g.st.uncharge(owner, charged);
                self.admit_ready(&mut g);
            }
        }
        Ok(self.pool.free_traced(block, frames)?)
    }

    // ----- evictable buffers ---------------------------------------------

    /// An evictable allocation of `nbytes` on `stream`; its stream must
    /// belong to a task (eviction is decided by the owning task's state).
    pub fn alloc_buffer(
        &self,
        nbytes: u64,
        stream: Handle,
        can_evict: CanEvict<'_>,
    ) -> Result<(BufferId, u64), SchedError> {
        let charged = round_size(nbytes).ok_or_else(|| {
            SchedError::Invalid(format!("cannot allocate {nbytes} bytes: too large"))
        })?;
        let mut g = self.lock();
        let owner = g.st.owner_of_stream(stream);
        if !matches!(owner, Owner::Task(_)) {
            return Err(SchedError::Invalid(
                "evictable arrays belong to a task: create them inside `with gp.task(...)`".into(),
            ));
        }
        self.charge(&mut g, owner, charged, None, can_evict)?;
        let block = match self.pool_alloc(&mut g, owner, nbytes, stream, None, None, can_evict) {
            Ok(b) => b,
            Err(e) => {
                g.st.uncharge(owner, charged);
                return Err(e);
            }
        };
        let id = g.next_buffer;
        g.next_buffer += 1;
        g.tick += 1;
        let tick = g.tick;
        g.buffers.insert(
            id,
            Buffer {
                owner,
                charged,
                requested: nbytes,
                stream,
                resident: Some(block),
                host: None,
                last_use: tick,
                touched: Instant::now(),
            },
        );
        Ok((id, block.ptr))
    }

    /// The device address of a buffer, restoring it first if it was spilled
    /// (byte-identical, possibly at a new address); marks it used.
    pub fn touch(&self, id: BufferId, can_evict: CanEvict<'_>) -> Result<u64, SchedError> {
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let b = g
            .buffers
            .get_mut(&id)
            .ok_or(SchedError::UnknownBuffer(id))?;
        b.last_use = tick;
        b.touched = Instant::now();
        if let Some(block) = b.resident {
            return Ok(block.ptr);
        }
        let (owner, charged, requested, stream, host) = (
            b.owner,
            b.charged,
            b.requested,
            b.stream,
            b.host.expect("spilled"),
        );
        self.charge(&mut g, owner, charged, Some(id), can_evict)?;
        let block =
            match self.pool_alloc(&mut g, owner, requested, stream, None, Some(id), can_evict) {
                Ok(b) => b,
                Err(e) => {
                    g.st.uncharge(owner, charged);
                    return Err(e);
                }
            };
        let driver = self.pool.driver();
        // SAFETY: both ranges hold `requested` bytes.
        let copied = unsafe { driver.memcpy_async(block.ptr, host, requested, stream) }
            .and_then(|()| driver.stream_synchronize(stream));
        if let Err(e) = copied {
            let _ = self.pool.free(&block);
            g.st.uncharge(owner, charged);
            return Err(e.into());
        }
        // SAFETY: the copy finished; nothing else refers to the host copy.
        let _ = unsafe { driver.host_free(host) };
        let b = g.buffers.get_mut(&id).expect("looked up above");
        b.resident = Some(block);
        b.host = None;
        if let Owner::Task(t) = owner {
            if let Some(t) = g.st.tasks.get_mut(&t) {
                t.restores += 1;
            }
        }
        g.eviction.restores += 1;
        g.eviction.restored_bytes += requested;
        Ok(block.ptr)
    }

    /// Whether the buffer is on the device now.
    pub fn is_resident(&self, id: BufferId) -> Result<bool, SchedError> {
        let g = self.lock();
        let b = g.buffers.get(&id).ok_or(SchedError::UnknownBuffer(id))?;
        Ok(b.resident.is_some())
    }

    /// Spill a buffer now (its task must not be running).
    pub fn evict_buffer(&self, id: BufferId) -> Result<bool, SchedError> {
        let mut g = self.lock();
        let b = g.buffers.get(&id).ok_or(SchedError::UnknownBuffer(id))?;
        if let Owner::Task(t) = b.owner {
            if g.st
                .tasks
                .get(&t)
                .is_some_and(|t| t.state == TaskState::Running)
            {
                return Err(SchedError::Busy(
                    "cannot spill a buffer of a running task: pause() the task first".into(),
                ));
            }
        }
        if b.resident.is_none() {
            return Ok(false);
        }
        self.evict(&mut g, id)?;
        self.admit_ready(&mut g);
        Ok(true)
    }

    /// Free a buffer, wherever it is.
    pub fn free_buffer(&self, id: BufferId) -> Result<(), SchedError> {
        let b = {
            let mut g = self.lock();
            let b = g.buffers.remove(&id).ok_or(SchedError::UnknownBuffer(id))?;
            if b.resident.is_some() {
                g.st.uncharge(b.owner, b.charged);
            }
            self.admit_ready(&mut g);
            b
        };
        if let Some(block) = b.resident {
            self.pool.free(&block)?;
        }
        if let Some(host) = b.host {
            // SAFETY: the buffer is gone; nothing refers to its host copy.
            unsafe { self.pool.driver().host_free(host) }?;
        }
        Ok(())
    }
}
