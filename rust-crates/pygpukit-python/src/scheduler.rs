//! Bindings of the scheduler (`pygpukit._rt.Scheduler`, `Buffer`) and the
//! launch gate capsule handed to `pygpukit._native`.
//!
//! ```text
//! Pool.scheduler() -> Scheduler
//!   .partition(name, quota, compute)  .submit(name, qos, partition, reservation, limit) -> id
//!   .admit(id, timeout)  .set_state(id, state, error=None)
//!   .add_stream(id, stream)  .remove_stream(stream) -> counters | None
//!   .stream_priority(qos, least, greatest) -> int
//!   .alloc_buffer(nbytes, stream) -> Buffer
//!   .snapshot() -> dict   .pacing / .set_pacing(...)   .capacity   .set_eviction_grace(s)
//!   .launch_gate() -> PyCapsule "pygpukit.launch_gate"
//! Buffer: .ptr (restores when spilled) .id .nbytes .resident .evict()
//! ```

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList};

use pygpukit_runtime::scheduler::{
    BufferId, Holder, Limit, PacingConfig, Qos, SchedError, Scheduler, TaskState,
};

use pygpukit_runtime::pool::{Frames, Pool};

use crate::{capture_frames, driver_err, pool_err, pygpukit_error};

// ----- errors ----------------------------------------------------------------

fn holders_list<'py>(py: Python<'py>, h: &[Holder]) -> PyResult<Bound<'py, PyList>> {
    let items: Vec<(String, &str, u64)> =
        h.iter().map(|x| (x.task.clone(), x.qos, x.bytes)).collect();
    PyList::new(py, items)
}

fn limit_bytes(l: &Limit) -> u64 {
    match l {
        Limit::Task { limit, .. } => *limit,
        Limit::Partition { quota, .. } => *quota,
        Limit::Device { capacity } => *capacity,
    }
}

pub(crate) fn sched_err(py: Python<'_>, e: SchedError) -> PyErr {
    let message = e.to_string();
    match &e {
        SchedError::Admission {
            task,
            asked,
            free,
            holders,
            ..
        } => pygpukit_error(
            py,
            "AdmissionError",
            &message,
            |py| {
                let h = holders_list(py, holders)?;
                (message.as_str(), task.as_str(), *asked, *free, h).into_pyobject(py)
            },
            PyRuntimeError::new_err,
        ),
        SchedError::Quota {
            asked,
            limit,
            holders,
            ..
        } => {
            let err = pygpukit_error(
                py,
                "OutOfMemoryError",
                &message,
                |py| {
                    let d = PyDict::new(py);
                    d.set_item("holders", holders_list(py, holders)?)?;
                    d.set_item("limit_kind", limit.to_string())?;
                    (message.as_str(), *asked, d, limit_bytes(limit)).into_pyobject(py)
                },
                PyMemoryError::new_err,
            );
            err
        }
        SchedError::Pool(p) => pool_err(py, p.clone()),
        SchedError::Driver(d) => driver_err(py, d),
        SchedError::UnknownPartition(_)
        | SchedError::Invalid(_)
        | SchedError::DuplicatePartition(_) => PyValueError::new_err(message),
        _ => pygpukit_error(
            py,
            "SchedulerError",
            &message,
            |py| (message.as_str(),).into_pyobject(py),
            PyRuntimeError::new_err,
        ),
    }
}

fn parse_qos(s: &str) -> PyResult<Qos> {
    Qos::parse(s).ok_or_else(|| {
        PyValueError::new_err(format!(
            "qos must be 'guaranteed', 'burstable' or 'best_effort', got '{s}'"
        ))
    })
}

fn parse_state(s: &str) -> PyResult<TaskState> {
    TaskState::ALL
        .into_iter()
        .find(|t| t.name() == s)
        .ok_or_else(|| PyValueError::new_err(format!("unknown task state '{s}'")))
}

fn timeout(t: Option<f64>) -> PyResult<Option<Duration>> {
    match t {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(PyValueError::new_err(format!(
            "timeout must be a finite number of seconds >= 0 or None, got {s}"
        ))),
    }
}

// ----- evictable buffers -----------------------------------------------------

/// Python objects of the live buffers (borrowed pointers, removed on drop):
/// a buffer may be spilled only while its owning array is its only holder,
/// that is while no view of it is alive.
#[derive(Default)]
pub(crate) struct Buffers(Mutex<HashMap<BufferId, usize>>);

