//! The scheduler's bookkeeping: partitions, tasks, the admission queue and
//! byte accounting. No driver calls here, so every rule is unit-testable.
//!
//! Accounting. A task holding its reservation (Admitted or Running) commits
//! `max(reservation, used)` bytes of its partition; any other task, and code
//! outside tasks, commits what it uses. A partition's `committed` must stay
//! within its quota, the sum over partitions within the capacity. So a
//! reservation can never be taken by someone else: it is committed from
//! admission on, whether used or not.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use super::error::{Holder, Limit, SchedError};
use super::types::{Qos, TaskState};

pub type TaskId = u64;
pub type PartitionId = usize;
/// The partition that holds everything not placed elsewhere.
pub const DEFAULT_PARTITION: PartitionId = 0;

#[derive(Clone, Debug)]
pub struct Partition {
    pub name: String,
    pub quota: Option<u64>,
    /// Share of the device's compute for pacing, in (0, 1].
    pub compute: f64,
    pub committed: u64,
    /// Live bytes charged to this partition (tasks and untasked).
    pub used: u64,
    /// Live bytes of code outside tasks (or of ended tasks) here.
    pub untasked: u64,
}

#[derive(Clone, Debug)]
pub struct Task {
    pub id: TaskId,
    pub name: String,
    pub qos: Qos,
    pub partition: PartitionId,
    pub reservation: u64,
    pub limit: Option<u64>,
    pub used: u64,
    pub peak: u64,
    pub state: TaskState,
    /// When the task entered each state (index: TaskState::index).
    pub since: [Option<Instant>; 6],
    pub streams: Vec<u64>,
    pub allocations: u64,
    pub evictions: u64,
    pub restores: u64,
    pub error: Option<String>,
    seq: u64,
}

impl Task {
    fn committed(&self) -> u64 {
        if self.state.holds_reservation() {
            self.reservation.max(self.used)
        } else {
            self.used
        }
    }

    /// The most this task may have live.
    pub fn effective_limit(&self) -> Option<u64> {
        match self.qos {
            Qos::Guaranteed => Some(self.limit.unwrap_or(self.reservation)),
            _ => self.limit,
        }
    }
}

/// Who an allocation is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Task(TaskId),
    Untasked(PartitionId),
}

/// A failed charge: which limit, and how much was in use against it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub limit: Limit,
    pub used: u64,
    /// Bytes that must be released in the limit's scope to fit.
    pub missing: u64,
    /// Partition to release in (None: any, for the device capacity).
    pub scope: Option<PartitionId>,
}

#[derive(Debug)]
pub struct State {
    pub partitions: Vec<Partition>,
    pub tasks: BTreeMap<TaskId, Task>,
    /// Pending tasks in admission order: (tier, submission sequence).
    pub queue: VecDeque<TaskId>,
    pub streams: HashMap<u64, TaskId>,
    pub capacity: Option<u64>,
    pub committed: u64,
    next_task: TaskId,
    next_seq: u64,
}

/// Terminal tasks that hold no memory are forgotten beyond this many.
const KEEP_ENDED: usize = 64;

impl State {
    pub fn new(capacity: Option<u64>) -> State {
        State {
            partitions: vec![Partition {
                name: "default".to_string(),
                quota: None,
                compute: 1.0,
                committed: 0,
                used: 0,
                untasked: 0,
            }],
            tasks: BTreeMap::new(),
            queue: VecDeque::new(),
            streams: HashMap::new(),
            capacity,
            committed: 0,
            next_task: 1,
            next_seq: 0,
        }
    }

