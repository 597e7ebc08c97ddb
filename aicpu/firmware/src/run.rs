//! One run on the AICPU: the runtime's state carved from the boot table's working memory, the
//! cores' register windows opened, the orchestration run through the submit path, the
//! scheduler pass driven until the graph drains, and the cores sent the exit signal.
//!
//! Where the boot table names a scheduler CPU of its own ([`BootTable::scheduler_cpu`]), the
//! two roles run side by side, as the reference's AICPU threads do: the orchestration on this
//! CPU submits into the shared state while [`aicpu_scheduler_main`] on the other runs scheduler
//! passes until the orchestration is done and every task has retired; a submit that waits for
//! room spins until the scheduler frees it. Where it names this CPU, one CPU runs both: a
//! waiting submit runs scheduler passes itself, and once the orchestration has returned the
//! CPU runs them until the graph drains. The AICores run their loops on CPUs of their own.
#![allow(unsafe_code)]

use crate::orchestrations::ORCHESTRATIONS;
use crate::platform::MmioCores;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use simpler_aicore_firmware::arch;
use simpler_aicore_firmware::gm::PhysGm;
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_aicpu::scheduler::{CoreSlot, OwnedCore, SchedError, Scheduler};
use simpler_aicpu::{Platform, Rt, RtError, TaskPayloads};
use simpler_core::boot::{BootError, BootTable};
use simpler_core::gm::Gm;
use simpler_core::handshake::{AICORE_EXITED, AICORE_IDLE, AICPU_IDLE, EXIT_SIGNAL};
use simpler_core::layout::LayoutError;
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Waiter,
};
use simpler_core::ring::{RingConfig, MAX_RINGS};
use simpler_core::sched::{SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::{ChipStorageTaskArgs, EntryError, OrchArgs};

/// The ring sizes the image runs with (every one of the four rings).
pub const RING: RingConfig = RingConfig {
    window: 64,
    heap_bytes: 1 << 20,
    edges: 256,
};
/// TensorMap buckets and entries.
pub const MAP: (u32, u32) = (64, 256);
/// Seconds without a scheduler pass doing anything before the run is declared stuck.
pub const WATCHDOG_S: u64 = 5;

/// Why a run could not start or did not finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwError {
    /// The boot table was refused.
    Boot(BootError),
    /// The boot table names no orchestration the image links.
    Orchestration(u32),
    /// The runtime's state does not fit the working memory (or a size was refused).
    Layout(LayoutError),
    /// The entry arguments did not adopt.
    Entry(EntryError),
    /// A core did not report IDLE (start-up) or EXITED (teardown) within the watchdog period.
    CoreSilent {
        /// The core's index.
        core: u32,
        /// Its status register when the wait gave up.
        status: u32,
    },
    /// The orchestration failed.
    Submit(RtError),
    /// A scheduler pass failed (a kernel failure).
    Scheduler(SchedError),
    /// No scheduler pass did anything for [`WATCHDOG_S`] seconds.
    Timeout,
    /// The boot table names a scheduler CPU, and none took the run within [`WATCHDOG_S`]
    /// seconds.
    SchedulerSilent,
}

impl From<BootError> for FwError {
    fn from(e: BootError) -> Self {
        Self::Boot(e)
    }
}

impl From<LayoutError> for FwError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

/// What a run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Tasks submitted.
    pub tasks: u64,
    /// Subtasks dispatched to cores.
    pub dispatched: u64,
    /// Scheduler passes run.
    pub passes: u64,
    /// System-counter ticks from the first submit to the last retirement.
    pub ticks: u64,
    /// Bytes of the boot table's working memory the runtime's state took.
    pub work_bytes: u64,
}

/// One scheduler pass over the firmware's platform: a hot-path root of the
/// panic-reachability check (`tests/firmware.sh`), so it is a real function in the image.
#[no_mangle]
#[inline(never)]
pub fn simpler_fw_sched_pass(
    sched: &mut Scheduler,
    cores: &mut MmioCores,
    shared: &SchedState<'_>,
    payloads: &TaskPayloads<'_>,
    gm: &PhysGm,
) -> Result<bool, SchedError> {
    sched.step(cores, shared, payloads, gm as &dyn Gm)
}

/// The scheduler side: driven from the orchestrator's waits and after it returns, or by the
/// scheduler CPU.
struct Sched<'s, 'a> {
    sched: Scheduler,
    cores: MmioCores,
    shared: &'s SchedState<'a>,
    payloads: &'s TaskPayloads<'a>,
    gm: &'s PhysGm,
    error: Option<SchedError>,
    last_progress: u64,
    watchdog: u64,
    /// Why the scheduler CPU stopped early.
    failure: Option<FwError>,
}