impl Buffers {
    fn can_evict(&self, id: BufferId) -> bool {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(&id) {
            // SAFETY: called with the GIL held (from an allocation made by
            // Python); the object is alive while it is in the map.
            Some(&obj) => (unsafe { pyo3::ffi::Py_REFCNT(obj as *mut pyo3::ffi::PyObject) }) <= 1,
            None => false,
        }
    }
}

/// What a pool, its blocks and its scheduler share: the scheduler (which
/// holds the pool) and what the bindings keep beside it.
pub(crate) struct Shared {
    pub sched: Arc<Scheduler>,
    pub buffers: Buffers,
    /// Capture Python stacks while the pool's history records.
    pub stacks: AtomicBool,
}

impl Shared {
    pub fn new(sched: Arc<Scheduler>) -> Arc<Shared> {
        Arc::new(Shared {
            sched,
            buffers: Buffers::default(),
            stacks: AtomicBool::new(false),
        })
    }

    #[inline]
    pub fn pool(&self) -> &Pool {
        self.sched.pool()
    }

    /// The caller's stack when the history records with stacks; `None`
    /// (one relaxed load) otherwise. A stack that cannot be read is left out.
    #[inline]
    pub fn frames(&self, py: Python<'_>) -> Option<Frames> {
        if self.pool().is_recording() && self.stacks.load(Ordering::Relaxed) {
            capture_frames(py).ok()
        } else {
            None
        }
    }

    pub fn can_evict(&self) -> impl Fn(BufferId) -> bool + '_ {
        |id| self.buffers.can_evict(id)
    }
}

/// An evictable allocation; `ptr` restores it when it was spilled.
#[pyclass(name = "Buffer", module = "pygpukit._rt", frozen, weakref)]
pub(crate) struct PyBuffer {
    shared: Arc<Shared>,
    id: BufferId,
    nbytes: u64,
}

impl Drop for PyBuffer {
    fn drop(&mut self) {
        self.shared
            .buffers
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        // Nobody to report to from a destructor; the id is ours, so only a
        // device error could fail here.
        let _ = self.shared.sched.free_buffer(self.id);
    }
}

#[pymethods]
impl PyBuffer {
    /// Device address; a spilled buffer is restored first (byte-identical).
    #[getter]
    fn ptr(&self, py: Python<'_>) -> PyResult<u64> {
        let s = &self.shared;
        s.sched
            .touch(self.id, &s.can_evict())
            .map_err(|e| sched_err(py, e))
    }

    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    #[getter]
    fn nbytes(&self) -> u64 {
        self.nbytes
    }

    /// True while the buffer is in device memory.
    #[getter]
    fn resident(&self, py: Python<'_>) -> PyResult<bool> {
        self.shared
            .sched
            .is_resident(self.id)
            .map_err(|e| sched_err(py, e))
    }

    /// Spill to pinned host memory now; False if it was spilled already.
    fn evict(&self, py: Python<'_>) -> PyResult<bool> {
        self.shared
            .sched
            .evict_buffer(self.id)
            .map_err(|e| sched_err(py, e))
    }

    fn __repr__(&self) -> String {
        format!("Buffer(id={}, nbytes={})", self.id, self.nbytes)
    }
}

// ----- launch gate -----------------------------------------------------------

/// `pgk_launch_gate` (native-libs/driver/include/pygpukit/launch_gate.h).
#[repr(C)]
struct LaunchGate {
    abi_version: u32,
    struct_size: u32,
    ctx: *const c_void,
    before: unsafe extern "C" fn(*const c_void, u64) -> c_int,
    wait: unsafe extern "C" fn(*const c_void, u64),
    after: unsafe extern "C" fn(*const c_void, u64),
}

const LAUNCH_GATE_ABI: u32 = 1;
const LAUNCH_GATE_CAPSULE: &CStr = c"pygpukit.launch_gate";

unsafe extern "C" fn gate_before(ctx: *const c_void, stream: u64) -> c_int {
    // SAFETY: ctx is the leaked Arc<Scheduler> of the gate.
    let s = unsafe { &*(ctx as *const Scheduler) };
    s.pacer().before(s.pool().driver(), stream) as c_int
}

unsafe extern "C" fn gate_wait(ctx: *const c_void, stream: u64) {
    let s = unsafe { &*(ctx as *const Scheduler) };
    s.pacer().wait(s.pool().driver(), stream)
}

unsafe extern "C" fn gate_after(ctx: *const c_void, stream: u64) {
    let s = unsafe { &*(ctx as *const Scheduler) };
    s.pacer().after(s.pool().driver(), stream)
}

// ----- Scheduler -------------------------------------------------------------

