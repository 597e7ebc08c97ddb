//! The host-built-graph runtime (hbg): the host runs the orchestration function into a mirror
//! of the device's shared state, ships the compact live image once, and the device runs its
//! schedulers only.
//!
//! One bind, phase by phase (each timed, with the minor page faults the binding thread took
//! over exactly the span its clock covers):
//!
//! | phase | what happens |
//! |---|---|
//! | `args` | place the entry tensors in GM (addresses only), adopt the chip entry |
//! | `arena_build` | format the mirror: shared state, payload records, orchestrator (host-only) |
//! | `graph_commit` | record the jobs no recorder thread has started, wait for the others, place
//! each new Definition (a retained one is in place already), reserve each Graph's heap block and
//! patch both into its outer task, in submission order |
//! | `host_orch` | run the orchestration function on this thread into the mirror (it may read
//! the entry tensors through their host copies; writing device memory from the host refuses) |
//! | `shared_mem` | measure the live prefix and export it into the retained image buffers |
//! | `graph_upload` | copy the bind's Definitions and Graph boundaries to the device |
//! | `arena_h2d` | copy the IN and INOUT entry tensors to the device (after the build, so the
//! orchestration does not run on caches the inputs just flushed; skipped in host-only mode) |
//! | `runtime_init` | on the device: reset its shared state, import the images (timed on the
//! device's thread) |
//! | `device_run` | ship the images (one copy each), then run the schedulers (the whole
//! device call less `runtime_init`) |
//! | `copy_back` | copy OUT and INOUT tensors back |
//!
//! The bind window ([`BindReport::bind_window`]) runs from `host_orch`'s start to
//! `graph_commit`'s end: the span the reference's `host_orch` covers (it closes after
//! `rt_orchestration_done`), and the one to compare with the reference's figure.
//!
//! Nothing is retired while the host builds: the rings, the heap and the dependency pool are
//! forward-only, and a graph that does not fit fails the bind with a typed error instead of
//! waiting. The mirror (its three regions and the two image buffers) is allocated at the first
//! bind and kept by the `ChipWorker` until it is finalized.
//!
//! ## Graphs on hbg
//!
//! (`graphs`: the Graph state a mirror keeps, the sink that accepts submissions, the commit.)
//! The first submission of a key in a bind queues its recording on the recorder pool
//! ([`crate::record::RecorderPool`]) and adds one outer task; every later submission whose
//! boundary matches the first one's (compared tensor by tensor with `TaskTensor::same_layout`,
//! under the in-flight entry's lock) adds one outer task. A boundary of at most 32 tensors is
//! the outer task's argument list as it is; a wider one puts its writers first and its other
//! readers on kernel-less prelude tasks the outer task waits for. `graph_commit` records the
//! jobs still queued itself (`RecorderPool::help`), waits for every other recording, places
//! each Definition once, reserves each invocation's heap block and patches both into its outer
//! task, in submission order; a recording that failed after its outer task
//! was submitted fails the bind as invalid arguments. Without a sink (tmr, or inside a
//! recording) a body runs inline; a Graph nested in a recorded body makes that recording
//! unsupported. Caps: 1024 nodes per Definition (a longer body finishes but is unsupported), 16
//! Definitions per bind, 128 boundary tensors (at most 32 of them written) and 64 scalars, 32
//! tensors and 16 scalars per node.
//!
//! ## Retained Definitions
//!
//! The commit retains each Definition it recorded ([`GraphRetention`]): the host copy, and a
//! device copy in a persistent allocation of its own (`DeviceTransport::malloc`, which the
//! per-run `free_all` of the next bind's staging leaves alone), uploaded once. Retained
//! Definitions are keyed by callable, full key and the first invocation's boundary
//! (`GraphBoundary::matches_args`: every layout field, tag, manual-dependency flag and alias
//! relation of each tensor, and the scalar count; and each tensor's view offset from its
//! buffer's start). A bind's first submission of a key that matches one is marked ready
//! without a recording (no recorder is woken) and its outer tasks point at the retained device
//! copy; later submissions of the key in the bind compare against it as usual. Caps: a count
//! and a byte total; to make room the Definition whose last use is the oldest bind goes first
//! (ties: the one retained first), never one the current bind uses; a Definition that cannot
//! be retained is staged per bind. Verification records anyway and compares content hashes
//! ([`HbgError::GraphChanged`] names the first differing node, [`first_differing_node`]).
//!
//! A warm bind that submits what the slot's last bind submitted, in the same order, follows
//! it (`memo`): each submission whose key, tags and scalar count are the last bind's at that
//! position and whose boundary tensors are byte for byte the ones staged there is accepted as
//! it was then (the same entry, the same retained Definition), without comparing layouts
//! again and without rewriting its staging. The first submission that differs, or that the
//! last bind did not replay, is accepted as above, and so is every one after it.

