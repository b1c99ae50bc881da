//! `pygpukit._rt`: Python bindings of the Rust runtime (memory pool, host
//! driver table).
//!
//! ```text
//! host_table() -> PyCapsule "pygpukit.driver_table"
//! host_table_stats() -> {"mem_alloc_calls": int, "mem_free_calls": int, "vmm_mapped_bytes": int}
//! Pool(table, limit=None, expandable=None)
//!     .alloc(nbytes, stream=0) -> Block     .record_stream(block, stream)
//!     .empty_cache()  .stats() -> dict  .reset_peak_stats()
//!     .record_history(enabled, max_entries=100000, stacks=True)
//!     .history() -> list  .segments() -> list
//!     .limit (get/set)  .is_host  .device  .expandable  .recording
//! Block: .ptr .size .requested .stream .segment (freed when dropped)
//! ```

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyInt, PyList, PyString, PyTuple};

use pygpukit_runtime::driver::{
    pgk_driver_table, Driver, DriverError, PGK_DRIVER_TABLE_ABI, PGK_DRIVER_TABLE_CAPSULE,
};
use pygpukit_runtime::host;
use pygpukit_runtime::pool::{
    config, Block, BlockState, Frame, Frames, Pool, PoolError, PoolKind, PoolStats,
};
use pygpukit_runtime::scheduler::Scheduler;

mod scheduler;
use scheduler::{sched_err, PyBuffer, PyScheduler, Shared};

mod transfer;

const CAPSULE_NAME: &str = "pygpukit.driver_table";

// ----- errors ----------------------------------------------------------------

/// Instantiate `pygpukit._errors.<class>(*args)` as a PyErr; falls back to
/// `fallback` with `message` if the module cannot be imported.
pub(crate) fn pygpukit_error<'py>(
    py: Python<'py>,
    class: &str,
    message: &str,
    args: impl FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>,
    fallback: fn(String) -> PyErr,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("pygpukit._errors")?.getattr(class)?;
        let exc = cls.call1(args(py)?)?;
        Ok(PyErr::from_value(exc))
    };
    build().unwrap_or_else(|_| fallback(message.to_string()))
}

pub(crate) fn driver_err(py: Python<'_>, e: &DriverError) -> PyErr {
    let message = e.to_string();
    pygpukit_error(
        py,
        "CudaError",
        &message,
        |py| (message.as_str(), e.call, e.status, e.name()).into_pyobject(py),
        PyRuntimeError::new_err,
    )
}

pub(crate) fn pool_err(py: Python<'_>, e: PoolError) -> PyErr {
    match &e {
        PoolError::OutOfMemory {
            requested,
            limit,
            stats,
            ..
        } => {
            let message = e.to_string();
            pygpukit_error(
                py,
                "OutOfMemoryError",
                &message,
                |py| {
                    let d = stats_dict(py, stats, *limit)?;
                    (message.as_str(), *requested, d, *limit).into_pyobject(py)
                },
                PyMemoryError::new_err,
            )
        }
        PoolError::Driver(d) => driver_err(py, d),
        PoolError::InvalidBlock { .. } => PyValueError::new_err(e.to_string()),
    }
}

// ----- helpers ---------------------------------------------------------------

/// A non-negative int; negative ints raise ValueError naming `what`.
fn non_negative(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    match obj.extract::<u64>() {
        Ok(v) => Ok(v),
        Err(err) => {
            if obj.is_instance_of::<PyInt>() && obj.lt(0)? {
                Err(PyValueError::new_err(format!(
                    "{what} must be >= 0, got {obj}"
                )))
            } else {
                Err(err)
            }
        }
    }
}

fn optional_limit(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => non_negative(o, "limit").map(Some),
    }
}

fn stats_dict<'py>(
    py: Python<'py>,
    stats: &PoolStats,
    limit: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in stats.fields() {
        d.set_item(name, value)?;
    }
    d.set_item("limit", limit)?;
    Ok(d)
}

