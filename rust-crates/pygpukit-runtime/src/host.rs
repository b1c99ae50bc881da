//! The host-memory driver table (CPU mode).
//!
//! Same shape as the CUDA table that `pygpukit._native` exports, so the pool
//! and everything above it run unchanged without a GPU: memory comes from
//! `posix_memalign` (256-byte aligned, like `cuMemAlloc`), copies are plain
//! `memmove`, and streams and events are no-ops (every event is complete).
//!
//! Virtual memory management is emulated for real, so that expandable pool
//! segments run the same code in CPU mode: `vmm_reserve` maps an inaccessible
//! range (`PROT_NONE`, no swap reserved), `vmm_map` replaces part of it with
//! fresh read/write pages (`MAP_FIXED`) and `vmm_unmap` turns it back into an
//! inaccessible mapping, which returns the pages to the kernel.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::{
    pgk_driver_table, PGK_DRIVER_TABLE_ABI, PGK_ERR_NOT_SUPPORTED, PGK_ERR_OOM, PGK_NOT_READY,
    PGK_OK,
};

/// Alignment of host allocations (matches the CUDA driver's guarantee).
pub const HOST_ALIGNMENT: usize = 256;
/// Granularity of the emulated virtual memory mappings (the CUDA driver's
/// usual one).
pub const HOST_VMM_GRANULARITY: u64 = 2 << 20;
/// `mem_get_info` total when /proc/meminfo cannot be read.
pub const FALLBACK_TOTAL_BYTES: u64 = 16 << 30;

const PGK_ERR_INVALID_VALUE: c_int = 1;

static MEM_ALLOC_CALLS: AtomicU64 = AtomicU64::new(0);
static MEM_FREE_CALLS: AtomicU64 = AtomicU64::new(0);
static NEXT_EVENT: AtomicU64 = AtomicU64::new(1);
static NEXT_VMM_HANDLE: AtomicU64 = AtomicU64::new(1);
static VMM_MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Process-wide counters of the host table. Like the CUDA table's, the call
/// counts include the virtual memory chunks: `mem_alloc_calls` counts
/// `mem_alloc` and `vmm_map`, `mem_free_calls` counts `mem_free` and `vmm_unmap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTableStats {
    pub mem_alloc_calls: u64,
    pub mem_free_calls: u64,
    /// Bytes currently mapped by `vmm_map` (physical pages of expandable segments).
    pub vmm_mapped_bytes: u64,
}

pub fn host_table_stats() -> HostTableStats {
    HostTableStats {
        mem_alloc_calls: MEM_ALLOC_CALLS.load(Ordering::Relaxed),
        mem_free_calls: MEM_FREE_CALLS.load(Ordering::Relaxed),
        vmm_mapped_bytes: VMM_MAPPED_BYTES.load(Ordering::Relaxed),
    }
}

struct SyncTable(pgk_driver_table);
// SAFETY: the host table is immutable; its ctx is null and its functions are thread-safe.
unsafe impl Sync for SyncTable {}

static HOST_TABLE: SyncTable = SyncTable(pgk_driver_table {
    abi_version: PGK_DRIVER_TABLE_ABI,
    struct_size: std::mem::size_of::<pgk_driver_table>() as u32,
    ctx: std::ptr::null_mut(),
    is_host: 1,
    device: 0,
    mem_alloc: Some(host_mem_alloc),
    mem_free: Some(host_mem_free),
    mem_get_info: Some(host_mem_get_info),
    memcpy_async: Some(host_memcpy),
    memset_d8_async: Some(host_memset),
    stream_synchronize: Some(host_stream_noop),
    device_synchronize: Some(host_device_synchronize),
    event_create: Some(host_event_create),
    event_destroy: Some(host_stream_noop),
    event_record: Some(host_event_record),
    event_query: Some(host_stream_noop),
    event_synchronize: Some(host_stream_noop),
    error_string: Some(host_error_string),
    host_alloc: Some(host_mem_alloc),
    host_free: Some(host_mem_free),
    stream_query: Some(host_stream_noop),
    vmm_granularity: Some(host_vmm_granularity),
    vmm_reserve: Some(host_vmm_reserve),
    vmm_free_range: Some(host_vmm_free_range),
    vmm_map: Some(host_vmm_map),
    vmm_unmap: Some(host_vmm_unmap),
});

