//! Public descriptors: the [`Block`] handed out by `alloc`, and the
//! snapshot types that describe every segment and block of a pool.

use super::config::PoolKind;

/// A live allocation. Plain data (`Copy`): the pool identifies it by an
/// internal slot and generation, so freeing a stale copy twice is detected
/// and reported as [`super::PoolError::InvalidBlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    /// Device (or host) address; 256-byte aligned at least.
    pub ptr: u64,
    /// Bytes owned by the block: the request rounded up to 512 B (larger when
    /// the tail of a large block was too small to split off).
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Stream the block was allocated on (its segment's stream).
    pub stream: u64,
    /// Id of the segment the block lies in.
    pub segment: u64,
    pub(super) slot: u32,
    pub(super) generation: u32,
}

/// State of a block in a [`SegmentSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out and not freed yet.
    Live,
    /// Free and cached for reuse on its stream.
    Cached,
    /// Freed, waiting for events on other streams before reuse.
    Pending,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSnapshot {
    pub ptr: u64,
    pub size: u64,
    /// Bytes asked for (0 unless live or pending).
    pub requested: u64,
    pub state: BlockState,
}

/// One segment and its blocks in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    pub id: u64,
    pub ptr: u64,
    pub size: u64,
    pub stream: u64,
    pub kind: PoolKind,
    pub blocks: Vec<BlockSnapshot>,
}
