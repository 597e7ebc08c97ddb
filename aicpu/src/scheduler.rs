//! A scheduler thread's pass over the cores it owns (the shared state and slot transitions it
//! drives are `simpler_core::sched`): poll for completions, resolve their fanout, dispatch ready
//! tasks to idle cores.
//!
//! Each thread owns whole clusters (1 AIC + 2 AIV) so a MIX task is never split across
//! threads. One [`Scheduler::step`] is one pass of the reference's loop: completions first,
//! then DUMMY tasks, then dispatch with MIX before AIC and AIV so a cluster is not broken up
//! while a MIX task waits, and idle cores only (a core runs one task at a time).
//! [`Reach`] names the narrower passes ([`Scheduler::pass`]) of a thread that steps its cores
//! in turn (the simulator): after one kernel, only what it made ready; before the round's last
//! cube task, the cube half of the round's dispatch.

use crate::graph_exec::{node_kernel, Expansion, GraphExecError, Submission, MAX_EXPANSIONS};
use crate::payloads::{MixedKernels, TaskPayloads, NO_KERNEL};
use crate::platform::Platform;
use simpler_core::cores::{ActiveMask, ResourceShape};
use simpler_core::gm::Gm;
use simpler_core::handshake::{next_token, FIN_BIT, NO_ERROR};
use simpler_core::predicate::PredicateError;
use simpler_core::sched::{Kept, SchedState};
use simpler_core::CoreTaskArgs;
use simpler_core::TaskId;

/// Most cores one scheduler thread can own (36 clusters of 3 cores).
pub const MAX_OWNED_CORES: usize = 108;

/// Which slot of its cluster a core is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreSlot {
    /// The cube core.
    Aic,
    /// The left vector core.
    Aiv0,
    /// The right vector core.
    Aiv1,
}

impl CoreSlot {
    fn index(self) -> usize {
        match self {
            Self::Aic => 0,
            Self::Aiv0 => 1,
            Self::Aiv1 => 2,
        }
    }
}

/// One core a scheduler owns.
#[derive(Clone, Copy, Debug)]
pub struct OwnedCore {
    /// Index in the chip's core table (what the platform is addressed with).
    pub core: usize,
    /// Cluster index.
    pub cluster: usize,
    /// Slot in the cluster.
    pub slot: CoreSlot,
    token: u32,
    running: Option<TaskId>,
}

impl OwnedCore {
    /// A core with no task.
    pub const fn new(core: usize, cluster: usize, slot: CoreSlot) -> Self {
        Self {
            core,
            cluster,
            slot,
            token: 0,
            running: None,
        }
    }
}

/// A scheduler failure: the run must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// A core reported that its kernel failed.
    KernelFailed {
        /// The task whose kernel failed.
        task: TaskId,
        /// The device-wide index of the core that ran it.
        core: usize,
        /// The kernel id the core ran.
        kernel: u32,
        /// The error code (`simpler_core::handshake::ERR_*`).
        code: u32,
        /// The code's detail word.
        detail: u32,
    },
    /// A ready task names no kernel for a core slot it occupies.
    MissingKernel {
        /// The task with an occupied slot and no kernel for it.
        task: TaskId,
    },
    /// A Graph could not be expanded.
    Graph {
        /// The Graph's outer task, whose Definition failed to expand.
        task: TaskId,
        /// Why.
        error: GraphExecError,
    },
    /// A task's dispatch predicate could not be evaluated.
    Predicate {
        /// The predicated task.
        task: TaskId,
        /// Why.
        error: PredicateError,
    },
}

/// `kernel 3 on core 5 failed on task 7 of ring 0: bad arguments (detail 2: the tensor at
/// fault, or the tensor count when too few)`: the failure code by its name
/// ([`simpler_core::handshake::error_name`]) and what its detail word means.
impl core::fmt::Display for SchedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use simpler_core::handshake::{error_detail, error_name, ERR_GM_CONFLICT, ERR_MEMORY};
        match *self {
            Self::KernelFailed {
                task,
                core,
                kernel,
                code,
                detail,
            } => {
                write!(f, "kernel {kernel} on core {core} failed on {task}: ")?;
                match (error_name(code), error_detail(code)) {
                    // The detail is an address: hex.
                    (Some(name), Some(meaning))
                        if code == ERR_MEMORY || code == ERR_GM_CONFLICT =>
                    {
                        write!(f, "{name} (detail {detail:#x}: {meaning})")
                    }
                    (Some(name), Some(meaning)) => {
                        write!(f, "{name} (detail {detail}: {meaning})")
                    }
                    _ => write!(f, "unknown error code {code} (detail {detail})"),
                }
            }
            Self::MissingKernel { task } => {
                write!(f, "{task} occupies a core slot it names no kernel for")
            }
            Self::Graph { task, .. } => {
                write!(f, "the Graph of outer {task} could not be expanded")
            }
            Self::Predicate { task, .. } => {
                write!(f, "the dispatch predicate of {task} could not be evaluated")
            }
        }
    }
}

