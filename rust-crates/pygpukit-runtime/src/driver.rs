//! The driver table: the C ABI between `pygpukit._native` (C++, owns the CUDA
//! driver) and this crate, plus a safe wrapper around it.
//!
//! [`pgk_driver_table`] mirrors `native-libs/driver/include/pygpukit/driver_table.h`
//! field for field. Change both together and bump [`PGK_DRIVER_TABLE_ABI`].

#![allow(non_camel_case_types)]

use std::any::Any;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fmt;
use std::ptr::NonNull;

/// ABI version of [`pgk_driver_table`] (`PGK_DRIVER_TABLE_ABI`).
pub const PGK_DRIVER_TABLE_ABI: u32 = 3;
/// Name of the PyCapsule that carries a `*const pgk_driver_table`.
pub const PGK_DRIVER_TABLE_CAPSULE: &CStr = c"pygpukit.driver_table";

/// Success.
pub const PGK_OK: c_int = 0;
/// Out of memory (`CUDA_ERROR_OUT_OF_MEMORY`).
pub const PGK_ERR_OOM: c_int = 2;
/// Work still pending (`CUDA_ERROR_NOT_READY`), returned by `event_query`.
pub const PGK_NOT_READY: c_int = 600;
/// The device or driver cannot do this (`CUDA_ERROR_NOT_SUPPORTED`), returned
/// by `vmm_granularity` when virtual memory management is unavailable.
pub const PGK_ERR_NOT_SUPPORTED: c_int = 801;

/// Device pointer, stream or event handle as carried through the table.
pub type Handle = u64;

/// `#[repr(C)]` mirror of `pgk_driver_table`.
///
/// Function pointers are `Option`s so that a null entry in a foreign table is
/// representable (same layout as a plain C function pointer); [`Driver`]
/// refuses tables with missing entries.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct pgk_driver_table {
    pub abi_version: u32,
    pub struct_size: u32,
    pub ctx: *mut c_void,
    pub is_host: i32,
    pub device: i32,

    pub mem_alloc: Option<unsafe extern "C" fn(*mut c_void, u64, *mut u64) -> c_int>,
    pub mem_free: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,
    pub mem_get_info: Option<unsafe extern "C" fn(*mut c_void, *mut u64, *mut u64) -> c_int>,
    pub memcpy_async: Option<unsafe extern "C" fn(*mut c_void, u64, u64, u64, u64) -> c_int>,
    pub memset_d8_async: Option<unsafe extern "C" fn(*mut c_void, u64, u8, u64, u64) -> c_int>,

    pub stream_synchronize: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,
    pub device_synchronize: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,

    pub event_create: Option<unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int>,
    pub event_destroy: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,
    pub event_record: Option<unsafe extern "C" fn(*mut c_void, u64, u64) -> c_int>,
    pub event_query: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,
    pub event_synchronize: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,

    pub error_string: Option<unsafe extern "C" fn(*mut c_void, c_int) -> *const c_char>,

    // ABI 2
    pub host_alloc: Option<unsafe extern "C" fn(*mut c_void, u64, *mut u64) -> c_int>,
    pub host_free: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,
    pub stream_query: Option<unsafe extern "C" fn(*mut c_void, u64) -> c_int>,

    // ABI 3: virtual memory management (expandable segments)
    pub vmm_granularity: Option<unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int>,
    pub vmm_reserve: Option<unsafe extern "C" fn(*mut c_void, u64, *mut u64) -> c_int>,
    pub vmm_free_range: Option<unsafe extern "C" fn(*mut c_void, u64, u64) -> c_int>,
    pub vmm_map: Option<unsafe extern "C" fn(*mut c_void, u64, u64, *mut u64) -> c_int>,
    pub vmm_unmap: Option<unsafe extern "C" fn(*mut c_void, u64, u64, u64) -> c_int>,
}

/// A failed driver call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverError {
    /// The CUDA driver function the table entry stands for, e.g. `"cuMemFree"`.
    pub call: &'static str,
    /// The status the table returned (a `CUresult`).
    pub status: i32,
    /// The table's `error_string` for `status`.
    pub message: String,
}

