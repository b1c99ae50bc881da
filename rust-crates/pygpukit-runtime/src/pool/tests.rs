//! Unit tests of the pool over a scripted driver table: fake addresses, an
//! optional device capacity, events that stay NOT_READY until the test
//! completes them (or a device synchronize does), and optional virtual memory
//! (reserved ranges and mapped chunks checked for misuse).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use super::config::*;
use super::*;
use crate::driver::{
    pgk_driver_table, PGK_DRIVER_TABLE_ABI, PGK_ERR_NOT_SUPPORTED, PGK_ERR_OOM, PGK_NOT_READY,
    PGK_OK,
};

const MIB: u64 = 1 << 20;

#[derive(Default)]
struct DevState {
    capacity: Option<u64>,
    used: u64,
    next_addr: u64,
    live: HashMap<u64, u64>,
    mem_allocs: u64,
    mem_frees: u64,
    /// Status the next mem_alloc fails with, if any.
    fail_next_alloc: Option<c_int>,
    /// event -> completed
    events: HashMap<u64, bool>,
    next_event: u64,
    events_created: u64,
    events_destroyed: u64,
    records: Vec<(u64, u64)>,
    syncs: u64,
    /// Granularity of virtual memory; None: not supported.
    vmm: Option<u64>,
    /// Reserved ranges: base -> size.
    ranges: HashMap<u64, u64>,
    /// Mapped chunks: va -> (size, handle).
    chunks: HashMap<u64, (u64, u64)>,
    next_handle: u64,
    maps: u64,
    unmaps: u64,
    /// Status the next vmm_map fails with, if any.
    fail_next_map: Option<c_int>,
}

impl DevState {
    fn mapped_bytes(&self) -> u64 {
        self.chunks.values().map(|c| c.0).sum()
    }
}

struct TestDev {
    state: Mutex<DevState>,
}

impl TestDev {
    fn with<R>(&self, f: impl FnOnce(&mut DevState) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }

    fn complete_all_events(&self) {
        self.with(|s| s.events.values_mut().for_each(|v| *v = true));
    }
}

fn dev(ctx: *mut c_void) -> &'static TestDev {
    unsafe { &*(ctx as *const TestDev) }
}

unsafe extern "C" fn t_alloc(ctx: *mut c_void, size: u64, out: *mut u64) -> c_int {
    dev(ctx).with(|s| {
        if let Some(st) = s.fail_next_alloc.take() {
            return st;
        }
        if s.capacity.is_some_and(|c| s.used + size > c) {
            return PGK_ERR_OOM;
        }
        let p = s.next_addr;
        s.next_addr += size.div_ceil(2 * MIB) * 2 * MIB + 2 * MIB;
        s.used += size;
        s.live.insert(p, size);
        s.mem_allocs += 1;
        unsafe { out.write(p) };
        PGK_OK
    })
}

unsafe extern "C" fn t_free(ctx: *mut c_void, ptr: u64) -> c_int {
    dev(ctx).with(|s| {
        let size = s.live.remove(&ptr).expect("free of unknown segment");
        s.used -= size;
        s.mem_frees += 1;
        PGK_OK
    })
}

unsafe extern "C" fn t_info(ctx: *mut c_void, free: *mut u64, total: *mut u64) -> c_int {
    dev(ctx).with(|s| {
        let cap = s.capacity.unwrap_or(1 << 40);
        unsafe {
            free.write(cap - s.used);
            total.write(cap);
        }
        PGK_OK
    })
}

unsafe extern "C" fn t_copy(_: *mut c_void, _: u64, _: u64, _: u64, _: u64) -> c_int {
    PGK_OK
}

unsafe extern "C" fn t_set(_: *mut c_void, _: u64, _: u8, _: u64, _: u64) -> c_int {
    PGK_OK
}

unsafe extern "C" fn t_stream_sync(_: *mut c_void, _: u64) -> c_int {
    PGK_OK
}

unsafe extern "C" fn t_device_sync(ctx: *mut c_void) -> c_int {
    dev(ctx).with(|s| {
        s.syncs += 1;
        s.events.values_mut().for_each(|v| *v = true);
        PGK_OK
    })
}

unsafe extern "C" fn t_event_create(ctx: *mut c_void, out: *mut u64) -> c_int {
    dev(ctx).with(|s| {
        s.next_event += 1;
        s.events_created += 1;
        s.events.insert(s.next_event, true);
        unsafe { out.write(s.next_event) };
        PGK_OK
    })
}

unsafe extern "C" fn t_event_destroy(ctx: *mut c_void, event: u64) -> c_int {
    dev(ctx).with(|s| {
        s.events.remove(&event).expect("destroy of unknown event");
        s.events_destroyed += 1;
        PGK_OK
    })
}

unsafe extern "C" fn t_event_record(ctx: *mut c_void, event: u64, stream: u64) -> c_int {
    dev(ctx).with(|s| {
        *s.events.get_mut(&event).expect("record of unknown event") = false;
        s.records.push((event, stream));
        PGK_OK
    })
}

unsafe extern "C" fn t_event_query(ctx: *mut c_void, event: u64) -> c_int {
    dev(ctx).with(|s| {
        if s.events[&event] {
            PGK_OK
        } else {
            PGK_NOT_READY
        }
    })
}

unsafe extern "C" fn t_event_sync(ctx: *mut c_void, event: u64) -> c_int {
    dev(ctx).with(|s| {
        s.events.insert(event, true);
        PGK_OK
    })
}