impl core::error::Error for SchedError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::KernelFailed { .. } | Self::MissingKernel { .. } => None,
            Self::Graph { error, .. } => Some(error),
            Self::Predicate { error, .. } => Some(error),
        }
    }
}

/// When a timed pass started, finished handling completions, and ended (platform cycles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassTimes {
    /// The pass started.
    pub start: u64,
    /// Completions were handled; dummy tasks and dispatch follow.
    pub completed: u64,
    /// The pass ended.
    pub end: u64,
}

/// Which pass [`Scheduler::pass`] runs: a round's, or one of the narrower passes a thread
/// that steps its cores in turn (the simulator) runs between two cores' steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The reference's pass ([`Scheduler::step`]): completions, kernel-less tasks, then MIX,
    /// AIC and AIV tasks (kept ones first, then the shared queues'), then Graph nodes;
    /// placement from the first owned core.
    Round,
    /// After owned core `i` ran a kernel: the completions, and only the tasks they kept,
    /// placed on the idle cores after `i` in step order first, so that they run before the
    /// round ends, while what their producer wrote is still in the cache. Nothing is taken
    /// from the shared queues (the next round's pass takes consecutive tasks for all the idle
    /// cores at once), and no kernel-less task or Graph node is handled.
    AfterKernel(usize),
    /// The cube half of a round's dispatch, ahead of the round's pass: MIX and then AIC
    /// tasks on the idle cores, in the pass's order (a waiting MIX task still takes its
    /// cluster first), no completions. Run before the round's last cube task, it gives the
    /// cores that finished earlier in the round their next tasks while that one still runs,
    /// so its kernel can fetch their first operands.
    Cube,
}

impl Reach {
    /// The owned core a placement looks at first; it goes on round to the ones before.
    fn from(self) -> usize {
        match self {
            Self::AfterKernel(i) => i + 1,
            Self::Round | Self::Cube => 0,
        }
    }

    /// Whether the shared ready queues are popped, or only kept tasks placed.
    fn queues(self) -> bool {
        !matches!(self, Self::AfterKernel(_))
    }

    /// The shapes dispatched, in order.
    fn shapes(self) -> &'static [ResourceShape] {
        match self {
            Self::Cube => &[ResourceShape::Mix, ResourceShape::Aic],
            Self::Round | Self::AfterKernel(_) => {
                &[ResourceShape::Mix, ResourceShape::Aic, ResourceShape::Aiv]
            }
        }
    }
}

/// An SPMD task some of whose blocks are not yet placed.
#[derive(Clone, Copy, Debug)]
struct Partial {
    task: TaskId,
    next_block: u16,
}

/// The state of one scheduler thread.
pub struct Scheduler {
    cores: [OwnedCore; MAX_OWNED_CORES],
    count: usize,
    partial: [Option<Partial>; 3],
    /// Tasks this thread completed (its share of the run).
    pub completed: u64,
    /// Subtasks this thread dispatched.
    pub dispatched: u64,
    /// Tasks whose dispatch predicate failed: retired without running (counted in
    /// `completed` too), ordinary tasks and Graph nodes alike.
    pub skipped: u64,
    /// Passes this thread ran.
    pub loops: u64,
    /// Ready-queue pops it attempted, and those that found a task.
    pub pops: u64,
    /// Ready-queue pops that found a task.
    pub pop_hits: u64,
    timed: bool,
    last_pass: PassTimes,
    /// Graphs this thread is expanding.
    expansions: [Option<Expansion>; MAX_EXPANSIONS],
    /// Tasks this pass's completions made ready, kept for this thread's own cores; queued
    /// for every scheduler when the pass ends.
    kept: Kept,
}

