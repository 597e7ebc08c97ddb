//! How GM, the simulator's largest arena, is backed.
//!
//! GM is allocated zeroed and left untouched, so the kernel commits its pages as a run first
//! writes them and resident memory follows what a run touches. At the base page size (4 KiB)
//! a busy run spreads its tile moves over thousands of pages (every task's outputs are fresh
//! heap, its inputs anywhere in the entry tensors), and the address translations miss the TLB
//! as often as the data misses the cache. [`Pages::Huge`] asks the kernel for transparent huge
//! pages on the arena (`madvise(MADV_HUGEPAGE)`): each 2 MiB-aligned stretch is backed by one
//! page when first touched, where the kernel has one to give. Memory is still committed only
//! as touched, 2 MiB at a time instead of 4 KiB.
//!
//! The runtime's own regions (the scheduler state, the orchestrator's, the payload records)
//! stay on base pages: a small run touches the start of each ring's stretch of the payload
//! records, so huge pages there commit several MiB it never uses, for little speed
//! (`tests/benches/README.md`).
//!
//! The advice is a hint: a kernel without transparent huge pages, or with them turned off
//! (`/sys/kernel/mm/transparent_hugepage/enabled` set to `never`), refuses or ignores it and
//! the arena keeps its base pages, with the same contents and behaviour. Elsewhere than Linux
//! it does nothing.

/// The huge page size the advice aims at (x86-64's and aarch64's usual 2 MiB): only
/// stretches aligned to it and wholly inside an arena are advised.
pub const HUGE_PAGE: usize = 2 << 20;

/// How an arena's memory is backed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pages {
    /// The base page size: the finest grain of commitment, the most TLB misses.
    Base,
    /// Transparent huge pages where the kernel grants them (the default).
    #[default]
    Huge,
}

impl Pages {
    /// Applies this backing to `memory` (an arena just allocated); returns whether the
    /// kernel accepted huge-page advice for some of it. [`Pages::Base`] leaves the memory as
    /// the allocator gave it. An arena with no whole aligned huge page in it is not advised.
    pub fn apply<T>(self, memory: &[T]) -> bool {
        match self {
            Self::Base => false,
            Self::Huge => advise_huge(memory),
        }
    }
}

/// The whole [`HUGE_PAGE`]s inside `memory`, as a start address and a length (0 when none).
pub fn huge_span<T>(memory: &[T]) -> (usize, usize) {
    let start = memory.as_ptr() as usize;
    let end = start + core::mem::size_of_val(memory);
    let first = start.next_multiple_of(HUGE_PAGE);
    let last = end / HUGE_PAGE * HUGE_PAGE;
    if last > first {
        (first, last - first)
    } else {
        (first, 0)
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // the madvise call: see its SAFETY comment
fn advise_huge<T>(memory: &[T]) -> bool {
    let (start, len) = huge_span(memory);
    if len == 0 {
        return false;
    }
    // SAFETY: `start..start + len` lies inside `memory`, an allocation this process owns for
    // as long as the call runs (the borrow keeps it alive). `MADV_HUGEPAGE` changes only which
    // page size the kernel backs the range with, now or when it is first touched: the range's
    // contents, its mapping and its protection are unchanged, so no reference into it, and
    // no atomic another thread is using in it, can observe the call. Failure (EINVAL where
    // transparent huge pages are compiled out) changes nothing and is reported as `false`.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    rc == 0
}

#[cfg(not(target_os = "linux"))]
fn advise_huge<T>(memory: &[T]) -> bool {
    let _ = memory;
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_is_the_whole_aligned_huge_pages_inside() {
        let bytes = vec![0u8; 3 * HUGE_PAGE];
        let (start, len) = huge_span(&bytes);
        let base = bytes.as_ptr() as usize;
        assert!(start.is_multiple_of(HUGE_PAGE));
        assert!(start >= base && start + len <= base + bytes.len());
        // Three huge pages' worth holds two whole aligned ones, or three when it starts on
        // a boundary.
        let expect = if base.is_multiple_of(HUGE_PAGE) { 3 } else { 2 };
        assert_eq!(len, expect * HUGE_PAGE);
        assert_eq!(huge_span(&bytes[..HUGE_PAGE / 2]).1, 0);
    }

    #[test]
    fn advice_keeps_the_contents() {
        let mut words = vec![0u64; 3 * HUGE_PAGE / 8];
        for (i, w) in words.iter_mut().enumerate().step_by(4096) {
            *w = i as u64 + 1;
        }
        assert!(!Pages::Base.apply(&words));
        Pages::Huge.apply(&words);
        for (i, w) in words.iter().enumerate() {
            let expect = if i % 4096 == 0 { i as u64 + 1 } else { 0 };
            assert_eq!(*w, expect, "word {i}");
        }
    }
}