unsafe extern "C" fn t_vmm_granularity(ctx: *mut c_void, out: *mut u64) -> c_int {
    dev(ctx).with(|s| match s.vmm {
        Some(g) => {
            unsafe { out.write(g) };
            PGK_OK
        }
        None => PGK_ERR_NOT_SUPPORTED,
    })
}

unsafe extern "C" fn t_vmm_reserve(ctx: *mut c_void, size: u64, out: *mut u64) -> c_int {
    dev(ctx).with(|s| {
        let g = s.vmm.expect("reserve without VMM");
        assert!(size > 0 && size.is_multiple_of(g), "reserve of {size}");
        let p = s.next_addr;
        s.next_addr += size + g;
        s.ranges.insert(p, size);
        unsafe { out.write(p) };
        PGK_OK
    })
}

unsafe extern "C" fn t_vmm_free_range(ctx: *mut c_void, va: u64, size: u64) -> c_int {
    dev(ctx).with(|s| {
        assert_eq!(s.ranges.remove(&va), Some(size), "free of unknown range");
        assert!(
            !s.chunks.keys().any(|&c| c >= va && c < va + size),
            "range freed with chunks mapped"
        );
        PGK_OK
    })
}

unsafe extern "C" fn t_vmm_map(ctx: *mut c_void, va: u64, size: u64, out: *mut u64) -> c_int {
    dev(ctx).with(|s| {
        if let Some(st) = s.fail_next_map.take() {
            return st;
        }
        let g = s.vmm.expect("map without VMM");
        assert!(size.is_multiple_of(g));
        assert!(
            s.ranges
                .iter()
                .any(|(&b, &n)| va >= b && va + size <= b + n && (va - b).is_multiple_of(g)),
            "map outside a reserved range or off the page grid"
        );
        assert!(
            !s.chunks
                .iter()
                .any(|(&c, &(n, _))| c < va + size && va < c + n),
            "map over a mapped chunk"
        );
        if s.capacity.is_some_and(|c| s.used + size > c) {
            return PGK_ERR_OOM;
        }
        s.used += size;
        s.next_handle += 1;
        s.chunks.insert(va, (size, s.next_handle));
        s.maps += 1;
        unsafe { out.write(s.next_handle) };
        PGK_OK
    })
}

unsafe extern "C" fn t_vmm_unmap(ctx: *mut c_void, va: u64, size: u64, handle: u64) -> c_int {
    dev(ctx).with(|s| {
        assert_eq!(
            s.chunks.remove(&va),
            Some((size, handle)),
            "unmap of unknown chunk"
        );
        s.used -= size;
        s.unmaps += 1;
        PGK_OK
    })
}

unsafe extern "C" fn t_error_string(_: *mut c_void, status: c_int) -> *const c_char {
    match status {
        PGK_ERR_OOM => c"out of memory".as_ptr(),
        _ => c"scripted failure".as_ptr(),
    }
}

/// A leaked test device and a driver over it.
fn test_driver(capacity: Option<u64>) -> (&'static TestDev, Driver) {
    test_driver_vmm(capacity, None)
}

/// A leaked test device with virtual memory of granularity `vmm`.
fn test_driver_vmm(capacity: Option<u64>, vmm: Option<u64>) -> (&'static TestDev, Driver) {
    let dev: &'static TestDev = Box::leak(Box::new(TestDev {
        state: Mutex::new(DevState {
            capacity,
            next_addr: 1 << 40,
            vmm,
            ..DevState::default()
        }),
    }));
    let table: &'static pgk_driver_table = Box::leak(Box::new(pgk_driver_table {
        abi_version: PGK_DRIVER_TABLE_ABI,
        struct_size: std::mem::size_of::<pgk_driver_table>() as u32,
        ctx: dev as *const TestDev as *mut c_void,
        is_host: 0,
        device: 3,
        mem_alloc: Some(t_alloc),
        mem_free: Some(t_free),
        mem_get_info: Some(t_info),
        memcpy_async: Some(t_copy),
        memset_d8_async: Some(t_set),
        stream_synchronize: Some(t_stream_sync),
        device_synchronize: Some(t_device_sync),
        event_create: Some(t_event_create),
        event_destroy: Some(t_event_destroy),
        event_record: Some(t_event_record),
        event_query: Some(t_event_query),
        event_synchronize: Some(t_event_sync),
        error_string: Some(t_error_string),
        host_alloc: Some(t_alloc),
        host_free: Some(t_free),
        stream_query: Some(t_event_query),
        vmm_granularity: Some(t_vmm_granularity),
        vmm_reserve: Some(t_vmm_reserve),
        vmm_free_range: Some(t_vmm_free_range),
        vmm_map: Some(t_vmm_map),
        vmm_unmap: Some(t_vmm_unmap),
    }));
    let driver = unsafe { Driver::from_raw(table, None) }.unwrap();
    (dev, driver)
}

fn test_pool(capacity: Option<u64>, limit: Option<u64>) -> (&'static TestDev, Pool) {
    let (dev, driver) = test_driver(capacity);
    (dev, Pool::new(driver, limit))
}

/// A pool with expandable segments over a device with 2 MiB pages.
fn vmm_pool(capacity: Option<u64>, limit: Option<u64>) -> (&'static TestDev, Pool) {
    let (dev, driver) = test_driver_vmm(capacity, Some(2 * MIB));
    let pool = Pool::with_expandable(driver, limit, true);
    assert!(pool.expandable());
    (dev, pool)
}

