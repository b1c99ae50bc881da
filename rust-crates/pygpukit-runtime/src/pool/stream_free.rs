//! The free path: checking a block is live, noting the other streams that
//! use it, and parking its free behind events on those streams until they
//! complete.

use super::block::Block;
use super::error::PoolError;
use super::history::{Frames, TraceAction};
use super::state::{NodeState, PendingFree, PoolState};
use crate::driver::{Driver, DriverError, Handle};

impl PoolState {
    // ----- free -------------------------------------------------------------

    fn live_slot(&self, block: &Block) -> Result<u32, PoolError> {
        match self.nodes.get(block.slot as usize) {
            Some(n)
                if n.state == NodeState::Live
                    && n.generation == block.generation
                    && n.ptr == block.ptr =>
            {
                Ok(block.slot)
            }
            _ => Err(PoolError::InvalidBlock { ptr: block.ptr }),
        }
    }

    pub(super) fn record_stream(&mut self, block: &Block, stream: Handle) -> Result<(), PoolError> {
        let slot = self.live_slot(block)?;
        let n = self.node_mut(slot);
        if stream != n.stream && !n.uses.contains(&stream) {
            n.uses.push(stream);
        }
        Ok(())
    }

    pub(super) fn free(
        &mut self,
        drv: &Driver,
        block: &Block,
        frames: Option<Frames>,
    ) -> Result<(), PoolError> {
        let slot = self.live_slot(block)?;
        let (size, requested, has_uses) = {
            let n = self.node(slot);
            (n.size, n.requested, !n.uses.is_empty())
        };
        let c = &mut self.counters;
        c.allocated -= size;
        c.requested -= requested;
        c.free_calls += 1;
        if self.history.enabled {
            let frames = frames.or_else(|| self.node(slot).frames.clone());
            self.history.push(
                TraceAction::FreeRequested,
                block.ptr,
                size,
                block.stream,
                frames,
            );
        }
        if has_uses {
            self.free_after_events(drv, slot)
        } else {
            self.complete_free(slot);
            Ok(())
        }
    }

    /// The block is reusable now: record it and return it to the free sets.
    fn complete_free(&mut self, slot: u32) {
        if self.history.enabled {
            let n = self.node(slot);
            let frames = n.frames.clone();
            let (ptr, size, stream) = (n.ptr, n.size, n.stream);
            self.history
                .push(TraceAction::FreeCompleted, ptr, size, stream, frames);
        }
        self.free_node(slot);
    }

    /// The block was used on other streams: record an event on each and park
    /// the block until they complete.
    fn free_after_events(&mut self, drv: &Driver, slot: u32) -> Result<(), PoolError> {
        let uses = std::mem::take(&mut self.node_mut(slot).uses);
        let mut events = Vec::with_capacity(uses.len());
        for &stream in &uses {
            match self.record_event(drv, stream) {
                Ok(event) => events.push(event),
                Err(e) => {
                    // Cannot fence the block: wait for the whole device, then
                    // free it; report the failure.
                    self.idle_events.extend(events);
                    let _ = drv.device_synchronize();
                    self.complete_free(slot);
                    return Err(e.into());
                }
            }
        }
        let n = self.node_mut(slot);
        n.state = NodeState::Pending;
        let size = n.size;
        self.counters.pending += size;
        self.pending.push(PendingFree { slot, events });
        Ok(())
    }

    fn record_event(&mut self, drv: &Driver, stream: Handle) -> Result<Handle, DriverError> {
        let event = match self.idle_events.pop() {
            Some(e) => e,
            None => drv.event_create()?,
        };
        if let Err(e) = drv.event_record(event, stream) {
            self.idle_events.push(event);
            return Err(e);
        }
        Ok(event)
    }

    /// Free pending blocks whose events all completed; returns how many.
    pub(super) fn process_pending(&mut self, drv: &Driver) -> Result<usize, DriverError> {
        let mut done = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let mut ready = true;
            for &event in &self.pending[i].events {
                if !drv.event_query(event)? {
                    ready = false;
                    break;
                }
            }
            if !ready {
                i += 1;
                continue;
            }
            let p = self.pending.swap_remove(i);
            self.idle_events.extend(p.events);
            self.counters.pending -= self.node(p.slot).size;
            self.complete_free(p.slot);
            done += 1;
        }
        Ok(done)
    }
}