/// The driver behind a "pygpukit.driver_table" capsule (`who` names the
/// caller in errors); the driver keeps the capsule, and so the table, alive.
pub(crate) fn driver_from_capsule(table: &Bound<'_, PyAny>, who: &str) -> PyResult<Driver> {
    let capsule = table.cast::<PyCapsule>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{who} needs a PyCapsule named '{CAPSULE_NAME}', got {}",
            table.get_type()
        ))
    })?;
    if !capsule.is_valid_checked(Some(PGK_DRIVER_TABLE_CAPSULE)) {
        return Err(PyValueError::new_err(format!(
            "{who} needs a PyCapsule named '{CAPSULE_NAME}'"
        )));
    }
    let ptr = capsule.pointer_checked(Some(PGK_DRIVER_TABLE_CAPSULE))?;
    let owner: Py<PyCapsule> = capsule.clone().unbind();
    // SAFETY: the capsule's contract is a `*const pgk_driver_table` that
    // stays valid while the capsule lives; the driver keeps it alive.
    unsafe {
        Driver::from_raw(
            ptr.as_ptr() as *const pgk_driver_table,
            Some(Box::new(owner)),
        )
    }
    .map_err(|e| PyValueError::new_err(e.to_string()))
}

// ----- host table ------------------------------------------------------------

/// The host-memory driver table as a PyCapsule named "pygpukit.driver_table".
#[pyfunction]
fn host_table(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    let ptr: NonNull<c_void> = NonNull::from(host::host_table()).cast();
    // SAFETY: the host table is a static; it outlives every capsule.
    unsafe { PyCapsule::new_with_pointer(py, ptr, PGK_DRIVER_TABLE_CAPSULE) }
}

/// Calls of the host table's mem_alloc / mem_free so far (process-wide).
#[pyfunction]
fn host_table_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = host::host_table_stats();
    let d = PyDict::new(py);
    d.set_item("mem_alloc_calls", s.mem_alloc_calls)?;
    d.set_item("mem_free_calls", s.mem_free_calls)?;
    d.set_item("vmm_mapped_bytes", s.vmm_mapped_bytes)?;
    Ok(d)
}

// ----- stacks (memory history) -----------------------------------------------

/// Frames kept per event: deeper stacks are cut (the innermost are kept).
const MAX_FRAMES: usize = 128;

/// The calling Python stack, innermost frame first.
pub(crate) fn capture_frames(py: Python<'_>) -> PyResult<Frames> {
    static GETFRAME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let mut frame = GETFRAME.import(py, "sys", "_getframe")?.call0()?;
    let mut frames = Vec::new();
    while !frame.is_none() && frames.len() < MAX_FRAMES {
        let code = frame.getattr(intern!(py, "f_code"))?;
        let filename = code.getattr(intern!(py, "co_filename"))?;
        let name = code.getattr(intern!(py, "co_name"))?;
        let line = frame.getattr(intern!(py, "f_lineno"))?;
        frames.push(Frame {
            filename: Arc::from(filename.cast::<PyString>()?.to_str()?),
            line: line.extract::<u32>().unwrap_or(0),
            name: Arc::from(name.cast::<PyString>()?.to_str()?),
        });
        frame = frame.getattr(intern!(py, "f_back"))?;
    }
    Ok(Arc::from(frames))
}

fn frames_list<'py>(py: Python<'py>, frames: Option<&Frames>) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for f in frames.map_or(&[][..], |f| &f[..]) {
        list.append((f.filename.as_ref(), f.line, f.name.as_ref()))?;
    }
    Ok(list)
}

// ----- Pool ------------------------------------------------------------------

/// Caching memory pool over a driver table capsule.
///
/// Pool(table, limit=None): `table` is a PyCapsule named
/// "pygpukit.driver_table" (from `host_table()` or `_native.driver_table()`);
/// `limit` caps the bytes the pool may reserve.
#[pyclass(name = "Pool", module = "pygpukit._rt", frozen)]
struct PyPool {
    /// The scheduler (holding the pool) that charges every allocation.
    shared: Arc<Shared>,
}

fn kind_name(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::Small => "small",
        PoolKind::Large => "large",
    }
}

fn state_name(state: BlockState) -> &'static str {
    match state {
        BlockState::Live => "live",
        BlockState::Cached => "cached",
        BlockState::Pending => "pending",
        BlockState::Unmapped => "unmapped",
    }
}