impl DriverError {
    /// Symbolic name of the status, e.g. `"CUDA_ERROR_OUT_OF_MEMORY"`.
    pub fn name(&self) -> String {
        status_name(self.status)
    }

    pub fn is_oom(&self) -> bool {
        self.status == PGK_ERR_OOM
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.message)
    }
}

impl std::error::Error for DriverError {}

/// Why a raw table pointer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableError {
    Null,
    AbiVersion { found: u32, expected: u32 },
    StructSize { found: u32, expected: u32 },
    MissingFunction(&'static str),
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableError::Null => write!(f, "driver table pointer is null"),
            TableError::AbiVersion { found, expected } => write!(
                f,
                "driver table ABI version {found} does not match the runtime's {expected}; \
                 rebuild pygpukit._native and pygpukit._rt together"
            ),
            TableError::StructSize { found, expected } => write!(
                f,
                "driver table struct_size {found} is smaller than the runtime's {expected}; \
                 rebuild pygpukit._native and pygpukit._rt together"
            ),
            TableError::MissingFunction(name) => {
                write!(f, "driver table entry {name} is null")
            }
        }
    }
}

impl std::error::Error for TableError {}

/// Symbolic name of a `CUresult`-style status.
pub fn status_name(status: i32) -> String {
    let name = match status {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        710 => "CUDA_ERROR_ASSERT",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return format!("CUDA_ERROR_{status}"),
    };
    name.to_string()
}

/// Safe wrapper of a validated driver table.
///
/// A `Driver` made by [`Driver::from_raw`] borrows the table; an optional
/// `owner` (for example the PyCapsule that carries it) is kept alive as long
/// as the `Driver` is.
pub struct Driver {
    table: NonNull<pgk_driver_table>,
    _owner: Option<Box<dyn Any + Send + Sync>>,
}

// SAFETY: the table is immutable after validation and its functions are
// required by the ABI to be callable from any thread.
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("table", &self.table)
            .field("is_host", &self.is_host())
            .field("device", &self.device())
            .finish()
    }
}

macro_rules! entry {
    ($self:ident, $field:ident) => {
        match $self.table().$field {
            Some(f) => f,
            // Checked non-null in `validate`.
            None => unreachable!(concat!(
                "driver table entry ",
                stringify!($field),
                " is null"
            )),
        }
    };
}

impl Driver {
    /// The process-wide host-memory table (CPU mode).
    pub fn host() -> Driver {
        Driver {
            table: NonNull::from(crate::host::host_table()),
            _owner: None,
        }
    }

