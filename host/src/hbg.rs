//! The host-built-graph runtime (hbg): the host runs the orchestration function into a mirror
//! of the device's shared state, ships the compact live image once, and the device runs its
//! schedulers only.
//!
//! One bind, phase by phase (each timed, with the minor page faults the binding thread took
//! over exactly the span its clock covers):
//!
//! | phase | what happens |
//! |---|---|
//! | `args` | stage the entry tensors in GM, adopt the chip entry |
//! | `arena_build` | format the mirror: shared state, payload records, orchestrator (host-only) |
//! | `host_orch` | run the orchestration function on this thread into the mirror (it may read
//! the entry tensors through their host copies; writing device memory from the host refuses) |
//! | `shared_mem` | measure the live prefix and export it into the retained image buffers |
//! | `graph_upload` | copy the bind's Definitions and Graph boundaries to the device |
//! | `device_run` | ship the images (one copy each), import, run the schedulers |
//! | `copy_back` | copy OUT and INOUT tensors back |
//!
//! Nothing is retired while the host builds: the rings, the heap and the dependency pool are
//! forward-only, and a graph that does not fit fails the bind with a typed error instead of
//! waiting. The mirror (its three regions and the two image buffers) is allocated at the first
//! bind and kept by the `ChipWorker` until it is finalized.

use crate::chip_worker::{CallableHandle, ChipArg, ChipWorker, RunReport, WorkerError};
use crate::record::{GraphBoundary, Recording};
use crate::transport::{HostImage, RunOptions};
use simpler_aicpu::payloads::{PayloadsLayout, TaskPayloads};
use simpler_aicpu::{GraphBody, GraphRef, GraphSink, Rt, RtError, RunError};
use simpler_core::gm::{Gm, GmFault};
use simpler_core::graph::GraphDefinitionHeader;
use simpler_core::image::{ImageError, Writer};
use simpler_core::layout::Line;
use simpler_core::orchestrator::TaskArg;
use simpler_core::orchestrator::{Blocked, GaveUp, Orchestrator, OrchestratorLayout, Waiter};
use simpler_core::sched::SchedState;
use simpler_core::scope::ScopeMode;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

/// The named phases of a bind.
pub const PHASES: [&str; 7] = [
    "args",
    "arena_build",
    "host_orch",
    "shared_mem",
    "graph_upload",
    "device_run",
    "copy_back",
];

/// One phase's cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    /// Wall time.
    pub time: Duration,
    /// Minor page faults the binding thread took in it.
    pub minflt: u64,
}

/// What one bind cost, by phase (in [`PHASES`] order), and what it shipped.
#[derive(Clone, Copy, Debug, Default)]
pub struct BindReport {
    /// Per phase.
    pub phases: [Phase; 7],
    /// Graph submissions that recorded a Definition, replayed one, or ran inline.
    pub graphs: [u64; 3],
    /// Tasks the host built.
    pub tasks: u64,
    /// Bytes shipped: the shared state's live image plus the payloads'.
    pub image_bytes: usize,
}

impl BindReport {
    /// The control plane: `host_orch` + `shared_mem` (the host's cost to produce the image).
    pub fn control_plane(&self) -> Duration {
        self.phases[2].time + self.phases[3].time
    }
}

/// Why a host-built run failed before reaching the device.
#[derive(Debug)]
pub enum HbgError {
    /// The graph does not fit the mirror (a ring, the heap or the dependency pool is full);
    /// nothing is retired while building, so this never waits.
    GraphTooLarge(RtError),
    /// The orchestration failed.
    Orchestration(RtError),
    /// The image could not be measured or written.
    Image(ImageError),
}

impl fmt::Display for HbgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GraphTooLarge(e) => write!(
                f,
                "the graph does not fit the host mirror ({e:?}); enlarge the rings or the heap"
            ),
            Self::Orchestration(e) => write!(f, "host orchestration failed: {e:?}"),
            Self::Image(e) => write!(f, "live image: {e:?}"),
        }
    }
}

/// Device memory a bind reserves for its Definitions and Graph boundaries.
const GRAPH_STAGING_BYTES: u64 = 8 << 20;
/// Definitions one bind may hold.
const MAX_DEFINITIONS: usize = simpler_core::graph::GRAPH_MAX_DEFINITIONS;

struct Cached {
    boundary: GraphBoundary,
    graph: GraphRef,
}

