//! Pool statistics and byte formatting.

/// A consistent snapshot of the pool's counters.
///
/// Byte counts: `allocated_bytes` is the sum of the sizes of live blocks
/// (requests rounded up to 512 B, plus any large-pool tail too small to split
/// off); `requested_bytes` is the sum of the sizes asked for;
/// `reserved_bytes` is the device memory held from the driver: plain segments
/// plus the pages mapped into expandable segments. Every reserved byte is in
/// exactly one of: a live block, a cached (free) block or a block pending
/// free, so `reserved_bytes == allocated_bytes + cached_bytes + pending_bytes`
/// and `fragmentation_bytes == reserved_bytes - allocated_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    pub reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub num_segments: u64,
    /// Successful `alloc` calls.
    pub num_alloc_calls: u64,
    /// Successful `free` calls.
    pub num_free_calls: u64,
    pub num_driver_allocs: u64,
    pub num_driver_frees: u64,
    pub num_cached_blocks: u64,
    pub cached_bytes: u64,
    pub largest_free_block: u64,
    /// `alloc` calls that failed with out of memory.
    pub num_ooms: u64,
    /// Freed blocks waiting for events on other streams.
    pub num_pending_frees: u64,
    pub pending_bytes: u64,
    /// Reserved but not allocated: memory held by the pool that no live
    /// block uses (cached and pending).
    pub fragmentation_bytes: u64,
    pub num_expandable_segments: u64,
    /// Physical memory mapped into expandable segments (part of `reserved_bytes`).
    pub expandable_mapped_bytes: u64,
    /// Address space reserved by expandable segments (mapped or not).
    pub expandable_virtual_bytes: u64,
}

impl PoolStats {
    /// Every counter by name, in a stable order (for dicts and logs).
    pub fn fields(&self) -> [(&'static str, u64); 20] {
        [
            ("allocated_bytes", self.allocated_bytes),
            ("requested_bytes", self.requested_bytes),
            ("reserved_bytes", self.reserved_bytes),
            ("peak_allocated_bytes", self.peak_allocated_bytes),
            ("peak_reserved_bytes", self.peak_reserved_bytes),
            ("num_segments", self.num_segments),
            ("num_alloc_calls", self.num_alloc_calls),
            ("num_free_calls", self.num_free_calls),
            ("num_driver_allocs", self.num_driver_allocs),
            ("num_driver_frees", self.num_driver_frees),
            ("num_cached_blocks", self.num_cached_blocks),
            ("cached_bytes", self.cached_bytes),
            ("largest_free_block", self.largest_free_block),
            ("num_ooms", self.num_ooms),
            ("num_pending_frees", self.num_pending_frees),
            ("pending_bytes", self.pending_bytes),
            ("fragmentation_bytes", self.fragmentation_bytes),
            ("num_expandable_segments", self.num_expandable_segments),
            ("expandable_mapped_bytes", self.expandable_mapped_bytes),
            ("expandable_virtual_bytes", self.expandable_virtual_bytes),
        ]
    }
}

/// Bytes for people, the same format as `pygpukit._units.format_bytes`:
/// "512 B", "1.50 KiB", "64.00 MiB", "1.02 GiB".
pub fn format_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    for unit in ["KiB", "MiB", "GiB"] {
        v /= 1024.0;
        if v < 1024.0 {
            return format!("{v:.2} {unit}");
        }
    }
    format!("{:.2} TiB", v / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::format_bytes;

    #[test]
    fn formats_like_python() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(64 << 20), "64.00 MiB");
        assert_eq!(format_bytes(1 << 30), "1.00 GiB");
        assert_eq!(format_bytes(3 << 40), "3.00 TiB");
    }
}
