//! A wakeup primitive for idle simulator threads: a generation counter plus a condition
//! variable, touched only when some thread actually sleeps.
//!
//! A waiter reads the generation, re-checks for work, and sleeps only if the generation is
//! still the one it read; a notifier bumps the generation first, so a notification between the
//! check and the sleep is never lost.
//!
//! ## Memory ordering
//!
//! The generation is the publication: work made visible before a [`Wakeup::notify`] is
//! visible to a waiter whose [`Wakeup::generation`] (or whose wait) observes the bump. The
//! sleeper count and the generation form a Dekker pair, each side ordered by a SeqCst fence
//! between its write of one and its read of the other: either the notifier sees the sleeper
//! and takes the lock to wake it, or the waiter, under the lock, sees the new generation and
//! does not sleep. The fences, not SeqCst accesses alone, carry that argument so that the loom
//! model (`tests/loom_wake.rs`) can check it: loom treats SeqCst accesses as acquire-release
//! but models SeqCst fences exactly.
//!
//! Under `cfg(loom)` the atomics are the checker's (through `simpler_core::sync`), and so are
//! the mutex and condition variable; loom's `wait_timeout` never times out, so a lost wakeup is
//! a thread blocked forever, which the checker reports as a deadlock.

use simpler_core::sync::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

#[cfg(loom)]
use loom::sync::{Condvar, Mutex};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex};

/// Wakes idle threads when work may have appeared.
#[derive(Default)]
pub struct Wakeup {
    generation: AtomicU64,
    sleepers: AtomicU32,
    /// The threads blocked in `cv` and not yet notified, counted under the lock: a notifier
    /// that finds none skips the condition variable, whose notification is a system call
    /// even when nobody waits, and one that notifies sets it to zero, so the notifications
    /// that follow before the woken threads run make no call either. A waiter between its
    /// check and its block holds the lock, so it is never missed; one that wakes takes
    /// itself off the count only if no notification came (its generation did not move):
    /// otherwise the notifier already did.
    lock: Mutex<u32>,
    cv: Condvar,
}

impl Wakeup {
    /// The current generation, to pass to [`Self::wait`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Wakes every sleeper (cheap when nobody sleeps).
    pub fn notify(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Paired with the fence in `wait`: see the module's memory-ordering section.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let mut blocked = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            if *blocked > 0 {
                *blocked = 0;
                self.cv.notify_all();
            }
        }
    }

    /// Sleeps until the generation moves past `seen`, or `timeout` passes.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let mut blocked = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) == seen {
            *blocked += 1;
            let (mut after, _) = self
                .cv
                .wait_timeout(blocked, timeout)
                .unwrap_or_else(|e| e.into_inner());
            // Its bump comes before its lock, so a notifier that counted this thread off has
            // moved the generation; one that bumped and has not locked yet will find the count
            // this thread leaves and notify once more, for nobody.
            if self.generation.load(Ordering::SeqCst) == seen {
                *after = after.saturating_sub(1);
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn blocked(w: &Wakeup) -> u32 {
        *w.lock.lock().unwrap()
    }

    #[test]
    fn a_timed_out_waiter_leaves_no_count_and_a_notified_one_is_counted_off_by_its_notifier() {
        let w = Arc::new(Wakeup::default());
        // Nobody notifies: the wait times out and takes itself off the count.
        w.wait(w.generation(), Duration::from_millis(1));
        assert_eq!(blocked(&w), 0);
        // A waiter blocked until notified: the notifier zeroes the count as it wakes it.
        let seen = w.generation();
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.wait(seen, Duration::from_secs(30)))
        };
        while blocked(&w) == 0 {
            std::thread::yield_now();
        }
        w.notify();
        assert_eq!(blocked(&w), 0, "the notifier counted the waiter off");
        waiter.join().unwrap();
        assert_eq!(blocked(&w), 0);
        assert_eq!(w.sleepers.load(Ordering::SeqCst), 0);
        // A wait whose generation already moved does not block at all.
        w.wait(seen, Duration::from_secs(30));
        assert_eq!(blocked(&w), 0);
    }
}
