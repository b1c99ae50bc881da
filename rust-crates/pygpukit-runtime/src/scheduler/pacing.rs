//! The dispatch controller: a gate every kernel launch passes.
//!
//! Streams of tasks are registered as lanes. A Guaranteed or Burstable lane
//! only counts launches. A BestEffort lane is paced: its launches in flight
//! are tracked with events and limited to a window, `idle_window` while no
//! Guaranteed stream has work queued, `contended_window` while one has
//! (0: hold the launch until the Guaranteed streams drain, at most
//! `max_hold`); and a partition's compute share below 1 stretches the gap
//! after each completed launch so that the lane is busy at most that share
//! of the time.
//!
//! The gate has three steps so that the caller (C++ around cuLaunchKernel)
//! can release the GIL only when it must wait: [`Pacer::before`] is cheap and
//! says whether to call [`Pacer::wait`]; [`Pacer::after`] records the event.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use super::state::TaskId;
use crate::driver::{Driver, DriverError, Handle};

/// What the launch path must do, as returned by [`Pacer::before`].
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Not a paced lane: launch, nothing else.
    Free = 0,
    /// Paced lane with room: launch, then call `after`.
    Go = 1,
    /// Paced lane without room: call `wait` (GIL released), launch, `after`.
    Wait = 2,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacingConfig {
    pub idle_window: u32,
    pub contended_window: u32,
    pub max_hold: Duration,
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig {
            idle_window: 8,
            contended_window: 1,
            max_hold: Duration::from_millis(5),
        }
    }
}

/// Launch counters of one task (summed over its lanes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneCounters {
    pub launches: u64,
    /// Paced launches seen complete (events observed).
    pub completions: u64,
    /// Launches that had to wait at the gate.
    pub waits: u64,
    pub wait_ns: u64,
}

impl LaneCounters {
    pub fn add(&mut self, o: &LaneCounters) {
        self.launches += o.launches;
        self.completions += o.completions;
        self.waits += o.waits;
        self.wait_ns += o.wait_ns;
    }
}

struct Lane {
    task: TaskId,
    paced: bool,
    share: f64,
    inflight: VecDeque<(Handle, Instant)>,
    spare_events: Vec<Handle>,
    last_done: Option<Instant>,
    next_allowed: Option<Instant>,
    counters: LaneCounters,
}

pub struct Pacer {
    driver_ok: bool,
    lanes: RwLock<HashMap<Handle, Arc<Mutex<Lane>>>>,
    guaranteed: RwLock<Vec<Handle>>,
    config: RwLock<PacingConfig>,
    /// Any lane registered: the launch path's only check when there is none.
    active: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pacer {
    pub fn new(is_host: bool) -> Pacer {
        Pacer {
            // On the host table every event is complete at once: nothing to pace.
            driver_ok: !is_host,
            lanes: RwLock::new(HashMap::new()),
            guaranteed: RwLock::new(Vec::new()),
            config: RwLock::new(PacingConfig::default()),
            active: AtomicBool::new(false),
        }
    }

    pub fn config(&self) -> PacingConfig {
        *self.config.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_config(&self, c: PacingConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = c;
    }

    pub fn add_lane(
        &self,
        stream: Handle,
        task: TaskId,
        paced: bool,
        guaranteed: bool,
        share: f64,
    ) {
        let lane = Lane {
            task,
            paced,
            share,
            inflight: VecDeque::new(),
            spare_events: Vec::new(),
            last_done: None,
            next_allowed: None,
            counters: LaneCounters::default(),
        };
        self.lanes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(stream, Arc::new(Mutex::new(lane)));
        if guaranteed {
            self.guaranteed
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .push(stream);
        }
        self.active.store(true, Ordering::Release);
    }

    /// Remove a lane; waits for its launches in flight and frees its events.
    pub fn remove_lane(&self, driver: &Driver, stream: Handle) -> Option<(TaskId, LaneCounters)> {
        let lane = {
            let mut lanes = self.lanes.write().unwrap_or_else(PoisonError::into_inner);
            let lane = lanes.remove(&stream);
            self.active.store(!lanes.is_empty(), Ordering::Release);
            lane
        }?;
        self.guaranteed
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| *s != stream);
        let mut guard = lock(&lane);
        let l = &mut *guard;
        let events: Vec<Handle> = l
            .inflight
            .drain(..)
            .map(|(e, _)| e)
            .chain(l.spare_events.drain(..))
            .collect();
        for e in events {
            let _ = driver.event_synchronize(e);
            let _ = driver.event_destroy(e);
        }
        Some((l.task, l.counters))
    }

    /// Counters per task of the lanes alive now.
    pub fn counters(&self) -> HashMap<TaskId, LaneCounters> {
        let mut out: HashMap<TaskId, LaneCounters> = HashMap::new();
        for lane in self
            .lanes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            let l = lock(lane);
            out.entry(l.task).or_default().add(&l.counters);
        }
        out
    }

