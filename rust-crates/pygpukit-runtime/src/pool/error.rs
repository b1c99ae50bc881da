//! Errors of the pool.

use std::fmt;

use super::stats::{format_bytes, PoolStats};
use crate::driver::DriverError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The request could not be met even after releasing the cache: the
    /// driver ran out of memory or a new segment would exceed the limit.
    OutOfMemory {
        requested: u64,
        limit: Option<u64>,
        device: i32,
        stats: Box<PoolStats>,
    },
    /// A driver call failed for another reason than out of memory.
    Driver(DriverError),
    /// The block was already freed or does not belong to this pool.
    InvalidBlock { ptr: u64 },
}

impl From<DriverError> for PoolError {
    fn from(e: DriverError) -> Self {
        PoolError::Driver(e)
    }
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::OutOfMemory {
                requested,
                limit,
                device,
                stats,
            } => {
                write!(
                    f,
                    "out of memory: tried to allocate {} ({} bytes) on device {}; \
                     pool: {} allocated, {} reserved, {} cached",
                    format_bytes(*requested),
                    requested,
                    device,
                    format_bytes(stats.allocated_bytes),
                    format_bytes(stats.reserved_bytes),
                    format_bytes(stats.cached_bytes),
                )?;
                if let Some(limit) = limit {
                    write!(f, ", limit {}", format_bytes(*limit))?;
                }
                Ok(())
            }
            PoolError::Driver(e) => e.fmt(f),
            PoolError::InvalidBlock { ptr } => write!(
                f,
                "block 0x{ptr:x} is not a live block of this pool (double free?)"
            ),
        }
    }
}

impl std::error::Error for PoolError {}