impl Sched<'_, '_> {
    /// One pass; records a failure and the time of the last progress.
    fn pass(&mut self) -> Result<bool, FwError> {
        match simpler_fw_sched_pass(
            &mut self.sched,
            &mut self.cores,
            self.shared,
            self.payloads,
            self.gm,
        ) {
            Ok(true) => {
                self.last_progress = arch::counter();
                Ok(true)
            }
            Ok(false) => {
                if arch::counter().wrapping_sub(self.last_progress) > self.watchdog {
                    return Err(FwError::Timeout);
                }
                Ok(false)
            }
            Err(e) => {
                self.error.get_or_insert(e);
                Err(FwError::Scheduler(e))
            }
        }
    }
}

impl Waiter for Sched<'_, '_> {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        // The AICPU has one CPU for both roles: a full resource frees up only through the
        // scheduler side, so the wait runs it.
        match self.pass() {
            Ok(_) => Ok(()),
            Err(_) => Err(GaveUp),
        }
    }
}

/// The hand-over between the AICPU's CPU and the scheduler CPU. The AICPU's CPU stores its
/// scheduler side in `side`; the scheduler CPU takes it by swapping the pointer out (so a side
/// is taken once, or reclaimed by the AICPU's CPU if no scheduler CPU came), runs it, and
/// reports [`FINISHED`] or [`FAILED`] in `state`, which gives the side back.
struct Handoff {
    state: AtomicU32,
    side: AtomicPtr<()>,
}

/// No run, or the run's orchestration is still going.
const RUNNING: u32 = 0;
/// The orchestration has returned: the scheduler CPU drains what it submitted.
const ORCH_DONE: u32 = 1;
/// The graph drained; the scheduler side is back with the AICPU's CPU.
const FINISHED: u32 = 2;
/// A pass failed (its error in [`Sched::failure`]); the side is back with the AICPU's CPU.
const FAILED: u32 = 3;

static HANDOFF: Handoff = Handoff {
    state: AtomicU32::new(RUNNING),
    side: AtomicPtr::new(core::ptr::null_mut()),
};

/// The orchestration's waiter while the scheduler CPU runs: room appears when that CPU retires
/// tasks, so a wait spins. It gives up once the scheduler has failed (its own watchdog covers a
/// graph that stops moving), or when no scheduler CPU took the side within the watchdog period.
struct Spin {
    published: u64,
    watchdog: u64,
}

impl Waiter for Spin {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        if HANDOFF.state.load(Ordering::Acquire) == FAILED {
            return Err(GaveUp);
        }
        if !HANDOFF.side.load(Ordering::Acquire).is_null()
            && arch::counter().wrapping_sub(self.published) > self.watchdog
        {
            return Err(GaveUp);
        }
        core::hint::spin_loop();
        Ok(())
    }
}

/// The scheduler CPU: takes a run's scheduler side once the AICPU's CPU has handed it over,
/// runs scheduler passes until the orchestration is done and the graph has drained (or a
/// pass fails, the watchdog included), and hands the side back. A hot-path root of the
/// panic-reachability check.
///
/// # Safety
///
/// Called once, on the CPU the boot table names as `scheduler_cpu` (not the AICPU's own),
/// while the AICPU's CPU runs [`aicpu_main`] with the same table.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn aicpu_scheduler_main() {
    let side = loop {
        let p = HANDOFF.side.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            break p;
        }
        core::hint::spin_loop();
    };
    // SAFETY: the AICPU's CPU stored a pointer to its live `Sched` (the AcqRel swap makes
    // every write before that store visible), and this swap took it: that CPU now touches
    // neither the side nor the cores it holds until this CPU stores FINISHED or FAILED, and
    // `aicpu_main`'s locals it borrows outlive that wait.
    let side = unsafe { &mut *side.cast::<Sched<'_, '_>>() };
    loop {
        // Read before the pass: once the orchestration is done, every task it submitted is
        // visible, so a drained state after this pass is the end.
        let done = HANDOFF.state.load(Ordering::Acquire) == ORCH_DONE;
        match side.pass() {
            Err(e) => {
                side.failure = Some(e);
                HANDOFF.state.store(FAILED, Ordering::Release);
                return;
            }
            Ok(true) => {}
            Ok(false) => {
                if done && side.shared.drained() && !side.sched.busy() {
                    HANDOFF.state.store(FINISHED, Ordering::Release);
                    return;
                }
                core::hint::spin_loop();
            }
        }
    }
}