use crate::chip_worker::{
    CallableHandle, ChipArg, ChipWorker, Flight, Launch, RunReport, Staging, Tail, WorkerError,
};
use crate::image_payloads::ImagePayloads;
use crate::os::PrivateMapping;
use crate::record::{RecorderPool, RefusingWaiter};
use crate::transport::{HostImage, RunOptions};
use simpler_aicpu::{Rt, RtError, RunError};
use simpler_core::gm::{Gm, GmFault};
use simpler_core::image::ImageError;
use simpler_core::orchestrator::Blocked;
use simpler_core::orchestrator::{Orchestrator, OrchestratorLayout};
use simpler_core::sched::SchedState;
use simpler_core::scope::ScopeMode;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

mod error;
mod graphs;
mod memo;
mod replay;
mod report;
mod retention;

pub use error::HbgError;
use graphs::{commit, BindGraphs, Graphs, GRAPH_STAGING_BYTES, SHELL_HEAP};
pub use replay::BindReplay;
use replay::{take_guard, Guard};
pub use report::{BindPhase, BindReport, GraphPhases, Phase, UnknownBindPhase, CONTROL_PLANE};
pub(crate) use retention::Kept;
pub use retention::{
    first_differing_node, GraphRetention, RETAINED_MAX_BYTES, RETAINED_MAX_DEFINITIONS,
    VERIFY_GRAPHS_ENV,
};

/// The retained host mirror of one chip's shared memory.
pub(crate) struct Mirror {
    layout: OrchestratorLayout,
    sched: PrivateMapping,
    orch: PrivateMapping,
    /// The payload records, written in the image's format as the orchestration submits.
    payloads: ImagePayloads,
    sched_image: ImageBuffer,
    graphs: Graphs,
    /// What the last bind used of the shared state (cleared at the next bind).
    last_usage: Option<simpler_core::image::Usage>,
    /// What the last bind's image depended on, so a later bind that matches replays it.
    guard: Guard,
}

impl Mirror {
    /// The regions are page-aligned mappings of zero pages: a page is touched only when a
    /// bind writes it (an aligned heap allocation would be zeroed eagerly).
    fn new(layout: OrchestratorLayout) -> Result<Self, HbgError> {
        let region = |bytes: usize| {
            PrivateMapping::new(bytes.max(1)).map_err(|e| HbgError::Mirror(e.to_string()))
        };
        Ok(Self {
            sched: region(layout.sched().size())?,
            orch: region(layout.size())?,
            payloads: ImagePayloads::default(),
            layout,
            sched_image: ImageBuffer::default(),
            graphs: Graphs::default(),
            last_usage: None,
            guard: Guard::default(),
        })
    }
}

/// What the host sees of device memory while it builds: the entry tensors it staged, through
/// their host copies (the reference's host views of external tensors). Reads inside one of
/// them succeed; anything else, and every write (the device copy is already staged), faults.
struct HostViews<'a> {
    args: &'a [ChipArg],
    staged: &'a [Option<u64>],
    /// Where every successful read went (the guard's reads), when recording.
    reads: Option<std::sync::Mutex<&'a mut Vec<(u64, u32)>>>,
}