/// The static host table; its address is stable for the life of the process.
pub fn host_table() -> &'static pgk_driver_table {
    &HOST_TABLE.0
}

unsafe extern "C" fn host_mem_alloc(_ctx: *mut c_void, size: u64, out: *mut u64) -> c_int {
    if out.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    MEM_ALLOC_CALLS.fetch_add(1, Ordering::Relaxed);
    let Ok(size) = usize::try_from(size) else {
        return PGK_ERR_OOM;
    };
    let mut p: *mut c_void = std::ptr::null_mut();
    // posix_memalign(0) may return null; always ask for at least one byte.
    let rc = unsafe { libc::posix_memalign(&mut p, HOST_ALIGNMENT, size.max(1)) };
    if rc != 0 || p.is_null() {
        return PGK_ERR_OOM;
    }
    unsafe { out.write(p as u64) };
    PGK_OK
}

unsafe extern "C" fn host_mem_free(_ctx: *mut c_void, ptr: u64) -> c_int {
    MEM_FREE_CALLS.fetch_add(1, Ordering::Relaxed);
    unsafe { libc::free(ptr as *mut c_void) };
    PGK_OK
}

/// `(MemAvailable, MemTotal)` in bytes from /proc/meminfo, if readable.
fn read_meminfo() -> Option<(Option<u64>, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
    };
    Some((field("MemAvailable:"), field("MemTotal:")?))
}

unsafe extern "C" fn host_mem_get_info(
    _ctx: *mut c_void,
    free: *mut u64,
    total: *mut u64,
) -> c_int {
    if free.is_null() || total.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    let (avail, tot) = match read_meminfo() {
        Some((avail, tot)) => (avail.unwrap_or(tot), tot),
        None => (FALLBACK_TOTAL_BYTES, FALLBACK_TOTAL_BYTES),
    };
    unsafe {
        free.write(avail);
        total.write(tot);
    }
    PGK_OK
}

unsafe extern "C" fn host_memcpy(
    _ctx: *mut c_void,
    dst: u64,
    src: u64,
    size: u64,
    _stream: u64,
) -> c_int {
    if size == 0 {
        return PGK_OK;
    }
    // memmove semantics: overlapping ranges are allowed.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size as usize) };
    PGK_OK
}

unsafe extern "C" fn host_memset(
    _ctx: *mut c_void,
    dst: u64,
    value: u8,
    size: u64,
    _stream: u64,
) -> c_int {
    if size == 0 {
        return PGK_OK;
    }
    unsafe { std::ptr::write_bytes(dst as *mut u8, value, size as usize) };
    PGK_OK
}

/// stream_synchronize, event_destroy, event_query, event_synchronize: nothing
/// is ever in flight on the host.
unsafe extern "C" fn host_stream_noop(_ctx: *mut c_void, _handle: u64) -> c_int {
    PGK_OK
}

unsafe extern "C" fn host_device_synchronize(_ctx: *mut c_void) -> c_int {
    PGK_OK
}

unsafe extern "C" fn host_event_create(_ctx: *mut c_void, out: *mut u64) -> c_int {
    if out.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    unsafe { out.write(NEXT_EVENT.fetch_add(1, Ordering::Relaxed)) };
    PGK_OK
}

unsafe extern "C" fn host_event_record(_ctx: *mut c_void, _event: u64, _stream: u64) -> c_int {
    PGK_OK
}

