//! Tests of the transfer engine against the host table and against a "lazy"
//! device: a table whose copies run only when an event or stream is waited
//! for (or, one at a time, when an event is queried), so that reusing a
//! staging buffer before its DMA ran corrupts the data and fails the test.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use super::*;
use crate::driver::{pgk_driver_table, PGK_NOT_READY, PGK_OK};
use crate::host::host_table;

const HIGH: Handle = 11;
const LOW: Handle = 22;

fn config(chunk_bytes: u64, staging_buffers: usize, copy_threads: usize) -> TransferConfig {
    TransferConfig {
        chunk_bytes,
        staging_buffers,
        copy_threads,
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

/// `src` to "device" memory and back through `engine`; returns what came back.
fn round_trip(engine: &TransferEngine, src: &[u8], priority: Priority) -> Vec<u8> {
    let n = src.len() as u64;
    let d = engine.driver();
    let dev = d.mem_alloc(n).unwrap();
    let up = unsafe { engine.host_to_device(dev, src.as_ptr(), n, priority) }.unwrap();
    up.wait().unwrap();
    assert!(up.done().unwrap());
    let mut back = vec![0xeeu8; src.len()];
    let down = unsafe { engine.device_to_host(back.as_mut_ptr(), dev, n, priority) }.unwrap();
    assert!(down.done().unwrap());
    unsafe { d.mem_free(dev) }.unwrap();
    back
}

// ----- a lazy device --------------------------------------------------------

enum Op {
    Copy { dst: u64, src: u64, size: u64 },
    Mark,
}

#[derive(Default)]
struct LazyState {
    ops: VecDeque<(u64, Op)>,
    next_op: u64,
    /// Ops with a sequence number below this have run.
    done_below: u64,
    /// Event -> sequence number of its last record.
    marks: HashMap<u64, u64>,
    next_event: u64,
    streams_used: Vec<u64>,
}

#[derive(Default)]
struct Lazy {
    state: Mutex<LazyState>,
    memcpy_calls: AtomicU64,
    /// memcpy_async fails on this call number (1-based), 0: never.
    fail_memcpy_at: AtomicU64,
    host_allocs: AtomicU64,
    host_frees: AtomicU64,
    events_created: AtomicU64,
    events_destroyed: AtomicU64,
}

impl LazyState {
    fn push(&mut self, op: Op) -> u64 {
        let seq = self.next_op;
        self.next_op += 1;
        self.ops.push_back((seq, op));
        seq
    }

    /// Run queued ops up to and including sequence number `upto`.
    fn run_until(&mut self, upto: u64) {
        while let Some((seq, _)) = self.ops.front() {
            if *seq > upto {
                break;
            }
            let (seq, op) = self.ops.pop_front().unwrap();
            if let Op::Copy { dst, src, size } = op {
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size as usize) };
            }
            self.done_below = seq + 1;
        }
    }
}

fn lazy(ctx: *mut c_void) -> &'static Lazy {
    unsafe { &*(ctx as *const Lazy) }
}

unsafe extern "C" fn l_memcpy(
    ctx: *mut c_void,
    dst: u64,
    src: u64,
    size: u64,
    stream: u64,
) -> c_int {
    let l = lazy(ctx);
    let call = l.memcpy_calls.fetch_add(1, SeqCst) + 1;
    if call == l.fail_memcpy_at.load(SeqCst) {
        return 1;
    }
    let mut st = l.state.lock().unwrap();
    st.streams_used.push(stream);
    st.push(Op::Copy { dst, src, size });
    PGK_OK
}

unsafe extern "C" fn l_event_create(ctx: *mut c_void, out: *mut u64) -> c_int {
    let l = lazy(ctx);
    l.events_created.fetch_add(1, SeqCst);
    let mut st = l.state.lock().unwrap();
    st.next_event += 1;
    unsafe { out.write(st.next_event) };
    PGK_OK
}

unsafe extern "C" fn l_event_destroy(ctx: *mut c_void, _event: u64) -> c_int {
    lazy(ctx).events_destroyed.fetch_add(1, SeqCst);
    PGK_OK
}

unsafe extern "C" fn l_event_record(ctx: *mut c_void, event: u64, _stream: u64) -> c_int {
    let mut st = lazy(ctx).state.lock().unwrap();
    let seq = st.push(Op::Mark);
    st.marks.insert(event, seq);
    PGK_OK
}

