use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::pool::Pool;

const MIB: u64 = 1 << 20;
const NEVER: CanEvict<'static> = &|_| false;
const ALWAYS: CanEvict<'static> = &|_| true;

fn sched(capacity: Option<u64>) -> Scheduler {
    let s = Scheduler::new(Arc::new(Pool::host(None)), capacity);
    s.set_eviction_grace(Duration::ZERO);
    s
}

/// A task admitted and running, with one stream (an arbitrary handle).
fn running(s: &Scheduler, name: &str, qos: Qos, part: &str, res: u64, stream: u64) -> TaskId {
    let id = s.submit(name, qos, part, res, None).unwrap();
    s.admit(id, Some(Duration::ZERO)).unwrap();
    s.set_state(id, TaskState::Running, None).unwrap();
    s.add_stream(id, stream).unwrap();
    id
}

fn check(s: &Scheduler) {
    s.with_state(|st, _| st.check_invariants()).unwrap();
}

#[test]
fn state_machine_rejects_illegal_transitions() {
    use TaskState::*;
    assert!(Pending.can_become(Admitted));
    assert!(Running.can_become(Admitted));
    assert!(!Pending.can_become(Running));
    assert!(!Completed.can_become(Running));
    assert!(!Cancelled.can_become(Admitted));
    let s = sched(None);
    let id = s.submit("t", Qos::Burstable, "default", 0, None).unwrap();
    let e = s.set_state(id, Running, None).unwrap_err();
    assert_eq!(e.to_string(), "task 't' cannot go from pending to running");
    s.admit(id, None).unwrap();
    s.set_state(id, Running, None).unwrap();
    s.set_state(id, Completed, None).unwrap();
    assert!(s.set_state(id, Running, None).is_err());
    s.with_state(|st, _| {
        let t = &st.tasks[&id];
        assert!(t.since[Pending.index()].unwrap() <= t.since[Completed.index()].unwrap());
    });
}

#[test]
fn qos_parse_and_priority() {
    assert_eq!(Qos::parse("best-effort"), Some(Qos::BestEffort));
    assert_eq!(Qos::parse("Guaranteed"), Some(Qos::Guaranteed));
    assert_eq!(Qos::parse("gold"), None);
    assert_eq!(Qos::Guaranteed.stream_priority(0, -5), -5);
    assert_eq!(Qos::Burstable.stream_priority(0, -5), -2);
    assert_eq!(Qos::BestEffort.stream_priority(0, -5), 0);
}

#[test]
fn partitions_validate_settings() {
    let s = sched(Some(100 * MIB));
    s.partition("a", Some(40 * MIB), 0.5).unwrap();
    assert!(s.partition("a", Some(40 * MIB), 0.5).is_ok());
    assert!(s.partition("b", Some(200 * MIB), 0.5).is_err());
    assert!(s.partition("c", None, 0.0).is_err());
    assert!(s.partition("c", None, 1.5).is_err());
    assert!(s.partition("", None, 1.0).is_err());
    assert!(matches!(
        s.submit("x", Qos::Burstable, "nope", 0, None),
        Err(SchedError::UnknownPartition(_))
    ));
    assert!(s.submit("g", Qos::Guaranteed, "a", 0, None).is_err());
    assert!(s
        .submit("g", Qos::Burstable, "a", 10 * MIB, Some(MIB))
        .is_err());
}

