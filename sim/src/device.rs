//! One simulated device: GM, the AICPU's threads and the AICore cores, set up once and reused
//! for every run.
//!
//! Threads (all created at [`Device::start`], all ended at drop):
//!
//! - the **device thread** owns every byte of device state, answers the host's requests
//!   (allocate, copy in, copy out, run) and, during a run, is the AICPU's orchestrator thread:
//!   it runs the orchestration function;
//! - one **scheduler thread** per AICPU scheduler (3 on a2a3, 4 on a5), each owning whole
//!   clusters; it runs the `aicpu` scheduler pass and steps the `aicore` loop of each core it
//!   owns. A core is stepped only when it has a task, so 30 simulated cores cost nothing when
//!   idle, and a thread with nothing to do blocks on a [`Wakeup`] instead of spinning;
//! - a **watchdog thread** that aborts a run which makes no progress for the configured time.
//!
//! The device code (`simpler_aicpu`, `simpler_aicore`, `simpler_core`) is the code the
//! firmware runs; this module supplies its registers, GM and threads.

use crate::gm::GmArena;
use crate::wake::Wakeup;
use simpler_aicore::core_loop::{CoreLoop, CorePort};
use simpler_aicore::KernelFn;
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_aicpu::scheduler::CoreSlot;
use simpler_aicpu::{
    OwnedCore, Platform, Rt, RtError, RunError, RunOutcome, SchedError, Scheduler, TaskPayloads,
};
use simpler_core::handshake::{DispatchPayload, AICPU_IDLE};
use simpler_core::layout::{Carver, Layout, LayoutError, Line};
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Waiter,
};
use simpler_core::ring::{RingConfig, MAX_RINGS};
use simpler_core::sched::{SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::OrchArgs;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The chip generation a device simulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// a2a3: 1 orchestrator + 3 scheduler threads, up to 24 clusters.
    A2a3,
    /// a5: 1 orchestrator + 4 scheduler threads, up to 36 clusters.
    A5,
}

impl Topology {
    /// Scheduler threads.
    pub fn schedulers(self) -> usize {
        match self {
            Self::A2a3 => 3,
            Self::A5 => 4,
        }
    }

    /// The most clusters the chip has.
    pub fn max_clusters(self) -> u32 {
        match self {
            Self::A2a3 => 24,
            Self::A5 => 36,
        }
    }

    /// The platform's name (`a2a3sim`, `a5sim`).
    pub fn name(self) -> &'static str {
        match self {
            Self::A2a3 => "a2a3sim",
            Self::A5 => "a5sim",
        }
    }
}

/// How a device is built.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// The chip generation.
    pub topology: Topology,
    /// Clusters of 1 AIC + 2 AIV.
    pub clusters: u32,
    /// Each ring's sizes.
    pub ring: RingConfig,
    /// TensorMap buckets and entries.
    pub map_buckets: u32,
    /// TensorMap entries.
    pub map_entries: u32,
    /// GM bytes beyond the four heaps, for buffers the host allocates.
    pub gm_bytes: u64,
    /// A run that makes no progress for this long ends with a timeout.
    pub watchdog: Duration,
    /// Each core's local buffer, in f32 words.
    pub local_words: usize,
}

impl DeviceConfig {
    /// The default device of `topology`: 8 clusters, rings of 4096 tasks with 16 MiB heaps,
    /// 256 MiB of GM, a 10 s watchdog.
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            clusters: 8,
            ring: RingConfig {
                window: 4096,
                heap_bytes: 16 << 20,
                edges: 16_384,
            },
            map_buckets: 4096,
            map_entries: 16_384,
            gm_bytes: 256 << 20,
            watchdog: Duration::from_secs(10),
            local_words: 64 * 1024,
        }
    }
}

