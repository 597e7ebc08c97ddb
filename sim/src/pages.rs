//! How the simulator's arenas are backed: GM, the runtime's regions and the cores' local
//! buffers.
//!
//! Each is a [`ZeroPages`]: zero pages mapped from the kernel and left untouched, so the
//! kernel commits them as a run first writes them and resident memory follows what a run
//! touches, however the allocator has been used before. On GM at the base page size (4 KiB)
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

/// Zeroed memory straight from the kernel: on Linux an anonymous private mapping
/// (`MAP_NORESERVE`), whose pages are committed one by one as first touched and which is
/// unmapped when dropped.
///
/// The simulator's large arenas (GM, the runtime's regions, the local buffers) come from here rather than from
/// the allocator's zeroed allocation. `calloc` maps fresh zero pages only for requests above
/// its mmap threshold, and glibc raises that threshold (up to 32 MiB) to the size of each
/// mapped block freed: after one device is dropped, the next device's regions below that size
/// would come from the heap, zeroed by writing every page, and be resident whole from the
/// start (`tests/benches/README.md` has what that cost a process running several cases).
/// Elsewhere than Linux the memory is the allocator's zeroed allocation.
pub struct ZeroPages<T> {
    #[cfg(target_os = "linux")]
    map: std::ptr::NonNull<T>,
    #[cfg(not(target_os = "linux"))]
    boxed: Box<[T]>,
    len: usize,
}

// SAFETY: a `ZeroPages<T>` owns its `len` elements as a `Box<[T]>` would (no other handle to
// the memory exists), so sending it to another thread is sound when sending a `T` is.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for ZeroPages<T> {}
// SAFETY: shared access hands out only `&[T]` (see `Deref`), so sharing it is sound when
// sharing a `T` is.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
unsafe impl<T: Sync> Sync for ZeroPages<T> {}

impl<T: bytemuck::Zeroable> ZeroPages<T> {
    /// `len` zeroed elements, none of their pages touched, backed as `pages` says. Out of
    /// address space, it fails as a failed allocation does (`handle_alloc_error`). `T` must
    /// need no drop (nothing is dropped element by element).
    pub fn new(len: usize, pages: Pages) -> Self {
        const { assert!(!core::mem::needs_drop::<T>(), "ZeroPages drops no element") };
        let this = Self::map(len);
        pages.apply(&this[..]);
        this
    }

    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)] // the mmap call: see its SAFETY comment
    fn map(len: usize) -> Self {
        let layout = std::alloc::Layout::array::<T>(len).expect("arena size overflows");
        // The kernel's pages are page-aligned, which is enough for any `T` up to a page.
        assert!(layout.align() <= 4096, "ZeroPages aligns to a page at most");
        if layout.size() == 0 {
            return Self {
                map: std::ptr::NonNull::dangling(),
                len,
            };
        }
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses: no
        // existing memory is touched or aliased. The result is checked for MAP_FAILED before
        // use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(layout);
        }
        let Some(map) = std::ptr::NonNull::new(ptr.cast::<T>()) else {
            std::alloc::handle_alloc_error(layout);
        };
        Self { map, len }
    }

    #[cfg(not(target_os = "linux"))]
    fn map(len: usize) -> Self {
        Self {
            boxed: bytemuck::zeroed_slice_box(len),
            len,
        }
    }
}

impl<T> core::ops::Deref for ZeroPages<T> {
    type Target = [T];

    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)] // the mapping as a slice: see the SAFETY comment
    fn deref(&self) -> &[T] {
        // SAFETY: `map` points at `len` elements this value owns (a live mapping of their
        // size, or a dangling aligned pointer for a zero-sized one), page-aligned and so
        // aligned for `T`; the kernel zeroed them and `T: Zeroable` (checked in `new`) makes
        // zero bytes a valid `T`, and any later writes went through `&mut [T]` or `T`'s own
        // interior mutability. The borrow of `self` keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.len) }
    }

    #[cfg(not(target_os = "linux"))]
    fn deref(&self) -> &[T] {
        &self.boxed
    }
}

impl<T> core::ops::DerefMut for ZeroPages<T> {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)] // the mapping as a slice: see the SAFETY comment
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference into the mapping
        // for the borrow's duration.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.len) }
    }

    #[cfg(not(target_os = "linux"))]
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.boxed
    }
}

#[cfg(target_os = "linux")]
impl<T> Drop for ZeroPages<T> {
    #[allow(unsafe_code)] // the munmap call: see its SAFETY comment
    fn drop(&mut self) {
        let bytes = core::mem::size_of::<T>() * self.len;
        if bytes == 0 {
            return;
        }
        // SAFETY: `map` and `bytes` are exactly the mapping `map` made; no reference into it
        // outlives `self` (every borrow is of `self`), and its elements need no drop.
        unsafe { libc::munmap(self.map.as_ptr().cast(), bytes) };
    }
}

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

    /// Pages of `memory` the kernel has resident (`mincore`), counted from the page holding
    /// its first byte.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)] // the mincore call: see its SAFETY comment
    fn resident_pages<T>(memory: &[T]) -> usize {
        let page = 4096;
        let start = memory.as_ptr() as usize / page * page;
        let end = memory.as_ptr() as usize + core::mem::size_of_val(memory);
        let mut vec = vec![0u8; (end - start).div_ceil(page)];
        // SAFETY: `start..end` covers `memory`, mapped for the borrow's duration, from the
        // start of its first page (mincore wants a page-aligned start and looks at whole
        // pages); `vec` has a byte for each of those pages. The call only reads page tables.
        let rc =
            unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn an_arena_is_untouched_until_written_even_after_the_allocator_recycled_a_large_block() {
        // The first large block freed raises glibc's mmap threshold; the second then comes
        // from the heap, written, and stays there freed. A zeroed allocation from that heap is
        // cleared page by page, resident whole before any use (4,097 pages of `calloc`'s
        // 16 MiB here, where this arena has none).
        for _ in 0..2 {
            let block = vec![1u8; 24 << 20];
            drop(std::hint::black_box(block));
        }
        let mut arena = ZeroPages::<u64>::new(2 << 20, Pages::Base); // 16 MiB
        assert_eq!(
            resident_pages(&arena[..]),
            0,
            "a fresh arena is not committed"
        );
        arena[100_000] = 7;
        assert_eq!(resident_pages(&arena[..]), 1, "one write commits one page");
        assert_eq!(arena.len(), 2 << 20);
        assert!(arena.iter().step_by(4099).all(|&w| w == 0));
        assert_eq!(arena[100_000], 7);
    }

    #[test]
    fn an_empty_arena_has_no_element() {
        let arena = ZeroPages::<u64>::new(0, Pages::Huge);
        assert!(arena.is_empty());
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
