//! The depth-two pipeline: [`ChipWorker::submit`] accepts a run without waiting for it, the
//! host binds (hbg) or stages (tmr) it into a slot whose previous run has ended while the other
//! slot's run may be on the device, and [`ChipWorker::wait`] gives each run's result and
//! tensors back, in submission order. Its own file because this is the run queue's policy
//! (depth, slot choice, in-order completion); what a run is lives in `chip_worker` and `hbg`.

use crate::chip_worker::{CallableHandle, ChipArg, ChipWorker, RunReport, Staging, WorkerError};
use crate::transport::{RunOptions, Runtime, TransportError};
use simpler_aicpu::RunOutcome;
use std::time::{Duration, Instant};

/// Runs a worker has in flight at most: one on the device while the host builds the next.
pub const PIPELINE_DEPTH: usize = 2;

/// A run [`ChipWorker::submit`] accepted: [`ChipWorker::wait`] collects its result (once; the
/// handle is consumed).
#[must_use = "a submitted run's result and tensors come back through `wait`"]
#[derive(Debug, PartialEq, Eq)]
pub struct RunHandle {
    worker: u64,
    seq: u64,
}

impl RunHandle {
    /// The run's position among the worker's submissions (0 for the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// A collected run: its result and its entry tensors (OUT and INOUT host tensors hold the
/// results when it succeeded; after a failure they are as they were given).
#[derive(Debug)]
pub struct Finished {
    /// The run's report, or why it failed.
    pub result: Result<RunReport, WorkerError>,
    /// The entry tensors, given back.
    pub args: Vec<ChipArg>,
}

/// A submitted run, until it is collected.
pub(crate) struct Submitted {
    seq: u64,
    args: Vec<ChipArg>,
    state: RunState,
}

// The queue holds a few runs at most, and a done run's result is moved out once: boxing it
// would allocate per run for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum RunState {
    /// On the device (or queued behind the other slot's run).
    Running(Box<Flight>),
    /// Ended: its result is ready for `wait`.
    Done(Result<RunReport, WorkerError>),
}

/// How far a launch got: to the run's end (host-only, or a backend that runs synchronously),
/// or to the device.
// Moved out at once by the caller; boxing the report would allocate per host-only bind.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Launch {
    Done(RunReport),
    Running(Box<Flight>),
}

/// A run launched on the device: what its end needs.
pub(crate) struct Flight {
    pub(crate) pending: crate::transport::PendingRun,
    pub(crate) slot: usize,
    /// The slot's entry staging, held while the run may read it.
    pub(crate) staging: Box<Staging>,
    /// The retained Definitions' bind counter at this run's bind (hbg), so none it uses is
    /// evicted while it is in flight.
    pub(crate) kept_bind: Option<u64>,
    pub(crate) tail: Tail,
}

/// The runtime's part of a run's end.
pub(crate) enum Tail {
    Tmr {
        start: Instant,
        run_start: Duration,
        sink: Option<crate::transport::TraceSink>,
    },
    Hbg {
        start: Instant,
        report: Box<crate::hbg::BindReport>,
        clock: crate::hbg::Clock,
        trace: Option<crate::transport::TraceSink>,
    },
}

impl ChipWorker {
    /// Accepts a run of `handle` with entry tensors `args` and `scalars` without waiting for
    /// it: [`Self::wait`] gives its result and its tensors back. The bind (hbg) or the staging
    /// (tmr) happens here, in a pipeline slot whose previous run has ended, while the other
    /// slot's run may still be on the device; the device runs submitted runs one at a time, in
    /// submission order. With two runs in flight ([`PIPELINE_DEPTH`]) this first waits for the
    /// older one's device run to end. A run that fails (bad input, a failed bind, a kernel
    /// failure, a deadlock) fails alone: its error comes from its own `wait`, and the worker
    /// takes new runs afterwards. Checks and runtimes are those of [`Self::run`].
    pub fn submit(
        &mut self,
        handle: CallableHandle,
        mut args: Vec<ChipArg>,
        scalars: &[u64],
        options: RunOptions,
    ) -> RunHandle {
        let pipelines = self.device.pipelines();
        while self.running() >= if pipelines { PIPELINE_DEPTH } else { 1 } {
            self.settle_oldest();
        }
        let slot = (0..PIPELINE_DEPTH)
            .find(|&slot| !self.slot_busy(slot))
            .expect("a slot is free once fewer than two runs are in flight");
        let state = match self.launch(slot, handle, &mut args, scalars, options) {
            Ok(Launch::Done(report)) => RunState::Done(Ok(report)),
            Ok(Launch::Running(flight)) => RunState::Running(flight),
            Err(e) => RunState::Done(Err(e)),
        };
        let seq = self.next_run;
        self.next_run += 1;
        self.runs.push_back(Submitted { seq, args, state });
        RunHandle {
            worker: self.id,
            seq,
        }
    }

    /// Waits for a submitted run and gives back its result and its tensors. Runs submitted
    /// before it end first (their results stay for their own `wait`).
    /// [`WorkerError::ForeignRun`] for a handle of another worker.
    pub fn wait(&mut self, run: RunHandle) -> Result<Finished, WorkerError> {
        let at = self.position(&run)?;
        for i in 0..=at {
            self.settle(i);
        }
        let done = self.runs.remove(at).expect("found above");
        match done.state {
            RunState::Done(result) => Ok(Finished {
                result,
                args: done.args,
            }),
            RunState::Running(_) => unreachable!("settled above"),
        }
    }