/// Why a device could not be started.
#[derive(Debug)]
pub enum DeviceError {
    /// The configuration is out of range.
    Config(&'static str),
    /// The memory layout was refused.
    Layout(LayoutError),
    /// The device thread is gone.
    Stopped,
}

impl From<LayoutError> for DeviceError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

/// An orchestration function.
pub type OrchFn = Arc<dyn Fn(&mut Rt<'_, '_>) -> Result<(), RtError> + Send + Sync>;

/// One run's work.
pub struct Job {
    /// The orchestration function.
    pub orch: OrchFn,
    /// The kernel table, by function id.
    pub kernels: Arc<[KernelFn]>,
    /// The adopted entry arguments.
    pub args: Box<OrchArgs>,
    /// Sees every submitted task, when set.
    pub hook: Option<SharedHook>,
    /// Receives the run's trace events, when set.
    pub trace: Option<TraceSink>,
    /// A graph the host built (hbg): the device imports it and runs its schedulers only; the
    /// orchestration function is not called.
    pub prebuilt: Option<Arc<Prebuilt>>,
}

/// A task graph built on the host into a mirror of the shared state, as shipped: the compact
/// live images of the shared state and of the payload records (see `simpler_core::image`).
#[derive(Clone, Debug, Default)]
pub struct Prebuilt {
    /// What the images hold.
    pub usage: simpler_core::image::Usage,
    /// `SchedState::export` of the mirror.
    pub sched: Vec<u8>,
    /// The payload records' image (the format `TaskPayloads::import` reads).
    pub payloads: Vec<u8>,
    /// Edges the host's submits recorded.
    pub edges: u64,
}

/// The layouts a device of some configuration uses, so a host can build a mirror of its
/// shared state that imports without translation.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLayouts {
    /// The orchestrator's (its `sched()` is the shared state's).
    pub orchestrator: OrchestratorLayout,
    /// The payload records'.
    pub payloads: PayloadsLayout,
}

impl DeviceConfig {
    /// The layouts a device of this configuration uses, with heap addresses in its GM.
    pub fn layouts(&self) -> Result<DeviceLayouts, DeviceError> {
        Ok(DeviceLayouts {
            orchestrator: OrchestratorLayout::new(orchestrator_config(self, GM_BASE))?,
            payloads: PayloadsLayout::new([self.ring.window; MAX_RINGS])?,
        })
    }
}

/// Where a traced run's events go: every thread appends its buffer when the run ends.
pub type TraceSink = Arc<Mutex<Vec<simpler_aicpu::TraceEvent>>>;

/// Events each thread can hold per run; more are counted as dropped.
pub const TRACE_EVENTS_PER_THREAD: usize = 1 << 18;

/// A per-thread trace buffer, allocated once at the first traced run and never grown.
struct TraceBuf {
    events: Vec<simpler_aicpu::TraceEvent>,
    dropped: u64,
}

impl TraceBuf {
    fn new() -> Self {
        Self {
            events: Vec::new(),
            dropped: 0,
        }
    }
    fn arm(&mut self) {
        if self.events.capacity() == 0 {
            self.events.reserve_exact(TRACE_EVENTS_PER_THREAD);
        }
        self.events.clear();
        self.dropped = 0;
    }
    fn push(&mut self, e: simpler_aicpu::TraceEvent) {
        if self.events.len() < self.events.capacity() {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }
    fn flush(&mut self, state: &RunState, sink: &TraceSink) {
        sink.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(&self.events);
        state
            .trace_dropped
            .fetch_add(self.dropped, Ordering::SeqCst);
        self.events.clear();
    }
}

/// Records the orchestrator's submit spans and passes each task on to the caller's hook.
struct TracingHook<'h> {
    inner: Option<&'h mut (dyn simpler_aicpu::SubmitHook + Send + 'static)>,
    buf: &'h mut TraceBuf,
    epoch: Instant,
    started: u64,
}