#[pymethods]
impl PyPool {
    #[new]
    #[pyo3(signature = (table, limit = None, expandable = None, capacity = None))]
    fn new(
        table: &Bound<'_, PyAny>,
        limit: Option<&Bound<'_, PyAny>>,
        expandable: Option<bool>,
        capacity: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let driver = driver_from_capsule(table, "Pool()")?;
        let limit = optional_limit(limit)?;
        let expandable = match expandable {
            Some(e) => e,
            None => config::expandable_from_env().map_err(PyValueError::new_err)?,
        };
        let pool = Arc::new(Pool::with_expandable(driver, limit, expandable));
        let capacity = match capacity {
            Some(c) if !c.is_none() => Some(non_negative(c, "capacity")?),
            _ => None,
        };
        Ok(PyPool {
            shared: Shared::new(Arc::new(Scheduler::new(pool, capacity))),
        })
    }

    /// Allocate `nbytes` for use on `stream`; the Block frees itself when dropped.
    /// Allocate `nbytes` for use on `stream`, charged to the task of `charge`
    /// (default: of `stream`); the Block frees itself when dropped.
    #[pyo3(signature = (nbytes, stream = 0, charge = None))]
    fn alloc(
        &self,
        py: Python<'_>,
        nbytes: &Bound<'_, PyAny>,
        stream: u64,
        charge: Option<u64>,
    ) -> PyResult<PyBlock> {
        let nbytes = non_negative(nbytes, "nbytes")?;
        let s = &self.shared;
        let frames = s.frames(py);
        let charge = charge.unwrap_or(stream);
        match s
            .sched
            .alloc_traced(nbytes, stream, charge, frames, &s.can_evict())
        {
            Ok(block) => Ok(PyBlock {
                shared: Arc::clone(s),
                block,
            }),
            Err(e) => Err(sched_err(py, e)),
        }
    }

    /// The scheduler every allocation of this pool is charged through.
    fn scheduler(&self) -> PyScheduler {
        PyScheduler {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Mark `block` as used by work on `stream`: when freed, it is reused
    /// only after that work completes.
    fn record_stream(
        &self,
        py: Python<'_>,
        block: &Bound<'_, PyBlock>,
        stream: u64,
    ) -> PyResult<()> {
        let b = block.get();
        if !Arc::ptr_eq(&b.shared, &self.shared) {
            return Err(PyValueError::new_err("the block belongs to another pool"));
        }
        self.shared
            .pool()
            .record_stream(&b.block, stream)
            .map_err(|e| pool_err(py, e))
    }

    /// Start recording allocator events (keeping the newest `max_entries`;
    /// with the Python stack of each alloc and free when `stacks`), or stop
    /// (`enabled=False`; the events are kept until the next start).
    #[pyo3(signature = (enabled, max_entries = 100_000, stacks = true))]
    fn record_history(&self, enabled: bool, max_entries: i64, stacks: bool) -> PyResult<()> {
        if enabled && max_entries < 1 {
            return Err(PyValueError::new_err(format!(
                "max_entries must be >= 1, got {max_entries}"
            )));
        }
        self.shared.stacks.store(stacks, Ordering::Relaxed);
        self.shared
            .pool()
            .record_history(enabled, usize::try_from(max_entries).unwrap_or(0));
        Ok(())
    }

    /// True while events are recorded.
    #[getter]
    fn recording(&self) -> bool {
        self.shared.pool().is_recording()
    }

    /// Recorded events, oldest first: (action, addr, size, stream, time_us,
    /// device_free, frames) with frames [(filename, line, name)], innermost first.
    fn history<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for e in self.shared.pool().history() {
            let t = (
                e.action.name(),
                e.addr,
                e.size,
                e.stream,
                e.time_us,
                e.device_free,
                frames_list(py, e.frames.as_ref())?,
            );
            out.append(t.into_pyobject(py)?)?;
        }
        Ok(out)
    }

    /// Every segment: (id, ptr, size, stream, kind, expandable, mapped,
    /// blocks) with blocks [(ptr, size, requested, state, frames)] in address
    /// order; state is "live", "cached", "pending" or "unmapped".
    fn segments<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for seg in self.shared.pool().snapshot() {
            let blocks = PyList::empty(py);
            for b in &seg.blocks {
                let t = (
                    b.ptr,
                    b.size,
                    b.requested,
                    state_name(b.state),
                    frames_list(py, b.frames.as_ref())?,
                );
                blocks.append(t.into_pyobject(py)?)?;
            }
            let t: Bound<'py, PyTuple> = (
                seg.id,
                seg.ptr,
                seg.size,
                seg.stream,
                kind_name(seg.kind),
                seg.expandable,
                seg.mapped,
                blocks,
            )
                .into_pyobject(py)?;
            out.append(t)?;
        }
        Ok(out)
    }

    /// Synchronize the device and return every cached segment without live
    /// blocks to the driver.
    fn empty_cache(&self, py: Python<'_>) -> PyResult<()> {
        let pool = self.shared.pool();
        py.detach(|| pool.empty_cache())
            .map_err(|e| driver_err(py, &e))
    }

    /// Pool statistics (see pygpukit.memory.stats) plus "limit".
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.shared.pool().stats(), self.shared.pool().limit())
    }

    fn reset_peak_stats(&self) {
        self.shared.pool().reset_peak_stats();
    }

    /// Byte cap on reserved memory, or None.
    #[getter]
    fn get_limit(&self) -> Option<u64> {
        self.shared.pool().limit()
    }

    #[setter]
    fn set_limit(&self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.shared.pool().set_limit(optional_limit(Some(value))?);
        Ok(())
    }

    /// True for the host-memory table (CPU mode).
    #[getter]
    fn is_host(&self) -> bool {
        self.shared.pool().driver().is_host()
    }

    /// Device ordinal of the table.
    #[getter]
    fn device(&self) -> i32 {
        self.shared.pool().driver().device()
    }

    /// True when the pool grows by mapping pages into expandable segments.
    #[getter]
    fn expandable(&self) -> bool {
        self.shared.pool().expandable()
    }

    fn __repr__(&self) -> String {
        let pool = self.shared.pool();
        let s = pool.stats();
        let limit = match pool.limit() {
            Some(l) => l.to_string(),
            None => "None".to_string(),
        };
        format!(
            "Pool(device={}, is_host={}, allocated_bytes={}, reserved_bytes={}, limit={})",
            pool.driver().device(),
            if pool.driver().is_host() {
                "True"
            } else {
                "False"
            },
            s.allocated_bytes,
            s.reserved_bytes,
            limit
        )
    }
}

