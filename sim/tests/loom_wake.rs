//! Model of the simulator's wakeup (`sim/src/wake.rs`): no lost wakeup, for the schedulers'
//! idle loop and for the orchestrator's wait for room.
//!
//! A producer publishes work (a relaxed flag: the wakeup's own ordering must carry it) and
//! notifies; a consumer runs the scheduler's idle loop (read the generation, check for work,
//! wait on what it read). Loom's `wait_timeout` never times out, so a lost wakeup leaves the
//! consumer blocked forever, which loom reports as a deadlock; and a consumer that wakes must
//! find the work. The one-consumer model explores every interleaving; the two-consumer one
//! is bounded to four preemptions per execution (see its test).
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p
//! simpler-sim --test loom_wake -- --nocapture`
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::sync::Arc;
use simpler_core::sync::Ordering;
use simpler_sim::wake::{RoomNotice, Wakeup};
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::Duration;

struct Shared {
    wake: Wakeup,
    work: AtomicBool,
}

/// The scheduler thread's idle loop: returns once it has seen the work.
fn consume(s: &Shared) {
    loop {
        let seen = s.wake.generation();
        if s.work.load(Ordering::Relaxed) {
            return;
        }
        s.wake.wait(seen, Duration::from_millis(5));
    }
}

/// Explores the model with `consumers` consumer threads, at most `bound` preemptions per
/// execution (`None`: every interleaving), and prints the interleaving count.
fn check(name: &str, consumers: usize, bound: Option<usize>) {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let mut builder = loom::model::Builder::new();
    // A `LOOM_MAX_PREEMPTIONS` in the environment wins.
    builder.preemption_bound = builder.preemption_bound.or(bound);
    builder.check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        let s = Arc::new(Shared {
            wake: Wakeup::default(),
            work: AtomicBool::new(false),
        });
        let threads: Vec<_> = (0..consumers)
            .map(|_| {
                let s = s.clone();
                loom::thread::spawn(move || consume(&s))
            })
            .collect();
        s.work.store(true, Ordering::Relaxed);
        s.wake.notify();
        for t in threads {
            t.join().unwrap();
        }
    });
    println!(
        "loom {name} {} interleavings",
        runs.load(StdOrdering::Relaxed)
    );
}

/// The orchestrator's wait for room (`OrchWaiter::wait_for_room` in
/// `sim/src/device/orchestrator.rs`): its claim reads the watermark and fails, then the waiter
/// reads the room wakeup's generation and the watermark again, returns at once if the
/// watermark moved since its last wait, and sleeps otherwise. A scheduler retires tasks one
/// by one (a release store of the watermark each) and gives notice as a scheduler thread does
/// ([`RoomNotice`]): after a retirement only once its share of the alive tasks has retired,
/// and before it goes idle at any move. With `claimed` tasks, 2 retire; 2 claimed makes the
/// first retirement's notice the busy one, 8 leaves it to the idle one. The claim's read and
/// the waiter's are separate, so a move may land between them: the model checks that no
/// interleaving leaves the orchestrator asleep with the room free.
fn check_room(name: &str, claimed: u32) {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    loom::model::Builder::new().check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        let s = Arc::new(Room {
            room: Wakeup::default(),
            watermark: AtomicU32::new(0),
        });
        let orchestrator = {
            let s = s.clone();
            loom::thread::spawn(move || {
                // The waiter's marks start unknown, as in the simulator's.
                let mut last = u32::MAX;
                // The claim: room once the watermark has moved past 0.
                while s.watermark.load(Ordering::Acquire) == 0 {
                    let seen = s.room.generation();
                    let marks = s.watermark.load(Ordering::Acquire);
                    if marks != last {
                        last = marks;
                        continue;
                    }
                    s.room.wait(seen, Duration::from_millis(2));
                }
            })
        };
        let mut notice = RoomNotice::new([0]);
        for retired in 1..=2 {
            s.watermark.store(retired, Ordering::Release);
            if notice.after_progress([retired], [claimed]) {
                s.room.notify();
            }
        }
        if notice.before_idle([2]) {
            s.room.notify();
        }
        orchestrator.join().unwrap();
    });
    println!(
        "loom {name} {} interleavings",
        runs.load(StdOrdering::Relaxed)
    );
}

struct Room {
    room: Wakeup,
    watermark: AtomicU32,
}

#[test]
fn a_watermark_move_wakes_the_orchestrator_waiting_for_room() {
    check_room("sim_wakeup_room", 2);
}

#[test]
fn a_move_too_small_for_a_busy_notice_wakes_the_orchestrator_when_the_scheduler_idles() {
    check_room("sim_wakeup_room_idle", 8);
}

#[test]
fn a_notify_racing_a_sleeper_wakes_it() {
    check("sim_wakeup", 1, None);
}

#[test]
fn a_notify_wakes_every_sleeper() {
    // Preemption bound 4: three threads' every interleaving is more than the CI step can
    // afford, and a lost wakeup needs a consumer preempted between reading the generation and
    // sleeping; four lets both consumers be preempted there and again inside the wait.
    check("sim_wakeup_two_consumers", 2, Some(4));
}