impl simpler_aicpu::SubmitHook for TracingHook<'_> {
    fn before_submit(&mut self) {
        self.started = self.epoch.elapsed().as_nanos() as u64;
        if let Some(h) = self.inner.as_deref_mut() {
            h.before_submit();
        }
    }
    fn submitted(
        &mut self,
        task: &simpler_aicpu::SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (simpler_core::TaskId, simpler_core::deps::DepFlags)>,
    ) {
        self.buf.push(simpler_aicpu::TraceEvent {
            track: simpler_aicpu::trace::ORCHESTRATOR_TRACK,
            kind: simpler_aicpu::EventKind::Submit,
            task: task.id,
            kernel: 0,
            start_ns: self.started,
            end_ns: self.epoch.elapsed().as_nanos() as u64,
            value: 0,
        });
        if let Some(h) = self.inner.as_deref_mut() {
            h.submitted(task, fanin);
        }
    }
}

/// A submit hook shared with the device thread for one run.
pub type SharedHook = Arc<Mutex<dyn simpler_aicpu::SubmitHook + Send>>;

enum Msg {
    Write(u64, Vec<u8>, Sender<bool>),
    Read(u64, usize, Sender<Option<Vec<u8>>>),
    Run(Job, Sender<RunOutcome>),
}

/// A running simulated device. Dropping it stops its threads.
pub struct Device {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    config: DeviceConfig,
    /// GM placement. The host decides where its buffers go; the device thread only reads and
    /// writes GM, so allocating needs no message (and no heap allocation) per call.
    gm_alloc: Mutex<GmAllocator>,
}

/// Where host buffers go in GM. Per-run allocations bump upward from the end of the heaps;
/// persistent ones (start → length) come down from the end of GM. The bump's limit is the
/// lowest live persistent start, and a persistent allocation never goes below the bump, so
/// the two never overlap.
struct GmAllocator {
    /// Where per-run allocations start (the end of the heaps).
    base: u64,
    next: u64,
    /// The end of the words GM really has (its size rounded down to whole words).
    end: u64,
    persistent: std::collections::BTreeMap<u64, u64>,
}

impl GmAllocator {
    fn new(config: &DeviceConfig) -> Self {
        let heaps = config.ring.heap_bytes * MAX_RINGS as u64;
        Self {
            base: GM_BASE + heaps,
            next: GM_BASE + heaps,
            end: GM_BASE + (heaps + config.gm_bytes) / 8 * 8,
            persistent: std::collections::BTreeMap::new(),
        }
    }

    fn alloc(&mut self, bytes: u64) -> Option<u64> {
        let limit = self.persistent.keys().next().copied().unwrap_or(self.end);
        let at = self.next.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN;
        let end = at.checked_add(bytes).filter(|&end| end <= limit)?;
        self.next = end;
        Some(at)
    }

    fn malloc(&mut self, bytes: u64) -> Option<u64> {
        let size = bytes.max(1);
        let at = place_persistent(&self.persistent, self.next, self.end, size)?;
        self.persistent.insert(at, size);
        Some(at)
    }
}

/// Abort codes.
const ABORT_SCHED: u32 = 1;
const ABORT_ORCH: u32 = 2;
const ABORT_TIMEOUT: u32 = 3;

/// What the device thread and the scheduler threads share for the current run.
struct RunState {
    /// Bumped to start a run; scheduler threads wait for it.
    generation: Mutex<(u64, Option<Arc<[KernelFn]>>)>,
    start: Condvar,
    /// Scheduler threads still in the current run.
    active: Mutex<usize>,
    done: Condvar,
    orch_done: AtomicBool,
    abort: AtomicU32,
    sched_error: Mutex<Option<SchedError>>,
    progress: AtomicU64,
    running: AtomicBool,
    dispatched: AtomicU64,
    /// Bumped at every run's start, so the watchdog times each run from its own start.
    run_id: AtomicU64,
    /// The current run's trace sink and start, when traced.
    trace: Mutex<Option<(TraceSink, Instant)>>,
    trace_dropped: AtomicU64,
    shutdown: AtomicBool,
    wake: Wakeup,
}

