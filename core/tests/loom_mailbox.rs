//! Model of the L3 mailbox handshake and its doorbells: the parent and a child as two loom
//! threads over one task frame's state and error words ([`FrameWords`]) and two
//! [`Doorbell`]s (the child's, the parent scheduler's), all core's own source, which the host
//! runs over its shared mapping and the kernel's futex.
//!
//! The parent posts a task into the frame (payload bytes, then the error word cleared, then
//! TASK_READY published), rings the child, and waits on its own bell for TASK_DONE; the child
//! waits on its bell for TASK_READY, reads the task, writes a result and an error code,
//! publishes TASK_DONE and rings back; the parent reads both and returns the frame to IDLE.
//! Once, and twice in the same frame. It checks:
//!
//! - no lost wakeup: the futex stand-in never times out, so a ring lost between a side's
//!   check and its sleep leaves both threads blocked, which loom reports as a deadlock;
//! - the payload written before a publish is what the other side reads after observing it:
//!   the frame's bytes are a loom `UnsafeCell`, so an access not ordered by the handshake is
//!   reported as a data race, and the values are asserted per round;
//! - no transition skipped: every publish finds the state its transition leaves;
//! - the state and error words serve a second round-trip.
//!
//! The one-round model explores every interleaving; the two-round one is bounded to four
//! preemptions per execution (see its test). Run:
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p simpler-core
//! --test loom_mailbox -- --nocapture`
#![cfg(loom)]
// The workspace denies unsafe code; a model needs it to free the state it leaked for its
// threads or to reach loom's cells through raw pointers. Each block says why it is sound.
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Condvar, Mutex};
use simpler_core::doorbell::{Doorbell, Futex};
use simpler_core::mailbox::{FrameWords, MailboxState, MAILBOX_OFF_ERROR, MAILBOX_OFF_STATE};
use simpler_core::sync::{AtomicU32, Ordering};
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::Duration;

/// The futex of one word: "sleep only if the word still holds the expected value", checked
/// under the lock a wake takes, so a wake cannot fall between the check and the sleep. Loom
/// has no time, so a wait ends only on a wake.
#[derive(Default)]
struct ModelFutex {
    lock: Mutex<()>,
    cv: Condvar,
}

impl Futex for ModelFutex {
    fn wait(&self, word: &AtomicU32, expected: u32, _timeout: Duration) {
        let guard = self.lock.lock().unwrap();
        if word.load(Ordering::Relaxed) == expected {
            drop(self.cv.wait(guard).unwrap());
        }
    }

    fn wake_all(&self, _word: &AtomicU32) {
        let _guard = self.lock.lock().unwrap();
        self.cv.notify_all();
    }
}

/// A bell's two words, as in the host's doorbell page, and its futex.
#[derive(Default)]
struct Bell {
    seq: AtomicU32,
    sleepers: AtomicU32,
    futex: ModelFutex,
}

impl Bell {
    fn bell(&self) -> Doorbell<'_, ModelFutex> {
        Doorbell::new(&self.seq, &self.sleepers, &self.futex)
    }

    /// The host's `Bells::wait` with a spin of one check.
    fn wait(&self, seen: u32) {
        let bell = self.bell();
        if !bell.rung_since(seen) {
            bell.block(seen, || Some(Duration::MAX));
        }
    }
}

/// The task frame's bytes the model uses: the task's argument and the child's result.
#[derive(Default)]
struct Payload {
    task: u32,
    result: u32,
}

struct Shared {
    /// The frame's header words, indexed by byte offset / 4.
    header: [AtomicU32; 2],
    payload: UnsafeCell<Payload>,
    child_bell: Bell,
    scheduler_bell: Bell,
}

impl Shared {
    fn frame(&self) -> FrameWords<'_> {
        FrameWords::new(
            &self.header[MAILBOX_OFF_STATE / 4],
            &self.header[MAILBOX_OFF_ERROR / 4],
        )
    }
}

fn task_of(round: u32) -> u32 {
    100 + round
}

fn result_of(task: u32) -> u32 {
    3 * task + 1
}

fn error_of(task: u32) -> u32 {
    task % 2
}

/// The parent's scheduler thread: `launch`, then `schedule`'s wait and `collect`, per round.
fn parent(s: &Shared, rounds: u32) {
    let frame = s.frame();
    for round in 0..rounds {
        let task = task_of(round);
        // SAFETY: the frame is IDLE (the first round) or was returned to IDLE by this thread
        // below: the bytes are the parent's until it publishes TASK_READY.
        s.payload.with_mut(|p| unsafe { (*p).task = task });
        frame.clear_error();
        frame.publish(MailboxState::TaskReady).unwrap();
        s.child_bell.bell().ring();
        loop {
            let seen = s.scheduler_bell.bell().seen();
            if frame.is(MailboxState::TaskDone) {
                break;
            }
            s.scheduler_bell.wait(seen);
        }
        assert_eq!(frame.error(), error_of(task), "round {round}'s error word");
        // SAFETY: TASK_DONE was observed: the bytes are the parent's again.
        let result = s.payload.with(|p| unsafe { (*p).result });
        assert_eq!(result, result_of(task), "round {round}'s result");
        frame.publish(MailboxState::Idle).unwrap();
    }
}

/// The child's `serve` loop, ending after `rounds` tasks.
fn child(s: &Shared, rounds: u32) {
    let frame = s.frame();
    let mut round = 0;
    while round < rounds {
        let seen = s.child_bell.bell().seen();
        if frame.is(MailboxState::TaskReady) {
            // SAFETY: TASK_READY was observed: the bytes are the child's until it publishes
            // TASK_DONE.
            let task = s.payload.with(|p| unsafe { (*p).task });
            assert_eq!(task, task_of(round), "the task the child reads");
            // SAFETY: as above.
            s.payload
                .with_mut(|p| unsafe { (*p).result = result_of(task) });
            frame.set_error(error_of(task));
            frame.publish(MailboxState::TaskDone).unwrap();
            s.scheduler_bell.bell().ring();
            round += 1;
            continue;
        }
        s.child_bell.wait(seen);
    }
}

/// Explores `rounds` round trips with at most `bound` preemptions per execution (`None`: every
/// interleaving; a `LOOM_MAX_PREEMPTIONS` in the environment wins), and prints the count.
fn check(name: &str, rounds: u32, bound: Option<usize>) {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(bound);
    builder.check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        let s = Arc::new(Shared {
            header: Default::default(),
            payload: UnsafeCell::new(Payload::default()),
            child_bell: Bell::default(),
            scheduler_bell: Bell::default(),
        });
        let c = {
            let s = s.clone();
            loom::thread::spawn(move || child(&s, rounds))
        };
        parent(&s, rounds);
        c.join().unwrap();
        assert!(s.frame().is(MailboxState::Idle));
    });
    println!(
        "loom {name} {} interleavings",
        runs.load(StdOrdering::Relaxed)
    );
}

#[test]
fn a_task_round_trip() {
    check("l3_mailbox", 1, None);
}

#[test]
fn two_task_round_trips_through_one_frame() {
    // Preemption bound 4: the second round doubles every thread's steps, and its every
    // interleaving is more than the CI step can afford; four preemptions let each side be
    // preempted between its check and its sleep in both rounds.
    check("l3_mailbox_two_rounds", 2, Some(4));
}