impl Gm for HostViews<'_> {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let fault = GmFault {
            addr,
            len: dst.len() as u64,
            kind: simpler_core::gm::GmFaultKind::Outside,
        };
        let (base, data) = self
            .args
            .iter()
            .zip(self.staged)
            .filter_map(|(a, at)| match (a, at) {
                (ChipArg::Host(t), Some(base)) => Some((*base, t.data.as_slice())),
                _ => None,
            })
            .find(|(base, data)| addr >= *base && addr - base < data.len() as u64)
            .ok_or(fault)?;
        let at = (addr - base) as usize;
        let src = data.get(at..at + dst.len()).ok_or(fault)?;
        dst.copy_from_slice(src);
        if let Some(reads) = &self.reads {
            // Uncontended: the orchestration thread is the only reader.
            let mut reads = reads.lock().unwrap_or_else(|e| e.into_inner());
            let len = u32::try_from(dst.len()).unwrap_or(u32::MAX);
            reads.push((addr, len));
        }
        Ok(())
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: src.len() as u64,
            kind: simpler_core::gm::GmFaultKind::Outside,
        })
    }
}

/// Times one phase on this thread: wall clock and minor faults over the same span.
pub(crate) struct Clock {
    bind: Instant,
    start: Instant,
    cpu: Duration,
    faults: u64,
    allocs: u64,
}

impl Clock {
    /// Starts timing a phase of the bind that started at `bind`.
    fn start(bind: Instant) -> Self {
        let faults = crate::os::minor_faults();
        let cpu = crate::os::thread_cpu_time();
        Self {
            bind,
            start: Instant::now(),
            cpu,
            faults,
            allocs: crate::alloc_count::now(),
        }
    }
    fn stop(self) -> Phase {
        let time = self.start.elapsed();
        Phase {
            time,
            cpu: crate::os::thread_cpu_time().saturating_sub(self.cpu),
            minflt: crate::os::minor_faults().saturating_sub(self.faults),
            allocs: crate::alloc_count::now().saturating_sub(self.allocs),
            at: self.start.saturating_duration_since(self.bind),
        }
    }
}

impl ChipWorker {
    /// The keys each recorder thread recorded, in order (for tests of storage reuse).
    pub fn recorder_history(&self) -> Vec<Vec<u64>> {
        self.recorders
            .as_ref()
            .map(RecorderPool::recorded_by_thread)
            .unwrap_or_default()
    }

    /// Sets how many Graph recordings may run at once while the orchestration builds (by
    /// default one fewer than the CPUs, at least one); 0 defers them all to `graph_commit`.
    pub fn set_recordings_while_building(&mut self, n: usize) {
        self.recorders
            .get_or_insert_with(RecorderPool::start)
            .set_while_building(n);
    }

    /// Sets whether the commit records the jobs no recorder thread has started yet itself
    /// (on by default; off, it waits for the recorder threads, as a test of their rotation
    /// needs).
    pub fn set_commit_helps(&mut self, on: bool) {
        self.recorders
            .get_or_insert_with(RecorderPool::start)
            .set_commit_helps(on);
    }

    /// Blocks until every recorder thread has stood its storage up (they start at callable
    /// registration and do it beside the first binds; a benchmark of steady-state binds waits
    /// for it).
    pub fn wait_for_recorders(&self) {
        if let Some(pool) = &self.recorders {
            pool.wait_settled();
        }
    }

    /// Recorder threads the pool has started (0 before it starts, at the first callable
    /// registration).
    pub fn recorder_threads(&self) -> usize {
        self.recorders.as_ref().map_or(0, RecorderPool::threads)
    }

    /// Makes the next recording a recorder thread takes drop that thread's storage and fail to
    /// stand it up again at `part`.
    pub fn inject_recorder_stand_up_failure(&mut self, part: crate::record::StandUpPart) {
        self.recorders
            .get_or_insert_with(RecorderPool::start)
            .inject_stand_up_failure(part);
    }

    /// The last bind's commit: per outer task in submission order, its Graph's key and the
    /// device address of its heap block.
    pub fn last_graph_commit(&self) -> Vec<(u64, u64)> {
        self.last_hbg_slot
            .and_then(|slot| self.hbg[slot].as_ref())
            .map(|m| m.graphs.committed.clone())
            .unwrap_or_default()
    }