// ----- Block -----------------------------------------------------------------

/// A live allocation of a Pool, returned to the pool when this object is
/// dropped. Holds the pool alive.
#[pyclass(name = "Block", module = "pygpukit._rt", frozen, weakref)]
struct PyBlock {
    shared: Arc<Shared>,
    block: Block,
}

impl Drop for PyBlock {
    fn drop(&mut self) {
        // Cannot fail for a block of this pool except when recording an
        // event fails; the block is freed anyway (after a synchronize) and
        // there is nobody to report to from a destructor.
        let frames = if self.shared.pool().is_recording() {
            Python::attach(|py| self.shared.frames(py))
        } else {
            None
        };
        let _ = self.shared.sched.free_traced(&self.block, frames);
    }
}

#[pymethods]
impl PyBlock {
    /// Device (or host) address.
    #[getter]
    fn ptr(&self) -> u64 {
        self.block.ptr
    }

    /// Bytes owned (the request rounded up to 512 B).
    #[getter]
    fn size(&self) -> u64 {
        self.block.size
    }

    /// Bytes asked for.
    #[getter]
    fn requested(&self) -> u64 {
        self.block.requested
    }

    /// Stream the block was allocated on.
    #[getter]
    fn stream(&self) -> u64 {
        self.block.stream
    }

    /// Id of the pool segment holding the block.
    #[getter]
    fn segment(&self) -> u64 {
        self.block.segment
    }

    fn __repr__(&self) -> String {
        format!(
            "Block(ptr=0x{:x}, size={}, requested={}, stream={})",
            self.block.ptr, self.block.size, self.block.requested, self.block.stream
        )
    }
}

// ----- module ----------------------------------------------------------------

#[pymodule]
fn _rt(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(host_table, m)?)?;
    m.add_function(wrap_pyfunction!(host_table_stats, m)?)?;
    m.add_class::<PyPool>()?;
    m.add_class::<PyBlock>()?;
    m.add_class::<PyScheduler>()?;
    m.add_class::<PyBuffer>()?;
    transfer::register(m)?;
    m.add("DRIVER_TABLE_ABI", PGK_DRIVER_TABLE_ABI)?;
    m.add("DRIVER_TABLE_CAPSULE", CAPSULE_NAME)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
