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

/// Per-run slots: a run's per-run allocations belong to one, so a run can be staged in one
/// while another is in flight in the other (the host's depth-two pipeline).
pub const RUN_SLOTS: usize = 2;

/// Where host buffers go in GM. Per-run allocations of slot 0 bump upward from the end of the
/// heaps; those of slot 1 bump downward from where the lowest persistent allocation stood
/// when the slot started (or the end of GM), so one slot can hold all the room when the
/// other is empty. Persistent ones (start → length) come down from the end of GM, in gaps
/// above slot 0's bump that neither slot occupies, and a slot never bumps into one: nothing
/// overlaps.
pub(super) struct GmAllocator {
    /// Where slot 0's allocations start (the end of the heaps).
    base: u64,
    /// Where slot 0's next allocation may start (before alignment).
    next: u64,
    /// Slot 1's live range `[low, top)`; empty when `low == top`.
    low: u64,
    top: u64,
    /// The end of the words GM really has (its size rounded down to whole words).
    end: u64,
    /// The live persistent allocations, start → length.
    persistent: BTreeMap<u64, u64>,
}

impl GmAllocator {
    /// Empty placement over the GM of a device of `config`.
    pub(super) fn new(config: &DeviceConfig) -> Self {
        let heaps = config.ring.heap_bytes * MAX_RINGS as u64;
        let end = GM_BASE + (heaps + config.gm_bytes) / 8 * 8;
        Self {
            base: GM_BASE + heaps,
            next: GM_BASE + heaps,
            low: end,
            top: end,
            end,
            persistent: BTreeMap::new(),
        }
    }

    /// A per-run allocation of `bytes` in slot 0 (see [`Device::alloc`](super::Device::alloc)).
    pub(super) fn alloc(&mut self, bytes: u64) -> Option<u64> {
        self.alloc_in(0, bytes)
    }

    /// A per-run allocation of `bytes` in `slot` (0 or 1), `ALLOC_ALIGN`-aligned.
    pub(super) fn alloc_in(&mut self, slot: usize, bytes: u64) -> Option<u64> {
        let lowest_persistent = self.persistent.keys().next().copied().unwrap_or(self.end);
        if slot == 0 {
            let slot1 = if self.low < self.top {
                self.low
            } else {
                self.end
            };
            let limit = lowest_persistent.min(slot1);
            let at = self.next.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN;
            let end = at.checked_add(bytes).filter(|&end| end <= limit)?;
            self.next = end;
            return Some(at);
        }
        if self.low == self.top {
            self.top = lowest_persistent;
            self.low = lowest_persistent;
        }
        // Below the slot's range: slot 0's bump, and any persistent allocation placed under
        // the slot since it started.
        let under = self
            .persistent
            .range(..self.low)
            .next_back()
            .map_or(0, |(&start, &len)| start + len);
        let floor = self.next.max(under);
        let at = self.low.checked_sub(bytes)? / ALLOC_ALIGN * ALLOC_ALIGN;
        if at < floor {
            return None;
        }
        self.low = at;
        Some(at)
    }

    /// Releases every per-run allocation of both slots.
    pub(super) fn free_all(&mut self) {
        for slot in 0..RUN_SLOTS {
            self.free_slot(slot);
        }
    }

    /// Releases every per-run allocation of `slot`.
    pub(super) fn free_slot(&mut self, slot: usize) {
        if slot == 0 {
            self.next = self.base;
        } else {
            self.low = self.end;
            self.top = self.end;
        }
    }

    /// A persistent allocation of `bytes` (see [`Device::malloc`](super::Device::malloc)).
    pub(super) fn malloc(&mut self, bytes: u64) -> Option<u64> {
        let size = bytes.max(1);
        let at = if self.low < self.top {
            // Slot 1's range is taken like a persistent allocation (rare: a copy of the map).
            let mut taken = self.persistent.clone();
            taken.insert(self.low, self.top - self.low);
            place_persistent(&taken, self.next, self.end, size)?
        } else {
            place_persistent(&self.persistent, self.next, self.end, size)?
        };
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

    fn allocator(gm_bytes: u64) -> GmAllocator {
        let mut config = DeviceConfig::new(super::super::Topology::A2a3);
        config.gm_bytes = gm_bytes;
        GmAllocator::new(&config)
    }

    #[test]
    fn the_two_run_slots_and_persistent_allocations_never_overlap() {
        let mut a = allocator(64 << 10);
        let (base, end) = (a.base, a.end);
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let take = |at: Option<u64>, len: u64, taken: &mut Vec<(u64, u64)>| {
            let at = at.expect("fits");
            assert_eq!(at % ALLOC_ALIGN, 0);
            assert!(at >= base && at + len <= end, "{at:#x}+{len}");
            for &(s, l) in taken.iter() {
                assert!(
                    at + len <= s || s + l <= at,
                    "{at:#x}+{len} overlaps {s:#x}+{l}"
                );
            }
            taken.push((at, len));
        };
        let p = a.malloc(8 << 10);
        take(p, 8 << 10, &mut taken);
        let s0 = a.alloc_in(0, 10 << 10);
        take(s0, 10 << 10, &mut taken);
        let s1 = a.alloc_in(1, 6 << 10);
        take(s1, 6 << 10, &mut taken);
        // Slot 1 starts under the persistent allocation and grows down.
        assert!(s1.unwrap() + (6 << 10) <= p.unwrap());
        let s1b = a.alloc_in(1, 4 << 10);
        take(s1b, 4 << 10, &mut taken);
        assert!(s1b.unwrap() < s1.unwrap());
        // A persistent allocation made while slot 1 is live goes in the gap under it (top-down
        // first fit), after which slot 1 cannot grow past it.
        let q = a.malloc(4 << 10);
        take(q, 4 << 10, &mut taken);
        assert_eq!(q.unwrap() + (4 << 10), s1b.unwrap());
        assert_eq!(a.alloc_in(1, 1 << 10), None);
        // The slots meet: neither passes the other.
        while let Some(at) = a.alloc_in(0, 2 << 10) {
            take(Some(at), 2 << 10, &mut taken);
        }
        assert_eq!(a.alloc_in(1, 2 << 10), None);
        // Freeing slot 0 leaves slot 1 and the persistent ones where they are.
        a.free_slot(0);
        let again = a.alloc_in(0, 1 << 10).unwrap();
        assert_eq!(again, base.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN);
        // A freed slot 1 starts again under the lowest persistent allocation.
        a.free_slot(1);
        let s1c = a.alloc_in(1, 1 << 10).unwrap();
        let lowest = *a.persistent.keys().next().unwrap();
        assert!(s1c + (1 << 10) <= lowest && s1c + ALLOC_ALIGN + (1 << 10) > lowest);
    }
}