    /// The hbg run of [`ChipWorker::run`] in pipeline slot `slot`, up to the device: the
    /// bind, phase by phase, the image shipped and the run launched. With
    /// [`RunOptions::host_only`] it stops after building the image and is done.
    pub(crate) fn launch_hbg(
        &mut self,
        slot: usize,
        handle: CallableHandle,
        args: &mut [ChipArg],
        scalars: &[u64],
        options: RunOptions,
    ) -> Result<Launch, WorkerError> {
        let run_device = !options.host_only;
        let trace = options.trace;
        let start = Instant::now();
        let mut report = BindReport::default();
        let clock = Clock::start(start);
        // Retained across binds; a bind that fails leaves it behind and the next makes another.
        let mut staging = self.staging[slot].take().unwrap_or_default();
        self.prepare(slot, handle, args, scalars, false, &mut staging)?;
        // Device memory for this bind's Definitions and Graph boundaries.
        let staging_base = self.device.alloc_in(slot, GRAPH_STAGING_BYTES)?.ok_or(
            WorkerError::OutOfDeviceMemory {
                bytes: GRAPH_STAGING_BYTES,
            },
        )?;
        *report.phase_mut(BindPhase::Args) = clock.stop();

        // A replay's guard check and placement are its `arena_build` (a built bind's own
        // `arena_build` replaces it).
        let clock = Clock::start(start);
        let generation = self.kept.generation;
        let guarded = self.replay.enabled
            && self.hbg[slot].as_mut().is_some_and(|m| {
                let views = HostViews {
                    args,
                    staged: &staging.staged,
                    reads: None,
                };
                let holds = m.guard.holds(handle.0, &staging.chip, &views, generation);
                if holds {
                    Guard::relocate(m, &staging.chip);
                    Guard::move_staging(m, staging_base);
                }
                holds
            });
        let replayed = match guarded && !self.replay.verify {
            true => self.replay_bind(slot, &mut report)?,
            false => None,
        };
        *report.phase_mut(BindPhase::ArenaBuild) = clock.stop();
        let built = match replayed {
            Some(built) => built,
            None => {
                if guarded {
                    // Verifying: keep the image a replay would ship, to compare, and where
                    // its heap block addresses are (a replay places the heap blocks where
                    // this build's commit will, so they are moved there after it).
                    let m = self.hbg[slot].as_mut().expect("guarded");
                    let len = m.guard.built.map_or(0, |b| b.sched_len);
                    self.replay_check.clear();
                    self.replay_check
                        .extend_from_slice(m.sched_image.filled(len));
                    self.replay_heap_at.clear();
                    for &(shell, _) in &m.graphs.shells {
                        if let Some(w) = m.payloads.scalar_word(shell, SHELL_HEAP) {
                            self.replay_heap_at.push(len + w * 8);
                        }
                    }
                    self.replay_heap = m.guard.heap.map(|h| h.0);
                    self.replay_check.extend_from_slice(m.payloads.bytes());
                    self.replay_check.extend_from_slice(&m.graphs.staging);
                }
                // The retained Definitions are lent to the mirror this bind builds into.
                if let Some(m) = self.hbg[slot].as_mut() {
                    std::mem::swap(&mut m.graphs.kept, &mut self.kept);
                }
                let built = self.build_image(
                    slot,
                    handle,
                    args,
                    &staging,
                    staging_base,
                    start,
                    &mut report,
                );
                if let Some(m) = self.hbg[slot].as_mut() {
                    std::mem::swap(&mut m.graphs.kept, &mut self.kept);
                }
                let built = built?;
                if guarded {
                    let m = self.hbg[slot].as_mut().expect("built");
                    if let (Some(was), Some((now, _))) = (self.replay_heap, m.graphs.heap_block) {
                        for &at in &self.replay_heap_at {
                            if let Some(w) = self.replay_check.get_mut(at..at + 8) {
                                let v = u64::from_le_bytes(w.try_into().expect("eight bytes"));
                                w.copy_from_slice(&(v - was + now).to_le_bytes());
                            }
                        }
                    }
                    let sched = m.sched_image.filled(built.sched_len);
                    let payloads = m.payloads.bytes();
                    let staged: &[u8] = &m.graphs.staging;
                    let len = sched.len() + payloads.len() + staged.len();
                    let old = &self.replay_check;
                    let differs = sched
                        .iter()
                        .chain(payloads)
                        .chain(staged)
                        .zip(old.iter())
                        .position(|(a, b)| a != b)
                        .or_else(|| (len != old.len()).then_some(len.min(old.len())));
                    if let Some(offset) = differs {
                        return Err(WorkerError::Hbg(HbgError::ReplayChanged { offset }));
                    }
                }
                built
            }
        };
        self.last_hbg_slot = Some(slot);

        let clock = Clock::start(start);
        if run_device {
            self.upload_graph_staging(slot, staging_base)?;
        }
        *report.phase_mut(BindPhase::GraphUpload) = clock.stop();

        let clock = Clock::start(start);
        if run_device {
            ChipWorker::copy_in(&*self.device, args, &staging.staged)?;
        }
        *report.phase_mut(BindPhase::ArenaH2d) = clock.stop();

        if !run_device {
            let run = host_only_run(start, &report, built.edges);
            self.staging[slot] = Some(staging);
            if let Some(sink) = &trace {
                record_bind_phases(sink, &report, Duration::ZERO);
            }
            return Ok(Launch::Done(run));
        }
        let clock = Clock::start(start);
        let mirror = self.hbg[slot].as_mut().expect("built by this bind");
        let kept_bind = match report.replayed {
            true => mirror.guard.kept_bind,
            false => self.kept.binds,
        };
        let image = HostImage {
            usage: built.usage,
            sched: mirror.sched_image.filled(built.sched_len),
            payloads: mirror.payloads.bytes(),
            edges: built.edges,
        };
        let pending = self.device.launch_prebuilt(
            self.callables[handle.0].kernels.clone(),
            image,
            RunOptions {
                trace: trace.clone(),
                ..RunOptions::default()
            },
        )?;
        Ok(Launch::Running(Box::new(Flight {
            pending,
            slot,
            staging,
            kept_bind: Some(kept_bind),
            tail: Tail::Hbg {
                start,
                report: Box::new(report),
                clock,
                trace,
            },
        })))
    }