#[pyclass(name = "Scheduler", module = "pygpukit._rt", frozen)]
pub(crate) struct PyScheduler {
    pub shared: Arc<Shared>,
}

#[pymethods]
impl PyScheduler {
    /// Create (or look up) a partition; returns its index.
    #[pyo3(signature = (name, quota = None, compute = 1.0))]
    fn partition(
        &self,
        py: Python<'_>,
        name: &str,
        quota: Option<u64>,
        compute: f64,
    ) -> PyResult<usize> {
        self.shared
            .sched
            .partition(name, quota, compute)
            .map_err(|e| sched_err(py, e))
    }

    /// Queue a new task; returns its id.
    #[pyo3(signature = (name, qos, partition = "default", reservation = 0, limit = None))]
    fn submit(
        &self,
        py: Python<'_>,
        name: &str,
        qos: &str,
        partition: &str,
        reservation: u64,
        limit: Option<u64>,
    ) -> PyResult<u64> {
        let qos = parse_qos(qos)?;
        self.shared
            .sched
            .submit(name, qos, partition, reservation, limit)
            .map_err(|e| sched_err(py, e))
    }

    /// Wait (without the GIL) until the task is admitted.
    #[pyo3(signature = (id, timeout = None))]
    fn admit(&self, py: Python<'_>, id: u64, timeout: Option<f64>) -> PyResult<()> {
        let t = self::timeout(timeout)?;
        let sched = Arc::clone(&self.shared.sched);
        py.detach(move || sched.admit(id, t))
            .map_err(|e| sched_err(py, e))
    }

    #[pyo3(signature = (id, state, error = None))]
    fn set_state(
        &self,
        py: Python<'_>,
        id: u64,
        state: &str,
        error: Option<String>,
    ) -> PyResult<()> {
        let st = parse_state(state)?;
        self.shared
            .sched
            .set_state(id, st, error)
            .map_err(|e| sched_err(py, e))
    }

    fn add_stream(&self, py: Python<'_>, id: u64, stream: u64) -> PyResult<()> {
        self.shared
            .sched
            .add_stream(id, stream)
            .map_err(|e| sched_err(py, e))
    }

