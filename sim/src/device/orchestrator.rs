//! The device thread: it builds the device state, starts the scheduler and watchdog threads,
//! answers the host's run requests, and during a run is the AICPU's orchestrator thread
//! (`device_main`, `run_one`).
//!
//! Its own file because this thread owns what the others borrow: the shared scheduler state,
//! the payload records and the orchestrator's private state live on its stack for the device's
//! whole life, and the scheduler threads are scoped threads of it. GM it shares with the host's
//! [`Device`](super::Device) handle, which copies in and out of it on the caller's thread.

use super::config::{orchestrator_config, DeviceConfig, DeviceError, GM_BASE};
use super::job::Job;
use super::scheduler::scheduler_main;
use super::state::{watchdog_main, RunState, ABORT_ORCH, ABORT_SCHED, ABORT_TIMEOUT};
use super::trace::{TraceBuf, TracingHook};
use super::Msg;
use crate::gm::{GmArena, GmWords};
use crate::pages::{Pages, ZeroPages};
use crate::wake::Wakeup;
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_aicpu::{Rt, RunError, RunOutcome, TaskPayloads};
use simpler_core::layout::Line;
use simpler_core::orchestrator::{Blocked, GaveUp, Orchestrator, OrchestratorLayout, Waiter};
use simpler_core::ring::MAX_RINGS;
use simpler_core::sched::SchedState;
use simpler_core::scope::ScopeMode;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A zeroed region of at least `bytes` bytes in whole cache lines (what core's layouts carve):
/// fresh zero pages from the kernel ([`ZeroPages`]), committed on first touch, so resident
/// memory follows what runs use.
struct Region(ZeroPages<Line>);

impl Region {
    fn new(bytes: usize) -> Self {
        Self(ZeroPages::new(
            bytes.div_ceil(size_of::<Line>()),
            Pages::Base,
        ))
    }

    /// The region's bytes, starting on a cache line.
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0[..])
    }
}

/// Pauses [`OrchWaiter`] spins before it blocks.
const SPINS: u32 = 32;

/// The orchestrator's waiting policy: spin briefly, then block on the wakeup; give up when the
/// run is aborted.
///
/// The spin is short (`SPINS` pauses, well under a microsecond): what the orchestrator waits for
/// (a completion that frees ring room) comes from scheduler threads that share the host's few
/// CPUs with it, so every pause spun is taken from the threads it is waiting on.
struct OrchWaiter<'s, 'a> {
    state: &'s RunState,
    shared: &'s SchedState<'a>,
    /// The watermarks as the last wait for room saw them.
    marks: [u32; MAX_RINGS],
}

impl OrchWaiter<'_, '_> {
    /// Waits for room: returns at once when a ring's watermark moved since the last wait (the
    /// claim that failed may have read it before it moved), else once the `room` wakeup is
    /// notified (a watermark moved, or an abort). The generation is read before the
    /// watermarks, so a move after that read also moves the generation past it.
    fn wait_for_room(&mut self) {
        let room = &self.state.room;
        let seen = room.generation();
        let marks: [u32; MAX_RINGS] = core::array::from_fn(|r| self.shared.flow(r).last_alive());
        if marks != self.marks {
            self.marks = marks;
            return;
        }
        spin_then_wait(room, seen);
    }
}

/// Spins [`SPINS`] pauses, then blocks on `wake` unless its generation moved past `seen`
/// (for at most 2 ms, a backstop).
fn spin_then_wait(wake: &Wakeup, seen: u64) {
    for _ in 0..SPINS {
        core::hint::spin_loop();
    }
    if wake.generation() == seen {
        wake.wait(seen, Duration::from_millis(2));
    }
}

impl Waiter for OrchWaiter<'_, '_> {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        if self.state.abort.load(Ordering::Acquire) != 0 {
            return Err(GaveUp);
        }
        let room = matches!(
            on,
            Blocked::TaskRing { .. }
                | Blocked::Heap { .. }
                | Blocked::EdgePool { .. }
                | Blocked::TensorMap { .. }
        );
        if room {
            self.wait_for_room();
        } else {
            let completion = &self.state.completion;
            spin_then_wait(completion, completion.generation());
        }
        if self.state.abort.load(Ordering::Acquire) != 0 {
            Err(GaveUp)
        } else {
            Ok(())
        }
    }

    /// A scheduler with nothing to do blocks on the run's wakeup; a task readied by its
    /// submit is work only the orchestrator knows of, so it wakes them (the queue push comes
    /// first: see `Wakeup`'s ordering).
    fn made_ready(&mut self) {
        self.state.wake.notify();
    }
}