impl Device {
    /// Builds the device and starts its threads.
    pub fn start(config: DeviceConfig) -> Result<Self, DeviceError> {
        if config.clusters == 0 || config.clusters > config.topology.max_clusters() {
            return Err(DeviceError::Config("clusters"));
        }
        // Check the layouts here so a bad configuration is reported, not a dead thread.
        let orch_config = orchestrator_config(&config, 0);
        OrchestratorLayout::new(orch_config)?;
        let (tx, rx) = channel();
        let (ready_tx, ready_rx) = channel();
        let thread = std::thread::Builder::new()
            .name("simpler-device".into())
            .spawn(move || device_main(config, rx, ready_tx))
            .map_err(|_| DeviceError::Stopped)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx: Some(tx),
                thread: Some(thread),
                config,
                gm_alloc: Mutex::new(GmAllocator::new(&config)),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(DeviceError::Stopped),
        }
    }

    /// The device's configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn send(&self, msg: Msg) -> Result<(), DeviceError> {
        self.tx
            .as_ref()
            .ok_or(DeviceError::Stopped)?
            .send(msg)
            .map_err(|_| DeviceError::Stopped)
    }

    /// Allocates `bytes` of GM for the current run (1024-byte aligned, bumped upward from
    /// the end of the heaps); `None` when GM is full. The bump never reaches into a live
    /// persistent allocation ([`Device::malloc`]).
    pub fn alloc(&self, bytes: u64) -> Result<Option<u64>, DeviceError> {
        Ok(self.gm()?.alloc(bytes))
    }

    /// The GM allocator, while the device runs.
    fn gm(&self) -> Result<std::sync::MutexGuard<'_, GmAllocator>, DeviceError> {
        if self.tx.is_none() {
            return Err(DeviceError::Stopped);
        }
        // Every update is a single assignment or map operation: a panic elsewhere cannot
        // leave the allocator half-updated, so a poisoned lock is used as it is.
        Ok(self.gm_alloc.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Releases every per-run allocation ([`Device::alloc`]); persistent allocations
    /// ([`Device::malloc`]) are kept.
    pub fn free_all(&self) -> Result<(), DeviceError> {
        let mut gm = self.gm()?;
        gm.next = gm.base;
        Ok(())
    }

    /// Allocates `bytes` of persistent GM (`DEVICE_MALLOC`): 1024-byte aligned, taken from the
    /// top of GM downward, first fit in the gaps between live persistent allocations. It
    /// survives [`Device::free_all`] and every run until [`Device::free`]. A size of 0 is
    /// taken as 1 byte; `None` when no gap above the current per-run allocations holds it.
    pub fn malloc(&self, bytes: u64) -> Result<Option<u64>, DeviceError> {
        Ok(self.gm()?.malloc(bytes))
    }

    /// Releases the persistent allocation starting at `addr`; `false` when `addr` is not the
    /// start of a live persistent allocation.
    pub fn free(&self, addr: u64) -> Result<bool, DeviceError> {
        Ok(self.gm()?.persistent.remove(&addr).is_some())
    }

    /// Copies `data` to GM at `addr`; `false` if the range is outside GM.
    pub fn write(&self, addr: u64, data: Vec<u8>) -> Result<bool, DeviceError> {
        let (tx, rx) = channel();
        self.send(Msg::Write(addr, data, tx))?;
        rx.recv().map_err(|_| DeviceError::Stopped)
    }

    /// Copies `len` bytes of GM at `addr`; `None` if the range is outside GM.
    pub fn read(&self, addr: u64, len: usize) -> Result<Option<Vec<u8>>, DeviceError> {
        let (tx, rx) = channel();
        self.send(Msg::Read(addr, len, tx))?;
        rx.recv().map_err(|_| DeviceError::Stopped)
    }

    /// Runs `job` to completion (or failure).
    pub fn run(&self, job: Job) -> Result<RunOutcome, DeviceError> {
        let (tx, rx) = channel();
        self.send(Msg::Run(job, tx))?;
        rx.recv().map_err(|_| DeviceError::Stopped)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where the heaps sit in GM, and where host allocations start.
const GM_BASE: u64 = 0x1_0000_0000;

/// Alignment of every host allocation, per-run and persistent.
const ALLOC_ALIGN: u64 = 1024;

/// Where a persistent allocation of `size` bytes goes: the highest `ALLOC_ALIGN`-aligned start
/// in the highest gap of `[floor, ceiling)` between the `live` allocations (start → length)
/// that holds it; `None` when no gap does.
fn place_persistent(
    live: &std::collections::BTreeMap<u64, u64>,
    floor: u64,
    ceiling: u64,
    size: u64,
) -> Option<u64> {
    let fit = |lo: u64, hi: u64| {
        let start = hi.checked_sub(size)? / ALLOC_ALIGN * ALLOC_ALIGN;
        (start >= lo).then_some(start)
    };
    let mut hi = ceiling;
    for (&start, &len) in live.iter().rev() {
        if let Some(at) = fit(start.saturating_add(len).max(floor), hi) {
            return Some(at);
        }
        hi = hi.min(start);
    }
    fit(floor, hi)
}

fn orchestrator_config(config: &DeviceConfig, gm_base: u64) -> OrchestratorConfig {
    let heap = config.ring.heap_bytes;
    OrchestratorConfig {
        sched: SchedConfig::uniform(config.ring),
        map_buckets: config.map_buckets,
        map_entries: config.map_entries,
        heap_base: [0, 1, 2, 3].map(|r| gm_base + r * heap),
    }
}

fn region(bytes: usize) -> Box<[Line]> {
    bytemuck::zeroed_slice_box(bytes.div_ceil(64))
}

/// The registers, payload buffers and loop state of one core, owned by its scheduler thread.
struct CoreBlock {
    task: AtomicU32,
    status: AtomicU32,
    error: AtomicU32,
    detail: AtomicU32,
    payloads: Box<[DispatchPayload; 2]>,
}

impl CorePort for CoreBlock {
    fn read_task(&self) -> u32 {
        self.task.load(Ordering::Acquire)
    }
    fn write_status(&self, value: u32) {
        self.status.store(value, Ordering::Release);
    }
    fn write_error(&self, code: u32, detail: u32) {
        self.error.store(code, Ordering::Relaxed);
        self.detail.store(detail, Ordering::Relaxed);
    }
    fn payload(&self, parity: u32) -> &DispatchPayload {
        &self.payloads[(parity & 1) as usize]
    }
}

/// The cores one scheduler thread owns, as its `Platform`.
struct SimCores {
    blocks: Vec<CoreBlock>,
    epoch: Instant,
}

impl Platform for SimCores {
    fn write_task(&mut self, core: usize, value: u32) {
        if let Some(b) = self.blocks.get(core) {
            b.task.store(value, Ordering::Release);
        }
    }
    fn read_status(&self, core: usize) -> u32 {
        self.blocks
            .get(core)
            .map_or(0, |b| b.status.load(Ordering::Acquire))
    }
    fn read_error(&self, core: usize) -> (u32, u32) {
        self.blocks.get(core).map_or((0, 0), |b| {
            (
                b.error.load(Ordering::Relaxed),
                b.detail.load(Ordering::Relaxed),
            )
        })
    }
    fn payload_mut(&mut self, core: usize, parity: u32) -> &mut DispatchPayload {
        // The scheduler only names cores it owns, so a thread without cores never gets here;
        // an out-of-range index is clamped rather than trusted.
        let i = core.min(self.blocks.len().saturating_sub(1));
        &mut self.blocks[i].payloads[(parity & 1) as usize]
    }
    fn cycles(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// The orchestrator's waiting policy: spin briefly, then block on the wakeup; give up when the
/// run is aborted.
struct OrchWaiter<'s> {
    state: &'s RunState,
}

impl Waiter for OrchWaiter<'_> {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        if self.state.abort.load(Ordering::Acquire) != 0 {
            return Err(GaveUp);
        }
        let seen = self.state.wake.generation();
        for _ in 0..256 {
            core::hint::spin_loop();
        }
        if self.state.wake.generation() == seen {
            self.state.wake.wait(seen, Duration::from_millis(2));
        }
        if self.state.abort.load(Ordering::Acquire) != 0 {
            Err(GaveUp)
        } else {
            Ok(())
        }
    }
}