/// Runs the orchestration on this CPU while the scheduler CPU runs `side`, then waits for that
/// CPU to drain the graph and give `side` back.
fn run_split(
    side: &mut Sched<'_, '_>,
    submit: impl FnOnce(&mut Spin) -> Result<(), RtError>,
) -> Result<(), FwError> {
    let watchdog = side.watchdog;
    HANDOFF.state.store(RUNNING, Ordering::Relaxed);
    HANDOFF
        .side
        .store((side as *mut Sched<'_, '_>).cast(), Ordering::Release);
    let published = arch::counter();
    let submitted = submit(&mut Spin {
        published,
        watchdog,
    });
    // Done either way: the scheduler drains what was submitted (unless it failed first), and
    // only then is the side given back.
    let _ = HANDOFF
        .state
        .compare_exchange(RUNNING, ORCH_DONE, Ordering::AcqRel, Ordering::Acquire);
    loop {
        match HANDOFF.state.load(Ordering::Acquire) {
            FINISHED => break,
            FAILED => return Err(side.failure.unwrap_or(FwError::Timeout)),
            _ => {}
        }
        if arch::counter().wrapping_sub(published) > watchdog
            && !HANDOFF
                .side
                .swap(core::ptr::null_mut(), Ordering::AcqRel)
                .is_null()
        {
            // No scheduler CPU took the side: it is still this CPU's.
            return Err(FwError::SchedulerSilent);
        }
        core::hint::spin_loop();
    }
    submitted.map_err(FwError::Submit)
}

/// Carves `bytes` bytes, 64-byte aligned, from the front of `rest`.
fn carve<'m>(rest: &mut &'m mut [u8], bytes: usize) -> Result<&'m mut [u8], LayoutError> {
    let taken = core::mem::take(rest);
    let pad = taken.as_ptr().align_offset(64);
    let need = bytes.saturating_add(pad);
    if need > taken.len() {
        return Err(LayoutError::RegionTooSmall {
            needed: need,
            provided: taken.len(),
        });
    }
    let (head, tail) = taken.split_at_mut(need);
    *rest = tail;
    Ok(head.split_at_mut(pad).1)
}

/// Polls every core's status until it is `want`, for at most the watchdog period.
fn wait_cores(cores: &MmioCores, want: u32, ticks: u64) -> Result<(), FwError> {
    for i in 0..cores.len() {
        let start = arch::counter();
        loop {
            let status = cores.peek_status(i);
            if status == want {
                break;
            }
            if arch::counter().wrapping_sub(start) > ticks {
                return Err(FwError::CoreSilent {
                    core: i as u32,
                    status,
                });
            }
            core::hint::spin_loop();
        }
    }
    arch::acquire();
    Ok(())
}

