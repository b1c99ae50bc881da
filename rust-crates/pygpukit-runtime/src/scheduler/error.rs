//! Errors of the scheduler. Each says what was asked, what is free and who
//! holds the rest.

use std::fmt;

use super::types::TaskState;
use crate::driver::DriverError;
use crate::pool::{format_bytes, PoolError};

/// One holder of memory, for error messages: "decode (guaranteed): 2.00 GiB".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub task: String,
    pub qos: &'static str,
    pub bytes: u64,
}

fn holders(f: &mut fmt::Formatter<'_>, list: &[Holder]) -> fmt::Result {
    if list.is_empty() {
        return write!(f, "nothing");
    }
    for (i, h) in list.iter().enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        write!(f, "{} ({}): {}", h.task, h.qos, format_bytes(h.bytes))?;
    }
    Ok(())
}

/// Which limit an allocation or reservation ran into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The task's own limit (a Guaranteed task's reservation, or `limit=`).
    Task { task: String, limit: u64 },
    /// The partition's memory quota.
    Partition { partition: String, quota: u64 },
    /// The scheduler's capacity (pool limit or device memory).
    Device { capacity: u64 },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Task { task, limit } => {
                write!(f, "the limit of task '{task}' ({})", format_bytes(*limit))
            }
            Limit::Partition { partition, quota } => write!(
                f,
                "the memory quota of partition '{partition}' ({})",
                format_bytes(*quota)
            ),
            Limit::Device { capacity } => {
                write!(f, "the scheduler's capacity ({})", format_bytes(*capacity))
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// A reservation that does not fit (now, within the timeout, or ever).
    Admission {
        task: String,
        asked: u64,
        free: u64,
        limit: Limit,
        holders: Vec<Holder>,
        reason: &'static str,
    },
    /// An allocation over a quota, after eviction.
    Quota {
        task: Option<String>,
        asked: u64,
        used: u64,
        limit: Limit,
        holders: Vec<Holder>,
    },
    IllegalTransition {
        task: String,
        from: TaskState,
        to: TaskState,
    },
    /// The operation does not fit the task's state (e.g. spilling a running task's buffer).
    Busy(String),
    UnknownPartition(String),
    UnknownTask(u64),
    UnknownBuffer(u64),
    DuplicatePartition(String),
    Invalid(String),
    Pool(PoolError),
    Driver(DriverError),
}

impl From<PoolError> for SchedError {
    fn from(e: PoolError) -> Self {
        SchedError::Pool(e)
    }
}

impl From<DriverError> for SchedError {
    fn from(e: DriverError) -> Self {
        SchedError::Driver(e)
    }
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::Admission {
                task,
                asked,
                free,
                limit,
                holders: h,
                reason,
            } => {
                write!(
                    f,
                    "task '{task}' not admitted ({reason}): it reserves {} but {} of {limit} is free; held by: ",
                    format_bytes(*asked),
                    format_bytes(*free),
                )?;
                holders(f, h)
            }
            SchedError::Quota {
                task,
                asked,
                used,
                limit,
                holders: h,
            } => {
                let who = match task {
                    Some(t) => format!("task '{t}'"),
                    None => "code outside any task".to_string(),
                };
                write!(
                    f,
                    "out of memory: {who} tried to allocate {} beyond {limit}, {} of it in use \
                     after evicting what could be evicted; held by: ",
                    format_bytes(*asked),
                    format_bytes(*used),
                )?;
                holders(f, h)
            }
            SchedError::IllegalTransition { task, from, to } => {
                write!(f, "task '{task}' cannot go from {from} to {to}")
            }
            SchedError::Busy(m) => f.write_str(m),
            SchedError::UnknownPartition(p) => write!(f, "no partition named '{p}'"),
            SchedError::UnknownTask(id) => write!(f, "no task with id {id}"),
            SchedError::UnknownBuffer(id) => {
                write!(f, "no evictable buffer with id {id} (already freed?)")
            }
            SchedError::DuplicatePartition(p) => write!(
                f,
                "a partition named '{p}' exists already with other settings"
            ),
            SchedError::Invalid(m) => f.write_str(m),
            SchedError::Pool(e) => e.fmt(f),
            SchedError::Driver(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SchedError {}