impl Scheduler {
    /// A scheduler owning `cores` (at most [`MAX_OWNED_CORES`]; more are ignored).
    pub fn new(cores: &[OwnedCore]) -> Self {
        let mut owned = [OwnedCore::new(0, 0, CoreSlot::Aic); MAX_OWNED_CORES];
        let count = cores.len().min(MAX_OWNED_CORES);
        owned[..count].copy_from_slice(&cores[..count]);
        Self {
            cores: owned,
            count,
            partial: [None; 3],
            completed: 0,
            dispatched: 0,
            skipped: 0,
            loops: 0,
            pops: 0,
            pop_hits: 0,
            timed: false,
            last_pass: PassTimes::default(),
            expansions: [const { None }; MAX_EXPANSIONS],
            kept: Kept::default(),
        }
    }

    /// The cores this thread owns.
    pub fn cores(&self) -> &[OwnedCore] {
        // `count` is at most MAX_OWNED_CORES (`new` clamps it).
        self.cores.get(..self.count).unwrap_or(&[])
    }

    /// The task owned core `i` runs, if any.
    pub fn running(&self, i: usize) -> Option<TaskId> {
        self.cores().get(i).and_then(|c| c.running)
    }

    /// Whether the passes since the last call queued a task for any scheduler (one their
    /// completions made ready and this thread could not keep, or kept and did not place):
    /// the only work of theirs an idle peer could take.
    pub fn take_queued(&mut self) -> bool {
        self.kept.take_queued()
    }

    /// Whether any owned core runs a task.
    pub fn busy(&self) -> bool {
        self.cores().iter().any(|c| c.running.is_some())
    }

    /// Forgets running tasks and partial SPMD tasks (after an aborted run). Tokens carry on,
    /// so no core sees a stale token again.
    pub fn reset(&mut self) {
        for c in &mut self.cores[..self.count] {
            c.running = None;
        }
        self.partial = [None; 3];
        self.expansions = [const { None }; MAX_EXPANSIONS];
        self.kept = Kept::default();
    }

    /// One pass: completions, dummy tasks, dispatch. Returns whether anything happened.
    ///
    /// A task a completion makes ready is kept for this thread's own idle cores first
    /// ([`Kept`]); what the pass could not place is queued before it returns, error or not.
    pub fn step(
        &mut self,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        self.pass(Reach::Round, platform, shared, payloads, gm)
    }

    /// A pass of `reach` ([`Self::step`] is a round's); whatever the completions kept and it
    /// did not place is queued before it returns, error or not. Returns whether anything
    /// happened.
    pub fn pass(
        &mut self,
        reach: Reach,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let pass = self.pass_placing(reach, platform, shared, payloads, gm);
        let queued = shared.queue_kept(&mut self.kept);
        pass.map(|progress| progress || queued)
    }

    fn pass_placing(
        &mut self,
        reach: Reach,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let timed = self.timed;
        let start = if timed { platform.cycles() } else { 0 };
        let mut progress = false;
        if reach != Reach::Cube {
            progress = self.poll_completions(platform, shared, gm)?;
            // The tasks the completions kept are dispatched below: their records' misses
            // overlap the rest of the pass.
            for task in self.kept.tasks() {
                payloads.hint_record(task, |words| platform.hint_read(words));
            }
        }
        let completed = if timed { platform.cycles() } else { 0 };
        if reach == Reach::Round {
            self.loops += 1;
            progress |= self.dummy_tasks(shared, payloads, gm)?;
        }
        let skipped = self.skipped;
        for &shape in reach.shapes() {
            progress |= self.dispatch_shape(shape, reach, platform, shared, payloads, gm)?;
        }
        if reach == Reach::Round {
            progress |= self.dispatch_graphs(platform, shared, gm)?;
        }
        // A task retired by its predicate is progress even if nothing was dispatched.
        progress |= self.skipped != skipped;
        if timed {
            self.last_pass = PassTimes {
                start,
                completed,
                end: platform.cycles(),
            };
        }
        Ok(progress)
    }

    /// Takes kernel-less tasks off their queue: a Graph's outer task starts its expansion (one
    /// only with a slot free: another thread, or this one after a Graph finishes, takes the
    /// rest), any other completes at once.
    fn dummy_tasks(
        &mut self,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let mut progress = false;
        for _ in 0..8 {
            if self.expansions.iter().all(Option::is_some) {
                break;
            }
            self.pops += 1;
            let Some(task) = shared.pop_ready(ResourceShape::Dummy) else {
                break;
            };
            self.pop_hits += 1;
            progress = true;
            // A Graph's outer task is told by its first scalar; ordinary kernel-less tasks
            // cost one header read more.
            let mut scalars = [0u64; Submission::SCALARS];
            let n = payloads.scalars(task, &mut scalars);
            if let Some(sub) = Submission::of(&scalars[..n]) {
                self.start_graph(task, sub, gm, shared)?;
                continue;
            }
            shared.complete_keeping(task, Some(&mut self.kept));
            self.completed += 1;
        }
        Ok(progress)
    }

