//! A bounded multi-producer multi-consumer queue of `u64` values over caller-provided memory.
//!
//! [`ReadyQueue`] carries ready task ids from the threads that resolve dependencies to the
//! threads that dispatch tasks. Any number of threads push and pop through a shared `&`; nothing
//! locks, allocates or sleeps. Like every sizeable structure in `core`, the queue is a view over a
//! region its caller provides: [`ReadyQueue::layout`] computes the region from the capacity alone
//! (the host sizes images with the same function), and [`ReadyQueue::init`] carves and
//! initialises it.
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue
//! (<https://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>). Two
//! monotonic position counters, `enqueue_pos` and `dequeue_pos`, each on its own cache line,
//! name the next position to push and to pop; position `p` lives in slot `p % capacity`. Every
//! slot carries a sequence number that says which position, and which side, may use it next.
//! A thread claims a position by a compare-and-swap on its side's counter, then owns the slot
//! until it hands it over by storing the next sequence number. Because sequence numbers grow
//! by one lap (`capacity`) per round trip, a stale position never matches a recycled slot: the
//! queue is ABA-safe without tags or epochs.
//!
//! The life of slot `i`, for position `p = lap * capacity + i`:
//!
//! ```text
//!   sequence == p            free: the producer of position p may write it
//!      | (1) push: CAS enqueue_pos p -> p+1, store value, store sequence = p+1
//!      v
//!   sequence == p+1          full: the consumer of position p may read it
//!      | (2) pop: CAS dequeue_pos p -> p+1, load value, store sequence = p+capacity
//!      v
//!   sequence == p+capacity   free for the producer of position p+capacity (the next lap)
//! ```
//!
//! (1) is [`ReadyQueue::push`], (2) is [`ReadyQueue::pop`]. A producer that reads a sequence
//! below its position finds the slot still held by the previous lap: the queue is full. A
//! consumer that reads a sequence below its position + 1 finds the slot not yet published: the
//! queue is empty.
//!
//! Each side claims positions in the order of its counter, so the values one thread pushes are
//! claimed for popping in the order it pushed them, and one thread that pops sees any one
//! producer's values in that order. Across producers, and across consumers, there is no order.
//!
//! ## Memory ordering
//!
//! - Each side's position counter is loaded and compare-and-swapped `Relaxed`. The counter only
//!   arbitrates which thread owns a position; no data is published through it, and the
//!   modification order of the counter alone makes every claimed position unique.
//! - A thread loads the slot's `sequence` with `Acquire`. Reading `p` (producer) or `p+1`
//!   (consumer) synchronises with the `Release` store that handed the slot over, so the previous
//!   owner's access to `value` happens-before this thread's.
//! - The owner stores `value` (producer) or loads it (consumer) `Relaxed`; it is published or
//!   released by the owner's `Release` store of the next `sequence`.
//! - [`ReadyQueue::len_estimate`] loads both counters `Relaxed` and clamps the difference: it
//!   is a hint, never a synchronisation point.
//!
//! ## Progress
//!
//! No operation waits for another thread, but the queue is not lock-free in the strict sense
//! (Vyukov says the same of his design): a thread that is preempted between claiming a position
//! and storing its sequence holds back the other side at that one slot. Until it resumes,
//! [`ReadyQueue::pop`] returns `None` (or [`ReadyQueue::push`] returns [`Full`]) even if other
//! slots are ready. `None` therefore means "nothing is ready at the head", and a dispatcher
//! that polls again will see the value once it is published.
//!
//! ## Portability
//!
//! The queue needs 64-bit atomics with compare-and-swap (`target_has_atomic = "64"`), which the
//! AArch64 AICPU and every host target have. Positions are `u64` and wrap modulo 2^64, which is
//! a multiple of the power-of-two capacity, so slot indices and sequence comparisons stay
//! correct across the wrap.
//!
//! ## Example
//!
//! ```
//! use simpler_core::layout::LayoutError;
//! use simpler_core::ready_queue::{Full, ReadyQueue};
//!
//! #[repr(C, align(64))]
//! struct Region([u8; 512]);
//!
//! let layout = ReadyQueue::layout(16)?;
//! assert_eq!(layout.size(), 384); // two cache lines of counters + 16 slots of 16 bytes
//! let mut region = Region([0; 512]);
//! let queue = ReadyQueue::init(&mut region.0, &layout)?;
//!
//! std::thread::scope(|s| {
//!     s.spawn(|| {
//!         for id in 0..10 {
//!             while queue.push(id).is_err() {
//!                 core::hint::spin_loop();
//!             }
//!         }
//!     });
//! });
//! assert_eq!(queue.len_estimate(), 10);
//! assert_eq!(queue.pop(), Some(0));
//! # for _ in 0..9 { queue.pop(); }
//! # for id in 0..16 { queue.push(id).unwrap(); }
//! # assert_eq!(queue.push(16), Err(Full(16)));
//! # Ok::<(), LayoutError>(())
//! ```