#[test]
fn admission_is_ordered_by_tier_then_fifo() {
    let s = sched(Some(100 * MIB));
    let big = running(&s, "hog", Qos::Guaranteed, "default", 100 * MIB, 1);
    let be = s.submit("be", Qos::BestEffort, "default", 0, None).unwrap();
    let b1 = s
        .submit("b1", Qos::Burstable, "default", 30 * MIB, None)
        .unwrap();
    let g1 = s
        .submit("g1", Qos::Guaranteed, "default", 60 * MIB, None)
        .unwrap();
    let b2 = s
        .submit("b2", Qos::Burstable, "default", 20 * MIB, None)
        .unwrap();
    s.with_state(|st, _| {
        assert_eq!(
            st.queue.iter().copied().collect::<Vec<_>>(),
            vec![g1, b1, b2, be]
        )
    });
    // Nothing fits while the hog holds everything.
    let e = s.admit(b2, Some(Duration::ZERO)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("task 'b2' not admitted"), "{msg}");
    assert!(msg.contains("reserves 20.00 MiB"), "{msg}");
    assert!(msg.contains("hog (guaranteed): 100.00 MiB"), "{msg}");
    s.set_state(big, TaskState::Completed, None).unwrap();
    // g1 (60) and b1 (30) fit; be (no reservation) is behind b2 (failed above).
    s.with_state(|st, _| {
        assert_eq!(st.tasks[&g1].state, TaskState::Admitted);
        assert_eq!(st.tasks[&b1].state, TaskState::Admitted);
        assert_eq!(st.tasks[&be].state, TaskState::Admitted);
        assert_eq!(st.tasks[&b2].state, TaskState::Failed);
    });
    check(&s);
}

#[test]
fn head_of_line_blocks_smaller_tasks_behind() {
    let s = sched(Some(100 * MIB));
    let a = running(&s, "a", Qos::Burstable, "default", 50 * MIB, 1);
    let big = s
        .submit("big", Qos::Guaranteed, "default", 80 * MIB, None)
        .unwrap();
    let small = s
        .submit("small", Qos::Guaranteed, "default", 10 * MIB, None)
        .unwrap();
    assert!(s.admit(small, Some(Duration::ZERO)).is_err());
    s.set_state(a, TaskState::Completed, None).unwrap();
    s.with_state(|st, _| assert_eq!(st.tasks[&big].state, TaskState::Admitted));
}

#[test]
fn a_full_partition_does_not_hold_up_the_others() {
    let s = sched(Some(100 * MIB));
    s.partition("a", Some(20 * MIB), 1.0).unwrap();
    s.partition("b", Some(20 * MIB), 1.0).unwrap();
    let _hog = running(&s, "hog", Qos::Guaranteed, "a", 20 * MIB, 1);
    let waiting = s
        .submit("wait-a", Qos::Guaranteed, "a", 10 * MIB, None)
        .unwrap();
    let later_a = s.submit("later-a", Qos::Burstable, "a", 0, None).unwrap();
    let other = s.submit("b", Qos::Burstable, "b", 10 * MIB, None).unwrap();
    s.admit(other, Some(Duration::ZERO)).unwrap();
    s.with_state(|st, _| {
        assert_eq!(st.tasks[&waiting].state, TaskState::Pending);
        // FIFO within the partition: the one behind the blocked head waits too.
        assert_eq!(st.tasks[&later_a].state, TaskState::Pending);
    });
}

#[test]
fn a_reservation_that_can_never_fit_fails_at_once() {
    let s = sched(Some(100 * MIB));
    s.partition("p", Some(10 * MIB), 1.0).unwrap();
    let t = s.submit("t", Qos::Guaranteed, "p", 20 * MIB, None).unwrap();
    let e = s.admit(t, None).unwrap_err().to_string();
    assert!(
        e.contains("can never fit") && e.contains("partition 'p'"),
        "{e}"
    );
}

#[test]
fn waiting_admission_completes_when_memory_is_released() {
    let s = Arc::new(sched(Some(100 * MIB)));
    let hog = running(&s, "hog", Qos::Guaranteed, "default", 80 * MIB, 1);
    let t = s
        .submit("t", Qos::Guaranteed, "default", 50 * MIB, None)
        .unwrap();
    let s2 = Arc::clone(&s);
    let waiter = std::thread::spawn(move || s2.admit(t, Some(Duration::from_secs(10))));
    std::thread::sleep(Duration::from_millis(50));
    s.set_state(hog, TaskState::Completed, None).unwrap();
    waiter.join().unwrap().unwrap();
    // and a timeout fails with the reason
    let u = s
        .submit("u", Qos::Guaranteed, "default", 60 * MIB, None)
        .unwrap();
    let e = s.admit(u, Some(Duration::from_millis(30))).unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
}