unsafe extern "C" fn host_vmm_granularity(_ctx: *mut c_void, out: *mut u64) -> c_int {
    if out.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    unsafe { out.write(HOST_VMM_GRANULARITY) };
    PGK_OK
}

/// `size` a positive multiple of the granularity, as a `usize`.
fn vmm_size(size: u64) -> Option<usize> {
    if size == 0 || !size.is_multiple_of(HOST_VMM_GRANULARITY) {
        return None;
    }
    usize::try_from(size).ok()
}

/// Replace `[va, va + len)` (or anywhere, for va 0) with a fresh anonymous
/// mapping of `prot`; inaccessible mappings reserve no swap.
unsafe fn fresh_mapping(va: u64, len: usize, prot: c_int) -> *mut c_void {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if va != 0 {
        flags |= libc::MAP_FIXED;
    }
    if prot == libc::PROT_NONE {
        flags |= libc::MAP_NORESERVE;
    }
    unsafe { libc::mmap(va as *mut c_void, len, prot, flags, -1, 0) }
}

unsafe extern "C" fn host_vmm_reserve(_ctx: *mut c_void, size: u64, out: *mut u64) -> c_int {
    let Some(len) = vmm_size(size) else {
        return PGK_ERR_INVALID_VALUE;
    };
    if out.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    let p = unsafe { fresh_mapping(0, len, libc::PROT_NONE) };
    if p == libc::MAP_FAILED {
        return PGK_ERR_OOM;
    }
    unsafe { out.write(p as u64) };
    PGK_OK
}

unsafe extern "C" fn host_vmm_free_range(_ctx: *mut c_void, va: u64, size: u64) -> c_int {
    let Some(len) = vmm_size(size) else {
        return PGK_ERR_INVALID_VALUE;
    };
    if unsafe { libc::munmap(va as *mut c_void, len) } != 0 {
        return PGK_ERR_INVALID_VALUE;
    }
    PGK_OK
}

unsafe extern "C" fn host_vmm_map(_ctx: *mut c_void, va: u64, size: u64, out: *mut u64) -> c_int {
    let Some(len) = vmm_size(size) else {
        return PGK_ERR_INVALID_VALUE;
    };
    if va == 0 || out.is_null() {
        return PGK_ERR_INVALID_VALUE;
    }
    let p = unsafe { fresh_mapping(va, len, libc::PROT_READ | libc::PROT_WRITE) };
    if p == libc::MAP_FAILED {
        return PGK_ERR_OOM;
    }
    MEM_ALLOC_CALLS.fetch_add(1, Ordering::Relaxed);
    VMM_MAPPED_BYTES.fetch_add(size, Ordering::Relaxed);
    unsafe { out.write(NEXT_VMM_HANDLE.fetch_add(1, Ordering::Relaxed)) };
    PGK_OK
}

unsafe extern "C" fn host_vmm_unmap(_ctx: *mut c_void, va: u64, size: u64, _handle: u64) -> c_int {
    let Some(len) = vmm_size(size) else {
        return PGK_ERR_INVALID_VALUE;
    };
    if va == 0 {
        return PGK_ERR_INVALID_VALUE;
    }
    // Back to an inaccessible mapping: the pages go back to the kernel and the
    // addresses stay reserved.
    if unsafe { fresh_mapping(va, len, libc::PROT_NONE) } == libc::MAP_FAILED {
        return PGK_ERR_OOM;
    }
    MEM_FREE_CALLS.fetch_add(1, Ordering::Relaxed);
    VMM_MAPPED_BYTES.fetch_sub(size, Ordering::Relaxed);
    PGK_OK
}

