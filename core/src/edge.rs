//! The dependency pool: one cell per producer-to-consumer edge.
//!
//! A consumer's edges are claimed contiguously in its ring's pool when it is submitted, so the
//! slot records them as a range (its fanin list, walked at completion to release RETAIN
//! producers). A WAIT edge is also linked into its producer's fanout list, which the producer
//! walks once at completion to release the consumer's fanin. Cells are reclaimed in task order
//! with the consumer: by the time a consumer retires, it completed, so every producer it waited
//! for completed earlier and finished walking past its cells (a walk reads a cell's `next`
//! before releasing its consumer).

use crate::deps::NIL;
use crate::layout::AtomicPod;
use crate::sync::{AtomicU32, Ordering};

/// One edge. Written by the orchestrator before the edge is published; read by schedulers.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
pub struct EdgeCell {
    pub(crate) consumer: AtomicU32,
    pub(crate) producer: AtomicU32,
    /// Next edge in the producer's fanout list ([`EdgeRef`] encoding, or `NIL`).
    pub(crate) next: AtomicU32,
    pub(crate) flags: AtomicU32,
}

// SAFETY: EdgeCell is #[repr(C)] made only of AtomicU32 fields, valid for any bit pattern.
#[allow(unsafe_code)]
unsafe impl AtomicPod for EdgeCell {}

/// An edge named across rings: ring in the top two bits, cell index below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeRef(pub u32);

impl EdgeRef {
    /// Cell `index` of `ring`'s pool.
    pub const fn new(ring: usize, index: u32) -> Self {
        Self(((ring as u32) << 30) | index)
    }
    /// Index of the ring whose pool holds the cell, `0..MAX_RINGS` (the top two bits).
    pub const fn ring(self) -> usize {
        (self.0 >> 30) as usize
    }
    /// The cell's index in that ring's pool (the low 30 bits).
    pub const fn index(self) -> usize {
        (self.0 & ((1 << 30) - 1)) as usize
    }
}

impl EdgeCell {
    pub(crate) fn set(&self, consumer: u32, producer: u32, flags: u32) {
        self.consumer.store(consumer, Ordering::Relaxed);
        self.producer.store(producer, Ordering::Relaxed);
        self.next.store(NIL, Ordering::Relaxed);
        self.flags.store(flags, Ordering::Relaxed);
    }
}

/// The orchestrator's cursor over one ring's pool: linear `top` and `tail` counters (cell =
/// counter mod capacity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeCursor {
    capacity: u32,
    top: u32,
    tail: u32,
}

impl EdgeCursor {
    /// An empty pool of `capacity` cells (a power of two).
    pub const fn new(capacity: u32) -> Self {
        Self {
            capacity,
            top: 0,
            tail: 0,
        }
    }

    /// The next cell's linear index.
    pub fn top(&self) -> u32 {
        self.top
    }

    /// Cells every claim so far can never exceed.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Frees every cell before linear index `tail`.
    pub fn set_tail(&mut self, tail: u32) {
        self.tail = tail;
    }

    /// Claims one cell, returning its linear index, or `None` if the pool is full.
    pub fn claim(&mut self) -> Option<u32> {
        if self.top.wrapping_sub(self.tail) >= self.capacity {
            return None;
        }
        self.top = self.top.wrapping_add(1);
        Some(self.top.wrapping_sub(1))
    }

    /// Gives back the most recent claim.
    pub fn unclaim(&mut self) {
        self.top = self.top.wrapping_sub(1);
    }

    /// The cell index of linear index `linear`.
    pub fn cell(&self, linear: u32) -> u32 {
        linear & (self.capacity - 1)
    }
}