    /// The end of a launched hbg run: `runtime_init` and `device_run` (the device times its
    /// own set-up, reset and image import, on its thread; `device_run` is the rest of the span
    /// from the launch to the end of this wait), then `copy_back`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish_hbg(
        &mut self,
        outcome: simpler_aicpu::RunOutcome,
        args: &mut [ChipArg],
        staged: &[Option<u64>],
        start: Instant,
        mut report: BindReport,
        clock: Clock,
        trace: Option<crate::transport::TraceSink>,
    ) -> Result<RunReport, WorkerError> {
        let whole = clock.stop();
        *report.phase_mut(BindPhase::RuntimeInit) = Phase {
            time: outcome.init,
            at: whole.at,
            ..Phase::default()
        };
        *report.phase_mut(BindPhase::DeviceRun) = Phase {
            time: whole.time.saturating_sub(outcome.init),
            at: whole.at + outcome.init,
            ..whole
        };
        if let Err(e) = outcome.result {
            return Err(WorkerError::Run(e));
        }
        let clock = Clock::start(start);
        self.copy_back(args, staged)?;
        *report.phase_mut(BindPhase::CopyBack) = clock.stop();
        if let Some(sink) = &trace {
            record_bind_phases(sink, &report, report.phase(BindPhase::RuntimeInit).at);
        }
        Ok(RunReport {
            outcome,
            host: start.elapsed(),
            bind: Some(report),
        })
    }

    /// Phases `arena_build` to `shared_mem`: formats (or attaches to) the mirror, runs the
    /// orchestration into it, commits the bind's Graphs, and exports the live image into the
    /// mirror's retained buffers. Fills those phases, the task and Graph counts and the image
    /// size in `report`.
    #[allow(clippy::too_many_arguments)]
    fn build_image(
        &mut self,
        slot: usize,
        handle: CallableHandle,
        args: &[ChipArg],
        staging: &Staging,
        staging_base: u64,
        start: Instant,
        report: &mut BindReport,
    ) -> Result<BuiltImage, WorkerError> {
        let clock = Clock::start(start);
        if self.hbg[slot].is_none() {
            let (layout, _) = self.device.layouts()?;
            let mut mirror = Mirror::new(layout).map_err(WorkerError::Hbg)?;
            // The worker's retained Definitions are lent to the mirror building.
            std::mem::swap(&mut mirror.graphs.kept, &mut self.kept);
            self.hbg[slot] = Some(Box::new(mirror));
        }
        let callable = &self.callables[handle.0];
        let mirror = self.hbg[slot].as_mut().expect("made above");
        let layout = mirror.layout;
        // The first bind formats the mirror's shared state; later binds attach to it and clear
        // only what the previous bind used (its watermarks, claimed slots, queued cells):
        // slots are initialized when claimed.
        let sched = mirror.sched.bytes_mut();
        let attach = mirror.last_usage.is_some();
        let shared = match mirror.last_usage.take() {
            Some(used) => {
                SchedState::attach_region(sched, layout.sched()).inspect(|s| s.reset_prefix(&used))
            }
            None => SchedState::init(sched, layout.sched()),
        }
        .map_err(layout_error)?;
        // The payload records go straight into the image (no mirror of the device's records).
        mirror.payloads.clear();
        // Likewise the orchestrator's private state: its TensorMap is emptied in O(1).
        let orch_region = mirror.orch.bytes_mut();
        let mut orch = if attach {
            Orchestrator::attach(orch_region, &layout, &shared)
        } else {
            Orchestrator::init(orch_region, &layout, &shared)
        }
        .map_err(layout_error)?;
        *report.phase_mut(BindPhase::ArenaBuild) = clock.stop();

        let clock = Clock::start(start);
        let graph_counts = mirror.graphs.counts;
        let pool = self.recorders.get_or_insert_with(RecorderPool::start);
        let wakes_before = mirror.graphs.begin_bind(pool, handle.0, self.retention);
        let mut waiter = RefusingWaiter::default();
        let abort = AtomicU32::new(0);
        mirror.guard.valid = false;
        let mut reads = std::mem::take(&mut mirror.guard.reads);
        reads.clear();
        let result = {
            let views = HostViews {
                args,
                staged: &staging.staged,
                reads: Some(std::sync::Mutex::new(&mut reads)),
            };
            let mut sink = BindGraphs {
                g: &mut mirror.graphs,
                pool: &mut *pool,
                base: staging_base,
            };
            let mut rt = Rt::new(
                &mut orch,
                &mirror.payloads,
                &mut waiter,
                &views,
                &staging.orch_args,
                &abort,
            )
            .with_graphs(&mut sink);
            let r = rt.scope(ScopeMode::Auto, |rt| (callable.orch)(rt));
            r.and_then(|()| rt.error().map_or(Ok(()), Err))
        };
        mirror.guard.reads = reads;
        *report.phase_mut(BindPhase::HostOrch) = clock.stop();
        mirror.graphs.phases.host_orch_wakes = pool.orchestration_wakes() - wakes_before;

        let clock = Clock::start(start);
        // Commit even when the orchestration failed: no recording may outlive its bind.
        pool.orchestrating(false);
        let committed = commit(
            &mut mirror.graphs,
            &mirror.payloads,
            &*self.device,
            (slot, staging_base),
            pool,
        );
        *report.phase_mut(BindPhase::GraphCommit) = clock.stop();
        mirror.graphs.phases.recorder_wakes = pool.orchestration_wakes() - wakes_before;
        if let Err(e) = result {
            return Err(WorkerError::Hbg(match waiter.blocked {
                Some(Blocked::Producer { task } | Blocked::Consumers { task }) => {
                    HbgError::TaskNotRun { task, error: e }
                }
                Some(_) => HbgError::GraphTooLarge(e),
                None => HbgError::Orchestration(e),
            }));
        }
        committed?;

        let clock = Clock::start(start);
        let edges = orch.edges_recorded();
        let usage = shared
            .usage(orch.edges_used())
            .map_err(|e| WorkerError::Hbg(HbgError::Image(e)))?;
        mirror.last_usage = Some(usage);
        let (sched_len, payloads_len) = export_image(
            &shared,
            &usage,
            &mut mirror.sched_image,
            &mut mirror.payloads,
        )?;
        report.tasks = usage.tasks.iter().map(|&t| t as u64).sum();
        report.image_bytes = sched_len + payloads_len;
        let g = &mirror.graphs;
        report.graph_phases = g.phases;
        report.graphs = core::array::from_fn(|i| g.counts[i] - graph_counts[i]);
        let built = BuiltImage {
            usage,
            sched_len,
            edges,
        };
        take_guard(mirror, handle.0, args, staging, staging_base, built, report);
        *report.phase_mut(BindPhase::SharedMem) = clock.stop();
        Ok(built)
    }

    /// `graph_upload`: copies the bind's staged Definitions and Graph boundaries to the
    /// device memory reserved for them at `base`.
    fn upload_graph_staging(&self, slot: usize, base: u64) -> Result<(), WorkerError> {
        let staged = &self.hbg[slot]
            .as_ref()
            .expect("built by this bind")
            .graphs
            .staging;
        if staged.is_empty() {
            return Ok(());
        }
        if !self.device.copy_to_device(base, staged)? {
            return Err(WorkerError::OutOfDeviceMemory {
                bytes: staged.len() as u64,
            });
        }
        Ok(())
    }
}