#[test]
fn reservations_are_never_taken_by_others() {
    let s = sched(None);
    s.partition("inf", Some(64 * MIB), 1.0).unwrap();
    let _g = running(&s, "decode", Qos::Guaranteed, "inf", 48 * MIB, 1);
    let _b = running(&s, "batch", Qos::BestEffort, "inf", 0, 2);
    // 16 MiB free in the partition for the best-effort task.
    let blk = s.alloc(16 * MIB, 2, NEVER).unwrap();
    let e = s.alloc(MIB, 2, NEVER).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("task 'batch'") && msg.contains("partition 'inf'"),
        "{msg}"
    );
    assert!(msg.contains("decode (guaranteed): 48.00 MiB"), "{msg}");
    // The guaranteed task gets all of its reservation, and not a byte more.
    let g1 = s.alloc(48 * MIB, 1, NEVER).unwrap();
    let e = s.alloc(512, 1, NEVER).unwrap_err();
    assert!(e.to_string().contains("the limit of task 'decode'"), "{e}");
    s.free(&g1).unwrap();
    s.free(&blk).unwrap();
    check(&s);
}

#[test]
fn untasked_memory_is_charged_to_the_default_partition() {
    let s = sched(Some(10 * MIB));
    let b = s.alloc(4 * MIB, 0, NEVER).unwrap();
    s.with_state(|st, _| assert_eq!(st.partitions[0].untasked, 4 * MIB));
    let e = s.alloc(7 * MIB, 0, NEVER).unwrap_err();
    assert!(e.to_string().contains("code outside any task"), "{e}");
    s.free(&b).unwrap();
    s.with_state(|st, _| assert_eq!(st.committed, 0));
}

/// The bytes checked of a buffer: its head and tail (a whole-buffer loop is
/// slow in debug builds and adds nothing: spills copy whole buffers).
fn probe(n: u64) -> impl Iterator<Item = u64> {
    (0..n.min(4096)).chain(n.saturating_sub(4096).max(4096)..n)
}

fn fill(ptr: u64, n: u64, seed: u8) {
    for i in probe(n) {
        unsafe { *((ptr + i) as *mut u8) = seed.wrapping_add((i % 251) as u8) };
    }
}

fn same(ptr: u64, n: u64, seed: u8) -> bool {
    probe(n).all(|i| unsafe { *((ptr + i) as *const u8) } == seed.wrapping_add((i % 251) as u8))
}

#[test]
fn idle_buffers_are_spilled_lru_and_restored_byte_identical() {
    let s = sched(None);
    s.partition("p", Some(8 * MIB), 1.0).unwrap();
    let idle = running(&s, "idle", Qos::BestEffort, "p", 0, 1);
    let (a, pa) = s.alloc_buffer(3 * MIB + 7, 1, NEVER).unwrap();
    let (b, pb) = s.alloc_buffer(3 * MIB, 1, NEVER).unwrap();
    fill(pa, 3 * MIB + 7, 1);
    fill(pb, 3 * MIB, 2);
    s.touch(a, NEVER).unwrap(); // b is now the least recently used
    s.set_state(idle, TaskState::Admitted, None).unwrap(); // idle: may be spilled
    let hot = running(&s, "hot", Qos::Burstable, "p", 0, 2);
    // A running task's buffers are never spilled; a predicate can pin buffers.
    let e = s.alloc(4 * MIB, 2, NEVER).unwrap_err();
    assert!(e.to_string().contains("partition 'p'"), "{e}");
    let blk = s.alloc(4 * MIB, 2, ALWAYS).unwrap();
    assert!(!s.is_resident(b).unwrap() && s.is_resident(a).unwrap());
    s.with_state(|st, ev| {
        assert_eq!(ev.evictions, 1);
        assert_eq!(st.tasks[&idle].evictions, 1);
        assert_eq!(st.tasks[&hot].used, 4 * MIB);
    });
    s.free(&blk).unwrap();
    s.set_state(hot, TaskState::Completed, None).unwrap();
    s.set_state(idle, TaskState::Running, None).unwrap();
    let pb2 = s.touch(b, NEVER).unwrap();
    assert!(same(pb2, 3 * MIB, 2));
    assert!(same(s.touch(a, NEVER).unwrap(), 3 * MIB + 7, 1));
    s.with_state(|_, ev| assert_eq!((ev.evictions, ev.restores), (1, 1)));
    s.free_buffer(a).unwrap();
    s.free_buffer(b).unwrap();
    assert!(matches!(
        s.touch(a, NEVER),
        Err(SchedError::UnknownBuffer(_))
    ));
    check(&s);
    s.with_state(|st, _| assert_eq!(st.partitions[1].used, 0));
}

