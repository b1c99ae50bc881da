//! Public descriptors: the [`Block`] handed out by `alloc`, and the
//! snapshot types that describe every segment and block of a pool.

use super::config::PoolKind;
use super::history::Frames;

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
    /// Addresses of an expandable segment with no memory mapped behind them.
    Unmapped,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSnapshot {
    pub ptr: u64,
    pub size: u64,
    /// Bytes asked for (0 unless live or pending).
    pub requested: u64,
    pub state: BlockState,
    /// Stack of the allocation when it was recorded (memory history).
    pub frames: Option<Frames>,
}

/// One segment and its blocks in address order; the blocks cover
/// `[ptr, ptr + size)` exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    pub id: u64,
    pub ptr: u64,
    /// Bytes of the segment: allocated (plain) or reserved addresses (expandable).
    pub size: u64,
    pub stream: u64,
    pub kind: PoolKind,
    /// An expandable segment (virtual memory), else one `mem_alloc`.
    pub expandable: bool,
    /// Bytes backed by physical memory (`size` for a plain segment).
    pub mapped: u64,
    /// Physical allocations behind it: 1 for a plain segment, the mapped
    /// pages of an expandable one.
    pub chunks: u64,
    pub blocks: Vec<BlockSnapshot>,
}