unsafe extern "C" fn l_event_query(ctx: *mut c_void, event: u64) -> c_int {
    let mut st = lazy(ctx).state.lock().unwrap();
    // Some progress on every query, as a real device makes.
    if let Some(&(seq, _)) = st.ops.front() {
        st.run_until(seq);
    }
    match st.marks.get(&event) {
        Some(&seq) if seq >= st.done_below => PGK_NOT_READY,
        _ => PGK_OK,
    }
}

unsafe extern "C" fn l_event_synchronize(ctx: *mut c_void, event: u64) -> c_int {
    let mut st = lazy(ctx).state.lock().unwrap();
    if let Some(&seq) = st.marks.get(&event) {
        st.run_until(seq);
    }
    PGK_OK
}

unsafe extern "C" fn l_synchronize_all(ctx: *mut c_void, _stream: u64) -> c_int {
    lazy(ctx).state.lock().unwrap().run_until(u64::MAX);
    PGK_OK
}

unsafe extern "C" fn l_host_alloc(ctx: *mut c_void, size: u64, out: *mut u64) -> c_int {
    lazy(ctx).host_allocs.fetch_add(1, SeqCst);
    let p = unsafe { libc::malloc(size.max(1) as usize) };
    unsafe { out.write(p as u64) };
    PGK_OK
}

unsafe extern "C" fn l_host_free(ctx: *mut c_void, ptr: u64) -> c_int {
    lazy(ctx).host_frees.fetch_add(1, SeqCst);
    unsafe { libc::free(ptr as *mut c_void) };
    PGK_OK
}

unsafe extern "C" fn l_error_string(_ctx: *mut c_void, _status: c_int) -> *const c_char {
    c"lazy device error".as_ptr()
}

/// A driver over a fresh lazy device (leaked: tests are short-lived).
fn lazy_driver() -> (Driver, &'static Lazy) {
    let state: &'static Lazy = Box::leak(Box::default());
    let table = Box::leak(Box::new(pgk_driver_table {
        ctx: state as *const Lazy as *mut c_void,
        is_host: 0,
        memcpy_async: Some(l_memcpy),
        event_create: Some(l_event_create),
        event_destroy: Some(l_event_destroy),
        event_record: Some(l_event_record),
        event_query: Some(l_event_query),
        event_synchronize: Some(l_event_synchronize),
        stream_synchronize: Some(l_synchronize_all),
        host_alloc: Some(l_host_alloc),
        host_free: Some(l_host_free),
        error_string: Some(l_error_string),
        ..*host_table()
    }));
    let driver = unsafe { Driver::from_raw(table, None) }.unwrap();
    (driver, state)
}

// ----- tests ------------------------------------------------------------------

#[test]
fn round_trips_are_byte_identical_for_odd_sizes() {
    let engine = TransferEngine::new(Driver::host(), config(4096, 3, 2), HIGH, LOW).unwrap();
    for (i, n) in [1usize, 7, 4095, 4096, 4097, 3 * 4096 + 5, 10 * 4096 + 3]
        .into_iter()
        .enumerate()
    {
        let src = pattern(n, i as u8);
        assert_eq!(round_trip(&engine, &src, Priority::Normal), src, "size {n}");
    }
    let s = engine.stats();
    assert_eq!((s.h2d_transfers, s.d2h_transfers), (7, 7));
    let total: u64 = [1u64, 7, 4095, 4096, 4097, 3 * 4096 + 5, 10 * 4096 + 3]
        .iter()
        .sum();
    assert_eq!((s.h2d_bytes, s.d2h_bytes), (total, total));
    assert_eq!(s.chunks, 2 * (1 + 1 + 1 + 1 + 2 + 4 + 11));
    assert_eq!(s.staging_bytes, 3 * 4096);
}

#[test]
fn chunks_are_counted_per_transfer() {
    let engine = TransferEngine::new(Driver::host(), config(1000, 2, 1), HIGH, LOW).unwrap();
    let src = pattern(2500, 1);
    let dev = engine.driver().mem_alloc(2500).unwrap();
    let t = unsafe { engine.host_to_device(dev, src.as_ptr(), 2500, Priority::High) }.unwrap();
    assert_eq!(t.chunks(), 3);
    assert_eq!(t.nbytes(), 2500);
    assert_eq!(t.direction(), Direction::HostToDevice);
    assert_eq!(t.priority(), Priority::High);
    assert_eq!(t.stream(), HIGH);
    unsafe { engine.driver().mem_free(dev) }.unwrap();
}