    pub fn partition_id(&self, name: &str) -> Result<PartitionId, SchedError> {
        self.partitions
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| SchedError::UnknownPartition(name.to_string()))
    }

    /// Create a partition, or return the existing one when the settings match.
    pub fn partition(
        &mut self,
        name: &str,
        quota: Option<u64>,
        compute: f64,
    ) -> Result<PartitionId, SchedError> {
        if name.is_empty() {
            return Err(SchedError::Invalid(
                "a partition needs a non-empty name".into(),
            ));
        }
        if !(compute > 0.0 && compute <= 1.0) {
            return Err(SchedError::Invalid(format!(
                "compute share of partition '{name}' must be in (0, 1], got {compute}"
            )));
        }
        if let Ok(id) = self.partition_id(name) {
            let p = &mut self.partitions[id];
            if id == DEFAULT_PARTITION || (p.quota == quota && p.compute == compute) {
                return Ok(id);
            }
            // Changing the settings is allowed while nothing exceeds them.
            if quota.is_some_and(|q| q < p.committed) {
                return Err(SchedError::DuplicatePartition(name.to_string()));
            }
            p.quota = quota;
            p.compute = compute;
            return Ok(id);
        }
        if let (Some(q), Some(cap)) = (quota, self.capacity) {
            if q > cap {
                return Err(SchedError::Invalid(format!(
                    "partition '{name}' asks for a quota of {} but the scheduler's capacity is {}",
                    crate::pool::format_bytes(q),
                    crate::pool::format_bytes(cap)
                )));
            }
        }
        self.partitions.push(Partition {
            name: name.to_string(),
            quota,
            compute,
            committed: 0,
            used: 0,
            untasked: 0,
        });
        Ok(self.partitions.len() - 1)
    }

    pub fn task(&self, id: TaskId) -> Result<&Task, SchedError> {
        self.tasks.get(&id).ok_or(SchedError::UnknownTask(id))
    }

    fn task_mut(&mut self, id: TaskId) -> Result<&mut Task, SchedError> {
        self.tasks.get_mut(&id).ok_or(SchedError::UnknownTask(id))
    }

    /// A new Pending task, queued for admission (FIFO within its tier).
    pub fn submit(
        &mut self,
        name: &str,
        qos: Qos,
        partition: PartitionId,
        reservation: u64,
        limit: Option<u64>,
    ) -> Result<TaskId, SchedError> {
        if partition >= self.partitions.len() {
            return Err(SchedError::Invalid(format!("no partition {partition}")));
        }
        let reservation = if qos == Qos::BestEffort {
            0
        } else {
            reservation
        };
        if let Some(l) = limit {
            if l < reservation {
                return Err(SchedError::Invalid(format!(
                    "task '{name}': limit {} is below its reservation {}",
                    crate::pool::format_bytes(l),
                    crate::pool::format_bytes(reservation)
                )));
            }
        }
        if qos == Qos::Guaranteed && reservation == 0 && limit.is_none() {
            return Err(SchedError::Invalid(format!(
                "guaranteed task '{name}' needs memory= (its reservation, which is also its limit)"
            )));
        }
        let id = self.next_task;
        self.next_task += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut since = [None; 6];
        since[TaskState::Pending.index()] = Some(Instant::now());
        self.tasks.insert(
            id,
            Task {
                id,
                name: name.to_string(),
                qos,
                partition,
                reservation,
                limit,
                used: 0,
                peak: 0,
                state: TaskState::Pending,
                since,
                streams: Vec::new(),
                allocations: 0,
                evictions: 0,
                restores: 0,
                error: None,
                seq,
            },
        );
        // Keep the queue ordered by (tier, sequence).
        let pos = self
            .queue
            .iter()
            .position(|t| {
                let other = &self.tasks[t];
                (other.qos, other.seq) > (qos, seq)
            })
            .unwrap_or(self.queue.len());
        self.queue.insert(pos, id);
        Ok(id)
    }

    /// Free bytes for a new reservation in `partition`: the smaller of the
    /// partition's and the device's headroom, with the limit that binds.
    pub fn headroom(&self, partition: PartitionId) -> (u64, Option<Limit>) {
        let p = &self.partitions[partition];
        let mut best: (u64, Option<Limit>) = (u64::MAX, None);
        if let Some(q) = p.quota {
            best = (
                q.saturating_sub(p.committed),
                Some(Limit::Partition {
                    partition: p.name.clone(),
                    quota: q,
                }),
            );
        }
        if let Some(cap) = self.capacity {
            let free = cap.saturating_sub(self.committed);
            if free < best.0 {
                best = (free, Some(Limit::Device { capacity: cap }));
            }
        }
        best
    }

    /// Whether the reservation of `id` could ever fit (with nothing else admitted).
    pub fn can_ever_fit(&self, id: TaskId) -> Result<(), (u64, Limit)> {
        let t = &self.tasks[&id];
        let p = &self.partitions[t.partition];
        if let Some(q) = p.quota {
            if t.reservation > q {
                return Err((
                    q,
                    Limit::Partition {
                        partition: p.name.clone(),
                        quota: q,
                    },
                ));
            }
        }
        if let Some(cap) = self.capacity {
            if t.reservation > cap {
                return Err((cap, Limit::Device { capacity: cap }));
            }
        }
        Ok(())
    }

    /// Admit queued tasks in order. A task that does not fit blocks those
    /// behind it that compete for the same memory (its partition's, or every
    /// task when the capacity is what is short), so a large reservation is
    /// not starved by smaller ones, and a full partition does not hold up the
    /// others. Returns the ids admitted.
    pub fn admit_ready(&mut self) -> Vec<TaskId> {
        let mut admitted = Vec::new();
        let mut blocked: Vec<PartitionId> = Vec::new();
        let mut i = 0;
        while i < self.queue.len() {
            let id = self.queue[i];
            let (partition, reservation) = {
                let t = &self.tasks[&id];
                (t.partition, t.reservation)
            };
            if blocked.contains(&partition) {
                i += 1;
                continue;
            }
            let (free, limit) = self.headroom(partition);
            if free < reservation {
                if matches!(limit, Some(Limit::Device { .. })) {
                    break; // the capacity is short: everyone behind waits
                }
                blocked.push(partition);
                i += 1;
                continue;
            }
            self.queue.remove(i);
            self.set_state(id, TaskState::Admitted)
                .expect("a queued task is pending");
            admitted.push(id);
        }
        admitted
    }

    /// Move a task to `to`, keeping the committed bytes right.
    pub fn set_state(&mut self, id: TaskId, to: TaskState) -> Result<(), SchedError> {
        let t = self.task(id)?;
        let from = t.state;
        if !from.can_become(to) {
            return Err(SchedError::IllegalTransition {
                task: t.name.clone(),
                from,
                to,
            });
        }
        let partition = t.partition;
        let before = t.committed();
        if from == TaskState::Pending {
            self.queue.retain(|q| *q != id);
        }
        let t = self.task_mut(id)?;
        t.state = to;
        t.since[to.index()] = Some(Instant::now());
        let after = t.committed();
        self.recommit(partition, before, after);
        if to.is_terminal() {
            self.prune();
        }
        Ok(())
    }

    fn recommit(&mut self, partition: PartitionId, before: u64, after: u64) {
        let p = &mut self.partitions[partition];
        p.committed = p.committed + after - before;
        self.committed = self.committed + after - before;
    }

    fn prune(&mut self) {
        let ended: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.state.is_terminal() && t.used == 0)
            .map(|t| t.id)
            .collect();
        if ended.len() > KEEP_ENDED {
            for id in &ended[..ended.len() - KEEP_ENDED] {
                self.tasks.remove(id);
            }
        }
    }

    pub fn owner_of_stream(&self, stream: u64) -> Owner {
        match self.streams.get(&stream) {
            Some(&id) => Owner::Task(id),
            None => Owner::Untasked(DEFAULT_PARTITION),
        }
    }

    pub fn partition_of(&self, owner: Owner) -> PartitionId {
        match owner {
            Owner::Task(id) => self
                .tasks
                .get(&id)
                .map_or(DEFAULT_PARTITION, |t| t.partition),
            Owner::Untasked(p) => p,
        }
    }

    /// Charge `n` bytes to `owner`, or say which limit is short by how much.
    pub fn try_charge(&mut self, owner: Owner, n: u64) -> Result<(), Shortfall> {
        let (partition, before, after) = match owner {
            Owner::Task(id) => {
                let t = &self.tasks[&id];
                if let Some(l) = t.effective_limit() {
                    if t.used + n > l {
                        return Err(Shortfall {
                            limit: Limit::Task {
                                task: t.name.clone(),
                                limit: l,
                            },
                            used: t.used,
                            missing: t.used + n - l,
                            scope: Some(t.partition),
                        });
                    }
                }
                let before = t.committed();
                let after = if t.state.holds_reservation() {
                    t.reservation.max(t.used + n)
                } else {
                    t.used + n
                };
                (t.partition, before, after)
            }
            Owner::Untasked(p) => (p, 0, n),
        };
        let delta = after - before;
        let p = &self.partitions[partition];
        if let Some(q) = p.quota {
            if p.committed + delta > q {
                return Err(Shortfall {
                    limit: Limit::Partition {
                        partition: p.name.clone(),
                        quota: q,
                    },
                    used: p.committed,
                    missing: p.committed + delta - q,
                    scope: Some(partition),
                });
            }
        }
        if let Some(cap) = self.capacity {
            if self.committed + delta > cap {
                return Err(Shortfall {
                    limit: Limit::Device { capacity: cap },
                    used: self.committed,
                    missing: self.committed + delta - cap,
                    scope: None,
                });
            }
        }
        self.add_usage(owner, n as i128);
        Ok(())
    }

    /// Uncharge `n` bytes from `owner` (a freed or evicted allocation).
    pub fn uncharge(&mut self, owner: Owner, n: u64) {
        self.add_usage(owner, -(n as i128));
    }

    fn add_usage(&mut self, owner: Owner, delta: i128) {
        let apply = |v: u64| (v as i128 + delta) as u64;
        match owner {
            Owner::Task(id) => {
                let Some(t) = self.tasks.get_mut(&id) else {
                    return;
                };
                let before = t.committed();
                t.used = apply(t.used);
                t.peak = t.peak.max(t.used);
                if delta > 0 {
                    t.allocations += 1;
                }
                let after = t.committed();
                let partition = t.partition;
                self.partitions[partition].used = apply(self.partitions[partition].used);
                self.recommit(partition, before, after);
            }
            Owner::Untasked(p) => {
                let part = &mut self.partitions[p];
                part.used = apply(part.used);
                part.untasked = apply(part.untasked);
                part.committed = apply(part.committed);
                self.committed = apply(self.committed);
            }
        }
    }

    /// Who holds memory in `scope` (a partition, or everything), largest first.
    pub fn holders(&self, scope: Option<PartitionId>) -> Vec<Holder> {
        let mut out: Vec<Holder> = self
            .tasks
            .values()
            .filter(|t| scope.is_none_or(|p| t.partition == p) && t.committed() > 0)
            .map(|t| Holder {
                task: t.name.clone(),
                qos: t.qos.name(),
                bytes: t.committed(),
            })
            .collect();
        for (i, p) in self.partitions.iter().enumerate() {
            if scope.is_none_or(|s| s == i) && p.untasked > 0 {
                out.push(Holder {
                    task: format!("<outside tasks in '{}'>", p.name),
                    qos: "none",
                    bytes: p.untasked,
                });
            }
        }
        out.sort_by_key(|b| std::cmp::Reverse(b.bytes));
        out
    }

    /// Check the accounting invariants (tests and debug builds).
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut total = 0u64;
        for (i, p) in self.partitions.iter().enumerate() {
            let tasks: Vec<&Task> = self.tasks.values().filter(|t| t.partition == i).collect();
            let committed: u64 = tasks.iter().map(|t| t.committed()).sum::<u64>() + p.untasked;
            let used: u64 = tasks.iter().map(|t| t.used).sum::<u64>() + p.untasked;
            if committed != p.committed {
                return Err(format!(
                    "partition {}: committed {} != recomputed {committed}",
                    p.name, p.committed
                ));
            }
            if used != p.used {
                return Err(format!(
                    "partition {}: used {} != recomputed {used}",
                    p.name, p.used
                ));
            }
            if let Some(q) = p.quota {
                if p.committed > q {
                    return Err(format!("partition {} over its quota", p.name));
                }
            }
            total += committed;
        }
        if total != self.committed {
            return Err(format!(
                "committed {} != sum of partitions {total}",
                self.committed
            ));
        }
        if let Some(cap) = self.capacity {
            if self.committed > cap {
                return Err("over capacity".into());
            }
        }
        Ok(())
    }
}