/// The device thread's body: builds the device state for `config` over GM `gm_words`, reports
/// on `ready` whether
/// that worked, then serves `rx` until the [`Device`](super::Device) hangs up, and stops the
/// other threads before returning.
pub(super) fn device_main(
    config: DeviceConfig,
    gm_words: Arc<GmWords>,
    rx: Receiver<Msg>,
    ready: Sender<Result<(), DeviceError>>,
) {
    let orch_config = orchestrator_config(&config, GM_BASE);
    let built = (|| {
        let orch_layout = OrchestratorLayout::new(orch_config)?;
        let payloads_layout = PayloadsLayout::new([config.ring.window; MAX_RINGS])?;
        Ok::<_, DeviceError>((orch_layout, payloads_layout))
    })();
    let (orch_layout, payloads_layout) = match built {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut sched_mem = Region::new(orch_layout.sched().size());
    let mut orch_mem = Region::new(orch_layout.size());
    let mut payload_mem = Region::new(payloads_layout.size());
    let shared = match SchedState::init(sched_mem.bytes_mut(), orch_layout.sched()) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    // The region is fresh zeroed pages, which need no formatting: attaching leaves them
    // untouched until a record is written into them.
    let payloads = match TaskPayloads::attach(payload_mem.bytes_mut(), &payloads_layout) {
        Ok(p) => p.with_write_hint(crate::tile_ops::ahead::hint_write),
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    // This thread's small GM accesses register in an entry of its own (line 0).
    let gm = gm_words.arena_owned(GM_BASE, 0);
    let mut orch = match Orchestrator::init(orch_mem.bytes_mut(), &orch_layout, &shared) {
        Ok(o) => o,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let state = RunState::new();
    let nsched = config.topology.schedulers();
    let workers = config.scheduler_threads();
    let words = &*gm_words;
    std::thread::scope(|s| {
        for t in 0..workers {
            let (state, shared, payloads) = (&state, &shared, &payloads);
            let _ = std::thread::Builder::new()
                .name(format!("simpler-sched-{t}"))
                .spawn_scoped(s, move || {
                    // Each scheduler thread's cores register their GM accesses in a ledger
                    // line of their own (line 0 is the orchestrator's), the small ones in an
                    // entry this thread owns.
                    let gm = words.arena_owned(GM_BASE, 1 + t);
                    scheduler_main(t, workers, &config, state, shared, payloads, &gm)
                });
        }
        let state_ref = &state;
        let _ = std::thread::Builder::new()
            .name("simpler-watchdog".into())
            .spawn_scoped(s, move || watchdog_main(&config, state_ref));
        let _ = ready.send(Ok(()));

        let mut orch_trace = TraceBuf::new();
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Run(job, reply) => {
                    let outcome = run_one(
                        &job,
                        &mut orch_trace,
                        &state,
                        &shared,
                        &mut orch,
                        &payloads,
                        &gm,
                        nsched,
                    );
                    let _ = reply.send(outcome);
                }
            }
        }
        state.shutdown.store(true, Ordering::SeqCst);
        {
            let mut g = state.generation.lock().unwrap_or_else(|e| e.into_inner());
            g.0 += 1;
            state.start.notify_all();
        }
        state.wake.notify();
    });
}

#[allow(clippy::too_many_arguments)]
/// One run on the device thread: resets the shared state, starts the scheduler threads on
/// it, runs the orchestration function (or imports the host's prebuilt graph), waits for every
/// scheduler thread to leave the run, and reports the outcome.
fn run_one<'a>(
    job: &Job,
    orch_trace: &mut TraceBuf,
    state: &RunState,
    shared: &SchedState<'a>,
    orch: &mut Orchestrator<'a>,
    payloads: &TaskPayloads<'a>,
    gm: &GmArena<'_>,
    nsched: usize,
) -> RunOutcome {
    let init_start = Instant::now();
    shared.reset();
    orch.reset();
    // The host's copies since the last run made the ledger heavy; the run's small accesses
    // register without a barrier until a bulk one makes it heavy again.
    gm.lighten();
    state.orch_done.store(false, Ordering::SeqCst);
    state.abort.store(0, Ordering::SeqCst);
    state.dispatched.store(0, Ordering::SeqCst);
    *state.sched_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
    *state.active.lock().unwrap_or_else(|e| e.into_inner()) = nsched;
    state.run_id.fetch_add(1, Ordering::SeqCst);
    state.running.store(true, Ordering::SeqCst);
    let start = Instant::now();
    state.trace_dropped.store(0, Ordering::SeqCst);
    // Without the `trace` feature no sink is ever armed, and every event site folds away.
    let sink = if cfg!(feature = "trace") {
        job.trace.clone()
    } else {
        None
    };
    *state.trace.lock().unwrap_or_else(|e| e.into_inner()) = sink.clone().map(|sink| (sink, start));
    if sink.is_some() {
        orch_trace.arm();
    }
    if let Some(p) = &job.prebuilt {
        // hbg: the host built the graph; import its live image before any scheduler starts.
        let imported = shared.import(&p.usage, &p.sched).and_then(|()| {
            payloads.import(
                &p.usage.tasks,
                &mut simpler_core::image::Reader::new(&p.payloads),
            )
        });
        if let Err(e) = imported {
            state.running.store(false, Ordering::SeqCst);
            return RunOutcome {
                result: Err(RunError::Image(e)),
                tasks: 0,
                edges: 0,
                dispatched: 0,
                orchestration: Duration::ZERO,
                init: init_start.elapsed(),
                device: start.elapsed(),
                trace_dropped: 0,
            };
        }
    }
    let init = init_start.elapsed();
    {
        let mut g = state.generation.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        g.1 = Some(job.kernels.clone());
        state.start.notify_all();
    }
    let mut waiter = OrchWaiter {
        state,
        shared,
        marks: [u32::MAX; MAX_RINGS],
    };
    let mut hook_guard = job
        .hook
        .as_ref()
        .map(|h| h.lock().unwrap_or_else(|e| e.into_inner()));
    let mut tracing = sink.as_ref().map(|_| TracingHook {
        inner: None,
        buf: &mut *orch_trace,
        epoch: start,
        started: 0,
    });
    let result = if job.prebuilt.is_some() {
        Ok(())
    } else {
        let mut rt = Rt::new(orch, payloads, &mut waiter, gm, &job.args, &state.abort);
        match (tracing.as_mut(), hook_guard.as_mut()) {
            (Some(t), inner) => {
                t.inner = inner.map(|g| &mut **g);
                rt = rt.with_hook(t);
            }
            (None, Some(g)) => rt = rt.with_hook(&mut **g),
            (None, None) => {}
        }
        let r = rt.scope(ScopeMode::Auto, |rt| (job.orch)(rt));
        r.and_then(|()| rt.error().map_or(Ok(()), Err))
    };
    drop(hook_guard);
    let orchestration = start.elapsed();
    if result.is_err() {
        let _ = state
            .abort
            .compare_exchange(0, ABORT_ORCH, Ordering::SeqCst, Ordering::SeqCst);
    }
    state.orch_done.store(true, Ordering::SeqCst);
    state.wake.notify();
    {
        let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
        while *active > 0 {
            active = state.done.wait(active).unwrap_or_else(|e| e.into_inner());
        }
    }
    state.running.store(false, Ordering::SeqCst);
    let device = start.elapsed();
    if let Some(sink) = &sink {
        orch_trace.flush(state, sink);
    }
    *state.trace.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let (tasks, edges) = match &job.prebuilt {
        Some(p) => (p.usage.tasks.iter().map(|&t| t as u64).sum(), p.edges),
        None => (
            (0..MAX_RINGS).map(|r| orch.submitted(r) as u64).sum(),
            orch.edges_recorded(),
        ),
    };
    // The cause of an abort wins over what the orchestration saw of it: an orchestrator
    // waiting on a full ring when a kernel failed gives up with a ring error.
    let sched_error = *state.sched_error.lock().unwrap_or_else(|e| e.into_inner());
    let result = match (result, state.abort.load(Ordering::SeqCst), sched_error) {
        (_, ABORT_SCHED, Some(e)) => Err(RunError::Scheduler(e)),
        (_, ABORT_TIMEOUT, _) => Err(RunError::Timeout),
        (Err(e), _, _) => Err(RunError::Orchestration(e)),
        (Ok(()), _, _) => Ok(()),
    };
    RunOutcome {
        result,
        tasks,
        edges,
        dispatched: state.dispatched.load(Ordering::SeqCst),
        orchestration,
        init,
        device,
        trace_dropped: state.trace_dropped.load(Ordering::SeqCst),
    }
}