#[test]
fn higher_tier_buffers_are_not_spilled_for_lower_tiers() {
    let s = sched(Some(8 * MIB));
    let g = running(&s, "g", Qos::Burstable, "default", 0, 1);
    let (buf, _) = s.alloc_buffer(6 * MIB, 1, NEVER).unwrap();
    s.set_state(g, TaskState::Admitted, None).unwrap();
    let _be = running(&s, "be", Qos::BestEffort, "default", 0, 2);
    assert!(s.alloc(4 * MIB, 2, ALWAYS).is_err());
    assert!(s.is_resident(buf).unwrap());
    let _b2 = running(&s, "b2", Qos::Burstable, "default", 0, 3);
    assert!(s.alloc(4 * MIB, 3, ALWAYS).is_ok());
    assert!(!s.is_resident(buf).unwrap());
}

#[test]
fn recently_used_buffers_are_not_spilled() {
    let s = sched(Some(8 * MIB));
    s.set_eviction_grace(Duration::from_secs(60));
    let a = running(&s, "a", Qos::BestEffort, "default", 0, 1);
    let (buf, _) = s.alloc_buffer(6 * MIB, 1, NEVER).unwrap();
    s.set_state(a, TaskState::Admitted, None).unwrap();
    let _b = running(&s, "b", Qos::BestEffort, "default", 0, 2);
    assert!(s.alloc(4 * MIB, 2, ALWAYS).is_err());
    assert!(s.is_resident(buf).unwrap());
    s.set_eviction_grace(Duration::ZERO);
    assert!(s.alloc(4 * MIB, 2, ALWAYS).is_ok());
    assert!(!s.is_resident(buf).unwrap());
}