    /// Forget a stream (it waits for the stream's paced launches); returns
    /// its launch counters, or None when it was not a task's stream.
    fn remove_stream<'py>(
        &self,
        py: Python<'py>,
        stream: u64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let sched = Arc::clone(&self.shared.sched);
        match py.detach(move || sched.remove_stream(stream)) {
            None => Ok(None),
            Some((_, c)) => {
                let d = PyDict::new(py);
                d.set_item("launches", c.launches)?;
                d.set_item("completions", c.completions)?;
                d.set_item("waits", c.waits)?;
                d.set_item("wait_ns", c.wait_ns)?;
                Ok(Some(d))
            }
        }
    }

    /// The stream priority of a tier within the device's range.
    #[staticmethod]
    fn stream_priority(qos: &str, least: i32, greatest: i32) -> PyResult<i32> {
        Ok(parse_qos(qos)?.stream_priority(least, greatest))
    }

    /// An evictable allocation charged to the task of `stream`.
    fn alloc_buffer(&self, py: Python<'_>, nbytes: u64, stream: u64) -> PyResult<Py<PyBuffer>> {
        let s = &self.shared;
        let (id, _) = s
            .sched
            .alloc_buffer(nbytes, stream, &s.can_evict())
            .map_err(|e| sched_err(py, e))?;
        let obj = Py::new(
            py,
            PyBuffer {
                shared: Arc::clone(s),
                id,
                nbytes,
            },
        )?;
        s.buffers
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, obj.as_ptr() as usize);
        Ok(obj)
    }

    #[getter]
    fn capacity(&self) -> Option<u64> {
        self.shared.sched.with_state(|st, _| st.capacity)
    }

    fn set_capacity(&self, py: Python<'_>, capacity: Option<u64>) -> PyResult<()> {
        self.shared
            .sched
            .set_capacity(capacity)
            .map_err(|e| sched_err(py, e))
    }

    fn set_eviction_grace(&self, seconds: f64) -> PyResult<()> {
        let d = timeout(Some(seconds))?.unwrap_or_default();
        self.shared.sched.set_eviction_grace(d);
        Ok(())
    }

    /// {"idle_window", "contended_window", "max_hold_us"}
    #[getter]
    fn pacing<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.shared.sched.pacer().config();
        let d = PyDict::new(py);
        d.set_item("idle_window", c.idle_window)?;
        d.set_item("contended_window", c.contended_window)?;
        d.set_item("max_hold_us", c.max_hold.as_micros() as u64)?;
        Ok(d)
    }

    fn set_pacing(
        &self,
        idle_window: u32,
        contended_window: u32,
        max_hold_us: u64,
    ) -> PyResult<()> {
        if idle_window == 0 {
            return Err(PyValueError::new_err("idle_window must be >= 1"));
        }
        self.shared.sched.pacer().set_config(PacingConfig {
            idle_window,
            contended_window,
            max_hold: Duration::from_micros(max_hold_us),
        });
        Ok(())
    }

    /// Everything the scheduler knows, as plain dicts and lists.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counters = self.shared.sched.pacer().counters();
        // Copied under the scheduler's lock, made into Python objects after it: making them may run the
        // garbage collector, whose finalizers may release the GIL to a thread that waits for this lock
        // while holding the GIL (an allocation): a deadlock.
        let (capacity, committed, all_partitions, all_tasks, queue, ev) =
            self.shared.sched.with_state(|st, ev| {
                let tasks: Vec<_> = st.tasks.values().cloned().collect();
                let queue: Vec<u64> = st.queue.iter().copied().collect();
                (
                    st.capacity,
                    st.committed,
                    st.partitions.clone(),
                    tasks,
                    queue,
                    *ev,
                )
            });
        {
            let out = PyDict::new(py);
            out.set_item("capacity", capacity)?;
            out.set_item("committed", committed)?;
            let parts = PyList::empty(py);
            for p in &all_partitions {
                let d = PyDict::new(py);
                d.set_item("name", &p.name)?;
                d.set_item("quota", p.quota)?;
                d.set_item("compute", p.compute)?;
                d.set_item("committed", p.committed)?;
                d.set_item("used", p.used)?;
                d.set_item("untasked", p.untasked)?;
                parts.append(d)?;
            }
            out.set_item("partitions", parts)?;
            let tasks = PyList::empty(py);
            for t in &all_tasks {
                let d = PyDict::new(py);
                d.set_item("id", t.id)?;
                d.set_item("name", &t.name)?;
                d.set_item("qos", t.qos.name())?;
                d.set_item("partition", &all_partitions[t.partition].name)?;
                d.set_item("state", t.state.name())?;
                d.set_item("reservation", t.reservation)?;
                d.set_item("limit", t.effective_limit())?;
                d.set_item("used", t.used)?;
                d.set_item("peak", t.peak)?;
                d.set_item("allocations", t.allocations)?;
                d.set_item("evictions", t.evictions)?;
                d.set_item("restores", t.restores)?;
                d.set_item("streams", t.streams.clone())?;
                d.set_item("error", t.error.clone())?;
                let times = PyDict::new(py);
                let origin = t.since[TaskState::Pending.index()];
                for s in TaskState::ALL {
                    if let (Some(at), Some(o)) = (t.since[s.index()], origin) {
                        times.set_item(s.name(), at.saturating_duration_since(o).as_secs_f64())?;
                    }
                }
                d.set_item("state_times", times)?;
                let c = counters.get(&t.id).copied().unwrap_or_default();
                d.set_item("launches", c.launches)?;
                d.set_item("completions", c.completions)?;
                d.set_item("waits", c.waits)?;
                d.set_item("wait_ns", c.wait_ns)?;
                tasks.append(d)?;
            }
            out.set_item("tasks", tasks)?;
            out.set_item("queue", queue)?;
            let e = PyDict::new(py);
            e.set_item("evictions", ev.evictions)?;
            e.set_item("restores", ev.restores)?;
            e.set_item("evicted_bytes", ev.evicted_bytes)?;
            e.set_item("restored_bytes", ev.restored_bytes)?;
            out.set_item("eviction", e)?;
            Ok(out)
        }
    }

    /// The launch gate for `pygpukit._native.set_launch_gate` (lives for the process).
    fn launch_gate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        // One Arc reference leaks with the gate: the native module may use it until exit.
        let ctx = Arc::into_raw(Arc::clone(&self.shared.sched)) as *const c_void;
        let gate = Box::leak(Box::new(LaunchGate {
            abi_version: LAUNCH_GATE_ABI,
            struct_size: std::mem::size_of::<LaunchGate>() as u32,
            ctx,
            before: gate_before,
            wait: gate_wait,
            after: gate_after,
        }));
        let ptr: NonNull<c_void> = NonNull::from(gate).cast();
        // SAFETY: the gate is leaked, valid for the process.
        unsafe { PyCapsule::new_with_pointer(py, ptr, LAUNCH_GATE_CAPSULE) }
    }
}
