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
    lock: Mutex<()>,
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
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }

    /// Sleeps until the generation moves past `seen`, or `timeout` passes.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) == seen {
            let _ = self.cv.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}