/// What a bind's build leaves for the device run: the usage the images were exported with,
/// the shared state's image length in the mirror's image buffer, and the edges recorded.
#[derive(Clone, Copy)]
struct BuiltImage {
    usage: simpler_core::image::Usage,
    sched_len: usize,
    edges: u64,
}

/// `shared_mem`'s export: the shared state's live prefix into `sched_image`, and the payload
/// records' image completed for `usage`. Returns both images' lengths in bytes.
fn export_image(
    shared: &SchedState<'_>,
    usage: &simpler_core::image::Usage,
    sched_image: &mut ImageBuffer,
    payloads: &mut ImagePayloads,
) -> Result<(usize, usize), WorkerError> {
    let sched_len = SchedState::image_size(usage);
    let n = shared
        .export(usage, sched_image.get(sched_len).map_err(WorkerError::Hbg)?)
        .map_err(|e| WorkerError::Hbg(HbgError::Image(e)))?;
    let p = payloads
        .image(&usage.tasks)
        .ok_or(WorkerError::Hbg(HbgError::Image(ImageError::Usage {
            field: "payload.tasks",
            value: usage.tasks.iter().map(|&t| t as u64).sum(),
        })))?
        .len();
    Ok((n, p))
}

/// The run report of a host-only bind (`run_device` false): nothing ran, and the outcome counts
/// the tasks built and the edges recorded.
fn host_only_run(start: Instant, report: &BindReport, edges: u64) -> RunReport {
    let outcome = simpler_aicpu::RunOutcome {
        result: Ok(()),
        tasks: report.tasks,
        edges,
        dispatched: 0,
        orchestration: report.phase(BindPhase::HostOrch).time,
        init: Duration::ZERO,
        device: Duration::ZERO,
        trace_dropped: 0,
    };
    RunReport {
        outcome,
        host: start.elapsed(),
        bind: Some(*report),
    }
}