#[test]
fn zero_bytes_complete_at_once_without_staging() {
    let (driver, dev) = lazy_driver();
    let engine = TransferEngine::new(driver, config(64, 2, 1), HIGH, LOW).unwrap();
    let t = unsafe { engine.host_to_device(0x1000, std::ptr::null(), 0, Priority::Low) }.unwrap();
    assert_eq!(t.chunks(), 0);
    t.wait().unwrap();
    assert!(t.done().unwrap());
    let t =
        unsafe { engine.device_to_host(std::ptr::null_mut(), 0x1000, 0, Priority::Low) }.unwrap();
    assert!(t.done().unwrap());
    assert_eq!(dev.memcpy_calls.load(SeqCst), 0);
    assert_eq!(dev.host_allocs.load(SeqCst), 0);
    assert_eq!(engine.stats().staging_bytes, 0);
    assert_eq!(engine.stats().h2d_transfers, 1);
}

#[test]
fn staging_buffers_are_not_reused_before_their_dma_ran() {
    // 37 chunks through 3 buffers on a device that copies only when waited
    // for: an early reuse would leave another chunk's bytes in the destination.
    let (driver, dev) = lazy_driver();
    let engine = TransferEngine::new(driver, config(256, 3, 1), HIGH, LOW).unwrap();
    let n = 256 * 36 + 77;
    let src = pattern(n, 9);
    let mut dst = vec![0u8; n];
    let t = unsafe {
        engine.host_to_device(
            dst.as_mut_ptr() as u64,
            src.as_ptr(),
            n as u64,
            Priority::Normal,
        )
    }
    .unwrap();
    assert_eq!(t.chunks(), 37);
    t.wait().unwrap();
    assert!(t.done().unwrap());
    assert!(
        dst == src,
        "host to device through a lazy device corrupted data"
    );
    assert!(
        engine.stats().staging_waits > 0,
        "the lazy device should have made the host wait"
    );

    let mut back = vec![0u8; n];
    let t = unsafe {
        engine.device_to_host(
            back.as_mut_ptr(),
            dst.as_ptr() as u64,
            n as u64,
            Priority::Normal,
        )
    }
    .unwrap();
    assert!(t.done().unwrap());
    assert!(
        back == src,
        "device to host through a lazy device corrupted data"
    );
    // The ring was allocated once and reused.
    assert_eq!(dev.host_allocs.load(SeqCst), 3);
    assert_eq!(dev.memcpy_calls.load(SeqCst), 2 * 37);
}

#[test]
fn the_transfer_event_follows_every_chunk() {
    let (driver, _) = lazy_driver();
    let engine = TransferEngine::new(driver, config(100, 4, 1), HIGH, LOW).unwrap();
    let src = pattern(250, 3);
    let mut dst = vec![0u8; 250];
    let t = unsafe {
        engine.host_to_device(dst.as_mut_ptr() as u64, src.as_ptr(), 250, Priority::Normal)
    }
    .unwrap();
    // The device has not reached the last chunk yet (the queries before it
    // ran only the first copy and its event).
    assert!(dst[200..].iter().all(|&b| b == 0));
    t.wait().unwrap();
    assert!(dst == src);
}

#[test]
fn priorities_pick_the_copy_stream() {
    let (driver, dev) = lazy_driver();
    let engine = TransferEngine::new(driver, config(64, 2, 1), HIGH, LOW).unwrap();
    let src = pattern(100, 0);
    let mut dst = vec![0u8; 100];
    for p in [Priority::High, Priority::Normal, Priority::Low] {
        let t = unsafe { engine.host_to_device(dst.as_mut_ptr() as u64, src.as_ptr(), 100, p) };
        t.unwrap().wait().unwrap();
    }
    let used = dev.state.lock().unwrap().streams_used.clone();
    assert_eq!(used, vec![HIGH, HIGH, LOW, LOW, LOW, LOW]);
    assert_eq!(engine.stream(Priority::High), HIGH);
    assert_eq!(engine.stream(Priority::Low), LOW);
}