/// The Graph state a mirror keeps across binds: the recorder's storage, the per-bind
/// Definition cache, and the staging buffer of the Definitions and boundaries to upload.
#[derive(Default)]
struct Graphs {
    recording: Recording,
    cache: HashMap<u64, Cached>,
    staging: Vec<u8>,
    scratch: GraphBoundary,
    recorded: u64,
    replayed: u64,
    inline: u64,
}

/// The orchestration's Graph sink during a bind: records on a miss (on this thread), replays
/// on a hit, stages Definitions and boundaries for `graph_upload`.
struct BindGraphs<'g> {
    g: &'g mut Graphs,
    base: u64,
}

impl BindGraphs<'_> {
    fn place(&mut self, bytes: &[u8]) -> Option<u64> {
        let at = self.g.staging.len().div_ceil(8) * 8;
        let end = at + bytes.len();
        if end as u64 > GRAPH_STAGING_BYTES {
            return None;
        }
        self.g.staging.resize(at, 0);
        self.g.staging.extend_from_slice(bytes);
        Some(self.base + at as u64)
    }
}

impl GraphSink for BindGraphs<'_> {
    fn definition(
        &mut self,
        full_key: u64,
        body: GraphBody,
        boundary: &[TaskArg],
        scalars: &[u64],
    ) -> Option<GraphRef> {
        let b = &mut self.g.scratch;
        b.tensors.clear();
        b.tags.clear();
        b.scalars.clear();
        b.tensors.extend(boundary.iter().map(|a| a.tensor));
        b.tags.extend(boundary.iter().map(|a| a.tag));
        b.scalars.extend_from_slice(scalars);
        if let Some(c) = self.g.cache.get(&full_key) {
            if c.boundary.matches(&self.g.scratch) {
                self.g.replayed += 1;
                return Some(c.graph);
            }
            // A different shape under a recorded key never reuses its heap layout.
            log::warn!("graph {full_key:#x}: boundary differs from the recorded one; inline");
            self.g.inline += 1;
            return None;
        }
        if self.g.cache.len() >= MAX_DEFINITIONS {
            self.g.inline += 1;
            return None;
        }
        let boundary = self.g.scratch.clone();
        let image = match self.g.recording.record(full_key, body, Some(&boundary)) {
            Ok(image) => image.to_vec(),
            Err(e) => {
                log::warn!("graph {full_key:#x}: {e}; inline");
                self.g.inline += 1;
                return None;
            }
        };
        let header: GraphDefinitionHeader =
            bytemuck::pod_read_unaligned(&image[..core::mem::size_of::<GraphDefinitionHeader>()]);
        let definition = self.place(&image)?;
        let graph = GraphRef {
            definition,
            required_heap: header.required_heap,
        };
        self.g.cache.insert(full_key, Cached { boundary, graph });
        self.g.recorded += 1;
        Some(graph)
    }

    fn stage_boundary(&mut self, boundary: &[TaskArg]) -> Option<u64> {
        let mut bytes = [0u8; 128 * simpler_core::limits::CORE_MAX_TENSOR_ARGS];
        let n = boundary
            .len()
            .min(simpler_core::limits::CORE_MAX_TENSOR_ARGS);
        for (i, a) in boundary[..n].iter().enumerate() {
            bytes[i * 128..(i + 1) * 128].copy_from_slice(bytemuck::bytes_of(&a.tensor));
        }
        self.place(&bytes[..n * 128])
    }
}

/// The retained host mirror of one chip's shared memory.
pub(crate) struct Mirror {
    layout: OrchestratorLayout,
    payloads_layout: PayloadsLayout,
    sched: Box<[Line]>,
    orch: Box<[Line]>,
    payloads: Box<[Line]>,
    sched_image: Vec<u8>,
    payload_image: Vec<u8>,
    graphs: Graphs,
}

impl Mirror {
    fn new(layout: OrchestratorLayout, payloads_layout: PayloadsLayout) -> Self {
        let region = |bytes: usize| bytemuck::zeroed_slice_box::<Line>(bytes.div_ceil(64));
        Self {
            sched: region(layout.sched().size()),
            orch: region(layout.size()),
            payloads: region(payloads_layout.size()),
            layout,
            payloads_layout,
            sched_image: Vec::new(),
            payload_image: Vec::new(),
            graphs: Graphs::default(),
        }
    }
}

/// A waiter that never waits: nothing retires while the host builds, so a full ring or heap
/// can never drain.
struct NoWait {
    blocked: Option<Blocked>,
}

