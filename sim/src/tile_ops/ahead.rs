//! Prefetches spread over the compute that runs before their data is used.
//!
//! A hint for a whole operand (the next slice of a batched product, 64 KiB and more) cannot be
//! issued at once: a few dozen misses fill a core's miss buffers, and everything after them
//! waits for memory, which is the stall the hint was meant to hide. So a long range joins its
//! thread's queue instead ([`queue`]), and the tile operations that run next on that thread
//! issue one line of it every few steps of their own loops ([`Ahead::step`]): the next
//! operand streams in while the current one is computed.
//!
//! The queue is a stack of at most [`RANGES`] ranges, the newest drained first (a kernel's
//! hint for its own next slice is more urgent than the scheduler's for the next task); when
//! it is full, the oldest range is dropped. A prefetch is only a hint, so a range dropped,
//! left undrained or already used costs time at most, never a result.

use std::cell::Cell;

/// Ranges a thread's queue holds.
pub const RANGES: usize = 8;
/// The bytes one prefetch moves: a cache line.
pub const LINE: usize = 64;

/// One thread's queue of ranges to prefetch, each as its next line and its end.
#[derive(Clone, Copy, Debug)]
pub struct Ahead {
    next: [*const u8; RANGES],
    end: [*const u8; RANGES],
    len: usize,
}

impl Ahead {
    /// No ranges.
    pub const EMPTY: Self = Self {
        next: [core::ptr::null(); RANGES],
        end: [core::ptr::null(); RANGES],
        len: 0,
    };

    /// Adds bytes `ptr..ptr + len` on top of the stack, dropping the oldest range if it is
    /// full. `ptr` is rounded down to its line.
    pub fn push(&mut self, ptr: *const u8, len: usize) {
        if len == 0 {
            return;
        }
        if self.len == RANGES {
            self.next.copy_within(1.., 0);
            self.end.copy_within(1.., 0);
            self.len -= 1;
        }
        let first = ptr.wrapping_sub(ptr as usize % LINE);
        self.next[self.len] = first;
        self.end[self.len] = ptr.wrapping_add(len);
        self.len += 1;
    }

    /// Prefetches the next line of the newest range, if any.
    #[inline(always)]
    pub fn step(&mut self) {
        if self.len == 0 {
            return;
        }
        let top = self.len - 1;
        let line = self.next[top];
        prefetch_line(line);
        let next = line.wrapping_add(LINE);
        if next as usize >= self.end[top] as usize {
            self.len = top;
        } else {
            self.next[top] = next;
        }
    }

    /// The line the next [`Self::step`] prefetches, if any.
    pub fn next_line(&self) -> Option<*const u8> {
        self.len.checked_sub(1).map(|top| self.next[top])
    }

    /// The lines still queued.
    pub fn lines(&self) -> usize {
        (0..self.len)
            .map(|i| (self.end[i] as usize - self.next[i] as usize).div_ceil(LINE))
            .sum()
    }
}

/// One prefetch of the line at `line` into the first-level cache; elsewhere than x86-64,
/// nothing. Any address will do: nothing is read.
#[inline(always)]
pub(crate) fn prefetch_line(line: *const u8) {
    prefetch::<false>(line);
}

/// One prefetch of the line at `line` into the second-level cache only. A burst of
/// first-level prefetches (a task's every tensor at once) fills the core's few first-level
/// miss buffers and stalls it until memory answers; this one leaves them to the loads of the
/// work at hand, and the line is a second-level hit when its kernel reads it.
#[inline(always)]
pub(crate) fn prefetch_line_l2(line: *const u8) {
    prefetch::<true>(line);
}