/// Runs the boot table's orchestration on its entry arguments to the end.
///
/// # Safety
///
/// `boot` is the loader's table; the memory it names is mapped, used by no reference in this
/// image, and the AICores it names run their loops (or will start them) on other CPUs.
pub unsafe fn aicpu_main(boot: &BootTable) -> Result<RunReport, FwError> {
    boot.validate(crate::platform::MAX_CORES as u32)?;
    let orch_fn = *ORCHESTRATIONS
        .get(boot.orchestration as usize)
        .ok_or(FwError::Orchestration(boot.orchestration))?;
    let hz = arch::counter_hz().max(1);
    let watchdog = WATCHDOG_S.saturating_mul(hz);
    // SAFETY: validated above; this AICPU is the only writer of the task registers.
    let mut cores = unsafe { MmioCores::new(boot)? };
    // SAFETY: the validated GM region, shared with the cores by the handshake.
    let gm = unsafe { PhysGm::new(boot.gm) };

    // The four heaps sit at the top of GM; the loader places tensors below them.
    let heaps = RING.heap_bytes * MAX_RINGS as u64;
    let heap0 = boot
        .gm
        .end()
        .and_then(|e| e.checked_sub(heaps))
        .filter(|&h| h >= boot.gm.base);
    let heap0 = heap0.ok_or(FwError::Boot(BootError::Region { name: "gm" }))?;
    let config = OrchestratorConfig {
        sched: SchedConfig::uniform(RING),
        map_buckets: MAP.0,
        map_entries: MAP.1,
        heap_base: [0u64, 1, 2, 3].map(|r| heap0 + r * RING.heap_bytes),
    };
    let orch_layout = OrchestratorLayout::new(config)?;
    let payloads_layout = PayloadsLayout::new([RING.window; MAX_RINGS])?;

    // SAFETY: the validated working region, 64-byte aligned, used by nothing else.
    let work = unsafe {
        core::slice::from_raw_parts_mut(
            boot.aicpu_work.base as usize as *mut u8,
            boot.aicpu_work.bytes as usize,
        )
    };
    let mut rest = work;
    let sched_mem = carve(&mut rest, orch_layout.sched().size())?;
    let orch_mem = carve(&mut rest, orch_layout.size())?;
    let payload_mem = carve(&mut rest, payloads_layout.size())?;
    let entry_mem = carve(&mut rest, core::mem::size_of::<ChipStorageTaskArgs>())?;
    let args_mem = carve(&mut rest, core::mem::size_of::<OrchArgs>())?;
    let work_bytes = boot.aicpu_work.bytes - rest.len() as u64;
    sched_mem.fill(0);
    orch_mem.fill(0);
    payload_mem.fill(0);
    let shared = SchedState::init(sched_mem, orch_layout.sched())?;
    let payloads = TaskPayloads::init(payload_mem, &payloads_layout)?;
    let mut orch = Orchestrator::init(orch_mem, &orch_layout, &shared)?;

    // The entry arguments: the loader's ChipStorageTaskArgs in GM, copied in and adopted.
    let entry_len = core::mem::size_of::<ChipStorageTaskArgs>();
    let entry_bytes = entry_mem
        .get_mut(..entry_len)
        .ok_or(FwError::Boot(BootError::Region { name: "entry_args" }))?;
    if boot.entry_args.bytes < entry_len as u64 {
        return Err(FwError::Boot(BootError::Region { name: "entry_args" }));
    }
    gm.read(boot.entry_args.base, entry_bytes)
        .map_err(|_| FwError::Boot(BootError::Region { name: "entry_args" }))?;
    let entry: &ChipStorageTaskArgs = bytemuck::try_from_bytes(entry_bytes)
        .map_err(|_| FwError::Boot(BootError::Region { name: "entry_args" }))?;
    let args_len = core::mem::size_of::<OrchArgs>();
    let args_bytes = args_mem
        .get_mut(..args_len)
        .ok_or(FwError::Boot(BootError::Region { name: "aicpu_work" }))?;
    args_bytes.fill(0);
    let args: &mut OrchArgs = bytemuck::try_from_bytes_mut(args_bytes)
        .map_err(|_| FwError::Boot(BootError::Region { name: "aicpu_work" }))?;
    args.adopt(entry).map_err(FwError::Entry)?;
    let args: &OrchArgs = args;

    // Whole clusters of (AIC, AIV0, AIV1), in core order.
    let mut owned = [OwnedCore::new(0, 0, CoreSlot::Aic); crate::platform::MAX_CORES];
    let n = cores.len() / 3 * 3;
    for (i, o) in owned.iter_mut().take(n).enumerate() {
        let slot = [CoreSlot::Aic, CoreSlot::Aiv0, CoreSlot::Aiv1][i % 3];
        *o = OwnedCore::new(i, i / 3, slot);
    }
    let sched = Scheduler::new(owned.get(..n).unwrap_or(&[]));

    // Open the register windows, then wait for every core's loop to report IDLE.
    for i in 0..cores.len() {
        cores.write_task(i, AICPU_IDLE);
    }
    wait_cores(&cores, AICORE_IDLE, watchdog)?;
    simpler_aicore_firmware::log::info_cores_up(cores.len() as u32);

    let start = arch::counter();
    let mut side = Sched {
        sched,
        cores,
        shared: &shared,
        payloads: &payloads,
        gm: &gm,
        error: None,
        last_progress: start,
        watchdog,
        failure: None,
    };
    let abort = AtomicU32::new(0);
    if boot.scheduler_cpu != 0 {
        run_split(&mut side, |spin| {
            let mut rt = Rt::new(&mut orch, &payloads, spin, &gm, args, &abort);
            let r = rt.scope(ScopeMode::Auto, |rt| orch_fn(rt));
            r.and_then(|()| rt.error().map_or(Ok(()), Err))
        })?;
    } else {
        let submitted = {
            let mut rt = Rt::new(&mut orch, &payloads, &mut side, &gm, args, &abort);
            let r = rt.scope(ScopeMode::Auto, |rt| orch_fn(rt));
            r.and_then(|()| rt.error().map_or(Ok(()), Err))
        };
        if let Some(e) = side.error {
            return Err(FwError::Scheduler(e));
        }
        submitted.map_err(FwError::Submit)?;
        while !shared.drained() || side.sched.busy() {
            if !side.pass()? {
                core::hint::spin_loop();
            }
        }
    }
    let ticks = arch::counter().wrapping_sub(start);

    for i in 0..side.cores.len() {
        side.cores.write_task(i, EXIT_SIGNAL);
    }
    wait_cores(&side.cores, AICORE_EXITED, watchdog)?;
    let tasks = (0..MAX_RINGS).map(|r| orch.submitted(r) as u64).sum();
    simpler_aicore_firmware::log::info_run_done(tasks, ticks);
    Ok(RunReport {
        tasks,
        dispatched: side.sched.dispatched,
        passes: side.sched.loops,
        ticks,
        work_bytes,
    })
}