/// Index of a bind phase's span in a trace's host-track events (`kernel` field): past the
/// tmr host phases.
pub const TRACE_PHASE_BASE: u32 = 16;

/// Index of the bind window's span ([`BindReport::bind_window`]) in a trace's host-track
/// events: past every bind phase's.
pub const TRACE_BIND_WINDOW: u32 = TRACE_PHASE_BASE + BindPhase::ALL.len() as u32;

/// Adds the bind to its trace: the device's events (counted from the device call's start,
/// `device_at` into the bind) on the bind's clock, a host-track span per phase that ran, and
/// one for the bind window (over `host_orch` and `graph_commit`).
fn record_bind_phases(
    sink: &crate::transport::TraceSink,
    report: &BindReport,
    device_at: Duration,
) {
    let spans = report.phases().filter(|(_, ph)| !ph.time.is_zero());
    let at = report.phase(BindPhase::HostOrch).at;
    let window = (TRACE_BIND_WINDOW, at, at + report.bind_window());
    crate::trace::add_host_spans(
        sink,
        device_at,
        spans
            .map(|(p, ph)| (TRACE_PHASE_BASE + p.index() as u32, ph.at, ph.at + ph.time))
            .chain(std::iter::once(window)),
    );
}

/// A retained image buffer: a mapping of zero pages grown to its high-water mark (to twice
/// what was asked, when it must grow) and never value-initialized: the kernel supplies zero
/// pages as they are first written, and an export writes every byte it ships.
#[derive(Default)]
struct ImageBuffer {
    map: Option<PrivateMapping>,
}

