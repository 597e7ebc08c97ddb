//! The per-ring allocators and the flow-control words they share with the schedulers.
//!
//! Each of the four rings (selected by scope depth, [`ring_for_depth`]) has:
//!
//! - a **task ring**: a power-of-two window of task slots, claimed in task order by the
//!   orchestrator; at most `window - 1` tasks are live, so full and empty differ;
//! - a **heap ring**: bytes for runtime-allocated outputs, claimed in task order; a claim never
//!   straddles the end (it wraps to 0 instead), and full and empty differ;
//! - a **dependency pool** ([`crate::edge`]): the edges a task's submit created, claimed in
//!   task order.
//!
//! All three are reclaimed strictly in task order through the ring's `last_task_alive`
//! watermark ([`RingFlow`]): when the scheduler side passes over a contiguous prefix of
//! CONSUMED tasks, every resource those tasks held is free. The orchestrator derives each
//! tail from the newest retired task's recorded end, so nothing but the watermark is shared.

use crate::layout::AtomicPod;
use crate::sync::{AtomicU32, Ordering};

/// Rings per runtime; scopes deeper than three share the last one.
pub const MAX_RINGS: usize = 4;

/// Scopes deeper than this are refused.
pub const MAX_SCOPE_DEPTH: usize = 64;

/// Outputs of one task are packed into one heap claim, each aligned to this many bytes.
pub const PACKED_OUTPUT_ALIGN: u64 = 1024;

/// The ring a task submitted at scope depth `depth` (0 = the entry scope) uses.
pub const fn ring_for_depth(depth: usize) -> usize {
    if depth < MAX_RINGS {
        depth
    } else {
        MAX_RINGS - 1
    }
}

/// Sizes of one ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Task slots; a power of two, at least 4.
    pub window: u32,
    /// Heap bytes for runtime-allocated outputs; at least 1024, below 4 GiB.
    pub heap_bytes: u64,
    /// Dependency-pool edges; a power of two, at least 4.
    pub edges: u32,
}

impl RingConfig {
    /// The reference's defaults: 16,384 tasks, 256 MiB of heap, 16,384 edges.
    pub const DEFAULT: Self = Self {
        window: 16_384,
        heap_bytes: 256 << 20,
        edges: 16_384,
    };
}

/// Flow-control words of one ring, shared by the orchestrator and the schedulers. Each word
/// that a different thread writes sits on its own cache line.
///
/// ## Memory ordering
///
/// The orchestrator publishes `current_task_index` (Release) after a claimed slot is
/// initialised. A scheduler advancing the watermark resets the passed slots, then publishes
/// `last_task_alive` (Release); the orchestrator loads it (Acquire) before reusing any slot or
/// byte below it. `advance_requests` counts the passes asked for since the passer last let go;
/// only read-modify-writes and acquiring loads touch it (`SchedState::advance`). A consumer
/// asks only when `last_task_alive` stands at its own task, reading it after a `SeqCst` fence;
/// a pass fences after its store and looks again at the slot it stopped at.
#[repr(C, align(64))]
#[cfg_attr(loom, derive(Default))]
pub struct RingFlow {
    /// Tasks claimed on this ring this run (the next task's local id). Written by the
    /// orchestrator.
    pub current_task_index: AtomicU32,
    _pad0: [u32; 15],
    /// The oldest task not yet retired. Written by the thread making the passes (see
    /// `advance_requests`).
    pub last_task_alive: AtomicU32,
    _pad1: [u32; 15],
    /// Watermark passes asked for and not yet made: each thread that consumes the task the
    /// watermark stands at adds one; the one that finds it 0 makes passes until it can set it
    /// back to 0.
    pub(crate) advance_requests: AtomicU32,
    _pad2: [u32; 15],
}

// SAFETY: RingFlow is #[repr(C)] made only of AtomicU32 fields and u32 padding arrays, so
// every bit pattern (zero included) is valid and all mutation is atomic.
#[allow(unsafe_code)]
unsafe impl AtomicPod for RingFlow {}

#[cfg(not(loom))]
crate::assert_layout!(RingFlow, size = 192);

