//! What the device's threads share for the current run (`RunState`), the abort codes they
//! end a run with, and the watchdog thread, the one thread that only reads that state.
//!
//! Its own file because the device thread (the orchestrator), every scheduler thread and the
//! watchdog each hold a reference to the one `RunState`; none of them owns it more than the
//! others.

use super::config::DeviceConfig;
use super::trace::TraceSink;
use crate::wake::Wakeup;
use simpler_aicore::KernelFn;
use simpler_aicpu::SchedError;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// [`RunState::abort`]: a scheduler thread failed (its error is in
/// [`RunState::sched_error`]).
pub(super) const ABORT_SCHED: u32 = 1;
/// [`RunState::abort`]: the orchestration function returned an error.
pub(super) const ABORT_ORCH: u32 = 2;
/// [`RunState::abort`]: the watchdog saw no progress for the configured time.
pub(super) const ABORT_TIMEOUT: u32 = 3;

/// What the device thread and the scheduler threads share for the current run.
pub(super) struct RunState {
    /// Bumped to start a run (with the run's kernel table) or to shut down; scheduler threads
    /// wait for it.
    pub(super) generation: Mutex<(u64, Option<Arc<[KernelFn]>>)>,
    /// Signalled with every bump of `generation`.
    pub(super) start: Condvar,
    /// Scheduler threads still in the current run.
    pub(super) active: Mutex<usize>,
    /// Signalled each time a scheduler thread leaves the run.
    pub(super) done: Condvar,
    /// The orchestration function has returned: no more tasks will be submitted.
    pub(super) orch_done: AtomicBool,
    /// 0 while the run goes on; the first `ABORT_*` code stored ends it.
    pub(super) abort: AtomicU32,
    /// The first scheduler error of the run.
    pub(super) sched_error: Mutex<Option<SchedError>>,
    /// Bumped by every scheduler loop that did something; the watchdog watches it.
    pub(super) progress: AtomicU64,
    /// A run is under way (the watchdog only times runs).
    pub(super) running: AtomicBool,
    /// Tasks the scheduler threads dispatched this run, added by each as it leaves.
    pub(super) dispatched: AtomicU64,
    /// Bumped at every run's start, so the watchdog times each run from its own start.
    pub(super) run_id: AtomicU64,
    /// The current run's trace sink and start, when traced.
    pub(super) trace: Mutex<Option<(TraceSink, Instant)>>,
    /// Trace events the threads could not hold this run.
    pub(super) trace_dropped: AtomicU64,
    /// The device is being dropped: every thread returns.
    pub(super) shutdown: AtomicBool,
    /// What idle scheduler threads sleep on: notified when a task is queued that they may
    /// take (by a submit that made it ready, or a scheduler that could not run it itself),
    /// when the rings drain, and when the run ends or aborts.
    pub(super) wake: Wakeup,
    /// What the orchestrator sleeps on while it waits for a task to complete (an element
    /// read or write): notified after every round of a scheduler that completed one.
    pub(super) completion: Wakeup,
    /// What the orchestrator sleeps on while it waits for room (a full task window, heap,
    /// dependency pool or TensorMap): notified when a ring's watermark moves, which is what
    /// frees all four, and on an abort; not on every completion, most of which free nothing.
    pub(super) room: Wakeup,
}

impl RunState {
    /// Wakes every sleeper of both wakeups (an abort).
    pub(super) fn wake_all(&self) {
        self.wake.notify();
        self.completion.notify();
        self.room.notify();
    }
}

impl RunState {
    /// The state before the first run: no run, no abort, nothing traced.
    pub(super) fn new() -> Self {
        Self {
            generation: Mutex::new((0, None)),
            start: Condvar::new(),
            active: Mutex::new(0),
            done: Condvar::new(),
            orch_done: AtomicBool::new(false),
            abort: AtomicU32::new(0),
            sched_error: Mutex::new(None),
            progress: AtomicU64::new(0),
            running: AtomicBool::new(false),
            dispatched: AtomicU64::new(0),
            run_id: AtomicU64::new(0),
            trace: Mutex::new(None),
            trace_dropped: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            wake: Wakeup::default(),
            completion: Wakeup::default(),
            room: Wakeup::default(),
        }
    }
}

/// The watchdog thread: every 20 ms, aborts the current run with [`ABORT_TIMEOUT`] when its
/// progress count has not moved for `config.watchdog`; returns at shutdown.
pub(super) fn watchdog_main(config: &DeviceConfig, state: &RunState) {
    // (run, progress count, when it last changed)
    let mut last = (0u64, 0u64, Instant::now());
    while !state.shutdown.load(Ordering::SeqCst) {
        std::thread::park_timeout(Duration::from_millis(20));
        let run = state.run_id.load(Ordering::SeqCst);
        let now = state.progress.load(Ordering::Relaxed);
        if !state.running.load(Ordering::SeqCst) || run != last.0 || now != last.1 {
            last = (run, now, Instant::now());
        } else if last.2.elapsed() >= config.watchdog {
            let _ =
                state
                    .abort
                    .compare_exchange(0, ABORT_TIMEOUT, Ordering::SeqCst, Ordering::SeqCst);
            state.wake_all();
        }
    }
}