impl Waiter for NoWait {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        self.blocked = Some(on);
        Err(GaveUp)
    }
}

/// What the host sees of device memory while it builds: the entry tensors it staged, through
/// their host copies (the reference's host views of external tensors). Reads inside one of
/// them succeed; anything else, and every write (the device copy is already staged), faults.
struct HostViews<'a> {
    views: Vec<(u64, &'a [u8])>,
}

impl Gm for HostViews<'_> {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let fault = GmFault {
            addr,
            len: dst.len() as u64,
        };
        let (base, data) = self
            .views
            .iter()
            .find(|(base, data)| addr >= *base && addr - base < data.len() as u64)
            .ok_or(fault)?;
        let at = (addr - base) as usize;
        let src = data.get(at..at + dst.len()).ok_or(fault)?;
        dst.copy_from_slice(src);
        Ok(())
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: src.len() as u64,
        })
    }
}

/// Times one phase on this thread: wall clock and minor faults over the same span.
struct Clock {
    start: Instant,
    faults: u64,
}

impl Clock {
    fn start() -> Self {
        let faults = crate::l3::os::minor_faults();
        Self {
            start: Instant::now(),
            faults,
        }
    }
    fn stop(self) -> Phase {
        let time = self.start.elapsed();
        Phase {
            time,
            minflt: crate::l3::os::minor_faults().saturating_sub(self.faults),
        }
    }
}

impl ChipWorker {
    /// Runs `handle` on the hbg runtime: the orchestration runs here, on the host, into the
    /// retained mirror; the device receives the compact live image and only schedules.
    /// OUT and INOUT tensors receive the results, as with [`ChipWorker::run_args`].
    pub fn run_hbg(
        &mut self,
        handle: CallableHandle,
        args: &mut [ChipArg],
        scalars: &[u64],
    ) -> Result<(RunReport, BindReport), WorkerError> {
        self.run_hbg_with(handle, args, scalars, true)
    }