#[test]
fn buffers_need_a_task() {
    let s = sched(None);
    let e = s.alloc_buffer(MIB, 0, NEVER).unwrap_err();
    assert!(e.to_string().contains("belong to a task"));
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { task: usize, kib: u64 },
    Free { pick: usize },
    Buffer { task: usize, kib: u64 },
    Touch { pick: usize },
    Idle { task: usize },
    Run { task: usize },
    FreeBuffer { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, 1..3000u64).prop_map(|(task, kib)| Op::Alloc { task, kib }),
        any::<usize>().prop_map(|pick| Op::Free { pick }),
        (0..4usize, 1..3000u64).prop_map(|(task, kib)| Op::Buffer { task, kib }),
        any::<usize>().prop_map(|pick| Op::Touch { pick }),
        (0..4usize).prop_map(|task| Op::Idle { task }),
        (0..4usize).prop_map(|task| Op::Run { task }),
        any::<usize>().prop_map(|pick| Op::FreeBuffer { pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// No byte is double-charged or lost under random alloc / free / evict /
    /// restore sequences across tasks of every tier and two partitions.
    #[test]
    fn accounting_stays_exact(ops in proptest::collection::vec(op(), 1..80)) {
        let s = sched(Some(24 * MIB));
        s.partition("p", Some(12 * MIB), 0.5).unwrap();
        let tasks = [
            running(&s, "g", Qos::Guaranteed, "default", 4 * MIB, 1),
            running(&s, "b", Qos::Burstable, "p", 2 * MIB, 2),
            running(&s, "e", Qos::BestEffort, "p", 0, 3),
            running(&s, "e2", Qos::BestEffort, "default", 0, 4),
        ];
        let mut blocks = Vec::new();
        let mut bufs: Vec<(BufferId, u8, u64)> = Vec::new();
        for (n, o) in ops.into_iter().enumerate() {
            match o {
                Op::Alloc { task, kib } => {
                    if let Ok(b) = s.alloc(kib * 1024, task as u64 + 1, ALWAYS) { blocks.push(b) }
                }
                Op::Free { pick } => {
                    if !blocks.is_empty() { let b = blocks.swap_remove(pick % blocks.len()); s.free(&b).unwrap(); }
                }
                Op::Buffer { task, kib } => {
                    if let Ok((id, p)) = s.alloc_buffer(kib * 1024, task as u64 + 1, ALWAYS) {
                        fill(p, kib * 1024, n as u8);
                        bufs.push((id, n as u8, kib * 1024));
                    }
                }
                Op::Touch { pick } => {
                    if !bufs.is_empty() {
                        let (id, seed, len) = bufs[pick % bufs.len()];
                        if let Ok(p) = s.touch(id, ALWAYS) { prop_assert!(same(p, len, seed)); }
                    }
                }
                Op::Idle { task } => { let _ = s.set_state(tasks[task], TaskState::Admitted, None); }
                Op::Run { task } => { let _ = s.set_state(tasks[task], TaskState::Running, None); }
                Op::FreeBuffer { pick } => {
                    if !bufs.is_empty() { let (id, _, _) = bufs.swap_remove(pick % bufs.len()); s.free_buffer(id).unwrap(); }
                }
            }
            s.with_state(|st, _| st.check_invariants()).map_err(TestCaseError::fail)?;
        }
        for b in blocks { s.free(&b).unwrap(); }
        for (id, _, _) in bufs { s.free_buffer(id).unwrap(); }
        // Only the reservations stay committed.
        s.with_state(|st, _| {
            assert_eq!(st.committed, 6 * MIB);
            assert!(st.partitions.iter().all(|p| p.used == 0));
        });
    }
}

#[test]
fn concurrent_allocations_keep_the_books() {
    let s = Arc::new(sched(Some(64 * MIB)));
    s.partition("p", Some(32 * MIB), 1.0).unwrap();
    for i in 0..4u64 {
        running(
            &s,
            &format!("t{i}"),
            Qos::Burstable,
            if i % 2 == 0 { "p" } else { "default" },
            MIB,
            10 + i,
        );
    }
    let threads: Vec<_> = (0..4u64)
        .map(|i| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut live = Vec::new();
                for k in 0..400u64 {
                    if let Ok(b) = s.alloc(((k * 7919 + i) % 4096 + 1) * 256, 10 + i, NEVER) {
                        live.push(b);
                    }
                    if k % 3 == 0 && !live.is_empty() {
                        let b = live.remove(0);
                        s.free(&b).unwrap();
                    }
                }
                for b in live {
                    s.free(&b).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    check(&s);
    s.with_state(|st, _| assert_eq!(st.committed, 4 * MIB));
}

#[test]
fn host_pacer_never_blocks() {
    let s = sched(None);
    let be = running(&s, "be", Qos::BestEffort, "default", 0, 7);
    let d = s.pool().driver();
    for _ in 0..100 {
        assert_eq!(s.pacer().before(d, 7), Gate::Free);
    }
    assert_eq!(s.pacer().before(d, 8), Gate::Free);
    assert_eq!(s.pacer().counters()[&be].launches, 100);
    let (task, c) = s.remove_stream(7).unwrap();
    assert_eq!((task, c.launches), (be, 100));
    assert_eq!(s.pacer().before(d, 7), Gate::Free);
}