/// The prefetch instruction, into the second level only with `L2`.
#[inline(always)]
#[allow(unsafe_code)] // the prefetch instruction: see its SAFETY comment
fn prefetch<const L2: bool>(line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it is in the target's
        // baseline). The instruction is a hint: it never faults, even where nothing is mapped
        // (a range queued by a run that has since ended), reads into no register and writes
        // nothing, so it is no access in the language's sense and cannot race with any.
        unsafe {
            if L2 {
                _mm_prefetch::<_MM_HINT_T1>(line.cast::<i8>());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(line.cast::<i8>());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
}

/// Hints that `words` will be written soon, by this thread: each of their cache lines is
/// prefetched for writing where the CPU has the instruction (x86-64's PREFETCHW, which takes
/// the line exclusive, so the stores that follow find it owned instead of first asking the
/// core that last read it to give it up); elsewhere, nothing. Reads and changes nothing.
pub fn hint_write(words: &[simpler_core::sync::AtomicU64]) {
    if let Some(hints) = WriteHints::get() {
        for_each_line(words, |line| hints.prefetch(line));
    }
}

/// Calls `f` with the start of each cache line `words` touch, first to last. The pointers
/// are for prefetches: the first may lie before `words` (its line's start).
#[inline(always)]
pub(crate) fn for_each_line(words: &[simpler_core::sync::AtomicU64], mut f: impl FnMut(*const u8)) {
    let bytes = words.as_ptr_range();
    let (first, end) = (bytes.start.cast::<u8>(), bytes.end.cast::<u8>());
    let mut line = first.wrapping_sub(first as usize % LINE);
    while (line as usize) < end as usize {
        f(line);
        line = line.wrapping_add(LINE);
    }
}

/// PREFETCHW, held only where this CPU has it: the instruction cannot be issued without
/// asking first.
#[derive(Clone, Copy)]
pub(crate) struct WriteHints(());

impl WriteHints {
    /// The instruction where this CPU has it (CPUID asked once), else `None`.
    pub(crate) fn get() -> Option<Self> {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        HAS.get_or_init(cpu_has_prefetchw).then_some(Self(()))
    }

    /// One PREFETCHW of the line at `line`.
    #[inline(always)]
    #[allow(unsafe_code)] // the prefetch instruction: see its SAFETY comment
    pub(crate) fn prefetch(self, line: *const u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has the instruction (a `WriteHints` exists only where CPUID said
        // so). Like every prefetch it is a hint: it never faults, whatever the address, reads
        // into no register and writes nothing, so it is no access in the language's sense and
        // cannot race with any. (The standard library's intrinsic for it needs a target
        // feature that is not yet stable.)
        unsafe {
            std::arch::asm!(
                "prefetchw byte ptr [{0}]",
                in(reg) line,
                options(nostack, preserves_flags, readonly)
            );
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }
}

/// CPUID leaf 0x8000_0001, ECX bit 8 (PRFCHW, "3DNowPrefetch").
#[allow(unsafe_code)] // CPUID: see its SAFETY comment
fn cpu_has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        #[allow(unused_unsafe)] // `__cpuid` is a safe function on newer toolchains
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 0x8000_0000 reports the highest
        // extended leaf, and 0x8000_0001 is asked only when it is there.
        let (top, ecx) = unsafe {
            let top = __cpuid(0x8000_0000).eax;
            (
                top,
                if top >= 0x8000_0001 {
                    __cpuid(0x8000_0001).ecx
                } else {
                    0
                },
            )
        };
        top >= 0x8000_0001 && ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

std::thread_local! {
    /// This thread's queue.
    static AHEAD: Cell<Ahead> = const { Cell::new(Ahead::EMPTY) };
}

/// Queues bytes `ptr..ptr + len` to be prefetched by this thread's next tile operations.
pub fn queue(ptr: *const u8, len: usize) {
    let mut a = take();
    a.push(ptr, len);
    put(a);
}

/// Empties this thread's queue (a run's end: its ranges are of no use to the next run).
pub fn clear() {
    AHEAD.set(Ahead::EMPTY);
}

/// The lines this thread's queue still holds.
pub fn queued_lines() -> usize {
    AHEAD.get().lines()
}

/// This thread's queue, for a tile operation to step in its loops and [`put`] back (a
/// range queued meanwhile is overwritten then).
#[inline(always)]
pub fn take() -> Ahead {
    AHEAD.get()
}

/// Puts back the queue [`take`] gave.
#[inline(always)]
pub fn put(a: Ahead) {
    AHEAD.set(a);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Line-aligned bytes, so that the counts below do not depend on where a buffer lands.
    #[repr(align(64))]
    struct Lines([u8; 4096]);

    fn lines_buf() -> Box<Lines> {
        Box::new(Lines([0; 4096]))
    }

    #[test]
    fn a_write_hint_runs_on_this_cpu_and_changes_no_word() {
        use simpler_core::sync::{AtomicU64, Ordering};
        let words: Vec<AtomicU64> = (0..100).map(AtomicU64::new).collect();
        // Ranges that start and end mid-line, and an empty one.
        for (from, to) in [(0, 100), (3, 17), (9, 9), (63, 100)] {
            hint_write(&words[from..to]);
        }
        for (i, w) in words.iter().enumerate() {
            assert_eq!(w.load(Ordering::Relaxed), i as u64);
        }
    }

    #[test]
    fn ranges_drain_newest_first_a_line_a_step() {
        let buf = lines_buf();
        let p = buf.0.as_ptr();
        let mut a = Ahead::EMPTY;
        a.push(p, 256); // 4 lines
        a.push(p.wrapping_add(1024 + 10), 100); // straddles 2 lines from its rounded start
        a.push(p, 0); // nothing
        assert_eq!(a.lines(), 6);
        a.step();
        a.step();
        // The newest range is done; the older one is untouched.
        assert_eq!(a.len, 1);
        assert_eq!(a.lines(), 4);
        for _ in 0..10 {
            a.step();
        }
        assert_eq!(a.lines(), 0);
    }

    #[test]
    fn a_full_queue_drops_its_oldest_range() {
        let buf = lines_buf();
        let buf = &buf.0;
        let mut a = Ahead::EMPTY;
        for i in 0..RANGES {
            a.push(buf.as_ptr().wrapping_add(i * 64), (i + 1) * 64);
        }
        assert_eq!(a.lines(), (1..=RANGES).sum::<usize>());
        a.push(buf.as_ptr(), 64 * 20);
        // The one-line range pushed first is gone.
        assert_eq!(a.lines(), (2..=RANGES).sum::<usize>() + 20);
    }

    #[test]
    fn the_thread_queue_is_this_threads_own() {
        let buf = lines_buf();
        let buf = &buf.0;
        clear();
        queue(buf.as_ptr(), 1024);
        assert_eq!(queued_lines(), 16);
        assert_eq!(std::thread::spawn(queued_lines).join().unwrap(), 0);
        let mut a = take();
        a.step();
        put(a);
        assert_eq!(queued_lines(), 15);
        clear();
        assert_eq!(queued_lines(), 0);
    }
}
