//! Property tests: random sequences of pool operations on the host table,
//! with plain and with expandable segments, checking the pool's invariants
//! after every step.

mod common;

use proptest::prelude::*;
use proptest::sample::Index;

use pygpukit_runtime::pool::{Block, BlockState, Pool, PoolError};
use pygpukit_runtime::Driver;

const MIB: u64 = 1 << 20;

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, stream: u64 },
    Free(Index),
    RecordStream(Index, u64),
    ProcessPending,
    EmptyCache,
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=4096,
        3 => 4097u64..=MIB,
        2 => MIB + 1..=10 * MIB,
        1 => 10 * MIB..=50 * MIB,
        1 => Just(0u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), 0u64..3).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        4 => any::<Index>().prop_map(Op::Free),
        1 => (any::<Index>(), 0u64..4).prop_map(|(i, s)| Op::RecordStream(i, s)),
        1 => Just(Op::ProcessPending),
        1 => Just(Op::EmptyCache),
    ]
}

/// Tag the first and last byte of a block (host memory is real).
fn tag(b: &Block) -> u8 {
    (b.ptr >> 9) as u8 ^ (b.size as u8) ^ 0x5a
}

fn write_tag(b: &Block) {
    let t = tag(b);
    unsafe {
        *(b.ptr as *mut u8) = t;
        *((b.ptr + b.size - 1) as *mut u8) = t;
    }
}

fn check_tag(b: &Block) -> bool {
    let t = tag(b);
    unsafe { *(b.ptr as *const u8) == t && *((b.ptr + b.size - 1) as *const u8) == t }
}

fn run(ops: Vec<Op>, limit: Option<u64>, expandable: bool) -> Result<(), TestCaseError> {
    let pool = Pool::with_expandable(Driver::host(), limit, expandable);
    prop_assert_eq!(pool.expandable(), expandable);
    let mut live: Vec<Block> = Vec::new();
    for op in ops {
        match op {
            Op::Alloc { size, stream } => match pool.alloc(size, stream) {
                Ok(b) => {
                    prop_assert!(b.size >= size.max(1) && b.size % 512 == 0);
                    prop_assert_eq!(b.requested, size);
                    prop_assert_eq!(b.stream, stream);
                    prop_assert_eq!(b.ptr % 256, 0);
                    write_tag(&b);
                    live.push(b);
                }
                Err(PoolError::OutOfMemory { requested, .. }) => {
                    prop_assert!(limit.is_some(), "host OOM without a limit");
                    prop_assert_eq!(requested, size);
                }
                Err(e) => return Err(TestCaseError::fail(format!("alloc failed: {e}"))),
            },
            Op::Free(i) => {
                if !live.is_empty() {
                    let b = live.swap_remove(i.index(live.len()));
                    prop_assert!(check_tag(&b), "block {:?} was overwritten", b);
                    pool.free(&b)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(pool.free(&b).is_err(), "double free accepted");
                }
            }
            Op::RecordStream(i, s) => {
                if !live.is_empty() {
                    let b = live[i.index(live.len())];
                    pool.record_stream(&b, s)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            Op::ProcessPending => {
                pool.process_pending_frees()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::EmptyCache => {
                pool.empty_cache()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(pool.stats().num_pending_frees, 0);
            }
        }
        common::check_invariants(&pool, &live, limit).map_err(TestCaseError::fail)?;
    }

    // Free everything: each segment becomes one free block (per mapped
    // range, in an expandable segment).
    for b in live.drain(..) {
        prop_assert!(check_tag(&b));
        pool.free(&b)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    pool.process_pending_frees()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    common::check_invariants(&pool, &live, limit).map_err(TestCaseError::fail)?;
    let s = pool.stats();
    prop_assert_eq!(s.allocated_bytes, 0);
    prop_assert_eq!(s.requested_bytes, 0);
    for seg in pool.snapshot() {
        if seg.expandable {
            for w in seg.blocks.windows(2) {
                prop_assert!(
                    w[0].state == BlockState::Unmapped || w[1].state == BlockState::Unmapped,
                    "segment {} not coalesced",
                    seg.id
                );
            }
            prop_assert!(seg
                .blocks
                .iter()
                .all(|b| matches!(b.state, BlockState::Cached | BlockState::Unmapped)));
        } else {
            prop_assert_eq!(seg.blocks.len(), 1, "segment {} not coalesced", seg.id);
            prop_assert_eq!(seg.blocks[0].state, BlockState::Cached);
            prop_assert_eq!(seg.blocks[0].size, seg.size);
        }
    }
    if !expandable {
        prop_assert_eq!(s.num_cached_blocks, s.num_segments);
    }
    prop_assert_eq!(s.cached_bytes, s.reserved_bytes);

    pool.empty_cache()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let s = pool.stats();
    prop_assert_eq!(s.reserved_bytes, 0);
    prop_assert_eq!(s.num_segments, 0);
    prop_assert_eq!(s.num_driver_allocs, s.num_driver_frees);
    prop_assert_eq!(s.cached_bytes, 0);
    prop_assert_eq!(s.expandable_mapped_bytes, 0);
    prop_assert_eq!(s.expandable_virtual_bytes, 0);
    // One driver allocation per segment at most (an expandable segment maps
    // a page per 2 MiB, so this holds for plain segments only).
    prop_assert!(expandable || s.num_alloc_calls >= s.num_driver_allocs || s.num_alloc_calls == 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_invariants(
        ops in prop::collection::vec(op(), 1..120),
        expandable in any::<bool>(),
    ) {
        run(ops, None, expandable)?;
    }

    #[test]
    fn random_sequences_respect_the_limit(
        ops in prop::collection::vec(op(), 1..120),
        limit in prop_oneof![Just(4 * MIB), Just(24 * MIB), 0u64..=128 * MIB],
        expandable in any::<bool>(),
    ) {
        run(ops, Some(limit), expandable)?;
    }
}