/// Byte accounting of a pool must add up (a cheap version of the property
/// tests' invariants).
fn check_accounting(pool: &Pool) {
    let s = pool.stats();
    let snap = pool.snapshot();
    let sum = |state| {
        snap.iter()
            .flat_map(|seg| &seg.blocks)
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .sum::<u64>()
    };
    assert_eq!(s.allocated_bytes, sum(BlockState::Live));
    assert_eq!(s.cached_bytes, sum(BlockState::Cached));
    assert_eq!(s.pending_bytes, sum(BlockState::Pending));
    assert_eq!(
        s.reserved_bytes,
        snap.iter().map(|seg| seg.mapped).sum::<u64>()
    );
    assert_eq!(s.fragmentation_bytes, s.reserved_bytes - s.allocated_bytes);
    assert_eq!(
        s.reserved_bytes,
        s.allocated_bytes + s.cached_bytes + s.pending_bytes
    );
    for seg in &snap {
        let mut at = seg.ptr;
        for b in &seg.blocks {
            assert_eq!(b.ptr, at);
            at += b.size;
        }
        assert_eq!(at, seg.ptr + seg.size);
    }
}

#[test]
fn rounding_and_segment_sizes() {
    // 0 bytes still gets a (distinct) 512-byte block.
    assert_eq!(round_size(0), Some(512));
    assert_eq!(round_size(1), Some(512));
    assert_eq!(round_size(512), Some(512));
    assert_eq!(round_size(513), Some(1024));
    assert_eq!(round_size(u64::MAX), None);
    assert_eq!(PoolKind::for_size(MIB), PoolKind::Small);
    assert_eq!(PoolKind::for_size(MIB + 512), PoolKind::Large);
    assert_eq!(segment_size(512), Some(2 * MIB));
    assert_eq!(segment_size(MIB), Some(2 * MIB));
    assert_eq!(segment_size(MIB + 512), Some(20 * MIB));
    assert_eq!(segment_size(10 * MIB - 512), Some(20 * MIB));
    assert_eq!(segment_size(10 * MIB), Some(10 * MIB));
    assert_eq!(segment_size(11 * MIB), Some(12 * MIB));
    assert_eq!(segment_size(50 * MIB + 512), Some(52 * MIB));
    assert!(should_split(PoolKind::Small, 1024, 512, false));
    assert!(!should_split(PoolKind::Small, 512, 512, true));
    assert!(!should_split(PoolKind::Large, 3 * MIB, 2 * MIB, false));
    assert!(should_split(PoolKind::Large, 3 * MIB + 512, 2 * MIB, false));
    assert!(should_split(PoolKind::Large, 2 * MIB + 512, 2 * MIB, true));
    assert!(!should_split(PoolKind::Large, 2 * MIB, 2 * MIB, true));
}

#[test]
fn small_blocks_split_one_segment() {
    let (dev, pool) = test_pool(None, None);
    let a = pool.alloc(1000, 7).unwrap();
    assert_eq!((a.size, a.requested, a.stream), (1024, 1000, 7));
    let b = pool.alloc(0, 7).unwrap();
    assert_eq!(b.size, 512);
    assert_eq!(b.ptr, a.ptr + 1024);
    assert_eq!(b.segment, a.segment);
    let s = pool.stats();
    assert_eq!(s.num_driver_allocs, 1);
    assert_eq!(s.reserved_bytes, 2 * MIB);
    assert_eq!(s.allocated_bytes, 1536);
    assert_eq!(s.requested_bytes, 1000);
    assert_eq!(s.num_cached_blocks, 1);
    assert_eq!(s.cached_bytes, 2 * MIB - 1536);
    assert_eq!(s.largest_free_block, 2 * MIB - 1536);
    assert_eq!(dev.with(|s| s.mem_allocs), 1);
    check_accounting(&pool);
    pool.free(&a).unwrap();
    pool.free(&b).unwrap();
    check_accounting(&pool);
}

#[test]
fn large_blocks_split_only_above_one_mib() {
    let (_, pool) = test_pool(None, None);
    let a = pool.alloc(MIB + 1, 0).unwrap();
    assert_eq!(a.size, MIB + 512);
    let s = pool.stats();
    assert_eq!(s.reserved_bytes, 20 * MIB);
    assert_eq!(s.cached_bytes, 20 * MIB - a.size);
    // A 12 MiB request gets its own segment; reusing it for 11.5 MiB leaves
    // 0.5 MiB, too little to split off in the large pool.
    // (On stream 5, so the cached tail of stream 0's segment is not a candidate.)
    let big = pool.alloc(12 * MIB, 5).unwrap();
    assert_eq!(pool.stats().reserved_bytes, 32 * MIB);
    pool.free(&big).unwrap();
    let again = pool.alloc(11 * MIB + MIB / 2, 5).unwrap();
    assert_eq!(again.ptr, big.ptr);
    assert_eq!(again.size, 12 * MIB);
    assert_eq!(again.requested, 11 * MIB + MIB / 2);
    assert_eq!(pool.stats().num_driver_allocs, 2);
    check_accounting(&pool);
    // Small requests never come out of large segments.
    let small = pool.alloc(4096, 0).unwrap();
    assert_ne!(small.segment, a.segment);
    assert_eq!(pool.stats().num_driver_allocs, 3);
    for b in [a, again, small] {
        pool.free(&b).unwrap();
    }
    check_accounting(&pool);
}