#[test]
fn low_priority_leaves_the_last_buffer_and_high_goes_first() {
    let (driver, _) = lazy_driver();
    let ring = Ring::new(2);
    let a = ring
        .acquire(&driver, Priority::Normal, false, 64)
        .unwrap()
        .unwrap();
    assert!(ring
        .acquire(&driver, Priority::Low, false, 64)
        .unwrap()
        .is_none());
    let b = ring
        .acquire(&driver, Priority::Normal, false, 64)
        .unwrap()
        .unwrap();
    assert_ne!(a.ptr, b.ptr);
    drop(b);

    // A single-buffer ring still serves low priority.
    let one = Ring::new(1);
    drop(
        one.acquire(&driver, Priority::Low, false, 64)
            .unwrap()
            .unwrap(),
    );

    // While a high-priority thread waits, normal requests yield to it.
    let held = one
        .acquire(&driver, Priority::Normal, false, 64)
        .unwrap()
        .unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            one.acquire(&driver, Priority::High, true, 64)
                .unwrap()
                .map(|l| l.ptr)
        });
        while one.lock().high_waiting == 0 {
            std::thread::yield_now();
        }
        drop(held);
        assert!(waiter.join().unwrap().is_some());
    });
    drop(a);
}

#[test]
fn buffers_are_handed_out_oldest_first() {
    let (driver, _) = lazy_driver();
    let ring = Ring::new(3);
    let mut order = Vec::new();
    for _ in 0..6 {
        let l = ring
            .acquire(&driver, Priority::Normal, true, 64)
            .unwrap()
            .unwrap();
        order.push(l.ptr);
    }
    assert_eq!(order[..3], order[3..]);
    assert_eq!(
        order.iter().collect::<std::collections::HashSet<_>>().len(),
        3
    );
}

#[test]
fn driver_errors_are_typed_and_leave_the_engine_usable() {
    for workers in [1, 2] {
        driver_errors_with(workers);
    }
}

fn driver_errors_with(workers: usize) {
    let (driver, dev) = lazy_driver();
    let engine = TransferEngine::new(driver, config(64, 2, workers), HIGH, LOW).unwrap();
    let src = pattern(640, 5);
    let mut dst = vec![0u8; 640];
    dev.fail_memcpy_at.store(4, SeqCst);
    let err = unsafe {
        engine.host_to_device(dst.as_mut_ptr() as u64, src.as_ptr(), 640, Priority::Normal)
    }
    .unwrap_err();
    match &err {
        TransferError::Driver(e) => {
            assert_eq!(e.call, "cuMemcpyAsync");
            assert!(err.to_string().contains("lazy device error"));
        }
        other => panic!("expected a driver error, got {other:?}"),
    }
    // Both buffers went back to the ring.
    let t = unsafe {
        engine.host_to_device(dst.as_mut_ptr() as u64, src.as_ptr(), 640, Priority::Normal)
    };
    t.unwrap().wait().unwrap();
    assert!(dst == src);

    dev.fail_memcpy_at
        .store(dev.memcpy_calls.load(SeqCst) + 3, SeqCst);
    let mut back = vec![0u8; 640];
    let err = unsafe {
        engine.device_to_host(
            back.as_mut_ptr(),
            dst.as_ptr() as u64,
            640,
            Priority::Normal,
        )
    };
    assert!(matches!(err, Err(TransferError::Driver(_))));
    let t = unsafe {
        engine.device_to_host(
            back.as_mut_ptr(),
            dst.as_ptr() as u64,
            640,
            Priority::Normal,
        )
    };
    assert!(t.unwrap().done().unwrap());
    assert!(back == src);
}

#[test]
fn engine_and_transfers_release_what_they_allocate() {
    let (driver, dev) = lazy_driver();
    let engine = TransferEngine::new(driver, config(64, 3, 1), HIGH, LOW).unwrap();
    let src = pattern(1000, 2);
    let mut dst = vec![0u8; 1000];
    let t = unsafe {
        engine.host_to_device(
            dst.as_mut_ptr() as u64,
            src.as_ptr(),
            1000,
            Priority::Normal,
        )
    }
    .unwrap();
    drop(engine);
    // The transfer keeps the engine alive: waiting still works.
    t.wait().unwrap();
    assert!(dst == src);
    assert_eq!(dev.host_frees.load(SeqCst), 0);
    drop(t);
    assert_eq!(dev.host_allocs.load(SeqCst), 3);
    assert_eq!(dev.host_frees.load(SeqCst), 3);
    assert_eq!(
        dev.events_created.load(SeqCst),
        dev.events_destroyed.load(SeqCst)
    );
}