use crate::layout::{AtomicPod, Carver, Layout, LayoutError, Span};
use crate::sync::{spin_loop, AtomicU64, Ordering};
use core::fmt;

/// A `u64` atomic alone on a 64-byte cache line, so that counters written by different threads
/// do not share a line.
#[repr(C, align(64))]
#[cfg_attr(loom, derive(Default))]
struct CachePaddedU64(AtomicU64);

#[allow(unsafe_code)]
// SAFETY: a `#[repr(C)]` struct whose one field is an `AtomicU64`; the rest of the 64 bytes is
// padding, which has no validity requirement. All-zero bytes are a valid value (the counter
// reads 0) and the counter is only mutated through atomic operations.
unsafe impl AtomicPod for CachePaddedU64 {}

/// The two position counters, each on its own cache line.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
struct QueueHeader {
    /// The next position to push. Compare-and-swapped by every producer, loaded by
    /// [`ReadyQueue::len_estimate`].
    enqueue_pos: CachePaddedU64,
    /// The next position to pop. Compare-and-swapped by every consumer, loaded by
    /// [`ReadyQueue::len_estimate`].
    dequeue_pos: CachePaddedU64,
}

#[allow(unsafe_code)]
// SAFETY: `#[repr(C)]` and made only of `CachePaddedU64`, which is `AtomicPod` (above); all-zero
// bytes make both counters 0 and every mutation is atomic.
unsafe impl AtomicPod for QueueHeader {}

/// One cell of the ring.
#[repr(C)]
#[cfg_attr(loom, derive(Default))]
struct Slot {
    /// Which position may use the slot next (see the module docs). Loaded by every producer and
    /// consumer; stored only by the thread that owns the slot, to hand it over.
    sequence: AtomicU64,
    /// The queued value. Stored by the producer that owns the slot, loaded by the consumer that
    /// owns it; ownership is handed over through `sequence`.
    value: AtomicU64,
}

#[allow(unsafe_code)]
// SAFETY: `#[repr(C)]` and made only of two `AtomicU64`s with no padding (asserted below); every
// bit pattern is valid and every mutation is atomic.
unsafe impl AtomicPod for Slot {}

// The queue lives in images the host builds, so its layout is fixed (for the real atomics; a
// loom build's carry the checker's bookkeeping and are larger).
#[cfg(not(loom))]
crate::assert_layout!(CachePaddedU64, size = 64, align = 64);
#[cfg(not(loom))]
crate::assert_layout!(QueueHeader, size = 128, { enqueue_pos: 0, dequeue_pos: 64 });
#[cfg(not(loom))]
crate::assert_layout!(Slot, size = 16, { sequence: 0, value: 8 });
static_assertions::assert_impl_all!(ReadyQueue<'static>: Sync, Send);

/// A push found the queue full; carries the value back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full(pub u64);

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ready queue is full; value {} was not pushed", self.0)
    }
}

impl core::error::Error for Full {}

/// Where a [`ReadyQueue`] of a given capacity lives in its region.
#[derive(Clone, Copy)]
pub struct ReadyQueueLayout {
    layout: Layout,
    header: Span<QueueHeader>,
    slots: Span<Slot>,
}

impl fmt::Debug for ReadyQueueLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadyQueueLayout")
            .field("capacity", &self.capacity())
            .field("size", &self.size())
            .finish()
    }
}

impl ReadyQueueLayout {
    /// Bytes the region needs (a multiple of [`REGION_ALIGN`](crate::layout::REGION_ALIGN)).
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

/// A bounded MPMC queue of `u64` values over a carved region (see the module docs).
pub struct ReadyQueue<'a> {
    header: &'a QueueHeader,
    /// `capacity` slots, a power of two.
    slots: &'a [Slot],
    /// `capacity - 1`: position `p` lives in slot `p & mask`.
    mask: usize,
    /// Slot 0: the fallback of a masked index, which the mask makes unreachable; it lets the
    /// compiler see every slot access in range, with no panic path.
    first: &'a Slot,
}