#[test]
fn freed_blocks_coalesce() {
    let (_, pool) = test_pool(None, None);
    let blocks: Vec<Block> = (0..4).map(|_| pool.alloc(4096, 1).unwrap()).collect();
    pool.free(&blocks[1]).unwrap();
    pool.free(&blocks[2]).unwrap(); // merges with 1
    let snap = pool.snapshot();
    let states: Vec<_> = snap[0].blocks.iter().map(|b| (b.state, b.size)).collect();
    assert_eq!(
        states,
        vec![
            (BlockState::Live, 4096),
            (BlockState::Cached, 8192),
            (BlockState::Live, 4096),
            (BlockState::Cached, 2 * MIB - 4 * 4096),
        ]
    );
    pool.free(&blocks[0]).unwrap(); // merges with the next
    pool.free(&blocks[3]).unwrap(); // merges with both neighbours
    let snap = pool.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].blocks.len(), 1);
    assert_eq!(snap[0].blocks[0].state, BlockState::Cached);
    assert_eq!(snap[0].blocks[0].size, 2 * MIB);
    assert_eq!(pool.stats().num_cached_blocks, 1);
    check_accounting(&pool);
}

#[test]
fn best_fit_picks_the_smallest_free_block() {
    let (_, pool) = test_pool(None, None);
    let a = pool.alloc(8192, 0).unwrap();
    let _sep1 = pool.alloc(512, 0).unwrap();
    let b = pool.alloc(2048, 0).unwrap();
    let _sep2 = pool.alloc(512, 0).unwrap();
    pool.free(&a).unwrap();
    pool.free(&b).unwrap();
    // Free: 8192 at a, 2048 at b, and the big tail. 1500 -> b's block.
    let c = pool.alloc(1500, 0).unwrap();
    assert_eq!(c.ptr, b.ptr);
    let d = pool.alloc(5000, 0).unwrap();
    assert_eq!(d.ptr, a.ptr);
    assert_eq!(pool.stats().num_driver_allocs, 1);
    check_accounting(&pool);
}

#[test]
fn streams_do_not_share_cached_blocks() {
    let (_, pool) = test_pool(None, None);
    let a = pool.alloc(4096, 1).unwrap();
    pool.free(&a).unwrap();
    let b = pool.alloc(4096, 2).unwrap();
    assert_eq!(b.stream, 2);
    assert_ne!(b.segment, a.segment);
    assert_eq!(pool.stats().num_driver_allocs, 2);
    let c = pool.alloc(4096, 1).unwrap();
    assert_eq!(c.ptr, a.ptr);
    assert_eq!(pool.stats().num_driver_allocs, 2);
    let snap = pool.snapshot();
    assert_eq!(
        snap.iter().map(|s| s.stream).collect::<Vec<_>>(),
        vec![1, 2]
    );
    check_accounting(&pool);
}

#[test]
fn record_stream_defers_reuse_until_events_complete() {
    let (dev, pool) = test_pool(None, None);
    let a = pool.alloc(4096, 1).unwrap();
    pool.record_stream(&a, 2).unwrap();
    pool.record_stream(&a, 3).unwrap();
    pool.record_stream(&a, 2).unwrap(); // duplicate: one event per stream
    pool.record_stream(&a, 1).unwrap(); // own stream: nothing to wait for
    pool.free(&a).unwrap();
    let s = pool.stats();
    assert_eq!(s.num_pending_frees, 1);
    assert_eq!(s.pending_bytes, 4096);
    assert_eq!(s.allocated_bytes, 0);
    let mut recorded: Vec<u64> = dev.with(|s| s.records.iter().map(|r| r.1).collect());
    recorded.sort();
    assert_eq!(recorded, vec![2, 3]);
    check_accounting(&pool);

    // Events not complete: the block is not reused.
    let b = pool.alloc(4096, 1).unwrap();
    assert_ne!(b.ptr, a.ptr);
    assert_eq!(pool.stats().num_pending_frees, 1);
    pool.free(&b).unwrap();

    // Complete one of two events: still pending.
    dev.with(|s| {
        let first = s.records[0].0;
        s.events.insert(first, true);
    });
    assert_eq!(pool.process_pending_frees().unwrap(), 0);

    dev.complete_all_events();
    let c = pool.alloc(4096, 1).unwrap();
    assert_eq!(c.ptr, a.ptr, "the pending block is freed at the next alloc");
    assert_eq!(pool.stats().num_pending_frees, 0);
    check_accounting(&pool);

    // Events are reused, not created again.
    pool.record_stream(&c, 2).unwrap();
    pool.record_stream(&c, 3).unwrap();
    pool.free(&c).unwrap();
    assert_eq!(dev.with(|s| s.events_created), 2);
    drop(pool);
    dev.with(|s| {
        assert_eq!(s.events_destroyed, 2);
        assert!(s.events.is_empty());
    });
}