    /// Times each pass's phases with the platform's cycle counter (for tracing); off by
    /// default, when a pass reads no clock.
    pub fn set_timed(&mut self, timed: bool) {
        self.timed = timed;
    }

    /// The phases of the last timed pass.
    pub fn last_pass(&self) -> PassTimes {
        self.last_pass
    }

    fn poll_completions(
        &mut self,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let mut progress = false;
        for i in 0..self.count {
            let Some(&c) = self.cores.get(i) else {
                break;
            };
            let Some(task) = c.running else {
                continue;
            };
            if platform.read_status(c.core) != c.token | FIN_BIT {
                continue;
            }
            self.cores[i].running = None;
            progress = true;
            let (code, detail) = platform.read_error(c.core);
            if code != NO_ERROR {
                let kernel = platform.payload_mut(c.core, c.token & 1).kernel_id;
                return Err(SchedError::KernelFailed {
                    task,
                    core: c.core,
                    kernel,
                    code,
                    detail,
                });
            }
            if let Some((slot, node)) = Expansion::decode(task) {
                self.finish_internal(slot, node, false, gm, shared)?;
            } else if shared.complete_subtask_keeping(task, Some(&mut self.kept)) {
                self.completed += 1;
            }
        }
        Ok(progress)
    }

    /// Takes on an outer GRAPH task.
    fn start_graph(
        &mut self,
        task: TaskId,
        sub: Submission,
        gm: &dyn Gm,
        shared: &SchedState<'_>,
    ) -> Result<(), SchedError> {
        let err = |error| SchedError::Graph { task, error };
        let slot = self
            .expansions
            .iter()
            .position(Option::is_none)
            .ok_or(err(GraphExecError::Capacity))?;
        let e = Expansion::start(task, sub, gm).map_err(err)?;
        self.expansions[slot] = Some(e);
        let _ = shared;
        Ok(())
    }

    /// A subtask of internal node `node` finished (or, with `whole`, a kernel-less node).
    fn finish_internal(
        &mut self,
        slot: usize,
        node: usize,
        whole: bool,
        gm: &dyn Gm,
        shared: &SchedState<'_>,
    ) -> Result<(), SchedError> {
        let Some(e) = self.expansions.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        let outer = e.outer;
        let err = |error| SchedError::Graph { task: outer, error };
        let done = if whole {
            e.finish_node(gm, node)
        } else {
            e.finish_subtask(gm, node)
        }
        .map_err(err)?;
        if done {
            self.expansions[slot] = None;
            shared.complete_keeping(outer, Some(&mut self.kept));
            self.completed += 1;
        }
        Ok(())
    }