    /// [`Self::wait`] for at most about `timeout`: the run's result if it (and every run
    /// submitted before it) ended by then, or the handle back (`Err`) to wait again.
    pub fn wait_timeout(
        &mut self,
        run: RunHandle,
        timeout: Duration,
    ) -> Result<Result<Finished, RunHandle>, WorkerError> {
        let deadline = Instant::now() + timeout;
        let at = self.position(&run)?;
        for i in 0..=at {
            if let RunState::Running(flight) = &mut self.runs[i].state {
                let left = deadline.saturating_duration_since(Instant::now());
                let outcome = match flight.pending.wait_timeout(left) {
                    Ok(None) => return Ok(Err(run)),
                    Ok(Some(o)) => Ok(o),
                    Err(e) => Err(WorkerError::from(e)),
                };
                self.conclude(i, |w, flight, args| w.end(flight, outcome, args));
            }
        }
        self.wait(run).map(Ok)
    }

    /// Runs submitted and not yet collected.
    pub fn runs_pending(&self) -> usize {
        self.runs.len()
    }

    /// The index of `run` among the runs not yet collected.
    fn position(&self, run: &RunHandle) -> Result<usize, WorkerError> {
        if run.worker != self.id {
            return Err(WorkerError::ForeignRun);
        }
        // Handles are consumed by `wait`, so one of this worker's is always still here.
        self.runs
            .iter()
            .position(|r| r.seq == run.seq)
            .ok_or(WorkerError::ForeignRun)
    }

    /// Runs on the device (launched, not yet ended).
    fn running(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| matches!(r.state, RunState::Running(_)))
            .count()
    }

    /// Whether pipeline slot `slot` has a run on the device.
    pub(crate) fn slot_busy(&self, slot: usize) -> bool {
        self.runs
            .iter()
            .any(|r| matches!(&r.state, RunState::Running(f) if f.slot == slot))
    }

    /// Ends the oldest run still on the device.
    fn settle_oldest(&mut self) {
        if let Some(i) = self
            .runs
            .iter()
            .position(|r| matches!(r.state, RunState::Running(_)))
        {
            self.settle(i);
        }
    }

    /// Ends every run still on the device, oldest first (their results stay for `wait`).
    pub(crate) fn settle_all(&mut self) {
        for i in 0..self.runs.len() {
            self.settle(i);
        }
    }

    /// Waits for run `i`'s device run to end and makes it done (copy back, report).
    fn settle(&mut self, i: usize) {
        self.conclude(i, |w, flight, args| w.finish(flight, args));
    }

    /// Makes run `i`, if it is on the device, done with what `end` makes of its flight and
    /// its tensors (the flight is taken out of the run for it, the tensors lent).
    fn conclude(
        &mut self,
        i: usize,
        end: impl FnOnce(&mut Self, Flight, &mut [ChipArg]) -> Result<RunReport, WorkerError>,
    ) {
        let r = &mut self.runs[i];
        let RunState::Running(_) = r.state else {
            return;
        };
        let RunState::Running(flight) = std::mem::replace(
            &mut r.state,
            RunState::Done(Err(WorkerError::Transport(TransportError::Stopped))),
        ) else {
            unreachable!("matched above")
        };
        let mut args = std::mem::take(&mut r.args);
        let result = end(self, *flight, &mut args);
        let r = &mut self.runs[i];
        r.args = args;
        r.state = RunState::Done(result);
    }

    /// Launches a run in pipeline slot `slot` (see [`Self::submit`]).
    pub(crate) fn launch(
        &mut self,
        slot: usize,
        handle: CallableHandle,
        args: &mut [ChipArg],
        scalars: &[u64],
        options: RunOptions,
    ) -> Result<Launch, WorkerError> {
        // A bind may evict a retained Definition only if no run in flight uses it.
        self.kept.spare = self.runs.iter().find_map(|r| match &r.state {
            RunState::Running(f) => f.kept_bind,
            RunState::Done(_) => None,
        });
        let launched = match options.runtime {
            Runtime::Tmr if options.host_only => Err(WorkerError::HostOnlyNeedsHbg),
            Runtime::Tmr => self.launch_tmr(slot, handle, args, scalars, options),
            Runtime::Hbg => self.launch_hbg(slot, handle, args, scalars, options),
        };
        self.kept.spare = None;
        launched
    }

    /// Waits for a launched run's device run to end and ends it.
    pub(crate) fn finish(
        &mut self,
        flight: Flight,
        args: &mut [ChipArg],
    ) -> Result<RunReport, WorkerError> {
        let mut flight = flight;
        let pending = std::mem::replace(
            &mut flight.pending,
            crate::transport::PendingRun::done_stopped(),
        );
        let outcome = pending.wait().map_err(WorkerError::from);
        self.end(flight, outcome, args)
    }

    /// Ends a launched run whose device run gave `outcome`: the slot's staging goes back to
    /// the slot, the outputs are copied back, the report is made.
    fn end(
        &mut self,
        flight: Flight,
        outcome: Result<RunOutcome, WorkerError>,
        args: &mut [ChipArg],
    ) -> Result<RunReport, WorkerError> {
        let Flight {
            slot,
            staging,
            tail,
            ..
        } = flight;
        let result = outcome.and_then(|outcome| match tail {
            Tail::Tmr {
                start,
                run_start,
                sink,
            } => self.finish_tmr(outcome, args, &staging.staged, start, run_start, sink),
            Tail::Hbg {
                start,
                report,
                clock,
                trace,
            } => self.finish_hbg(outcome, args, &staging.staged, start, *report, clock, trace),
        });
        self.staging[slot] = Some(staging);
        result
    }
}
