//! A wakeup primitive for idle simulator threads: a generation counter plus a condition
//! variable, touched only when some thread actually sleeps.
//!
//! A waiter reads the generation, re-checks for work, and sleeps only if the generation is
//! still the one it read; a notifier bumps the generation first, so a notification between the
//! check and the sleep is never lost.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

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
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.cv.notify_all();
        }
    }

    /// Sleeps until the generation moves past `seen`, or `timeout` passes.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) == seen {
            let _ = self.cv.wait_timeout(guard, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}