fn device_main(config: DeviceConfig, rx: Receiver<Msg>, ready: Sender<Result<(), DeviceError>>) {
    let heaps = config.ring.heap_bytes * MAX_RINGS as u64;
    let orch_config = orchestrator_config(&config, GM_BASE);
    let built = (|| {
        let orch_layout = OrchestratorLayout::new(orch_config)?;
        let payloads_layout = PayloadsLayout::new([config.ring.window; MAX_RINGS])?;
        let mut gm_layout = Layout::new();
        let gm_words = gm_layout.array::<AtomicU64>(((heaps + config.gm_bytes) / 8) as usize)?;
        Ok::<_, DeviceError>((orch_layout, payloads_layout, gm_layout, gm_words))
    })();
    let (orch_layout, payloads_layout, gm_layout, gm_words) = match built {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut sched_mem = region(orch_layout.sched().size());
    let mut orch_mem = region(orch_layout.size());
    let mut payload_mem = region(payloads_layout.size());
    let mut gm_mem = region(gm_layout.size());
    let shared = match SchedState::init(
        bytemuck::cast_slice_mut(&mut sched_mem),
        orch_layout.sched(),
    ) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let payloads =
        match TaskPayloads::init(bytemuck::cast_slice_mut(&mut payload_mem), &payloads_layout) {
            Ok(p) => p,
            Err(e) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
        };
    let gm = match Carver::new(bytemuck::cast_slice_mut(&mut gm_mem), &gm_layout)
        .and_then(|mut c| c.atomic_as_is(gm_words))
    {
        Ok(words) => GmArena::new(GM_BASE, words),
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let mut orch = match Orchestrator::init(
        bytemuck::cast_slice_mut(&mut orch_mem),
        &orch_layout,
        &shared,
    ) {
        Ok(o) => o,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    let state = RunState {
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
    };
    let nsched = config.topology.schedulers();
    std::thread::scope(|s| {
        for t in 0..nsched {
            let (state, shared, payloads, gm) = (&state, &shared, &payloads, &gm);
            let _ = std::thread::Builder::new()
                .name(format!("simpler-sched-{t}"))
                .spawn_scoped(s, move || {
                    scheduler_main(t, nsched, &config, state, shared, payloads, gm)
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
                Msg::Write(addr, data, reply) => {
                    let _ = reply.send(simpler_core::gm::Gm::write(&gm, addr, &data).is_ok());
                }
                Msg::Read(addr, len, reply) => {
                    let mut out = vec![0u8; len];
                    let ok = simpler_core::gm::Gm::read(&gm, addr, &mut out).is_ok();
                    let _ = reply.send(ok.then_some(out));
                }
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
    let mut waiter = OrchWaiter { state };
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

#[allow(clippy::too_many_arguments)]
fn scheduler_main(
    index: usize,
    nsched: usize,
    config: &DeviceConfig,
    state: &RunState,
    shared: &SchedState<'_>,
    payloads: &TaskPayloads<'_>,
    gm: &GmArena<'_>,
) {
    // Whole clusters, round robin: cluster c belongs to thread c % nsched. Cores of a cluster
    // are contiguous (AIC, AIV0, AIV1), which the scheduler's MIX placement relies on.
    let mut owned = Vec::new();
    let mut blocks = Vec::new();
    for cluster in (index..config.clusters as usize).step_by(nsched) {
        for slot in [CoreSlot::Aic, CoreSlot::Aiv0, CoreSlot::Aiv1] {
            owned.push(OwnedCore::new(blocks.len(), cluster, slot));
            blocks.push(CoreBlock {
                task: AtomicU32::new(AICPU_IDLE),
                status: AtomicU32::new(simpler_core::handshake::AICORE_IDLE),
                error: AtomicU32::new(0),
                detail: AtomicU32::new(0),
                payloads: Box::new([bytemuck::Zeroable::zeroed(); 2]),
            });
        }
    }
    let mut loops = vec![CoreLoop::new(); blocks.len()];
    let mut locals: Vec<Vec<f32>> = (0..blocks.len())
        .map(|_| vec![0.0; config.local_words])
        .collect();
    let mut platform = SimCores {
        blocks,
        epoch: Instant::now(),
    };
    let mut sched = Scheduler::new(&owned);
    let mut trace = TraceBuf::new();
    let mut seen_generation = 0;
    loop {
        let kernels = {
            let mut g = state.generation.lock().unwrap_or_else(|e| e.into_inner());
            while g.0 == seen_generation {
                g = state.start.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            seen_generation = g.0;
            g.1.clone()
        };
        if state.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let kernels = kernels.unwrap_or_else(|| Arc::from(Vec::new()));
        sched.reset();
        for (b, l) in platform.blocks.iter().zip(loops.iter_mut()) {
            b.task.store(AICPU_IDLE, Ordering::Release);
            l.reset();
        }
        let dispatched0 = sched.dispatched;
        let (loops0, pops0, hits0) = (sched.loops, sched.pops, sched.pop_hits);
        let tracing = if cfg!(feature = "trace") {
            state
                .trace
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        } else {
            None
        };
        if tracing.is_some() {
            trace.arm();
        }
        let epoch = tracing.as_ref().map(|t| t.1);
        // Timed passes read the platform clock, which counts from the run's start.
        sched.set_timed(epoch.is_some());
        if let Some(e) = epoch {
            platform.epoch = e;
        }
        let now = |e: Option<Instant>| e.map_or(0, |e| e.elapsed().as_nanos() as u64);
        let track = simpler_aicpu::trace::SCHEDULER_TRACK + index as u32;
        loop {
            if state.abort.load(Ordering::Acquire) != 0 {
                break;
            }
            let seen = state.wake.generation();
            let completed0 = sched.completed;
            let stepped = sched.step(&mut platform, shared, payloads, gm);
            if epoch.is_some() && matches!(stepped, Ok(true)) {
                let pass = sched.last_pass();
                for (kind, start_ns, end_ns) in [
                    (
                        simpler_aicpu::EventKind::Completion,
                        pass.start,
                        pass.completed,
                    ),
                    (simpler_aicpu::EventKind::Dispatch, pass.completed, pass.end),
                ] {
                    trace.push(simpler_aicpu::TraceEvent {
                        track,
                        kind,
                        task: simpler_core::TaskId::INVALID,
                        kernel: 0,
                        start_ns,
                        end_ns,
                        value: 0,
                    });
                }
            }
            let mut progress = match stepped {
                Ok(p) => p,
                Err(e) => {
                    let mut slot = state.sched_error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(e);
                    let _ = state.abort.compare_exchange(
                        0,
                        ABORT_SCHED,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    state.wake.notify();
                    break;
                }
            };
            for (i, l) in loops.iter_mut().enumerate() {
                let t0 = now(epoch);
                let step = l.step(&platform.blocks[i], gm, &kernels, &mut locals[i]);
                if step != simpler_aicore::core_loop::Step::Idle {
                    progress = true;
                    if let (Some(_), simpler_aicore::core_loop::Step::Ran(token)) = (epoch, step) {
                        let c = &owned[i];
                        trace.push(simpler_aicpu::TraceEvent {
                            track: (c.cluster * 3 + c.slot as usize) as u32,
                            kind: simpler_aicpu::EventKind::Exec,
                            task: sched.running(i).unwrap_or(simpler_core::TaskId::INVALID),
                            kernel: platform.blocks[i].payloads[(token & 1) as usize].kernel_id,
                            start_ns: t0,
                            end_ns: now(epoch),
                            value: 0,
                        });
                    }
                }
            }
            if progress {
                state.progress.fetch_add(1, Ordering::Relaxed);
                if sched.completed != completed0 {
                    state.wake.notify();
                }
                continue;
            }
            if state.orch_done.load(Ordering::Acquire) && shared.drained() && !sched.busy() {
                break;
            }
            let t0 = now(epoch);
            state.wake.wait(seen, Duration::from_millis(5));
            if epoch.is_some() {
                trace.push(simpler_aicpu::TraceEvent {
                    track,
                    kind: simpler_aicpu::EventKind::Idle,
                    task: simpler_core::TaskId::INVALID,
                    kernel: 0,
                    start_ns: t0,
                    end_ns: now(epoch),
                    value: 0,
                });
            }
        }
        if let Some((sink, _)) = &tracing {
            use simpler_aicpu::trace::{COUNTER_LOOPS, COUNTER_POPS, COUNTER_POP_HITS};
            let end_ns = now(epoch);
            for (counter, value) in [
                (COUNTER_LOOPS, sched.loops - loops0),
                (COUNTER_POPS, sched.pops - pops0),
                (COUNTER_POP_HITS, sched.pop_hits - hits0),
            ] {
                trace.push(simpler_aicpu::TraceEvent {
                    track,
                    kind: simpler_aicpu::EventKind::Counter,
                    task: simpler_core::TaskId::INVALID,
                    kernel: counter,
                    start_ns: end_ns,
                    end_ns,
                    value,
                });
            }
            trace.flush(state, sink);
        }
        state
            .dispatched
            .fetch_add(sched.dispatched - dispatched0, Ordering::SeqCst);
        let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
        *active -= 1;
        state.done.notify_all();
    }
}

fn watchdog_main(config: &DeviceConfig, state: &RunState) {
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
            state.wake.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn persistent_placement_is_top_down_first_fit_and_aligned() {
        let (floor, ceiling) = (0x1000_0000u64, 0x1001_0000u64);
        let mut live = BTreeMap::new();
        let a = place_persistent(&live, floor, ceiling, 100).unwrap();
        assert_eq!(a, ceiling - ALLOC_ALIGN);
        live.insert(a, 100);
        let b = place_persistent(&live, floor, ceiling, 3000).unwrap();
        assert_eq!(b % ALLOC_ALIGN, 0);
        assert!(b + 3000 <= a);
        live.insert(b, 3000);
        // Freeing the top one opens a gap that a small request fills first.
        live.remove(&a);
        assert_eq!(
            place_persistent(&live, floor, ceiling, 1),
            Some(ceiling - ALLOC_ALIGN)
        );
        // A request larger than the top gap goes below the live one.
        let c = place_persistent(&live, floor, ceiling, 4096).unwrap();
        assert!(c + 4096 <= b);
        // Nothing fits below the floor.
        assert_eq!(
            place_persistent(&live, floor, ceiling, ceiling - floor + 1),
            None
        );
        assert_eq!(place_persistent(&live, floor, ceiling, u64::MAX), None);
    }

    #[test]
    fn per_run_and_persistent_allocations_do_not_overlap() {
        let mut config = DeviceConfig::new(Topology::A2a3);
        config.gm_bytes = 64 << 10;
        let device = Device::start(config).unwrap();
        let p = device.malloc(16 << 10).unwrap().unwrap();
        assert_eq!(p % ALLOC_ALIGN, 0);
        // The bump allocator stops at the persistent allocation.
        let mut bumped = Vec::new();
        while let Some(at) = device.alloc(4096).unwrap() {
            bumped.push(at);
        }
        assert!(bumped.iter().all(|&at| at + 4096 <= p));
        assert!(!bumped.is_empty());
        // Persistent memory does not come from below the live bump.
        assert_eq!(device.malloc(16 << 10).unwrap(), None);
        device.free_all().unwrap();
        let q = device.malloc(16 << 10).unwrap().unwrap();
        assert!(q + (16 << 10) <= p);
        assert!(device.free(p).unwrap());
        assert!(!device.free(p).unwrap());
        assert!(!device.free(q + 8).unwrap());
        assert!(device.free(q).unwrap());
        // With nothing persistent left, the bump reaches the end of GM again.
        assert!(device.alloc(48 << 10).unwrap().is_some());
        assert_eq!(device.malloc(0).unwrap().map(|a| a % ALLOC_ALIGN), Some(0));
    }
}
