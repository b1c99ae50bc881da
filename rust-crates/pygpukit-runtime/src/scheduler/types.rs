//! QoS tiers and the task state machine.

use std::fmt;

/// Quality-of-service tier of a task, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Qos {
    /// Memory reserved at admission, highest-priority stream, never paced.
    Guaranteed,
    /// Reserves a minimum, may burst to its limit or the partition quota.
    Burstable,
    /// No reservation, lowest-priority stream, paced, evicted first.
    BestEffort,
}

impl Qos {
    pub const ALL: [Qos; 3] = [Qos::Guaranteed, Qos::Burstable, Qos::BestEffort];

    pub fn name(self) -> &'static str {
        match self {
            Qos::Guaranteed => "guaranteed",
            Qos::Burstable => "burstable",
            Qos::BestEffort => "best_effort",
        }
    }

    /// "guaranteed", "burstable", "best_effort" (also "besteffort", "best-effort").
    pub fn parse(s: &str) -> Option<Qos> {
        match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
            "guaranteed" => Some(Qos::Guaranteed),
            "burstable" => Some(Qos::Burstable),
            "besteffort" => Some(Qos::BestEffort),
            _ => None,
        }
    }

    /// Stream priority for this tier within the device's range
    /// (`greatest` is the highest priority, a lower number in CUDA).
    pub fn stream_priority(self, least: i32, greatest: i32) -> i32 {
        match self {
            Qos::Guaranteed => greatest,
            Qos::Burstable => (least + greatest) / 2,
            Qos::BestEffort => least,
        }
    }
}

impl fmt::Display for Qos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Life cycle of a task: Pending -> Admitted -> Running -> Completed | Failed
/// | Cancelled. A running task may go back to Admitted (it keeps its
/// reservation but is idle: its evictable buffers may be spilled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    Pending,
    Admitted,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TaskState {
    pub const ALL: [TaskState; 6] = [
        TaskState::Pending,
        TaskState::Admitted,
        TaskState::Running,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Admitted => "admitted",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Cancelled
        )
    }

    /// Whether the task holds its memory reservation in this state.
    pub fn holds_reservation(self) -> bool {
        matches!(self, TaskState::Admitted | TaskState::Running)
    }

    /// The legal transitions; everything else is an error.
    pub fn can_become(self, to: TaskState) -> bool {
        use TaskState::*;
        matches!(
            (self, to),
            (Pending, Admitted)
                | (Pending, Failed)
                | (Pending, Cancelled)
                | (Admitted, Running)
                | (Admitted, Completed)
                | (Admitted, Failed)
                | (Admitted, Cancelled)
                | (Running, Admitted)
                | (Running, Completed)
                | (Running, Failed)
                | (Running, Cancelled)
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