impl<'a> ReadyQueue<'a> {
    /// The layout of a queue of `capacity` slots, which must be a power of two, at least 2.
    pub fn layout(capacity: usize) -> Result<ReadyQueueLayout, LayoutError> {
        if capacity < 2 || !capacity.is_power_of_two() {
            return Err(LayoutError::Config {
                field: "ready_queue.capacity",
                value: capacity as u64,
            });
        }
        let mut layout = Layout::new();
        let header = layout.array::<QueueHeader>(1)?;
        let slots = layout.array::<Slot>(capacity)?;
        Ok(ReadyQueueLayout {
            layout,
            header,
            slots,
        })
    }

    /// Carves an empty queue out of `region`, which must start on a
    /// [`REGION_ALIGN`](crate::layout::REGION_ALIGN)-byte boundary and hold
    /// [`ReadyQueueLayout::size`] bytes.
    ///
    /// The queue is initialised with `Relaxed` stores: hand it to other threads through
    /// something that synchronises (spawning them, a `Release`/`Acquire` flag).
    pub fn init(region: &'a mut [u8], layout: &ReadyQueueLayout) -> Result<Self, LayoutError> {
        let mut carver = Carver::new(region, &layout.layout)?;
        // A layout from `ReadyQueue::layout` always has exactly one header; anything else is
        // refused rather than indexed.
        let [header] = carver.atomic(layout.header)? else {
            return Err(LayoutError::SpanOutOfOrder {
                offset: layout.header.offset(),
            });
        };
        let slots = carver.atomic(layout.slots)?;
        // The carver zero-filled both counters; slot i starts free for position i.
        for (position, slot) in (0u64..).zip(slots) {
            slot.sequence.store(position, Ordering::Relaxed);
        }
        let [first, ..] = slots else {
            return Err(LayoutError::SpanOutOfOrder {
                offset: layout.slots.offset(),
            });
        };
        Ok(Self {
            header,
            slots,
            mask: slots.len().wrapping_sub(1),
            first,
        })
    }

    /// Carves a queue out of `region` keeping its bytes: a region an earlier `init` formatted
    /// (the caller resets what it used, [`Self::reset_prefix`]).
    pub fn attach(region: &'a mut [u8], layout: &ReadyQueueLayout) -> Result<Self, LayoutError> {
        let mut carver = Carver::new(region, &layout.layout)?;
        let [header] = carver.atomic_as_is(layout.header)? else {
            return Err(LayoutError::SpanOutOfOrder {
                offset: layout.header.offset(),
            });
        };
        let slots = carver.atomic_as_is(layout.slots)?;
        let [first, ..] = slots else {
            return Err(LayoutError::SpanOutOfOrder {
                offset: layout.slots.offset(),
            });
        };
        Ok(Self {
            header,
            slots,
            mask: slots.len().wrapping_sub(1),
            first,
        })
    }