impl ImageBuffer {
    /// At least `len` writable bytes.
    fn get(&mut self, len: usize) -> Result<&mut [u8], HbgError> {
        if self.map.as_ref().map_or(0, PrivateMapping::len) < len {
            let map = PrivateMapping::new(len.max(4096) * 2)
                .map_err(|e| HbgError::Mirror(e.to_string()))?;
            self.map = Some(map);
        }
        let map = self.map.as_mut().expect("mapped above");
        Ok(&mut map.bytes_mut()[..len])
    }

    /// The first `len` bytes (written by the last export).
    fn filled(&self, len: usize) -> &[u8] {
        self.map
            .as_ref()
            .and_then(|m| m.bytes().get(..len))
            .unwrap_or(&[])
    }
}

fn layout_error(e: simpler_core::layout::LayoutError) -> WorkerError {
    WorkerError::Hbg(HbgError::Mirror(format!("layout: {e}")))
}

impl From<HbgError> for RunError {
    fn from(e: HbgError) -> Self {
        match e {
            HbgError::GraphTooLarge(e)
            | HbgError::Orchestration(e)
            | HbgError::TaskNotRun { error: e, .. } => RunError::Orchestration(e),
            HbgError::Image(e) => RunError::Image(e),
            HbgError::Mirror(_) => RunError::Orchestration(RtError::Fatal(5)),
            HbgError::GraphFailed { .. }
            | HbgError::GraphChanged { .. }
            | HbgError::ReplayChanged { .. } => RunError::Orchestration(RtError::Fatal(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bind_window_runs_from_the_orchestration_to_the_end_of_the_commit() {
        let mut report = BindReport::default();
        let us = Duration::from_micros;
        // args 0-10, arena_build 10-30, host_orch 30-130, graph_commit 131-631, shared_mem after.
        for (p, at, time) in [
            (BindPhase::Args, 0, 10),
            (BindPhase::ArenaBuild, 10, 20),
            (BindPhase::HostOrch, 30, 100),
            (BindPhase::GraphCommit, 131, 500),
            (BindPhase::SharedMem, 631, 40),
        ] {
            *report.phase_mut(p) = Phase {
                at: us(at),
                time: us(time),
                ..Phase::default()
            };
        }
        assert_eq!(report.bind_window(), us(601));
    }

    #[test]
    fn the_control_plane_sums_exactly_its_named_phases() {
        let mut report = BindReport::default();
        for (i, ph) in report.phases.iter_mut().enumerate() {
            ph.time = Duration::from_micros(1 << i);
            ph.minflt = 1 << i;
        }
        let bits: u64 = CONTROL_PLANE.iter().map(|p| 1 << p.index()).sum();
        let cp = report.control_plane();
        assert_eq!(cp.time, Duration::from_micros(bits));
        assert_eq!(cp.minflt, bits);
        assert_eq!(report.phase(BindPhase::HostOrch), &report.phases[2]);
        assert_eq!("host_orch".parse(), Ok(BindPhase::HostOrch));
        assert_eq!(
            "no such phase".parse::<BindPhase>(),
            Err(UnknownBindPhase("no such phase".to_string()))
        );
        for (i, p) in BindPhase::ALL.into_iter().enumerate() {
            assert_eq!(p.index(), i);
            assert_eq!(p.name().parse(), Ok(p));
        }
    }
}