#[test]
fn concurrent_transfers_from_many_threads() {
    for (driver, ring) in [(Driver::host(), 2), (lazy_driver().0, 3)] {
        let engine =
            Arc::new(TransferEngine::new(driver, config(512, ring, 2), HIGH, LOW).unwrap());
        std::thread::scope(|s| {
            for i in 0..8usize {
                let engine = Arc::clone(&engine);
                s.spawn(move || {
                    let p = [Priority::High, Priority::Normal, Priority::Low][i % 3];
                    for round in 0..6 {
                        let src = pattern(513 * (i + 1) + round * 97, (i * 7 + round) as u8);
                        assert_eq!(
                            round_trip(&engine, &src, p),
                            src,
                            "thread {i} round {round}"
                        );
                    }
                });
            }
        });
        let s = engine.stats();
        assert_eq!((s.h2d_transfers, s.d2h_transfers), (48, 48));
    }
}

#[test]
fn plans_give_every_worker_a_chunk_of_at_least_a_mib() {
    let mib = MIN_WORKER_CHUNK;
    let engine = TransferEngine::new(Driver::host(), config(8 * mib, 4, 4), HIGH, LOW).unwrap();
    assert_eq!(engine.plan(0), (mib, 0, 1));
    assert_eq!(engine.plan(1000), (mib, 1, 1));
    assert_eq!(engine.plan(3 * mib), (mib, 3, 3));
    assert_eq!(engine.plan(6 * mib), (3 * mib / 2, 4, 4));
    assert_eq!(engine.plan(256 * mib), (8 * mib, 32, 4));
    // No more workers than buffers, nor than copy_threads.
    let engine = TransferEngine::new(Driver::host(), config(8 * mib, 2, 4), HIGH, LOW).unwrap();
    assert_eq!(engine.plan(64 * mib), (8 * mib, 8, 2));
    let engine = TransferEngine::new(Driver::host(), config(4096, 4, 1), HIGH, LOW).unwrap();
    assert_eq!(engine.plan(10_000), (4096, 3, 1));
}

#[test]
fn parallel_workers_through_a_lazy_device() {
    for workers in [2, 3, 4] {
        let (driver, dev) = lazy_driver();
        let engine = TransferEngine::new(driver, config(256, 4, workers), HIGH, LOW).unwrap();
        let n = 256 * 50 + 13;
        let src = pattern(n, workers as u8);
        let mut dst = vec![0u8; n];
        let t = unsafe {
            engine.host_to_device(
                dst.as_mut_ptr() as u64,
                src.as_ptr(),
                n as u64,
                Priority::Normal,
            )
        }
        .unwrap();
        t.wait().unwrap();
        assert!(
            dst == src,
            "{workers} workers: host to device corrupted data"
        );
        let mut back = vec![0u8; n];
        let t = unsafe {
            engine.device_to_host(
                back.as_mut_ptr(),
                dst.as_ptr() as u64,
                n as u64,
                Priority::Low,
            )
        }
        .unwrap();
        assert!(t.done().unwrap());
        assert!(
            back == src,
            "{workers} workers: device to host corrupted data"
        );
        assert_eq!(dev.memcpy_calls.load(SeqCst), 2 * 51);
        assert_eq!(engine.stats().chunks, 2 * 51);
    }
}

#[test]
fn bad_configs_and_arguments_are_rejected() {
    let bad = [
        config(0, 4, 1),
        config(64, 0, 1),
        config(64, MAX_STAGING_BUFFERS + 1, 1),
        config(64, 4, 0),
        config(64, 4, MAX_COPY_THREADS + 1),
        config(MAX_STAGING_BYTES, 2, 1),
        config(u64::MAX, 2, 1),
    ];
    for c in bad {
        let err = TransferEngine::new(Driver::host(), c, HIGH, LOW).unwrap_err();
        assert!(matches!(err, TransferError::InvalidConfig(_)), "{c:?}");
        assert!(err
            .to_string()
            .starts_with("invalid transfer engine config: "));
    }
    TransferConfig::default().validate().unwrap();

    let engine = TransferEngine::new(Driver::host(), config(64, 2, 1), HIGH, LOW).unwrap();
    let err =
        unsafe { engine.host_to_device(u64::MAX - 4, [0u8; 8].as_ptr(), 8, Priority::Normal) }
            .unwrap_err();
    assert!(err.to_string().contains("destination range"), "{err}");

    assert_eq!("high".parse::<Priority>().unwrap(), Priority::High);
    assert_eq!(Priority::Low.name(), "low");
    let err = "urgent".parse::<Priority>().unwrap_err();
    assert!(err.to_string().contains("'high', 'normal' or 'low'"));
}