    /// Returns a queue that saw `pushed` pushes since it was formatted (and at most as many
    /// pops) to its formatted state, touching only those cells.
    pub fn reset_prefix(&self, pushed: u64) {
        self.header.enqueue_pos.0.store(0, Ordering::Relaxed);
        self.header.dequeue_pos.0.store(0, Ordering::Relaxed);
        let n = (pushed as usize).min(self.slots.len());
        for (position, slot) in (0u64..).zip(&self.slots[..n]) {
            slot.sequence.store(position, Ordering::Release);
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Empties the queue. Only while no other thread uses it (between runs).
    pub fn reset(&self) {
        self.header.enqueue_pos.0.store(0, Ordering::Relaxed);
        self.header.dequeue_pos.0.store(0, Ordering::Relaxed);
        for (position, slot) in (0u64..).zip(self.slots) {
            slot.sequence.store(position, Ordering::Release);
        }
    }

    /// Positions pushed and popped so far.
    pub(crate) fn positions(&self) -> (u64, u64) {
        (
            self.header.enqueue_pos.0.load(Ordering::Acquire),
            self.header.dequeue_pos.0.load(Ordering::Acquire),
        )
    }

    /// The two position counters (for the live image).
    pub(crate) fn position_words(&self) -> (&AtomicU64, &AtomicU64) {
        (&self.header.enqueue_pos.0, &self.header.dequeue_pos.0)
    }

    /// The sequence and value words of the cell `position` lives in (for the live image).
    pub(crate) fn cell_words(&self, position: u64) -> (&AtomicU64, &AtomicU64) {
        let cell = self.slot(position);
        (&cell.sequence, &cell.value)
    }

    /// The slot position `position` lives in.
    fn slot(&self, position: u64) -> &Slot {
        // `mask` is `slots.len() - 1` with `slots.len()` a power of two (checked by `layout`),
        // so the index is always in bounds. Truncating `position` to `usize` first keeps its
        // low bits, which are the only ones the mask keeps.
        self.slots
            .get(position as usize & self.mask)
            .unwrap_or(self.first)
    }

    /// Appends `value`, or returns it in [`Full`] if the slot at the tail is still held by the
    /// previous lap (the queue is full, or a consumer of that slot has not finished).
    pub fn push(&self, value: u64) -> Result<(), Full> {
        let enqueue_pos = &self.header.enqueue_pos.0;
        let mut position = enqueue_pos.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(position);
            let sequence = slot.sequence.load(Ordering::Acquire);
            // Signed distance of the slot's state from "free for `position`"; wrapping keeps it
            // right across the 2^64 wrap of the positions.
            let lag = sequence.wrapping_sub(position) as i64;
            if lag == 0 {
                match enqueue_pos.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.value.store(value, Ordering::Relaxed);
                        slot.sequence
                            .store(position.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => {
                        // Another producer claimed `position` first (or the CAS failed
                        // spuriously): retry at the position it left.
                        position = current;
                        spin_loop();
                    }
                }
            } else if lag < 0 {
                // The slot still holds the value from one lap ago.
                return Err(Full(value));
            } else {
                // Another producer has already filled this slot: `position` is stale.
                position = enqueue_pos.load(Ordering::Relaxed);
                spin_loop();
            }
        }
    }

    /// Removes the value at the head, or returns `None` if it is not published yet (the queue
    /// is empty, or the producer of the head position has not finished).
    pub fn pop(&self) -> Option<u64> {
        let dequeue_pos = &self.header.dequeue_pos.0;
        let mut position = dequeue_pos.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(position);
            let sequence = slot.sequence.load(Ordering::Acquire);
            // Signed distance of the slot's state from "full for `position`".
            let lag = sequence.wrapping_sub(position.wrapping_add(1)) as i64;
            if lag == 0 {
                match dequeue_pos.compare_exchange_weak(
                    position,
                    position.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let value = slot.value.load(Ordering::Relaxed);
                        let next_lap = position.wrapping_add(self.slots.len() as u64);
                        slot.sequence.store(next_lap, Ordering::Release);
                        return Some(value);
                    }
                    Err(current) => {
                        // Another consumer claimed `position` first (or the CAS failed
                        // spuriously): retry at the position it left.
                        position = current;
                        spin_loop();
                    }
                }
            } else if lag < 0 {
                // The slot's producer has not published `position` yet.
                return None;
            } else {
                // Another consumer has already emptied this slot: `position` is stale.
                position = dequeue_pos.load(Ordering::Relaxed);
                spin_loop();
            }
        }
    }

    /// Pushes the values of `values` in order until one does not fit, and returns how many were
    /// pushed. Each value is claimed on its own, so other producers' values may interleave.
    pub fn push_batch(&self, values: &[u64]) -> usize {
        values
            .iter()
            .take_while(|&&value| self.push(value).is_ok())
            .count()
    }

    /// Pops values into `out` in order until the queue has none ready or `out` is full, and
    /// returns how many were popped. Each value is claimed on its own, so other consumers may
    /// take values in between.
    pub fn pop_batch(&self, out: &mut [u64]) -> usize {
        let mut popped = 0;
        for cell in out.iter_mut() {
            let Some(value) = self.pop() else { break };
            *cell = value;
            popped += 1;
        }
        popped
    }

    /// Number of values claimed for pushing and not yet claimed for popping, clamped to
    /// `0..=capacity`. Under concurrent use it is stale as soon as it returns: a hint for
    /// diagnostics and load balancing, not a guarantee that `pop` succeeds.
    pub fn len_estimate(&self) -> usize {
        let dequeued = self.header.dequeue_pos.0.load(Ordering::Relaxed);
        let enqueued = self.header.enqueue_pos.0.load(Ordering::Relaxed);
        // The two loads are not one snapshot, so the difference may be briefly negative or
        // exceed the capacity.
        let len = enqueued.wrapping_sub(dequeued) as i64;
        if len <= 0 {
            0
        } else {
            (len as u64).min(self.slots.len() as u64) as usize
        }
    }
}