    /// Places ready internal nodes of every expansion on idle cores.
    fn dispatch_graphs(
        &mut self,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let mut progress = false;
        for slot in 0..MAX_EXPANSIONS {
            while let Some(e) = self.expansions[slot].as_ref() {
                let Some(i) = e.front() else {
                    break;
                };
                let outer = e.outer;
                let err = |error| SchedError::Graph { task: outer, error };
                let node = e.node(gm, i).map_err(err)?;
                let kernels = [0, 1, 2].map(|s| node_kernel(&node, s));
                let mask = ActiveMask::from_bits_truncate(
                    (kernels[0] != NO_KERNEL) as u8
                        | ((kernels[1] != NO_KERNEL) as u8) << 1
                        | ((kernels[2] != NO_KERNEL) as u8) << 2,
                );
                // A failing predicate retires the node as a kernel-less one (decided before its
                // first block is placed).
                let skip = e.next_block == 0
                    && !mask.is_empty()
                    && match e.predicate(gm, &node).map_err(err)? {
                        Some(p) => !p.evaluate(gm).map_err(|error| SchedError::Predicate {
                            task: Expansion::id(slot, i),
                            error,
                        })?,
                        None => false,
                    };
                if mask.is_empty() || skip {
                    self.expansions[slot].as_mut().map(Expansion::pop_front);
                    self.finish_internal(slot, i, true, gm, shared)?;
                    self.skipped += skip as u64;
                    progress = true;
                    continue;
                }
                let normalized = mask.normalized();
                let shape = normalized.shape();
                let cores = match shape {
                    ResourceShape::Aic => (0..self.count)
                        .find(|&c| self.idle(c) && self.cores[c].slot == CoreSlot::Aic)
                        .map(|c| [c, usize::MAX, usize::MAX]),
                    ResourceShape::Aiv => (0..self.count)
                        .find(|&c| self.idle(c) && self.cores[c].slot != CoreSlot::Aic)
                        .map(|c| [c, usize::MAX, usize::MAX]),
                    _ => self.idle_cluster(normalized),
                };
                let Some(cores) = cores else {
                    break;
                };
                let block_num = node.logical_block_num.max(1) as u16;
                let Some(e) = self.expansions.get_mut(slot).and_then(Option::as_mut) else {
                    break;
                };
                let block = e.next_block;
                let id = Expansion::id(slot, i);
                for &c in cores.iter().filter(|&&c| c != usize::MAX) {
                    // Placement returns owned cores only.
                    let Some(core_slot) = self.cores.get(c).map(|c| c.slot) else {
                        continue;
                    };
                    let kernel = if shape == ResourceShape::Aiv {
                        if kernels[1] != NO_KERNEL {
                            kernels[1]
                        } else {
                            kernels[2]
                        }
                    } else {
                        kernels[core_slot.index()]
                    };
                    hand_over(
                        &mut self.cores[c],
                        platform,
                        id,
                        (kernel, block, block_num),
                        |args| e.args(gm, i, args).map(|_| ()),
                    )
                    .map_err(err)?;
                    self.dispatched += 1;
                }
                e.next_block += 1;
                if e.next_block >= block_num {
                    e.pop_front();
                }
                progress = true;
            }
        }
        Ok(progress)
    }

    fn idle(&self, i: usize) -> bool {
        self.cores.get(i).is_some_and(|c| c.running.is_none())
    }