    fn lane(&self, stream: Handle) -> Option<Arc<Mutex<Lane>>> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        self.lanes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&stream)
            .cloned()
    }

    fn guaranteed_busy(&self, driver: &Driver) -> bool {
        let g = self
            .guaranteed
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        g.iter()
            .any(|s| matches!(driver.stream_query(*s), Ok(false)))
    }

    fn window(&self, driver: &Driver, cfg: &PacingConfig) -> u32 {
        if self.guaranteed_busy(driver) {
            cfg.contended_window
        } else {
            cfg.idle_window
        }
    }

    /// Drop completed events from the front of the lane's window.
    fn retire(driver: &Driver, l: &mut Lane) -> Result<(), DriverError> {
        while let Some(&(ev, launched)) = l.inflight.front() {
            if !driver.event_query(ev)? {
                break;
            }
            Self::complete_front(l, ev, launched);
        }
        Ok(())
    }

    fn complete_front(l: &mut Lane, ev: Handle, launched: Instant) {
        l.inflight.pop_front();
        l.spare_events.push(ev);
        l.counters.completions += 1;
        let now = Instant::now();
        if l.share < 1.0 {
            // Busy from the later of its launch and the previous completion.
            let start = l.last_done.map_or(launched, |d| d.max(launched));
            let busy = now.saturating_duration_since(start);
            let gap = busy.mul_f64((1.0 - l.share) / l.share);
            l.next_allowed = Some(now + gap);
        }
        l.last_done = Some(now);
    }

    /// Cheap check before a launch on `stream`.
    pub fn before(&self, driver: &Driver, stream: Handle) -> Gate {
        let Some(lane) = self.lane(stream) else {
            return Gate::Free;
        };
        let mut l = lock(&lane);
        if !l.paced || !self.driver_ok {
            l.counters.launches += 1;
            return Gate::Free;
        }
        if Self::retire(driver, &mut l).is_err() {
            return Gate::Go; // the launch itself will report the device error
        }
        let cfg = self.config();
        let window = self.window(driver, &cfg);
        let throttled = l.next_allowed.is_some_and(|t| Instant::now() < t);
        if (l.inflight.len() as u32) < window.max(1) && window > 0 && !throttled {
            Gate::Go
        } else {
            Gate::Wait
        }
    }

    /// Block until the paced lane may launch (call without the GIL).
    pub fn wait(&self, driver: &Driver, stream: Handle) {
        let Some(lane) = self.lane(stream) else {
            return;
        };
        let start = Instant::now();
        let cfg = self.config();
        loop {
            let mut l = lock(&lane);
            if Self::retire(driver, &mut l).is_err() {
                break;
            }
            let window = self.window(driver, &cfg);
            let held_too_long = start.elapsed() >= cfg.max_hold;
            if window == 0 && !held_too_long {
                drop(l);
                std::thread::sleep(Duration::from_micros(20));
                continue;
            }
            if l.inflight.len() as u32 >= window.max(1) {
                let (ev, launched) = l.inflight[0];
                drop(l);
                // Without the lane lock: other threads may count on this lane meanwhile.
                if driver.event_synchronize(ev).is_err() {
                    break;
                }
                let mut l = lock(&lane);
                if l.inflight.front().map(|f| f.0) == Some(ev) {
                    Self::complete_front(&mut l, ev, launched);
                }
                continue;
            }
            match l.next_allowed {
                Some(t) if Instant::now() < t => {
                    drop(l);
                    std::thread::sleep(t - Instant::now());
                }
                _ => break,
            }
        }
        let mut l = lock(&lane);
        l.counters.waits += 1;
        l.counters.wait_ns += start.elapsed().as_nanos() as u64;
    }

    /// After a paced launch: record its completion event.
    pub fn after(&self, driver: &Driver, stream: Handle) {
        let Some(lane) = self.lane(stream) else {
            return;
        };
        let mut l = lock(&lane);
        l.counters.launches += 1;
        let ev = match l.spare_events.pop() {
            Some(e) => e,
            None => match driver.event_create() {
                Ok(e) => e,
                Err(_) => return,
            },
        };
        if driver.event_record(ev, stream).is_ok() {
            l.inflight.push_back((ev, Instant::now()));
        } else {
            l.spare_events.push(ev);
        }
    }
}