unsafe extern "C" fn host_error_string(_ctx: *mut c_void, status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        PGK_OK => c"no error",
        PGK_ERR_OOM => c"out of memory",
        PGK_NOT_READY => c"device not ready",
        PGK_ERR_INVALID_VALUE => c"invalid argument",
        PGK_ERR_NOT_SUPPORTED => c"operation not supported",
        _ => c"unknown error",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use crate::driver::Driver;

    #[test]
    fn host_table_allocates_aligned_real_memory() {
        let d = Driver::host();
        assert!(d.is_host());
        assert_eq!(d.device(), 0);
        let before = super::host_table_stats();
        let p = d.mem_alloc(1000).unwrap();
        assert_eq!(p % super::HOST_ALIGNMENT as u64, 0);
        unsafe {
            d.memset_d8_async(p, 0xab, 1000, 0).unwrap();
            d.memcpy_async(p + 500, p, 100, 0).unwrap();
            assert_eq!(*((p + 599) as *const u8), 0xab);
            d.mem_free(p).unwrap();
        }
        let after = super::host_table_stats();
        assert!(after.mem_alloc_calls > before.mem_alloc_calls);
        assert!(after.mem_free_calls > before.mem_free_calls);
    }

    #[test]
    fn host_events_and_info() {
        let d = Driver::host();
        let a = d.event_create().unwrap();
        let b = d.event_create().unwrap();
        assert_ne!(a, b);
        d.event_record(a, 7).unwrap();
        assert!(d.event_query(a).unwrap());
        d.event_synchronize(a).unwrap();
        d.event_destroy(a).unwrap();
        d.device_synchronize().unwrap();
        d.stream_synchronize(7).unwrap();
        let (free, total) = d.mem_get_info().unwrap();
        assert!(total > 0 && free <= total);
        assert_eq!(d.error_string(600), "device not ready");
    }

    /// Pages of `[p, p + len)` resident in memory (mincore).
    fn resident_pages(p: u64, len: u64) -> usize {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        let mut vec = vec![0u8; len.div_ceil(page) as usize];
        let rc = unsafe { libc::mincore(p as *mut libc::c_void, len as usize, vec.as_mut_ptr()) };
        assert_eq!(rc, 0);
        vec.iter().filter(|&&v| v & 1 != 0).count()
    }

    #[test]
    fn host_vmm_maps_real_pages_and_gives_them_back() {
        let d = Driver::host();
        let g = d.vmm_granularity().unwrap().unwrap();
        assert_eq!(g, super::HOST_VMM_GRANULARITY);
        let va = d.vmm_reserve(4 * g).unwrap();
        assert_eq!(resident_pages(va, 4 * g), 0);
        unsafe {
            let h1 = d.vmm_map(va + g, g).unwrap();
            let h2 = d.vmm_map(va + 2 * g, g).unwrap();
            assert_ne!(h1, h2);
            // The two chunks form one writable range.
            std::ptr::write_bytes((va + g) as *mut u8, 0x77, 2 * g as usize);
            assert_eq!(resident_pages(va + g, 2 * g), resident_pages(va, 4 * g));
            assert!(resident_pages(va + g, 2 * g) > 0);
            d.vmm_unmap(va + g, g, h1).unwrap();
            assert_eq!(resident_pages(va + g, g), 0, "unmapped pages are returned");
            assert_eq!(*((va + 2 * g) as *const u8), 0x77);
            // A chunk mapped again comes back zeroed.
            let h3 = d.vmm_map(va + g, g).unwrap();
            assert_eq!(*((va + g + 5) as *const u8), 0);
            d.vmm_unmap(va + g, g, h3).unwrap();
            d.vmm_unmap(va + 2 * g, g, h2).unwrap();
            d.vmm_free_range(va, 4 * g).unwrap();
        }
        assert!(d.vmm_reserve(g + 1).is_err());
        let e = unsafe { d.vmm_map(va, 3) }.unwrap_err();
        assert_eq!(e.call, "cuMemMap");
    }

    #[test]
    fn host_oom_is_reported() {
        let d = Driver::host();
        let e = d.mem_alloc(u64::MAX / 2).unwrap_err();
        assert_eq!(e.status, crate::driver::PGK_ERR_OOM);
        assert_eq!(e.call, "cuMemAlloc");
    }
}