#[test]
fn empty_cache_releases_free_segments_and_pending_frees() {
    let (dev, pool) = test_pool(None, None);
    let keep = pool.alloc(4096, 0).unwrap();
    let other = pool.alloc(4096, 5).unwrap();
    let large = pool.alloc(30 * MIB, 0).unwrap();
    pool.record_stream(&other, 6).unwrap();
    pool.free(&other).unwrap();
    pool.free(&large).unwrap();
    assert_eq!(pool.stats().num_segments, 3);
    pool.empty_cache().unwrap();
    let s = pool.stats();
    assert!(dev.with(|s| s.syncs) >= 1);
    assert_eq!(s.num_pending_frees, 0);
    assert_eq!(s.num_segments, 1);
    assert_eq!(s.reserved_bytes, 2 * MIB);
    assert_eq!(s.num_driver_frees, 2);
    assert_eq!(dev.with(|s| s.live.len()), 1);
    check_accounting(&pool);
    pool.free(&keep).unwrap();
    pool.empty_cache().unwrap();
    let s = pool.stats();
    assert_eq!(s.reserved_bytes, 0);
    assert_eq!(s.num_driver_allocs, s.num_driver_frees);
    assert_eq!(dev.with(|s| s.used), 0);
}

#[test]
fn limit_releases_cache_then_fails() {
    let (dev, pool) = test_pool(None, Some(20 * MIB));
    let a = pool.alloc(12 * MIB, 0).unwrap();
    pool.free(&a).unwrap();
    // 12 MiB cached + 14 MiB new > 20 MiB: the cache is released, then it fits.
    let b = pool.alloc(14 * MIB, 0).unwrap();
    let s = pool.stats();
    assert_eq!(s.num_driver_frees, 1);
    assert_eq!(s.reserved_bytes, 14 * MIB);
    assert_eq!(s.num_ooms, 0);
    // 14 MiB live + 8 MiB > 20 MiB even with no cache: out of memory.
    let err = pool.alloc(8 * MIB, 0).unwrap_err();
    match &err {
        PoolError::OutOfMemory {
            requested,
            limit,
            device,
            stats,
        } => {
            assert_eq!(*requested, 8 * MIB);
            assert_eq!(*limit, Some(20 * MIB));
            assert_eq!(*device, 3);
            assert_eq!(stats.allocated_bytes, 14 * MIB);
            assert_eq!(stats.num_ooms, 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "out of memory: tried to allocate 8.00 MiB (8388608 bytes) on device 3; \
         pool: 14.00 MiB allocated, 14.00 MiB reserved, 0 B cached, limit 20.00 MiB"
    );
    assert_eq!(pool.stats().num_ooms, 1);
    assert!(pool.stats().reserved_bytes <= 20 * MIB);
    // Raising the limit lets it through.
    pool.set_limit(None);
    let c = pool.alloc(8 * MIB, 0).unwrap();
    assert_eq!(pool.limit(), None);
    pool.free(&b).unwrap();
    pool.free(&c).unwrap();
    assert_eq!(dev.with(|s| s.mem_allocs), 3);
    check_accounting(&pool);
}

#[test]
fn driver_oom_releases_cache_and_retries() {
    let (dev, pool) = test_pool(Some(40 * MIB), None);
    let small = pool.alloc(100, 0).unwrap();
    let a = pool.alloc(30 * MIB, 0).unwrap();
    pool.free(&a).unwrap();
    // 2 + 30 used on a 40 MiB device: a 20 MiB segment for stream 1 needs
    // the cache released.
    let b = pool.alloc(2 * MIB, 1).unwrap();
    assert_eq!(pool.stats().num_driver_frees, 1);
    assert_eq!(pool.stats().reserved_bytes, 22 * MIB);
    let err = pool.alloc(30 * MIB, 0).unwrap_err();
    assert!(matches!(err, PoolError::OutOfMemory { limit: None, .. }));
    assert!(err.to_string().ends_with(" cached"));
    assert!(!err.to_string().contains("limit"));
    assert_eq!(dev.with(|s| s.used), 22 * MIB);
    pool.free(&small).unwrap();
    pool.free(&b).unwrap();
}

#[test]
fn other_driver_errors_are_not_oom() {
    let (dev, pool) = test_pool(None, None);
    dev.with(|s| s.fail_next_alloc = Some(999));
    let err = pool.alloc(10, 0).unwrap_err();
    match err {
        PoolError::Driver(e) => {
            assert_eq!(e.call, "cuMemAlloc");
            assert_eq!(e.status, 999);
            assert_eq!(e.name(), "CUDA_ERROR_UNKNOWN");
            assert_eq!(e.to_string(), "cuMemAlloc failed: scripted failure");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(pool.stats().num_ooms, 0);
    assert!(pool.alloc(10, 0).is_ok());
}

#[test]
fn huge_requests_are_oom_not_overflow() {
    let (_, pool) = test_pool(None, None);
    let err = pool.alloc(u64::MAX, 0).unwrap_err();
    assert!(matches!(
        err,
        PoolError::OutOfMemory {
            requested: u64::MAX,
            ..
        }
    ));
    let err = pool.alloc(u64::MAX - 4096, 0).unwrap_err();
    assert!(matches!(err, PoolError::OutOfMemory { .. }));
    assert_eq!(pool.stats().num_ooms, 2);
}

#[test]
fn double_free_and_stale_blocks_are_rejected() {
    let (_, pool) = test_pool(None, None);
    let a = pool.alloc(100, 0).unwrap();
    pool.free(&a).unwrap();
    assert_eq!(pool.free(&a), Err(PoolError::InvalidBlock { ptr: a.ptr }));
    // Same slot and address again: the old descriptor is still stale.
    let b = pool.alloc(100, 0).unwrap();
    assert_eq!(b.ptr, a.ptr);
    assert!(pool.free(&a).is_err());
    assert!(pool.record_stream(&a, 1).is_err());
    pool.free(&b).unwrap();
    assert_eq!(pool.stats().num_free_calls, 2);
}

#[test]
fn peak_stats_and_reset() {
    let (_, pool) = test_pool(None, None);
    let a = pool.alloc(MIB, 0).unwrap();
    let b = pool.alloc(MIB, 0).unwrap();
    pool.free(&a).unwrap();
    pool.free(&b).unwrap();
    let s = pool.stats();
    assert_eq!(s.peak_allocated_bytes, 2 * MIB);
    assert_eq!(s.allocated_bytes, 0);
    // Two 1 MiB (small) blocks share one 2 MiB segment.
    assert_eq!(s.peak_reserved_bytes, 2 * MIB);
    assert_eq!((s.num_alloc_calls, s.num_free_calls), (2, 2));
    pool.empty_cache().unwrap();
    pool.reset_peak_stats();
    let s = pool.stats();
    assert_eq!((s.peak_allocated_bytes, s.peak_reserved_bytes), (0, 0));
}

#[test]
fn drop_returns_everything_to_the_driver() {
    let (dev, pool) = test_pool(None, None);
    let _live = pool.alloc(5 * MIB, 0).unwrap();
    let x = pool.alloc(100, 1).unwrap();
    pool.record_stream(&x, 9).unwrap();
    pool.free(&x).unwrap();
    drop(pool);
    dev.with(|s| {
        assert_eq!(s.used, 0);
        assert_eq!(s.mem_allocs, s.mem_frees);
        assert_eq!(s.events_created, s.events_destroyed);
    });
}

#[test]
fn host_pool_hands_out_usable_memory() {
    let pool = Pool::host(None);
    assert!(pool.driver().is_host());
    let a = pool.alloc(3000, 0).unwrap();
    assert_eq!(a.ptr % 256, 0);
    unsafe { std::ptr::write_bytes(a.ptr as *mut u8, 0x5a, a.size as usize) };
    pool.free(&a).unwrap();
    pool.empty_cache().unwrap();
    assert_eq!(pool.stats().reserved_bytes, 0);
}

// ----- expandable segments ---------------------------------------------------

#[test]
fn expandable_is_the_default_only_where_the_table_supports_it() {
    let (_, plain) = test_pool(None, None);
    assert!(!plain.expandable(), "no VMM in the table: plain segments");
    let (_, driver) = test_driver_vmm(None, Some(2 * MIB));
    assert!(!Pool::with_expandable(driver, None, false).expandable());
    assert_eq!(parse_expandable(None), Ok(true));
    assert_eq!(parse_expandable(Some("0")), Ok(false));
    assert_eq!(parse_expandable(Some(" Off ")), Ok(false));
    assert_eq!(parse_expandable(Some("yes")), Ok(true));
    let err = parse_expandable(Some("maybe")).unwrap_err();
    assert!(err.contains("PYGPUKIT_EXPANDABLE_SEGMENTS") && err.contains("maybe"));
}

#[test]
fn expandable_segment_grows_by_pages_at_its_tail() {
    let (dev, pool) = vmm_pool(Some(1 << 30), None);
    let a = pool.alloc(3 * MIB, 4).unwrap();
    let b = pool.alloc(3 * MIB, 4).unwrap();
    // One segment: b follows a, and only the pages they touch are mapped.
    assert_eq!(b.ptr, a.ptr + 3 * MIB);
    assert_eq!(b.segment, a.segment);
    let s = pool.stats();
    assert_eq!(s.num_segments, 1);
    assert_eq!(s.num_expandable_segments, 1);
    assert_eq!(s.reserved_bytes, 6 * MIB);
    assert_eq!(s.expandable_mapped_bytes, 6 * MIB);
    assert_eq!(
        s.expandable_virtual_bytes,
        1 << 30,
        "reserves the device size"
    );
    assert_eq!(s.num_driver_allocs, 3);
    assert_eq!(dev.with(|d| d.mapped_bytes()), 6 * MIB);
    // Small blocks live in their own expandable segment.
    let small = pool.alloc(1000, 4).unwrap();
    assert_ne!(small.segment, a.segment);
    assert_eq!(pool.stats().reserved_bytes, 8 * MIB);
    let snap = pool.snapshot();
    assert!(snap.iter().all(|s| s.expandable));
    assert_eq!(snap[0].blocks.last().unwrap().state, BlockState::Unmapped);
    check_accounting(&pool);
    for blk in [a, b, small] {
        pool.free(&blk).unwrap();
    }
    check_accounting(&pool);
}

#[test]
fn large_request_after_small_frees_does_not_fail_for_fragmentation() {
    // 48 MiB device; 20 blocks of 2 MiB, every other one freed: 20 MiB
    // cached in 2 MiB pieces. A 16 MiB request fits only if those pieces go
    // back to the device first.
    let run = |expandable: bool| {
        let (dev, driver) = test_driver_vmm(Some(48 * MIB), Some(2 * MIB));
        let pool = Pool::with_expandable(driver, None, expandable);
        let blocks: Vec<Block> = (0..20).map(|_| pool.alloc(2 * MIB, 0).unwrap()).collect();
        for b in blocks.iter().skip(1).step_by(2) {
            pool.free(b).unwrap();
        }
        let big = pool.alloc(16 * MIB, 0);
        check_accounting(&pool);
        let used = dev.with(|d| d.used);
        (big.is_ok(), used)
    };
    let (ok, used) = run(true);
    assert!(
        ok,
        "expandable: the free pages are unmapped and the tail grows"
    );
    assert_eq!(used, 10 * 2 * MIB + 16 * MIB);
    let (ok, _) = run(false);
    assert!(!ok, "plain segments: the 20 MiB segments are half used");
}

#[test]
fn empty_cache_unmaps_free_pages_in_the_middle() {
    let (dev, pool) = vmm_pool(None, None);
    let a = pool.alloc(4 * MIB, 0).unwrap();
    let b = pool.alloc(4 * MIB, 0).unwrap();
    let c = pool.alloc(4 * MIB, 0).unwrap();
    pool.free(&b).unwrap();
    pool.empty_cache().unwrap();
    let s = pool.stats();
    assert_eq!(s.reserved_bytes, 8 * MIB);
    assert_eq!(s.num_driver_frees, 2);
    assert_eq!(dev.with(|d| d.chunks.len()), 4);
    let snap = pool.snapshot();
    let states: Vec<_> = snap[0].blocks.iter().map(|b| (b.state, b.size)).collect();
    assert_eq!(states[0], (BlockState::Live, 4 * MIB));
    assert_eq!(states[1], (BlockState::Unmapped, 4 * MIB));
    assert_eq!(states[2], (BlockState::Live, 4 * MIB));
    assert_eq!(states[3].0, BlockState::Unmapped);
    assert_eq!(snap[0].chunks, 4);
    check_accounting(&pool);
    // The hole is mapped again for the next request that fits in it.
    let d = pool.alloc(3 * MIB, 0).unwrap();
    assert_eq!(d.ptr, b.ptr);
    // Two pages for 3 MiB: the last MiB of the hole stays cached.
    assert_eq!(pool.stats().reserved_bytes, 12 * MIB);
    assert_eq!(pool.stats().fragmentation_bytes, MIB);
    check_accounting(&pool);
    for blk in [a, c, d] {
        pool.free(&blk).unwrap();
    }
    pool.empty_cache().unwrap();
    let s = pool.stats();
    assert_eq!((s.reserved_bytes, s.num_segments), (0, 0));
    assert_eq!(s.expandable_virtual_bytes, 0);
    assert_eq!(s.num_driver_allocs, s.num_driver_frees);
    dev.with(|d| {
        assert_eq!(d.used, 0);
        assert!(d.ranges.is_empty() && d.chunks.is_empty());
        assert_eq!(d.maps, d.unmaps);
    });
}

#[test]
fn pages_shared_with_live_blocks_stay_mapped() {
    let (dev, pool) = vmm_pool(None, None);
    // Small segment: x [0, 0.5M), y [0.5M, 1.5M), z [1.5M, 2.5M) crosses a page.
    let x = pool.alloc(MIB / 2, 0).unwrap();
    let y = pool.alloc(MIB, 0).unwrap();
    let z = pool.alloc(MIB, 0).unwrap();
    assert_eq!(z.ptr, x.ptr + 3 * MIB / 2);
    assert_eq!(pool.stats().reserved_bytes, 4 * MIB);
    pool.free(&y).unwrap();
    pool.empty_cache().unwrap();
    // No page lies wholly in y's free block (nor in the free tail of page 1).
    assert_eq!(pool.stats().reserved_bytes, 4 * MIB);
    assert_eq!(dev.with(|d| d.unmaps), 0);
    pool.free(&z).unwrap();
    pool.empty_cache().unwrap();
    // Page 1 is free now; page 0 still holds x.
    assert_eq!(pool.stats().reserved_bytes, 2 * MIB);
    check_accounting(&pool);
    pool.free(&x).unwrap();
    pool.empty_cache().unwrap();
    assert_eq!(pool.stats().reserved_bytes, 0);
    assert_eq!(dev.with(|d| d.used), 0);
}

#[test]
fn expandable_limit_counts_mapped_bytes() {
    let (dev, pool) = vmm_pool(None, Some(10 * MIB));
    let a = pool.alloc(8 * MIB, 0).unwrap();
    let err = pool.alloc(4 * MIB, 0).unwrap_err();
    match err {
        PoolError::OutOfMemory { stats, .. } => {
            assert_eq!(stats.reserved_bytes, 8 * MIB);
            assert_eq!(stats.num_ooms, 1);
        }
        other => panic!("unexpected {other:?}"),
    }
    // Nor on another stream, and no addresses are reserved for it.
    assert!(pool.alloc(4 * MIB, 1).is_err());
    assert_eq!(pool.stats().num_segments, 1);
    assert_eq!(dev.with(|d| d.ranges.len()), 1);
    // 2 MiB more fits: 10 MiB mapped.
    let b = pool.alloc(2 * MIB, 0).unwrap();
    assert_eq!(b.ptr, a.ptr + 8 * MIB);
    assert_eq!(pool.stats().reserved_bytes, 10 * MIB);
    pool.free(&a).unwrap();
    pool.free(&b).unwrap();
    check_accounting(&pool);
}

#[test]
fn failed_maps_are_rolled_back() {
    // 5 MiB device: a 6 MiB block needs 3 pages, the third fails.
    let (dev, pool) = vmm_pool(Some(5 * MIB), None);
    let err = pool.alloc(6 * MIB, 0).unwrap_err();
    assert!(matches!(err, PoolError::OutOfMemory { .. }));
    dev.with(|d| {
        assert_eq!(d.used, 0);
        assert_eq!(d.maps, d.unmaps);
    });
    check_accounting(&pool);
    dev.with(|d| d.fail_next_map = Some(999));
    match pool.alloc(MIB * 3, 0).unwrap_err() {
        PoolError::Driver(e) => assert_eq!(e.call, "cuMemMap"),
        other => panic!("unexpected {other:?}"),
    }
    let ok = pool.alloc(4 * MIB, 0).unwrap();
    assert_eq!(dev.with(|d| d.used), 4 * MIB);
    pool.free(&ok).unwrap();
    drop(pool);
    dev.with(|d| {
        assert_eq!(d.used, 0);
        assert!(d.ranges.is_empty(), "drop releases the address ranges");
    });
}

#[test]
fn expandable_pending_frees_wait_for_events() {
    let (dev, pool) = vmm_pool(None, None);
    let a = pool.alloc(4 * MIB, 1).unwrap();
    pool.record_stream(&a, 2).unwrap();
    pool.free(&a).unwrap();
    assert_eq!(pool.stats().pending_bytes, 4 * MIB);
    let b = pool.alloc(4 * MIB, 1).unwrap();
    assert_ne!(b.ptr, a.ptr, "pending memory is not reused");
    dev.complete_all_events();
    pool.free(&b).unwrap();
    pool.empty_cache().unwrap();
    assert_eq!(pool.stats().reserved_bytes, 0);
    check_accounting(&pool);
}

// ----- memory history --------------------------------------------------------

fn frames(name: &str, line: u32) -> Frames {
    Arc::from(vec![Frame {
        filename: Arc::from("test_file.py"),
        line,
        name: Arc::from(name),
    }])
}

fn actions(pool: &Pool) -> Vec<(TraceAction, u64, u64)> {
    pool.history()
        .iter()
        .map(|e| (e.action, e.addr, e.size))
        .collect()
}

#[test]
fn history_records_a_scripted_sequence() {
    let (dev, pool) = vmm_pool(Some(64 * MIB), None);
    let before = pool.alloc(1000, 0).unwrap(); // not recorded
    assert!(!pool.is_recording());
    pool.record_history(true, 100);
    assert!(pool.is_recording());
    let a = pool
        .alloc_traced(3 * MIB, 0, Some(frames("make_a", 10)))
        .unwrap();
    let b = pool.alloc(100, 0).unwrap();
    pool.record_stream(&b, 5).unwrap();
    pool.free_traced(&b, Some(frames("drop_b", 20))).unwrap();
    dev.complete_all_events();
    pool.process_pending_frees().unwrap();
    pool.free(&a).unwrap();
    pool.empty_cache().unwrap();
    assert!(pool.alloc(1 << 40, 0).is_err());
    pool.record_history(false, 0);
    assert!(!pool.is_recording());
    pool.free(&before).unwrap(); // not recorded

    let seg = a.ptr;
    use TraceAction::*;
    assert_eq!(
        actions(&pool),
        vec![
            (SegmentMap, seg, 4 * MIB),
            (Alloc, a.ptr, 3 * MIB),
            (Alloc, b.ptr, 512),
            (FreeRequested, b.ptr, 512),
            (FreeCompleted, b.ptr, 512),
            (FreeRequested, a.ptr, 3 * MIB),
            (FreeCompleted, a.ptr, 3 * MIB),
            (SegmentUnmap, seg, 4 * MIB),
            (Oom, 0, 1 << 40),
        ]
    );
    let h = pool.history();
    assert_eq!(h[1].frames.as_ref().unwrap()[0].name.as_ref(), "make_a");
    assert!(h[2].frames.is_none(), "untraced alloc has no stack");
    assert_eq!(
        h[3].frames.as_ref().unwrap()[0].line,
        20,
        "free's own stack"
    );
    assert_eq!(h[5].frames.as_ref().unwrap()[0].name.as_ref(), "make_a");
    assert_eq!(h[3].stream, 0);
    assert_eq!(h[8].device_free, 64 * MIB - 2 * MIB);
    assert!(h.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    assert!(
        h[0].time_us > 1_600_000_000_000_000,
        "microseconds since the epoch"
    );
}

#[test]
fn history_of_plain_segments_and_block_frames() {
    let (_, pool) = test_pool(None, None);
    pool.record_history(true, 3);
    let a = pool.alloc_traced(100, 7, Some(frames("f", 1))).unwrap();
    let snap = pool.snapshot();
    let live = snap[0]
        .blocks
        .iter()
        .find(|b| b.state == BlockState::Live)
        .unwrap();
    assert_eq!(live.frames.as_ref().unwrap()[0].name.as_ref(), "f");
    pool.free(&a).unwrap();
    assert!(pool.snapshot()[0].blocks.iter().all(|b| b.frames.is_none()));
    pool.empty_cache().unwrap();
    use TraceAction::*;
    // The ring holds the newest 3 of 5 events.
    let got: Vec<_> = actions(&pool).into_iter().map(|e| e.0).collect();
    assert_eq!(got, vec![FreeRequested, FreeCompleted, SegmentFree]);
    let last = pool.history().pop().unwrap();
    assert_eq!((last.size, last.stream), (2 * MIB, 7));
}