impl RingFlow {
    /// The watermark, as the orchestrator reads it before reusing resources.
    pub fn last_alive(&self) -> u32 {
        self.last_task_alive.load(Ordering::Acquire)
    }
}

/// Why a heap claim cannot be satisfied now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapClaim {
    /// Wait for older tasks to retire.
    WouldBlock,
    /// Larger than the whole heap: it can never fit.
    TooLarge,
}

impl core::fmt::Display for HeapClaim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::WouldBlock => "the heap is full until older tasks retire",
            Self::TooLarge => "the claim is larger than the whole heap",
        })
    }
}

impl core::error::Error for HeapClaim {}

/// The orchestrator's cursor over one ring's heap. Offsets are relative to the heap's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapRing {
    size: u64,
    top: u64,
    tail: u64,
}

impl HeapRing {
    /// An empty heap of `size` bytes.
    pub const fn new(size: u64) -> Self {
        Self {
            size,
            top: 0,
            tail: 0,
        }
    }

    /// The heap's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where the next claim would start.
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Sets the tail: every byte before it (in claim order) belongs to retired tasks.
    pub fn set_tail(&mut self, tail: u64) {
        self.tail = tail;
    }

    /// Whether every claimed byte has been retired.
    pub fn is_empty(&self) -> bool {
        self.top == self.tail
    }

    /// Claims `n` contiguous bytes and returns their offset, and whether the heap was empty
    /// and restarted at 0 (tails recorded before that restart no longer apply).
    ///
    /// A zero-byte claim returns the current top and moves nothing. The live region runs from
    /// the tail to the top, wrapping; a claim that does not fit before the end wraps to 0 when
    /// the bytes before the tail suffice, and never straddles the end. The free gap behind the
    /// tail is kept strictly larger than a claim, so a full heap never looks empty.
    pub fn claim(&mut self, n: u64) -> Result<(u64, bool), HeapClaim> {
        if n > self.size {
            return Err(HeapClaim::TooLarge);
        }
        if n == 0 {
            return Ok((self.top, false));
        }
        let mut restarted = false;
        if self.top == self.tail && self.top != 0 {
            self.top = 0;
            self.tail = 0;
            restarted = true;
        }
        if self.top >= self.tail {
            if self.size - self.top >= n {
                let at = self.top;
                self.top += n;
                return Ok((at, restarted));
            }
            if self.tail > n {
                self.top = n;
                return Ok((0, restarted));
            }
            return Err(HeapClaim::WouldBlock);
        }
        if self.tail - self.top > n {
            let at = self.top;
            self.top += n;
            return Ok((at, restarted));
        }
        Err(HeapClaim::WouldBlock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_for_depth_caps_at_the_last_ring() {
        assert_eq!([0, 1, 2, 3, 4, 63].map(ring_for_depth), [0, 1, 2, 3, 3, 3]);
    }

    #[test]
    fn heap_claims_wrap_without_straddling_and_keep_full_distinct_from_empty() {
        let mut h = HeapRing::new(1000);
        assert_eq!(h.claim(400), Ok((0, false)));
        assert_eq!(h.claim(400), Ok((400, false)));
        // 200 left at the end, nothing retired: a 300-byte claim must wait.
        assert_eq!(h.claim(300), Err(HeapClaim::WouldBlock));
        // The first claim retires: tail at 400. 300 does not fit at the end, so it wraps.
        h.set_tail(400);
        assert_eq!(h.claim(300), Ok((0, false)));
        // The gap [300, 400) is 100 bytes; a claim must leave it strictly larger.
        assert_eq!(h.claim(100), Err(HeapClaim::WouldBlock));
        assert_eq!(h.claim(99), Ok((300, false)));
        // Everything retires: the heap restarts at 0.
        h.set_tail(399);
        assert!(h.is_empty());
        assert_eq!(h.claim(1000), Ok((0, true)));
        assert_eq!(h.claim(1), Err(HeapClaim::WouldBlock));
        assert_eq!(h.claim(1001), Err(HeapClaim::TooLarge));
        assert_eq!(h.claim(0), Ok((1000, false)));
    }
}
