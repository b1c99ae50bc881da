//! The ring of pinned staging buffers, each with the event of its last copy.
//!
//! A buffer is *held* by one thread from [`Ring::acquire`] until its
//! [`Lease`] is dropped; while held, only that thread touches it. A free
//! buffer may still be in use by a queued DMA: its event says when it is not,
//! and the next holder waits for that event before writing or queueing.
//! Free buffers are handed out oldest submission first, so in a single
//! thread the buffers are used round robin and the one taken is the most
//! likely to be idle.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::{Priority, TransferError};
use crate::driver::{Driver, Handle};

struct Slot {
    ptr: Handle,
    event: Handle,
    held: bool,
    /// Order of the last release; lowest is the oldest submission.
    seq: u64,
}

pub(super) struct State {
    slots: Vec<Slot>,
    next_seq: u64,
    /// High-priority threads waiting for a buffer: the others yield to them.
    pub(super) high_waiting: usize,
}

pub(super) struct Ring {
    len: usize,
    state: Mutex<State>,
    released: Condvar,
}

/// A held staging buffer; returned to the ring when dropped.
pub(super) struct Lease<'a> {
    ring: &'a Ring,
    index: usize,
    pub ptr: Handle,
    pub event: Handle,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut st = self.ring.lock();
        let seq = st.next_seq;
        st.next_seq += 1;
        let slot = &mut st.slots[self.index];
        slot.held = false;
        slot.seq = seq;
        drop(st);
        self.ring.released.notify_all();
    }
}

impl Ring {
    pub fn new(len: usize) -> Ring {
        Ring {
            len,
            state: Mutex::new(State {
                slots: Vec::new(),
                next_seq: 1, // above the 0 of never-used buffers
                high_waiting: 0,
            }),
            released: Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // State changes cannot panic midway; a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pinned bytes allocated so far (0 before the first transfer).
    pub fn staging_bytes(&self, chunk_bytes: u64) -> u64 {
        self.lock().slots.len() as u64 * chunk_bytes
    }

    /// Take a free buffer for a transfer of `priority`. With `block`, wait
    /// until one is free; without, return None when none can be taken now.
    /// The buffers (of `chunk_bytes` each) are allocated on first use.
    pub fn acquire<'a>(
        &'a self,
        driver: &Driver,
        priority: Priority,
        block: bool,
        chunk_bytes: u64,
    ) -> Result<Option<Lease<'a>>, TransferError> {
        let mut st = self.lock();
        if st.slots.is_empty() {
            st.slots = allocate(driver, self.len, chunk_bytes)?;
        }
        loop {
            let free = st.slots.iter().filter(|s| !s.held).count();
            let allowed = match priority {
                Priority::High => free > 0,
                Priority::Normal => free > 0 && st.high_waiting == 0,
                // Leave the last free buffer to others (unless there is only one).
                Priority::Low => (free > 1 || (free == 1 && self.len == 1)) && st.high_waiting == 0,
            };
            if allowed {
                let (index, slot) = st
                    .slots
                    .iter_mut()
                    .enumerate()
                    .filter(|(_, s)| !s.held)
                    .min_by_key(|(_, s)| s.seq)
                    .expect("a free buffer exists");
                slot.held = true;
                return Ok(Some(Lease {
                    ring: self,
                    index,
                    ptr: slot.ptr,
                    event: slot.event,
                }));
            }
            if !block {
                return Ok(None);
            }
            let high = priority == Priority::High;
            if high {
                st.high_waiting += 1;
            }
            st = self
                .released
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
            if high {
                st.high_waiting -= 1;
            }
        }
    }

    /// Wait for every buffer's last copy, then free buffers and events.
    pub fn teardown(&mut self, driver: &Driver) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for slot in st.slots.drain(..) {
            // Errors here mean the context is gone; nothing is left to protect.
            let _ = driver.event_synchronize(slot.event);
            let _ = driver.event_destroy(slot.event);
            let _ = unsafe { driver.host_free(slot.ptr) };
        }
    }
}

/// `len` pinned buffers with their events; all or nothing.
fn allocate(driver: &Driver, len: usize, chunk_bytes: u64) -> Result<Vec<Slot>, TransferError> {
    let mut slots: Vec<Slot> = Vec::with_capacity(len);
    let undo = |slots: &mut Vec<Slot>| {
        for s in slots.drain(..) {
            let _ = driver.event_destroy(s.event);
            let _ = unsafe { driver.host_free(s.ptr) };
        }
    };
    for _ in 0..len {
        let ptr = match driver.host_alloc(chunk_bytes) {
            Ok(p) => p,
            Err(e) => {
                undo(&mut slots);
                return Err(e.into());
            }
        };
        let event = match driver.event_create() {
            Ok(ev) => ev,
            Err(e) => {
                let _ = unsafe { driver.host_free(ptr) };
                undo(&mut slots);
                return Err(e.into());
            }
        };
        slots.push(Slot {
            ptr,
            event,
            held: false,
            seq: 0,
        });
    }
    Ok(slots)
}
