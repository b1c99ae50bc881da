//! `pygpukit._rt.TransferEngine` and `Transfer`: the Rust transfer engine
//! for Python (`pygpukit.transfer` is the public API over it).
//!
//! ```text
//! TransferEngine(table, high_stream, low_stream, chunk_bytes=None,
//!                staging_buffers=None, copy_threads=None)
//!     .host_to_device(dst, src, nbytes, priority) -> Transfer
//!     .device_to_host(dst, src, nbytes, priority) -> Transfer
//!     .stream(priority) -> int   .stats() -> dict   .config -> dict
//! Transfer: .done() .wait() .event .stream .nbytes .chunks .direction .priority
//! ```
//!
//! Addresses are ints; the caller keeps the memory behind them alive for the
//! call (and the device destination until the transfer is done). Copies run
//! with the GIL released.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use pygpukit_runtime::transfer::{
    Direction, Priority, Transfer, TransferConfig, TransferEngine, TransferError,
};

use crate::{driver_err, driver_from_capsule};

fn transfer_err(py: Python<'_>, e: &TransferError) -> PyErr {
    match e {
        TransferError::Driver(d) => driver_err(py, d),
        TransferError::InvalidConfig(_) | TransferError::InvalidArgument(_) => {
            PyValueError::new_err(e.to_string())
        }
    }
}

fn priority(py: Python<'_>, name: &str) -> PyResult<Priority> {
    name.parse().map_err(|e| transfer_err(py, &e))
}

/// Pipelined host <-> device copies through pinned staging buffers on two
/// copy streams (see rust-crates/pygpukit-runtime/src/transfer).
#[pyclass(name = "TransferEngine", module = "pygpukit._rt", frozen)]
pub struct PyTransferEngine {
    engine: TransferEngine,
}

#[pymethods]
impl PyTransferEngine {
    #[new]
    #[pyo3(signature = (table, high_stream, low_stream, chunk_bytes = None, staging_buffers = None, copy_threads = None))]
    fn new(
        py: Python<'_>,
        table: &Bound<'_, PyAny>,
        high_stream: u64,
        low_stream: u64,
        chunk_bytes: Option<u64>,
        staging_buffers: Option<usize>,
        copy_threads: Option<usize>,
    ) -> PyResult<Self> {
        let driver = driver_from_capsule(table, "TransferEngine()")?;
        let default = TransferConfig::default();
        let config = TransferConfig {
            chunk_bytes: chunk_bytes.unwrap_or(default.chunk_bytes),
            staging_buffers: staging_buffers.unwrap_or(default.staging_buffers),
            copy_threads: copy_threads.unwrap_or(default.copy_threads),
        };
        let engine = TransferEngine::new(driver, config, high_stream, low_stream)
            .map_err(|e| transfer_err(py, &e))?;
        Ok(PyTransferEngine { engine })
    }

    /// Copy `nbytes` from host address `src` to device address `dst`; returns
    /// once `src` may be reused. The device copy is done with the Transfer.
    fn host_to_device(
        &self,
        py: Python<'_>,
        dst: u64,
        src: u64,
        nbytes: u64,
        priority: &str,
    ) -> PyResult<PyTransfer> {
        let p = self::priority(py, priority)?;
        let engine = &self.engine;
        // SAFETY: the caller guarantees both ranges (module documentation).
        py.detach(|| unsafe { engine.host_to_device(dst, src as *const u8, nbytes, p) })
            .map(|t| PyTransfer { t })
            .map_err(|e| transfer_err(py, &e))
    }

    /// Copy `nbytes` from device address `src` to host address `dst`; returns
    /// once the data is in `dst`.
    fn device_to_host(
        &self,
        py: Python<'_>,
        dst: u64,
        src: u64,
        nbytes: u64,
        priority: &str,
    ) -> PyResult<PyTransfer> {
        let p = self::priority(py, priority)?;
        let engine = &self.engine;
        // SAFETY: the caller guarantees both ranges (module documentation).
        py.detach(|| unsafe { engine.device_to_host(dst as *mut u8, src, nbytes, p) })
            .map(|t| PyTransfer { t })
            .map_err(|e| transfer_err(py, &e))
    }

    /// The copy stream of `priority` ("high", "normal" or "low").
    fn stream(&self, py: Python<'_>, priority: &str) -> PyResult<u64> {
        Ok(self.engine.stream(self::priority(py, priority)?))
    }

    /// Counters since the engine was created (see TransferStats).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, value) in self.engine.stats().fields() {
            d.set_item(name, value)?;
        }
        Ok(d)
    }

    /// {"chunk_bytes", "staging_buffers", "copy_threads"}.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.engine.config();
        let d = PyDict::new(py);
        d.set_item("chunk_bytes", c.chunk_bytes)?;
        d.set_item("staging_buffers", c.staging_buffers)?;
        d.set_item("copy_threads", c.copy_threads)?;
        Ok(d)
    }
}

/// One transfer: its completion event (a stream can wait on it) and size.
#[pyclass(name = "Transfer", module = "pygpukit._rt", frozen)]
pub struct PyTransfer {
    t: Transfer,
}

#[pymethods]
impl PyTransfer {
    /// True once every byte has arrived (never blocks).
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        self.t.done().map_err(|e| transfer_err(py, &e))
    }

    /// Block (without the GIL) until every byte has arrived.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let t = &self.t;
        py.detach(|| t.wait()).map_err(|e| transfer_err(py, &e))
    }

    /// Event handle recorded on the copy stream after the last chunk.
    #[getter]
    fn event(&self) -> u64 {
        self.t.event()
    }

    /// The copy stream the transfer ran on.
    #[getter]
    fn stream(&self) -> u64 {
        self.t.stream()
    }

    #[getter]
    fn nbytes(&self) -> u64 {
        self.t.nbytes()
    }

    #[getter]
    fn chunks(&self) -> u64 {
        self.t.chunks()
    }

    /// "h2d" or "d2h".
    #[getter]
    fn direction(&self) -> &'static str {
        match self.t.direction() {
            Direction::HostToDevice => "h2d",
            Direction::DeviceToHost => "d2h",
        }
    }

    #[getter]
    fn priority(&self) -> &'static str {
        self.t.priority().name()
    }

    fn __repr__(&self) -> String {
        format!(
            "Transfer(direction={}, nbytes={}, chunks={}, priority={})",
            self.direction(),
            self.t.nbytes(),
            self.t.chunks(),
            self.t.priority().name()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTransferEngine>()?;
    m.add_class::<PyTransfer>()?;
    Ok(())
}