    /// The next task of `shape` to place: a partially placed SPMD task first, then a kept one,
    /// then (with `queues`) one popped from the shared queue. A task whose dispatch predicate
    /// fails is retired here, without running, and the next taken.
    fn next_task(
        &mut self,
        shape: ResourceShape,
        queues: bool,
        platform: &impl Platform,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<Option<Partial>, SchedError> {
        let s = shape as usize;
        if let Some(p) = self.partial.get(s).copied().flatten() {
            return Ok(Some(p));
        }
        loop {
            let task = match self.kept.take(shape) {
                Some(task) => task,
                None if !queues => return Ok(None),
                None => {
                    self.pops += 1;
                    let Some(task) = shared.pop_ready(shape) else {
                        return Ok(None);
                    };
                    self.pop_hits += 1;
                    // Its record's lines move in while its slot is claimed below.
                    payloads.hint_record(task, |words| platform.hint_read(words));
                    task
                }
            };
            shared.mark_running(task);
            if let Some(predicate) = payloads.predicate(task) {
                let runs = predicate
                    .evaluate(gm)
                    .map_err(|error| SchedError::Predicate { task, error })?;
                if !runs {
                    shared.complete_keeping(task, Some(&mut self.kept));
                    self.completed += 1;
                    self.skipped += 1;
                    continue;
                }
            }
            return Ok(Some(Partial {
                task,
                next_block: 0,
            }));
        }
    }

    fn dispatch_shape(
        &mut self,
        shape: ResourceShape,
        reach: Reach,
        platform: &mut impl Platform,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &dyn Gm,
    ) -> Result<bool, SchedError> {
        let mut progress = false;
        loop {
            // Find a place before taking a task off the queue.
            let from = reach.from().min(self.count);
            let mut order = (from..self.count).chain(0..from);
            let place = match shape {
                ResourceShape::Mix => None,
                ResourceShape::Aic => order
                    .find(|&i| self.idle(i) && self.cores[i].slot == CoreSlot::Aic)
                    .map(|i| [i, usize::MAX, usize::MAX]),
                _ => order
                    .find(|&i| self.idle(i) && self.cores[i].slot != CoreSlot::Aic)
                    .map(|i| [i, usize::MAX, usize::MAX]),
            };
            if shape != ResourceShape::Mix && place.is_none() {
                return Ok(progress);
            }
            if shape == ResourceShape::Mix && !(0..self.count).any(|i| self.idle(i)) {
                return Ok(progress);
            }
            let Some(mut p) =
                self.next_task(shape, reach.queues(), platform, shared, payloads, gm)?
            else {
                return Ok(progress);
            };
            let (kernels, block_num) = payloads.kernels(p.task);
            let mask = shared
                .task_slot(p.task)
                .map_or(ActiveMask::empty(), |s| s.active_mask().normalized());
            let cores = match shape {
                ResourceShape::Mix => match self.idle_cluster(mask) {
                    Some(c) => c,
                    None => {
                        // No cluster has the slots free: keep the task for the next pass.
                        self.partial[shape as usize] = Some(p);
                        return Ok(progress);
                    }
                },
                _ => place.unwrap_or([usize::MAX; 3]),
            };
            for &i in cores.iter().filter(|&&i| i != usize::MAX) {
                // Placement returns owned cores only.
                let Some(slot) = self.cores.get(i).map(|c| c.slot) else {
                    continue;
                };
                // A single-slot AIV task runs its AIV0 kernel on whichever vector core is free.
                let kernel = if shape == ResourceShape::Aiv {
                    kernels.aiv0
                } else {
                    kernels.slot(slot.index())
                };
                if kernel == NO_KERNEL {
                    return Err(SchedError::MissingKernel { task: p.task });
                }
                self.dispatch(
                    i,
                    p.task,
                    kernel,
                    p.next_block,
                    block_num,
                    platform,
                    payloads,
                );
            }
            p.next_block += 1;
            if let Some(slot) = self.partial.get_mut(shape as usize) {
                *slot = (p.next_block < block_num.max(1)).then_some(p);
            }
            progress = true;
        }
    }

    /// A cluster whose cores in `mask` are all idle: their indices (unused entries MAX).
    fn idle_cluster(&self, mask: ActiveMask) -> Option<[usize; 3]> {
        let wanted = [
            mask.contains(ActiveMask::AIC),
            mask.contains(ActiveMask::AIV0),
            mask.contains(ActiveMask::AIV1),
        ];
        let cores = self.cores();
        let mut cluster_start = 0;
        while let Some(first) = cores.get(cluster_start) {
            let cluster = first.cluster;
            let mut found = [usize::MAX; 3];
            let mut i = cluster_start;
            while let Some(c) = cores.get(i).filter(|c| c.cluster == cluster) {
                let s = c.slot.index();
                if wanted.get(s) == Some(&true) && self.idle(i) {
                    if let Some(f) = found.get_mut(s) {
                        *f = i;
                    }
                }
                i += 1;
            }
            if (0..3).all(|s| !wanted[s] || found[s] != usize::MAX) {
                return Some(found);
            }
            cluster_start = i;
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        i: usize,
        task: TaskId,
        kernel: u32,
        block: u16,
        block_num: u16,
        platform: &mut impl Platform,
        payloads: &TaskPayloads<'_>,
    ) {
        let core = &mut self.cores[i];
        let filled: Result<(), core::convert::Infallible> =
            hand_over(core, platform, task, (kernel, block, block_num), |args| {
                payloads.read_args(task, args);
                Ok(())
            });
        // Reading a payload record cannot fail.
        let _ = filled;
        self.dispatched += 1;
    }
}

/// Writes `core`'s next dispatch payload (`kernel`, SPMD `block` of `block_num`, the arguments
/// `fill` writes) and hands it `task`: the one place a core is given work.
fn hand_over<E>(
    core: &mut OwnedCore,
    platform: &mut impl Platform,
    task: TaskId,
    (kernel, block, block_num): (u32, u16, u16),
    fill: impl FnOnce(&mut CoreTaskArgs) -> Result<(), E>,
) -> Result<(), E> {
    let token = next_token(core.token);
    let payload = platform.payload_mut(core.core, token & 1);
    payload.kernel_id = kernel;
    payload.block_idx = block as u32;
    payload.block_num = block_num.max(1) as u32;
    payload.sub_block = (core.slot == CoreSlot::Aiv1) as u32;
    fill(&mut payload.args)?;
    platform.write_task(core.core, token);
    core.token = token;
    core.running = Some(task);
    Ok(())
}

/// Kernel ids for the single-slot submit helpers.
pub fn single(slot: CoreSlot, kernel: u32) -> MixedKernels {
    let on = |s: CoreSlot| if s == slot { kernel } else { NO_KERNEL };
    MixedKernels {
        aic: on(CoreSlot::Aic),
        aiv0: on(CoreSlot::Aiv0),
        aiv1: on(CoreSlot::Aiv1),
    }
}
