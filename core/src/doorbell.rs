//! A doorbell: a ring count that a waiter blocks on, which costs a ring a wake-up call only
//! when someone is blocked.
//!
//! The L3 processes wake each other through doorbells in a shared page (the host's `Bells`):
//! the parent rings a child's after posting a request into its mailbox, a child rings the
//! parent's after publishing a reply. The blocking itself is the caller's [`Futex`] (the
//! kernel's futex across processes in the host; a mutex and condition variable emulating one
//! in the loom model, `tests/loom_mailbox.rs`), so this protocol is the same source in both.
//!
//! A waiter reads the count ([`Doorbell::seen`]) *before* it checks for work, and after finding
//! none waits for the count to move past what it read ([`Doorbell::rung_since`] while it
//! spins, [`Doorbell::block`] after). A ringer publishes its work first, then rings. So a ring
//! that lands between the waiter's check and its sleep is never lost: the waiter either sees
//! the count move, or is counted as a sleeper in time for the ringer to wake it.
//!
//! ## Memory ordering
//!
//! `seq` is the publication: [`Doorbell::ring`]'s increment releases the work the ringer
//! published before it, and a waiter whose read of `seq` ([`Doorbell::seen`],
//! [`Doorbell::rung_since`], [`Doorbell::block`]) observes the increment acquires that work.
//! `sleepers` and `seq` form a Dekker pair: the ringer increments `seq` then reads `sleepers`,
//! a blocking waiter increments `sleepers` then reads `seq`, each with a SeqCst fence between
//! its write and its read, so at least one of the two reads sees the other's write: the ringer
//! wakes the sleeper, or the sleeper sees the ring and does not block. A ring may still count
//! and wake between the sleeper's check and its sleep; the futex's own comparison, atomic with
//! its wake, then refuses to sleep on a count that has moved. The fences carry the argument,
//! not SeqCst accesses alone, so that the loom model can check it: loom treats SeqCst accesses
//! as acquire-release, but models SeqCst fences exactly.

use crate::sync::{fence, AtomicU32, Ordering};
use core::time::Duration;

/// Blocking on a 32-bit word's value, and waking the threads blocked on it: a futex.
pub trait Futex {
    /// Blocks while `word` holds `expected`, for at most `timeout`. The comparison and going
    /// to sleep are atomic with respect to [`Self::wake_all`]. May return early for any reason
    /// (a wake, a signal, a timeout); the caller re-checks.
    fn wait(&self, word: &AtomicU32, expected: u32, timeout: Duration);
    /// Wakes every thread blocked on `word`.
    fn wake_all(&self, word: &AtomicU32);
}

/// One doorbell: its ring count (the futex word) and how many waiters are blocked on it.
/// Any number of threads, in any number of processes, may ring and wait.
pub struct Doorbell<'a, F> {
    /// The ring count: incremented by every ring, wrapping.
    seq: &'a AtomicU32,
    /// Waiters between deciding to block and having woken: incremented and decremented by
    /// waiters, read by ringers.
    sleepers: &'a AtomicU32,
    futex: &'a F,
}

impl<'a, F: Futex> Doorbell<'a, F> {
    /// The doorbell whose count is `seq` and sleeper count `sleepers`, blocking through `futex`.
    pub const fn new(seq: &'a AtomicU32, sleepers: &'a AtomicU32, futex: &'a F) -> Self {
        Self {
            seq,
            sleepers,
            futex,
        }
    }

    /// The ring count, read before checking for work and then passed to [`Self::block`].
    pub fn seen(&self) -> u32 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Whether the bell was rung since the count `seen` was read (the spinning check).
    pub fn rung_since(&self, seen: u32) -> bool {
        self.seq.load(Ordering::Acquire) != seen
    }

    /// Rings: counts, then wakes the blocked waiters, if any.
    pub fn ring(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        // Paired with the fence in `block`: see the module's memory-ordering section.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            self.futex.wake_all(self.seq);
        }
    }

    /// Blocks until the bell is rung since `seen`, or until `time_left` (asked before each
    /// sleep) answers `None`.
    pub fn block(&self, seen: u32, mut time_left: impl FnMut() -> Option<Duration>) {
        loop {
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.seq.load(Ordering::SeqCst) != seen {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            let Some(left) = time_left() else {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return;
            };
            self.futex.wait(self.seq, seen, left);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            if self.rung_since(seen) {
                return;
            }
        }
    }
}
