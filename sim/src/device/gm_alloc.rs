//! Where host buffers go in GM: the per-run bump allocation and the persistent
//! (`DEVICE_MALLOC`) allocations (`GmAllocator`).
//!
//! Its own file because placement is pure bookkeeping on the host's side of the device: the
//! device thread only reads and writes GM, so [`Device`](super::Device) places buffers
//! without a message (and without a heap allocation) per call, and the placement rule is unit
//! tested here without a device.

use super::config::{DeviceConfig, GM_BASE};
use simpler_core::ring::MAX_RINGS;
use std::collections::BTreeMap;

/// Alignment of every host allocation, per-run and persistent, in bytes.
pub(super) const ALLOC_ALIGN: u64 = 1024;

/// Where host buffers go in GM. Per-run allocations bump upward from the end of the heaps;
/// persistent ones (start → length) come down from the end of GM. The bump's limit is the
/// lowest live persistent start, and a persistent allocation never goes below the bump, so
/// the two never overlap.
pub(super) struct GmAllocator {
    /// Where per-run allocations start (the end of the heaps).
    base: u64,
    /// Where the next per-run allocation may start (before alignment).
    next: u64,
    /// The end of the words GM really has (its size rounded down to whole words).
    end: u64,
    /// The live persistent allocations, start → length.
    persistent: BTreeMap<u64, u64>,
}

impl GmAllocator {
    /// Empty placement over the GM of a device of `config`.
    pub(super) fn new(config: &DeviceConfig) -> Self {
        let heaps = config.ring.heap_bytes * MAX_RINGS as u64;
        Self {
            base: GM_BASE + heaps,
            next: GM_BASE + heaps,
            end: GM_BASE + (heaps + config.gm_bytes) / 8 * 8,
            persistent: BTreeMap::new(),
        }
    }

    /// A per-run allocation of `bytes` (see [`Device::alloc`](super::Device::alloc)).
    pub(super) fn alloc(&mut self, bytes: u64) -> Option<u64> {
        let limit = self.persistent.keys().next().copied().unwrap_or(self.end);
        let at = self.next.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN;
        let end = at.checked_add(bytes).filter(|&end| end <= limit)?;
        self.next = end;
        Some(at)
    }

    /// Releases every per-run allocation.
    pub(super) fn free_all(&mut self) {
        self.next = self.base;
    }

    /// A persistent allocation of `bytes` (see [`Device::malloc`](super::Device::malloc)).
    pub(super) fn malloc(&mut self, bytes: u64) -> Option<u64> {
        let size = bytes.max(1);
        let at = place_persistent(&self.persistent, self.next, self.end, size)?;
        self.persistent.insert(at, size);
        Some(at)
    }

    /// Releases the persistent allocation that starts at `addr`; `false` when none does.
    pub(super) fn free(&mut self, addr: u64) -> bool {
        self.persistent.remove(&addr).is_some()
    }
}

/// Where a persistent allocation of `size` bytes goes: the highest `ALLOC_ALIGN`-aligned start
/// in the highest gap of `[floor, ceiling)` between the `live` allocations (start → length)
/// that holds it; `None` when no gap does.
fn place_persistent(live: &BTreeMap<u64, u64>, floor: u64, ceiling: u64, size: u64) -> Option<u64> {
    let fit = |lo: u64, hi: u64| {
        let start = hi.checked_sub(size)? / ALLOC_ALIGN * ALLOC_ALIGN;
        (start >= lo).then_some(start)
    };
    let mut hi = ceiling;
    for (&start, &len) in live.iter().rev() {
        if let Some(at) = fit(start.saturating_add(len).max(floor), hi) {
            return Some(at);
        }
        hi = hi.min(start);
    }
    fit(floor, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persistent_placement_is_top_down_first_fit_and_aligned() {
        let (floor, ceiling) = (0x1000_0000u64, 0x1001_0000u64);
        let mut live = BTreeMap::new();
        let a = place_persistent(&live, floor, ceiling, 100).unwrap();
        assert_eq!(a, ceiling - ALLOC_ALIGN);
        live.insert(a, 100);
        let b = place_persistent(&live, floor, ceiling, 3000).unwrap();
        assert_eq!(b % ALLOC_ALIGN, 0);
        assert!(b + 3000 <= a);
        live.insert(b, 3000);
        // Freeing the top one opens a gap that a small request fills first.
        live.remove(&a);
        assert_eq!(
            place_persistent(&live, floor, ceiling, 1),
            Some(ceiling - ALLOC_ALIGN)
        );
        // A request larger than the top gap goes below the live one.
        let c = place_persistent(&live, floor, ceiling, 4096).unwrap();
        assert!(c + 4096 <= b);
        // Nothing fits below the floor.
        assert_eq!(
            place_persistent(&live, floor, ceiling, ceiling - floor + 1),
            None
        );
        assert_eq!(place_persistent(&live, floor, ceiling, u64::MAX), None);
    }
}
