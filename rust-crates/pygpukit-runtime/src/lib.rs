//! Core of PyGPUkit's runtime, without Python.
//!
//! * [`driver`]: the C ABI driver table (`pgk_driver_table`) shared with the
//!   C++ module `pygpukit._native`, and a safe [`driver::Driver`] wrapper.
//! * [`host`]: the host-memory table used in CPU mode.
//! * [`pool`]: the caching, stream-aware memory pool behind every array.
//! * [`transfer`]: pipelined host <-> device copies through pinned staging.
//!
//! The Python bindings live in the `pygpukit-python` crate (`pygpukit._rt`).

pub mod driver;
pub mod host;
pub mod pool;
pub mod scheduler;
pub mod transfer;

pub use driver::{Driver, DriverError, TableError};
pub use pool::{Block, Pool, PoolError, PoolStats};