impl fmt::Debug for ReadyQueue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadyQueue")
            .field("capacity", &self.capacity())
            .field("len_estimate", &self.len_estimate())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    #[repr(C, align(64))]
    struct Region([u8; 1024]);

    impl Region {
        fn new() -> Self {
            Self([0xA5; 1024])
        }
    }

    fn queue(region: &mut Region, capacity: usize) -> ReadyQueue<'_> {
        let layout = ReadyQueue::layout(capacity).unwrap();
        ReadyQueue::init(&mut region.0, &layout).unwrap()
    }

    #[test]
    fn layout_puts_counters_on_their_own_lines_then_the_slots() {
        let layout = ReadyQueue::layout(4).unwrap();
        assert_eq!(layout.header.offset(), 0);
        assert_eq!(layout.slots.offset(), 128);
        assert_eq!(layout.size(), 192);
        assert_eq!(layout.capacity(), 4);
        assert_eq!(ReadyQueue::layout(2).unwrap().size(), 192);
        assert_eq!(ReadyQueue::layout(8).unwrap().size(), 256);
    }

    #[test]
    fn bad_capacities_are_refused() {
        for capacity in [0, 1, 3, 6, 100, usize::MAX] {
            assert_eq!(
                ReadyQueue::layout(capacity).err(),
                Some(LayoutError::Config {
                    field: "ready_queue.capacity",
                    value: capacity as u64
                }),
                "capacity {capacity}"
            );
        }
        let huge = 1usize << (usize::BITS - 2);
        assert_eq!(ReadyQueue::layout(huge).err(), Some(LayoutError::TooLarge));
    }

    #[test]
    fn short_or_misaligned_regions_are_refused() {
        let layout = ReadyQueue::layout(16).unwrap();
        let mut region = Region::new();
        assert_eq!(
            ReadyQueue::init(&mut region.0[..383], &layout).err(),
            Some(LayoutError::RegionTooSmall {
                needed: 384,
                provided: 383
            })
        );
        assert_eq!(
            ReadyQueue::init(&mut region.0[8..], &layout).err(),
            Some(LayoutError::Misaligned { offset: 8 })
        );
    }

    #[test]
    fn values_come_out_in_push_order() {
        let mut region = Region::new();
        let queue = queue(&mut region, 8);
        assert_eq!(queue.capacity(), 8);
        for value in [5, 0, u64::MAX, 42, 7] {
            queue.push(value).unwrap();
        }
        assert_eq!(queue.len_estimate(), 5);
        let popped: Vec<u64> = core::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(popped, [5, 0, u64::MAX, 42, 7]);
        assert_eq!(queue.len_estimate(), 0);
    }

    #[test]
    fn a_full_queue_returns_the_value_and_an_empty_one_returns_none() {
        let mut region = Region::new();
        let queue = queue(&mut region, 4);
        assert_eq!(queue.pop(), None, "a fresh queue is empty");
        for value in 10..14 {
            queue.push(value).unwrap();
        }
        assert_eq!(queue.len_estimate(), 4);
        assert_eq!(queue.push(99), Err(Full(99)));
        assert_eq!(queue.push(100), Err(Full(100)), "full stays full");
        assert_eq!(queue.pop(), Some(10));
        queue.push(99).unwrap();
        assert_eq!(queue.push(101), Err(Full(101)));
        for expected in [11, 12, 13, 99] {
            assert_eq!(queue.pop(), Some(expected));
        }
        assert_eq!(queue.pop(), None);
        assert_eq!(queue.pop(), None, "empty stays empty");
        assert_eq!(queue.len_estimate(), 0);
    }

    /// Runs a deterministic mix of fills and drains over many laps against a model.
    fn check_against_model(queue: &ReadyQueue<'_>, operations: usize) {
        let capacity = queue.capacity();
        let mut model = std::collections::VecDeque::new();
        let mut next = 0u64;
        let mut done = 0;
        let mut round = 0usize;
        while done < operations {
            // Push a varying amount (sometimes past full), then pop a varying amount (sometimes
            // past empty), so head and tail cross slot boundaries at every offset.
            let pushes = (round * 3) % (capacity + 2);
            let pops = (round * 5 + 1) % (capacity + 2);
            for _ in 0..pushes {
                let result = queue.push(next);
                if model.len() < capacity {
                    assert_eq!(result, Ok(()), "push {next} with {} queued", model.len());
                    model.push_back(next);
                } else {
                    assert_eq!(result, Err(Full(next)));
                }
                next += 1;
                done += 1;
            }
            for _ in 0..pops {
                assert_eq!(queue.pop(), model.pop_front());
                done += 1;
            }
            assert_eq!(queue.len_estimate(), model.len());
            round += 1;
        }
        while let Some(expected) = model.pop_front() {
            assert_eq!(queue.pop(), Some(expected));
        }
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn wraps_around_many_laps() {
        for capacity in [2, 4, 16] {
            let mut region = Region::new();
            let queue = queue(&mut region, capacity);
            check_against_model(&queue, 20 * capacity);
        }
    }

    #[test]
    fn positions_wrap_past_u64_max() {
        let mut region = Region::new();
        let queue = queue(&mut region, 4);
        // Rewind the queue to an empty state just before the 2^64 wrap: both counters at
        // `start`, and every slot free for the position that maps to it.
        let start = u64::MAX - 5;
        queue.header.enqueue_pos.0.store(start, Ordering::Relaxed);
        queue.header.dequeue_pos.0.store(start, Ordering::Relaxed);
        for offset in 0..4u64 {
            let position = start.wrapping_add(offset);
            queue
                .slot(position)
                .sequence
                .store(position, Ordering::Relaxed);
        }
        check_against_model(&queue, 80);
        assert!(queue.header.enqueue_pos.0.load(Ordering::Relaxed) < start);
    }

    #[test]
    fn batches_stop_at_full_and_at_empty() {
        let mut region = Region::new();
        let queue = queue(&mut region, 4);
        assert_eq!(queue.push_batch(&[1, 2, 3]), 3);
        assert_eq!(queue.push_batch(&[4, 5, 6]), 1);
        let mut out = [0; 3];
        assert_eq!(queue.pop_batch(&mut out), 3);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(queue.pop_batch(&mut out), 1);
        assert_eq!(out[0], 4);
        assert_eq!(queue.pop_batch(&mut out), 0);
        assert_eq!(queue.push_batch(&[]), 0);
    }

    /// A small concurrent run, sized for Miri: two producers and two consumers over a queue of
    /// 4, each value popped exactly once. The full-size run is `tests/ready_queue_stress.rs`.
    #[test]
    fn concurrent_producers_and_consumers_lose_and_duplicate_nothing() {
        use core::sync::atomic::AtomicUsize;
        const PER_PRODUCER: u64 = if cfg!(miri) { 20 } else { 2_000 };
        const PRODUCERS: u64 = 2;
        let mut region = Region::new();
        let queue = queue(&mut region, 4);
        let popped_total = AtomicUsize::new(0);
        let total = (PER_PRODUCER * PRODUCERS) as usize;
        let seen: Vec<Vec<u64>> = std::thread::scope(|s| {
            for producer in 0..PRODUCERS {
                let queue = &queue;
                s.spawn(move || {
                    for seq in 0..PER_PRODUCER {
                        while queue.push(producer << 32 | seq).is_err() {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut seen = Vec::new();
                        while popped_total.load(Ordering::Relaxed) < total {
                            match queue.pop() {
                                Some(value) => {
                                    seen.push(value);
                                    popped_total.fetch_add(1, Ordering::Relaxed);
                                }
                                None => std::thread::yield_now(),
                            }
                        }
                        seen
                    })
                })
                .collect();
            consumers.into_iter().map(|c| c.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = seen.iter().flatten().copied().collect();
        all.sort_unstable();
        let expected: Vec<u64> = (0..PRODUCERS)
            .flat_map(|p| (0..PER_PRODUCER).map(move |seq| p << 32 | seq))
            .collect();
        assert_eq!(all, expected);
        for consumer in &seen {
            for producer in 0..PRODUCERS {
                let mine: Vec<u64> = consumer
                    .iter()
                    .filter(|&&v| v >> 32 == producer)
                    .copied()
                    .collect();
                assert!(
                    mine.windows(2).all(|w| w[0] < w[1]),
                    "producer {producer} out of order: {mine:?}"
                );
            }
        }
        assert_eq!(queue.pop(), None);
    }
}