    /// [`Self::run_hbg`]; with `run_device` false the bind stops after building the image
    /// (host-only mode: nothing runs, no output is written, the report's outcome counts the
    /// tasks built).
    pub fn run_hbg_with(
        &mut self,
        handle: CallableHandle,
        args: &mut [ChipArg],
        scalars: &[u64],
        run_device: bool,
    ) -> Result<(RunReport, BindReport), WorkerError> {
        let start = Instant::now();
        let mut report = BindReport::default();
        let clock = Clock::start();
        let (orch_args, staged) = self.prepare(handle, args, scalars)?;
        // Device memory for this bind's Definitions and Graph boundaries.
        let staging_base =
            self.device
                .alloc(GRAPH_STAGING_BYTES)?
                .ok_or(WorkerError::OutOfDeviceMemory {
                    bytes: GRAPH_STAGING_BYTES,
                })?;
        report.phases[0] = clock.stop();

        let clock = Clock::start();
        if self.hbg.is_none() {
            let (layout, payloads_layout) = self.device.layouts()?;
            self.hbg = Some(Box::new(Mirror::new(layout, payloads_layout)));
        }
        let callable = &self.callables[handle.0];
        let mirror = self.hbg.as_mut().expect("made above");
        let layout = mirror.layout;
        let payloads_layout = mirror.payloads_layout;
        let shared = SchedState::init(bytemuck::cast_slice_mut(&mut mirror.sched), layout.sched())
            .map_err(|e| WorkerError::Hbg(HbgError::Image(layout_error(e))))?;
        // The payload records (70 MB at the defaults) are written whole at claim: attached as
        // they are, never formatted, so a bind touches only the records it writes.
        let payloads = TaskPayloads::attach(
            bytemuck::cast_slice_mut(&mut mirror.payloads),
            &payloads_layout,
        )
        .map_err(|e| WorkerError::Hbg(HbgError::Image(layout_error(e))))?;
        let mut orch =
            Orchestrator::init(bytemuck::cast_slice_mut(&mut mirror.orch), &layout, &shared)
                .map_err(|e| WorkerError::Hbg(HbgError::Image(layout_error(e))))?;
        report.phases[1] = clock.stop();

        let clock = Clock::start();
        let graph_counts;
        let mut waiter = NoWait { blocked: None };
        let abort = AtomicU32::new(0);
        let result = {
            let views = HostViews {
                views: args
                    .iter()
                    .zip(&staged)
                    .filter_map(|(a, at)| match (a, at) {
                        (ChipArg::Host(t), Some(addr)) => Some((*addr, t.data.as_slice())),
                        _ => None,
                    })
                    .collect(),
            };
            mirror.graphs.cache.clear();
            mirror.graphs.staging.clear();
            graph_counts = (
                mirror.graphs.recorded,
                mirror.graphs.replayed,
                mirror.graphs.inline,
            );
            let mut sink = BindGraphs {
                g: &mut mirror.graphs,
                base: staging_base,
            };
            let mut rt = Rt::new(
                &mut orch,
                &payloads,
                &mut waiter,
                &views,
                &orch_args,
                &abort,
            )
            .with_graphs(&mut sink);
            let r = rt.scope(ScopeMode::Auto, |rt| (callable.orch)(rt));
            r.and_then(|()| rt.error().map_or(Ok(()), Err))
        };
        report.phases[2] = clock.stop();
        if let Err(e) = result {
            return Err(WorkerError::Hbg(if waiter.blocked.is_some() {
                HbgError::GraphTooLarge(e)
            } else {
                HbgError::Orchestration(e)
            }));
        }

        let clock = Clock::start();
        let edges = orch.edges_recorded();
        let usage = shared
            .usage(orch.edges_used())
            .map_err(|e| WorkerError::Hbg(HbgError::Image(e)))?;
        let sched_len = SchedState::image_size(&usage);
        grow(&mut mirror.sched_image, sched_len);
        let n = shared
            .export(&usage, &mut mirror.sched_image[..sched_len])
            .map_err(|e| WorkerError::Hbg(HbgError::Image(e)))?;
        let bound = TaskPayloads::image_bound(&usage.tasks);
        grow(&mut mirror.payload_image, bound);
        let mut w = Writer::new(&mut mirror.payload_image[..bound]);
        payloads
            .export(&usage.tasks, &mut w)
            .map_err(|e| WorkerError::Hbg(HbgError::Image(e)))?;
        let p = w.len();
        report.tasks = usage.tasks.iter().map(|&t| t as u64).sum();
        report.image_bytes = n + p;
        report.graphs = [
            mirror.graphs.recorded - graph_counts.0,
            mirror.graphs.replayed - graph_counts.1,
            mirror.graphs.inline - graph_counts.2,
        ];
        report.phases[3] = clock.stop();

        let clock = Clock::start();
        if run_device && !mirror.graphs.staging.is_empty() {
            let ok = self
                .device
                .copy_to_device(staging_base, mirror.graphs.staging.clone())?;
            if !ok {
                return Err(WorkerError::OutOfDeviceMemory {
                    bytes: mirror.graphs.staging.len() as u64,
                });
            }
        }
        report.phases[4] = clock.stop();

        if !run_device {
            let outcome = simpler_aicpu::RunOutcome {
                result: Ok(()),
                tasks: report.tasks,
                edges,
                dispatched: 0,
                orchestration: report.phases[2].time,
                device: Duration::ZERO,
                trace_dropped: 0,
            };
            let run = RunReport {
                outcome,
                host: start.elapsed(),
            };
            return Ok((run, report));
        }
        let clock = Clock::start();
        let image = HostImage {
            usage,
            sched: &mirror.sched_image[..n],
            payloads: &mirror.payload_image[..p],
            edges,
        };
        let outcome =
            self.device
                .run_prebuilt(callable.kernels.clone(), image, RunOptions::default())?;
        report.phases[5] = clock.stop();
        if let Err(e) = outcome.result {
            return Err(WorkerError::Run(e));
        }

        let clock = Clock::start();
        self.copy_back(args, &staged)?;
        report.phases[6] = clock.stop();
        let run = RunReport {
            outcome,
            host: start.elapsed(),
        };
        Ok((run, report))
    }
}

/// Grows `buf` to at least `len` bytes and keeps it (the retained image buffers).
fn grow(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

fn layout_error(e: simpler_core::layout::LayoutError) -> ImageError {
    let _ = e;
    ImageError::Usage {
        field: "mirror layout",
        value: 0,
    }
}

impl From<HbgError> for RunError {
    fn from(e: HbgError) -> Self {
        match e {
            HbgError::GraphTooLarge(e) | HbgError::Orchestration(e) => RunError::Orchestration(e),
            HbgError::Image(e) => RunError::Image(e),
        }
    }
}
