//! Size classes and segment policy (the same scheme as PyTorch's
//! CUDACachingAllocator).

/// All block sizes are multiples of this.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Requests up to this size are "small" and come from small segments.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Size of a small segment.
pub const SMALL_SEGMENT: u64 = 2 << 20;
/// Requests below this size (and above `SMALL_SIZE`) share 20 MiB segments.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Size of a shared large segment.
pub const LARGE_SEGMENT: u64 = 20 << 20;
/// Larger requests get their own segment, rounded up to this.
pub const ROUND_LARGE: u64 = 2 << 20;

/// Which free lists (and segments) a size belongs to. Small and large blocks
/// never share a segment, so small blocks cannot fragment large segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    #[inline]
    pub fn for_size(rounded: u64) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }
}

fn round_up(n: u64, to: u64) -> Option<u64> {
    n.checked_add(to - 1).map(|v| v / to * to)
}

/// Block size for a request of `nbytes`: a multiple of 512 bytes. A 0-byte
/// request still gets a 512-byte block, so every block has a distinct,
/// valid address. `None` when the size overflows.
#[inline]
pub fn round_size(nbytes: u64) -> Option<u64> {
    if nbytes == 0 {
        return Some(MIN_BLOCK_SIZE);
    }
    round_up(nbytes, MIN_BLOCK_SIZE)
}

/// Size of the segment to allocate from the driver for a block of `rounded`
/// bytes when no cached block fits.
#[inline]
pub fn segment_size(rounded: u64) -> Option<u64> {
    if rounded <= SMALL_SIZE {
        Some(SMALL_SEGMENT)
    } else if rounded < MIN_LARGE_ALLOC {
        Some(LARGE_SEGMENT)
    } else {
        round_up(rounded, ROUND_LARGE)
    }
}

/// Whether a free block of `block_size` should be split to serve `rounded`
/// bytes: the remainder must be at least one minimum block (small pool) or
/// more than `SMALL_SIZE` (large pool, so large segments are never carved
/// into small pieces).
#[inline]
pub fn should_split(kind: PoolKind, block_size: u64, rounded: u64) -> bool {
    let remaining = block_size - rounded;
    match kind {
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => remaining > SMALL_SIZE,
    }
}
