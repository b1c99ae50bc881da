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

/// Environment variable that turns expandable segments off ("0").
pub const EXPANDABLE_ENV: &str = "PYGPUKIT_EXPANDABLE_SEGMENTS";
/// Addresses an expandable segment reserves when the device's memory size
/// is unknown.
pub const DEFAULT_VA_RESERVE: u64 = 64 << 30;

/// Whether the pool should use expandable segments, from the value of
/// `PYGPUKIT_EXPANDABLE_SEGMENTS` (unset: yes). `Err` names a value that is
/// neither a yes nor a no.
pub fn parse_expandable(value: Option<&str>) -> Result<bool, String> {
    let Some(v) = value else {
        return Ok(true);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "{EXPANDABLE_ENV}={v:?} is not understood; expected 1/true/yes/on or 0/false/no/off"
        )),
    }
}

/// [`parse_expandable`] of the environment.
pub fn expandable_from_env() -> Result<bool, String> {
    parse_expandable(std::env::var(EXPANDABLE_ENV).ok().as_deref())
}

/// Which free lists (and segments) a size belongs to. Small and large blocks
/// never share a segment, so small blocks cannot fragment large segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

pub(super) fn round_up(n: u64, to: u64) -> Option<u64> {
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
/// more than `SMALL_SIZE` (large pool, so plain large segments are never
/// carved into small pieces). In expandable segments any remainder of a
/// minimum block is split off: it merges with the pages mapped next to it,
/// so it is not lost to the large pool, and the block does not hold memory
/// it was not asked for.
#[inline]
pub fn should_split(kind: PoolKind, block_size: u64, rounded: u64, expandable: bool) -> bool {
    let remaining = block_size - rounded;
    match kind {
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large if expandable => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => remaining > SMALL_SIZE,
    }
}
