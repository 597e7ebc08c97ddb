//! A wakeup primitive for idle simulator threads: a generation counter plus a condition
//! variable, touched only when some thread actually sleeps.
//!
//! A waiter reads the generation, re-checks for work, and sleeps only if the generation is
//! still the one it read; a notifier bumps the generation first, so a notification between the
//! check and the sleep is never lost. [`RoomNotice`] decides when a scheduler thread
//! notifies the wakeup an orchestrator waiting for ring room sleeps on.
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

/// When a scheduler thread tells an orchestrator waiting for ring room that retirements
/// freed some: the `room` [`Wakeup`]'s notices, kept per scheduler thread.
///
/// Not at every move of a watermark: on a host with fewer CPUs than the device's threads,
/// each wakeup of the orchestrator takes a CPU from a scheduler thread in the middle of its
/// kernels, and a heap that holds a few dozen tasks' outputs would wake it for every one that
/// retires, to claim room for one more. Instead a thread gives notice once a ring's watermark
/// has moved, since its last notice, by at least the tasks still alive on that ring (claimed
/// and not retired) over [`ROOM_SHARE`], and by one task at least, so the orchestrator
/// wakes with that much room to fill while the rest of the tasks keep the cores busy; and at
/// any move at all before the thread goes idle ([`RoomNotice::before_idle`]), so an
/// orchestrator is never left waiting on room that was freed while every scheduler sleeps.
/// The notice comes after the watermark's store either way, which is what the waiter relies
/// on (`tests/loom_wake.rs` models both paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoomNotice<const RINGS: usize> {
    /// Each ring's watermark as this thread's last notice saw it.
    marks: [u32; RINGS],
}

/// The divisor of a ring's alive tasks that a busy scheduler thread's notice waits for: it
/// gives notice once half as many as are still alive have retired since its last (a third
/// of those alive at that notice), so the orchestrator wakes to room for that many while
/// twice as many keep the cores busy.
pub const ROOM_SHARE: u32 = 2;

impl<const RINGS: usize> RoomNotice<RINGS> {
    /// Notices counted from the watermarks `marks`.
    pub fn new(marks: [u32; RINGS]) -> Self {
        Self { marks }
    }

    /// After a round that completed tasks, with each ring's watermark `now` and its claimed
    /// tasks `claimed` (the next task's local id): whether to notify the room wakeup now (a
    /// ring's watermark moved by its share of the alive tasks). Task ids wrap as `u32`s do.
    pub fn after_progress(&mut self, now: [u32; RINGS], claimed: [u32; RINGS]) -> bool {
        let far = (0..RINGS).any(|r| {
            let moved = now[r].wrapping_sub(self.marks[r]);
            // A claimed count read before the watermark it trails reads as none alive.
            let alive = claimed[r].wrapping_sub(now[r]);
            let alive = if alive > u32::MAX / 2 { 0 } else { alive };
            moved >= (alive / ROOM_SHARE).max(1)
        });
        if far {
            self.marks = now;
        }
        far
    }

    /// Before the thread goes idle, with each ring's watermark `now`: whether to notify the
    /// room wakeup (a watermark moved since the last notice at all).
    pub fn before_idle(&mut self, now: [u32; RINGS]) -> bool {
        let moved = now != self.marks;
        self.marks = now;
        moved
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

    #[test]
    fn a_busy_thread_gives_notice_once_half_the_alive_tasks_retired() {
        // Ring 1 has tasks 0..100 claimed, none retired: 100 alive.
        let mut n = RoomNotice::new([0, 0]);
        // 20 retire, 80 alive: short of their half.
        assert!(!n.after_progress([0, 20], [0, 100]), "20 retired, 80 alive");
        assert!(
            n.after_progress([0, 40], [0, 100]),
            "40 retired, 60 alive: past their half"
        );
        // Counted from that notice: 10 more retire with 50 alive.
        assert!(!n.after_progress([0, 50], [0, 100]));
        assert!(
            n.after_progress([0, 70], [0, 100]),
            "30 since the notice, 30 alive"
        );
        // Nothing moved: no notice, however few are alive.
        assert!(!n.after_progress([0, 70], [0, 70]));
    }

    #[test]
    fn the_last_alive_task_retiring_gives_notice_and_any_ring_counts() {
        let mut n = RoomNotice::new([5, 9]);
        // Ring 0: one task alive, it retires.
        assert!(n.after_progress([6, 9], [6, 200]));
        // Ring 1 moves by one of 190 alive: not yet; ring 0's move of one of one: notice.
        assert!(!n.after_progress([6, 10], [7, 200]));
        assert!(n.after_progress([7, 10], [7, 200]));
    }

    #[test]
    fn task_ids_that_wrap_count_their_moves_and_alive_tasks_across_the_wrap() {
        let start = u32::MAX - 9;
        let mut n = RoomNotice::new([start]);
        // 20 claimed across the wrap; 12 retire across it, 8 alive.
        assert!(n.after_progress([start.wrapping_add(12)], [start.wrapping_add(20)]));
        assert!(!n.after_progress([start.wrapping_add(13)], [start.wrapping_add(20)]));
        // A claimed count behind the watermark (read stale) counts as none alive.
        assert!(n.after_progress([start.wrapping_add(14)], [start.wrapping_add(10)]));
    }

    #[test]
    fn a_thread_going_idle_gives_notice_of_any_move_since_its_last() {
        let mut n = RoomNotice::new([3, 0]);
        assert!(!n.before_idle([3, 0]), "nothing moved");
        // One retirement of many alive: too few for a busy thread, enough for an idle one.
        assert!(!n.after_progress([4, 0], [1000, 0]));
        assert!(n.before_idle([4, 0]));
        assert!(!n.before_idle([4, 0]), "that notice counts");
    }
}
