//! Multi-threaded stress test on the host table: 4 threads allocate, fill,
//! check and free blocks concurrently (some freed by another thread), with
//! per-thread and shared streams and occasional record_stream/empty_cache.

mod common;

use std::sync::{Arc, Mutex};
use std::thread;

use pygpukit_runtime::pool::{Block, Pool};

const THREADS: u64 = 4;
const OPS: usize = 4000;
const MAX_LIVE: usize = 48;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pattern(b: &Block, i: u64) -> u8 {
    (b.ptr.wrapping_mul(31) ^ i.wrapping_mul(7) ^ (b.ptr >> 9)) as u8
}

/// The bytes checked: all of a small block, the first and last 4 KiB of a large one.
fn ranges(b: &Block) -> [(u64, u64); 2] {
    let n = b.requested.max(1);
    if n <= 64 * 1024 {
        [(0, n), (n, n)]
    } else {
        [(0, 4096), (n - 4096, n)]
    }
}

fn fill(b: &Block) {
    for (lo, hi) in ranges(b) {
        for i in lo..hi {
            unsafe { *((b.ptr + i) as *mut u8) = pattern(b, i) };
        }
    }
}

fn verify(b: &Block) {
    for (lo, hi) in ranges(b) {
        for i in lo..hi {
            let got = unsafe { *((b.ptr + i) as *const u8) };
            assert_eq!(got, pattern(b, i), "block {b:?} corrupted at byte {i}");
        }
    }
}

#[test]
fn four_threads_alloc_fill_free() {
    let pool = Arc::new(Pool::host(None));
    let exchange: Arc<Mutex<Vec<Block>>> = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = Arc::clone(&pool);
            let exchange = Arc::clone(&exchange);
            thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1).wrapping_mul(0xdead_beef));
                let mut live: Vec<Block> = Vec::new();
                for op in 0..OPS {
                    let r = rng.below(100);
                    if r < 55 && live.len() < MAX_LIVE {
                        let size = match rng.below(20) {
                            0 => 2 * 1024 * 1024 + rng.below(10 * 1024 * 1024),
                            1..=4 => rng.below(1024 * 1024) + 1,
                            _ => rng.below(8192),
                        };
                        // Own stream mostly; stream 100 is shared by all threads.
                        let stream = if rng.below(4) == 0 { 100 } else { t + 1 };
                        let b = pool.alloc(size, stream).expect("host alloc failed");
                        assert_eq!(b.requested, size);
                        fill(&b);
                        if rng.below(10) == 0 {
                            pool.record_stream(&b, 200 + rng.below(3)).unwrap();
                        }
                        if rng.below(8) == 0 {
                            exchange.lock().unwrap().push(b);
                        } else {
                            live.push(b);
                        }
                    } else if r < 90 && !live.is_empty() {
                        let i = rng.below(live.len() as u64) as usize;
                        let b = live.swap_remove(i);
                        verify(&b);
                        pool.free(&b).unwrap();
                    } else if r < 97 {
                        // Free a block some thread handed over.
                        let b = exchange.lock().unwrap().pop();
                        if let Some(b) = b {
                            verify(&b);
                            pool.free(&b).unwrap();
                        }
                    } else if op % 500 == 0 {
                        pool.empty_cache().unwrap();
                    } else {
                        let _ = pool.stats();
                    }
                }
                for b in live {
                    verify(&b);
                    pool.free(&b).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for b in exchange.lock().unwrap().drain(..) {
        verify(&b);
        pool.free(&b).unwrap();
    }
    pool.process_pending_frees().unwrap();
    common::check_invariants(&pool, &[], None).unwrap();
    let s = pool.stats();
    assert_eq!(s.allocated_bytes, 0);
    assert_eq!(s.num_alloc_calls, s.num_free_calls);
    assert!(s.num_alloc_calls > 1000);
    assert!(
        s.num_driver_allocs * 10 < s.num_alloc_calls,
        "cache not effective: {s:?}"
    );
    pool.empty_cache().unwrap();
    let s = pool.stats();
    assert_eq!(s.reserved_bytes, 0);
    assert_eq!(s.num_driver_allocs, s.num_driver_frees);
}