    /// Wrap a foreign table after checking its ABI version, size and entries.
    ///
    /// # Safety
    /// `ptr` must point to a `pgk_driver_table` that, together with its `ctx`,
    /// stays valid for as long as the returned `Driver` (and `owner`) lives.
    pub unsafe fn from_raw(
        ptr: *const pgk_driver_table,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<Driver, TableError> {
        let table = NonNull::new(ptr as *mut pgk_driver_table).ok_or(TableError::Null)?;
        // Read the header first: a smaller (older) struct must not be read in full.
        let header = table.as_ptr() as *const u32;
        let abi = unsafe { header.read() };
        if abi != PGK_DRIVER_TABLE_ABI {
            return Err(TableError::AbiVersion {
                found: abi,
                expected: PGK_DRIVER_TABLE_ABI,
            });
        }
        let size = unsafe { header.add(1).read() };
        let expected = std::mem::size_of::<pgk_driver_table>() as u32;
        if size < expected {
            return Err(TableError::StructSize {
                found: size,
                expected,
            });
        }
        validate(unsafe { table.as_ref() })?;
        Ok(Driver {
            table,
            _owner: owner,
        })
    }

    #[inline]
    fn table(&self) -> &pgk_driver_table {
        // SAFETY: valid for our lifetime per the constructor's contract.
        unsafe { self.table.as_ref() }
    }

    /// The raw table pointer (for handing on to other native code).
    pub fn as_ptr(&self) -> *const pgk_driver_table {
        self.table.as_ptr()
    }

    pub fn is_host(&self) -> bool {
        self.table().is_host != 0
    }

    pub fn device(&self) -> i32 {
        self.table().device
    }

    #[inline]
    fn ctx(&self) -> *mut c_void {
        self.table().ctx
    }

    /// The table's message for `status`.
    pub fn error_string(&self, status: i32) -> String {
        let f = entry!(self, error_string);
        let s = unsafe { f(self.ctx(), status) };
        if s.is_null() {
            return format!("unknown error {status}");
        }
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    #[inline]
    fn check(&self, call: &'static str, status: c_int) -> Result<(), DriverError> {
        if status == PGK_OK {
            Ok(())
        } else {
            Err(self.error(call, status))
        }
    }

    /// Build the error for a failed `call`.
    pub fn error(&self, call: &'static str, status: i32) -> DriverError {
        DriverError {
            call,
            status,
            message: self.error_string(status),
        }
    }

    pub fn mem_alloc(&self, size: u64) -> Result<Handle, DriverError> {
        let f = entry!(self, mem_alloc);
        let mut out = 0u64;
        let st = unsafe { f(self.ctx(), size, &mut out) };
        self.check("cuMemAlloc", st).map(|()| out)
    }

    /// # Safety
    /// `ptr` must come from [`Driver::mem_alloc`] of this table and not be in use.
    pub unsafe fn mem_free(&self, ptr: Handle) -> Result<(), DriverError> {
        let f = entry!(self, mem_free);
        let st = unsafe { f(self.ctx(), ptr) };
        self.check("cuMemFree", st)
    }

    /// `(free, total)` bytes of the device.
    pub fn mem_get_info(&self) -> Result<(u64, u64), DriverError> {
        let f = entry!(self, mem_get_info);
        let (mut free, mut total) = (0u64, 0u64);
        let st = unsafe { f(self.ctx(), &mut free, &mut total) };
        self.check("cuMemGetInfo", st).map(|()| (free, total))
    }

    /// # Safety
    /// `dst` and `src` must be valid for `size` bytes on this device.
    pub unsafe fn memcpy_async(
        &self,
        dst: Handle,
        src: Handle,
        size: u64,
        stream: Handle,
    ) -> Result<(), DriverError> {
        let f = entry!(self, memcpy_async);
        let st = unsafe { f(self.ctx(), dst, src, size, stream) };
        self.check("cuMemcpyAsync", st)
    }

    /// # Safety
    /// `dst` must be valid for `size` bytes on this device.
    pub unsafe fn memset_d8_async(
        &self,
        dst: Handle,
        value: u8,
        size: u64,
        stream: Handle,
    ) -> Result<(), DriverError> {
        let f = entry!(self, memset_d8_async);
        let st = unsafe { f(self.ctx(), dst, value, size, stream) };
        self.check("cuMemsetD8Async", st)
    }

    pub fn stream_synchronize(&self, stream: Handle) -> Result<(), DriverError> {
        let f = entry!(self, stream_synchronize);
        let st = unsafe { f(self.ctx(), stream) };
        self.check("cuStreamSynchronize", st)
    }

    pub fn device_synchronize(&self) -> Result<(), DriverError> {
        let f = entry!(self, device_synchronize);
        let st = unsafe { f(self.ctx()) };
        self.check("cuCtxSynchronize", st)
    }

    pub fn event_create(&self) -> Result<Handle, DriverError> {
        let f = entry!(self, event_create);
        let mut out = 0u64;
        let st = unsafe { f(self.ctx(), &mut out) };
        self.check("cuEventCreate", st).map(|()| out)
    }

    pub fn event_destroy(&self, event: Handle) -> Result<(), DriverError> {
        let f = entry!(self, event_destroy);
        let st = unsafe { f(self.ctx(), event) };
        self.check("cuEventDestroy", st)
    }

    pub fn event_record(&self, event: Handle, stream: Handle) -> Result<(), DriverError> {
        let f = entry!(self, event_record);
        let st = unsafe { f(self.ctx(), event, stream) };
        self.check("cuEventRecord", st)
    }

    /// `Ok(true)` when the event completed, `Ok(false)` while it is pending.
    pub fn event_query(&self, event: Handle) -> Result<bool, DriverError> {
        let f = entry!(self, event_query);
        match unsafe { f(self.ctx(), event) } {
            PGK_OK => Ok(true),
            PGK_NOT_READY => Ok(false),
            st => Err(self.error("cuEventQuery", st)),
        }
    }

    pub fn event_synchronize(&self, event: Handle) -> Result<(), DriverError> {
        let f = entry!(self, event_synchronize);
        let st = unsafe { f(self.ctx(), event) };
        self.check("cuEventSynchronize", st)
    }

    /// Page-locked host memory (plain host memory in CPU mode).
    pub fn host_alloc(&self, size: u64) -> Result<Handle, DriverError> {
        let f = entry!(self, host_alloc);
        let mut out = 0u64;
        let st = unsafe { f(self.ctx(), size, &mut out) };
        self.check("cuMemHostAlloc", st).map(|()| out)
    }

    /// # Safety
    /// `ptr` must come from [`Driver::host_alloc`] of this table and not be in use.
    pub unsafe fn host_free(&self, ptr: Handle) -> Result<(), DriverError> {
        let f = entry!(self, host_free);
        let st = unsafe { f(self.ctx(), ptr) };
        self.check("cuMemFreeHost", st)
    }

    /// `Ok(true)` when all work queued on `stream` is done.
    pub fn stream_query(&self, stream: Handle) -> Result<bool, DriverError> {
        let f = entry!(self, stream_query);
        match unsafe { f(self.ctx(), stream) } {
            PGK_OK => Ok(true),
            PGK_NOT_READY => Ok(false),
            st => Err(self.error("cuStreamQuery", st)),
        }
    }

    /// Granularity of virtual memory mappings, or `None` when the device or
    /// driver has no virtual memory management (the pool then uses
    /// `mem_alloc` segments).
    pub fn vmm_granularity(&self) -> Result<Option<u64>, DriverError> {
        let f = entry!(self, vmm_granularity);
        let mut out = 0u64;
        match unsafe { f(self.ctx(), &mut out) } {
            PGK_OK if out > 0 => Ok(Some(out)),
            PGK_OK | PGK_ERR_NOT_SUPPORTED => Ok(None),
            st => Err(self.error("cuMemGetAllocationGranularity", st)),
        }
    }

    /// Reserve `size` bytes of device address space (a multiple of the
    /// granularity); nothing is mapped there yet.
    pub fn vmm_reserve(&self, size: u64) -> Result<Handle, DriverError> {
        let f = entry!(self, vmm_reserve);
        let mut out = 0u64;
        let st = unsafe { f(self.ctx(), size, &mut out) };
        self.check("cuMemAddressReserve", st).map(|()| out)
    }

    /// # Safety
    /// `(va, size)` must be a whole range from [`Driver::vmm_reserve`] with
    /// nothing mapped in it.
    pub unsafe fn vmm_free_range(&self, va: Handle, size: u64) -> Result<(), DriverError> {
        let f = entry!(self, vmm_free_range);
        let st = unsafe { f(self.ctx(), va, size) };
        self.check("cuMemAddressFree", st)
    }

    /// Back `[va, va + size)` with new device memory, readable and writable by
    /// the device; returns the chunk's handle for [`Driver::vmm_unmap`].
    ///
    /// # Safety
    /// The range must lie in a range from [`Driver::vmm_reserve`], be a
    /// multiple of the granularity and not be mapped.
    pub unsafe fn vmm_map(&self, va: Handle, size: u64) -> Result<Handle, DriverError> {
        let f = entry!(self, vmm_map);
        let mut out = 0u64;
        let st = unsafe { f(self.ctx(), va, size, &mut out) };
        self.check("cuMemMap", st).map(|()| out)
    }

    /// # Safety
    /// `(va, size, handle)` must be one mapping made by [`Driver::vmm_map`],
    /// no longer in use by the device.
    pub unsafe fn vmm_unmap(
        &self,
        va: Handle,
        size: u64,
        handle: Handle,
    ) -> Result<(), DriverError> {
        let f = entry!(self, vmm_unmap);
        let st = unsafe { f(self.ctx(), va, size, handle) };
        self.check("cuMemUnmap", st)
    }
}

fn validate(t: &pgk_driver_table) -> Result<(), TableError> {
    let entries: [(&'static str, bool); 21] = [
        ("mem_alloc", t.mem_alloc.is_some()),
        ("mem_free", t.mem_free.is_some()),
        ("mem_get_info", t.mem_get_info.is_some()),
        ("memcpy_async", t.memcpy_async.is_some()),
        ("memset_d8_async", t.memset_d8_async.is_some()),
        ("stream_synchronize", t.stream_synchronize.is_some()),
        ("device_synchronize", t.device_synchronize.is_some()),
        ("event_create", t.event_create.is_some()),
        ("event_destroy", t.event_destroy.is_some()),
        ("event_record", t.event_record.is_some()),
        ("event_query", t.event_query.is_some()),
        ("event_synchronize", t.event_synchronize.is_some()),
        ("error_string", t.error_string.is_some()),
        ("host_alloc", t.host_alloc.is_some()),
        ("host_free", t.host_free.is_some()),
        ("stream_query", t.stream_query.is_some()),
        ("vmm_granularity", t.vmm_granularity.is_some()),
        ("vmm_reserve", t.vmm_reserve.is_some()),
        ("vmm_free_range", t.vmm_free_range.is_some()),
        ("vmm_map", t.vmm_map.is_some()),
        ("vmm_unmap", t.vmm_unmap.is_some()),
    ];
    match entries.iter().find(|(_, present)| !present) {
        Some((name, _)) => Err(TableError::MissingFunction(name)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_matches_the_c_header() {
        // Same layout as the C struct on LP64 targets.
        assert_eq!(offset_of!(pgk_driver_table, abi_version), 0);
        assert_eq!(offset_of!(pgk_driver_table, struct_size), 4);
        assert_eq!(offset_of!(pgk_driver_table, ctx), 8);
        assert_eq!(offset_of!(pgk_driver_table, is_host), 16);
        assert_eq!(offset_of!(pgk_driver_table, device), 20);
        assert_eq!(offset_of!(pgk_driver_table, mem_alloc), 24);
        assert_eq!(offset_of!(pgk_driver_table, error_string), 24 + 12 * 8);
        assert_eq!(offset_of!(pgk_driver_table, stream_query), 24 + 15 * 8);
        assert_eq!(offset_of!(pgk_driver_table, vmm_granularity), 24 + 16 * 8);
        assert_eq!(offset_of!(pgk_driver_table, vmm_unmap), 24 + 20 * 8);
        assert_eq!(size_of::<pgk_driver_table>(), 192);
    }

    #[test]
    fn rejects_bad_tables() {
        let good = *crate::host::host_table();
        assert!(unsafe { Driver::from_raw(std::ptr::null(), None) }.is_err());

        let mut t = good;
        t.abi_version = 1;
        let err = unsafe { Driver::from_raw(&t, None) }.unwrap_err();
        assert!(matches!(err, TableError::AbiVersion { found: 1, .. }));

        let mut t = good;
        t.struct_size = 64;
        let err = unsafe { Driver::from_raw(&t, None) }.unwrap_err();
        assert!(matches!(err, TableError::StructSize { found: 64, .. }));

        let mut t = good;
        t.vmm_unmap = None;
        let err = unsafe { Driver::from_raw(&t, None) }.unwrap_err();
        assert_eq!(err, TableError::MissingFunction("vmm_unmap"));

        let mut t = good;
        t.event_query = None;
        let err = unsafe { Driver::from_raw(&t, None) }.unwrap_err();
        assert_eq!(err, TableError::MissingFunction("event_query"));

        let d = unsafe { Driver::from_raw(&good, None) }.unwrap();
        assert!(d.is_host());
    }

    #[test]
    fn errors_carry_the_table_message() {
        let d = Driver::host();
        let e = d.error("cuMemFree", PGK_ERR_OOM);
        assert_eq!(e.to_string(), "cuMemFree failed: out of memory");
        assert_eq!(e.name(), "CUDA_ERROR_OUT_OF_MEMORY");
        assert!(e.is_oom());
        assert_eq!(status_name(12345), "CUDA_ERROR_12345");
    }
}
