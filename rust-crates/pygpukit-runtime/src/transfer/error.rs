//! Errors of the transfer engine.

use std::fmt;

use crate::driver::DriverError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferError {
    /// A configuration value is out of range; the message names it.
    InvalidConfig(String),
    /// A transfer's arguments are unusable (an address range that wraps).
    InvalidArgument(String),
    /// A driver call failed (allocating staging, queueing a copy, an event).
    Driver(DriverError),
}

impl From<DriverError> for TransferError {
    fn from(e: DriverError) -> Self {
        TransferError::Driver(e)
    }
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferError::InvalidConfig(m) => write!(f, "invalid transfer engine config: {m}"),
            TransferError::InvalidArgument(m) => write!(f, "invalid transfer: {m}"),
            TransferError::Driver(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TransferError {}
