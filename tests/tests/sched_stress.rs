//! Multi-threaded stress test of the task-slot state machine ([`simpler_core::slot`]) and the
//! ready queues, driven through the real submit path.
//!
//! One orchestrator thread (the test thread) submits a long random stream of tasks over a few
//! external buffers, with runtime-allocated outputs, explicit dependencies, MIX and SPMD tasks,
//! dummy tasks, allocation tasks, fan-out bursts (several tasks waiting for one gate) and nested
//! AUTO scopes, on rings small enough that back-pressure and slot reuse happen all the time. Three scheduler threads pop the four ready
//! queues, mark tasks running and complete their subtasks, handing subtasks of a task to each
//! other through a shared work list.
//!
//! Checked, with the offending task named in every message:
//!
//! - every submitted task is popped exactly once (allocation tasks never), from the queue of
//!   its shape, and completes exactly once (`complete_subtask` reports the completion once,
//!   and only after every subtask was reported);
//! - when a task is popped, every producer it waits for has completed: its WAIT fanin as
//!   `SchedState::fanin` reports it right after the submit, plus its explicit WAIT
//!   dependencies and the creators of its inputs;
//! - the submit recorded the edges it must: a creator edge (WAIT | RETAIN) to the owner of
//!   every input produced in a still-open scope, and every explicit dependency unless that
//!   task had already completed;
//! - a popped task still occupies its slot, READY when popped and RUNNING after
//!   `mark_running`, with the mask it was submitted with;
//! - at the end, after the last scope closed, every ring's watermark equals the tasks
//!   submitted on it and every slot is FREE: everything retired, nothing leaked.
//!
//! The orchestrator's `Waiter` spins and yields; it gives up after [`WAIT_LIMIT`] on one
//! submit, which fails the test with a dump of the shared state. A watchdog aborts the process
//! (after printing the same dump) if nothing is submitted or completed for [`STALL_LIMIT`], or
//! the run exceeds [`RUN_LIMIT`], so a thread stuck inside the library cannot hang the suite.
//!
//! `SCHED_STRESS_SEED` sets the orchestrator's random stream; `SCHED_STRESS_TASKS` the
//! number of tasks (the 1,000,000-operation floor applies only at the default or more). The
//! interleavings differ from run to run whatever the seed.
//!
//! The second test is a reduction of a failure the stress test hits now and then (a full ring
//! draining onto a scope-pinned head reported as a deadlock); see its comment.

use simpler_core::cores::{ActiveMask, ResourceShape};
use simpler_core::deps::{DepFlags, ExplicitDep};
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, SubmitError, Task, TaskArg, Waiter,
};
use simpler_core::ring::{ring_for_depth, RingConfig, MAX_RINGS};
use simpler_core::sched::{SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::slot::SlotStatus;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskId, TaskTensor, TensorArgType};
use simpler_tests::harness::with_runtime;
use simpler_tests::random::{env_u64, SplitMix64};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Tasks the orchestrator submits (allocation tasks included).
const TASKS: u32 = 220_000;
/// Scheduler threads.
const SCHEDULERS: usize = 3;
/// State operations the run must reach.
const MIN_OPS: u64 = 1_000_000;
/// How long one submit may wait for the schedulers before the test fails.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// How long the run may go without a submit or a completion, and how long it may take in
/// all, before the watchdog aborts the process.
const STALL_LIMIT: Duration = Duration::from_secs(30);
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// Failed waits a thread spins through before it yields its CPU (four threads share two CPUs).
const SPINS_BEFORE_YIELD: u32 = 256;
/// Empty polls each scheduler spins through before it yields: different per thread, so some
/// poll eagerly and some keep their CPU (and get preempted at arbitrary points).
const SCHEDULER_IDLE_SPINS: [u32; SCHEDULERS] = [32, 256, 2048];

/// Ring window (slots), edge pool, heap and TensorMap: small, so back-pressure is constant.
const WINDOW: u32 = 64;
const EDGES: u32 = 256;
const HEAP: u64 = 256 << 10;
const MAP_ENTRIES: u32 = 512;
/// Chance per submit of starting a fan-out burst: the next 6 to 16 tasks wait for this one.
const GATE_PERCENT: u64 = 5;
/// Scope depth the random walk reaches (depths 4 and 5 share ring 3).
const MAX_DEPTH: usize = 5;
/// What may be submitted on a ring while a scope on it is open: tasks, heap bytes, edges. A
/// ring cannot retire past a task its open scope holds, so everything submitted on it after
/// that task stays live. These budgets keep such a ring's window, heap and edge pool (and,
/// over four rings, the TensorMap: 4 x 32 tasks x 3 writers < 512) below their sizes even
/// after the largest next task, so a full resource is always one the schedulers can drain:
/// the orchestrator is never in a real deadlock, and every wait must end.
const TASK_BUDGET: u32 = 32;
const HEAP_BUDGET: u64 = 96 << 10;
const EDGE_BUDGET: u64 = 160;

/// External buffers: 8 of 4,096 `f32`, every fourth one viewed as 64 x 64.
const BUFFERS: usize = 8;
const BUFFER_ELEMS: u32 = 4096;
const EXT_BASE: u64 = 0x0100_0000;
const HEAP_BASES: [u64; MAX_RINGS] = [0x1000_0000, 0x2000_0000, 0x3000_0000, 0x4000_0000];

const SHAPES: [ResourceShape; 4] = [
    ResourceShape::Mix,
    ResourceShape::Aic,
    ResourceShape::Aiv,
    ResourceShape::Dummy,
];

fn config() -> OrchestratorConfig {
    OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window: WINDOW,
            heap_bytes: HEAP,
            edges: EDGES,
        }),
        map_buckets: 256,
        map_entries: MAP_ENTRIES,
        heap_base: HEAP_BASES,
    }
}

/// A thread's generator: [`SplitMix64`] with multiply-shift reductions.
struct Rng(SplitMix64);

impl Rng {
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0.below_scaled(n)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.below((hi - lo + 1) as u64) as u32
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What the test knows of one submitted task, written once by the orchestrator thread right
/// after the submit returned.
#[derive(Debug)]
struct Info {
    id: TaskId,
    /// The mask after normalisation (what the slot holds).
    mask: ActiveMask,
    shape: ResourceShape,
    /// Subtasks to complete: `block_num` x active slots.
    subtasks: u32,
    /// Submit-order indices of every task this one must wait for.
    producers: Box<[u32]>,
    /// An allocation task: complete at submit, never in a ready queue.
    alloc: bool,
}

/// Everything the threads share besides the runtime.
struct Board<'s> {
    sched: &'s SchedState<'s>,
    start: Instant,
    /// Per submit-order index.
    infos: Vec<OnceLock<Info>>,
    popped: Vec<AtomicBool>,
    /// Set by the test just before the library call that completes the task, so a consumer
    /// popped after that completion always sees it.
    completed: Vec<AtomicBool>,
    /// Set when the library reported the completion (`complete_subtask` returned true).
    lib_completed: Vec<AtomicBool>,
    subtasks_done: Vec<AtomicU32>,
    /// Per ring, per local id: submit-order index + 1 (0: not recorded yet).
    index: [Vec<AtomicU32>; MAX_RINGS],
    /// Tasks recorded so far.
    recorded: AtomicU32,
    /// Non-allocation tasks submitted; final once `done` is set.
    schedulable: AtomicU64,
    done: AtomicBool,
    completed_count: AtomicU64,
    /// Subtasks waiting for any scheduler: (submit index, task).
    work: Mutex<Vec<(u32, TaskId)>>,
    /// Set when any thread fails, so the others stop.
    stop: AtomicBool,
    /// Threads still running (orchestrator + schedulers), for the watchdog.
    live: AtomicUsize,
    ops: AtomicU64,
    pops: [AtomicU64; 4],
    cross_thread_subtasks: AtomicU64,
}

impl<'s> Board<'s> {
    fn new(sched: &'s SchedState<'s>, tasks: u32) -> Self {
        let n = tasks as usize;
        let atomics32 = || (0..n + 1).map(|_| AtomicU32::new(0)).collect::<Vec<_>>();
        let flags = || (0..n).map(|_| AtomicBool::new(false)).collect::<Vec<_>>();
        Self {
            sched,
            start: Instant::now(),
            infos: (0..n).map(|_| OnceLock::new()).collect(),
            popped: flags(),
            completed: flags(),
            lib_completed: flags(),
            subtasks_done: (0..n).map(|_| AtomicU32::new(0)).collect(),
            index: [atomics32(), atomics32(), atomics32(), atomics32()],
            recorded: AtomicU32::new(0),
            schedulable: AtomicU64::new(0),
            done: AtomicBool::new(false),
            completed_count: AtomicU64::new(0),
            work: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            live: AtomicUsize::new(1 + SCHEDULERS),
            ops: AtomicU64::new(0),
            pops: Default::default(),
            cross_thread_subtasks: AtomicU64::new(0),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The submit-order index of `id`, if the orchestrator recorded it.
    fn lookup(&self, id: TaskId) -> Option<u32> {
        let table = self.index.get(id.ring() as usize)?;
        match table.get(id.local() as usize)?.load(Ordering::Acquire) {
            0 => None,
            g => Some(g - 1),
        }
    }

    /// The submit-order index of a task a scheduler popped. The orchestrator records a task
    /// right after its submit returns, which may be after a scheduler already popped it, so
    /// wait for the record (bounded: an id that is never recorded is a bug).
    fn lookup_popped(&self, id: TaskId) -> u32 {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.lookup(id) {
                return g;
            }
            assert!(
                id.ring() < MAX_RINGS as u32 && id.local() < self.infos.len() as u32,
                "popped an id no submit produced: {id:?}"
            );
            if self.stopped() {
                panic!("stopping (another thread failed) while waiting for the record of {id:?}");
            }
            assert!(
                t0.elapsed() < WAIT_LIMIT,
                "popped {id:?} but the orchestrator never recorded such a task\n{}",
                self.dump()
            );
            back_off(&mut spins);
        }
    }

    fn info(&self, g: u32) -> &Info {
        self.infos[g as usize]
            .get()
            .expect("recorded before its index is published")
    }

    /// The shared state, for failure messages.
    fn dump(&self) -> String {
        let mut s = String::new();
        let recorded = self.recorded.load(Ordering::Acquire);
        let _ = writeln!(
            s,
            "after {:.1?}: {} tasks recorded, {} of {} schedulable completed (orchestrator done: {}), work list {}",
            self.start.elapsed(),
            recorded,
            self.completed_count.load(Ordering::Acquire),
            self.schedulable.load(Ordering::Acquire),
            self.done.load(Ordering::Acquire),
            self.work.try_lock().map_or(usize::MAX, |w| w.len()),
        );
        for r in 0..MAX_RINGS {
            let flow = self.sched.flow(r);
            let alive = flow.last_alive();
            let current = flow.current_task_index.load(Ordering::Acquire);
            let head = if alive != current {
                let slot = self.sched.slot(
                    self.sched
                        .slot_ref(TaskId::new(r as u32, alive))
                        .expect("a valid ring"),
                );
                format!(
                    "head slot holds {:?} in {:?}",
                    slot.task_id(),
                    slot.status()
                )
            } else {
                "empty".to_string()
            };
            let _ = writeln!(
                s,
                "  ring {r}: last_alive {alive}, current {current}, {head}"
            );
        }
        let mut shown = 0;
        for g in 0..recorded {
            let Some(info) = self.infos[g as usize].get() else {
                continue;
            };
            if self.completed[g as usize].load(Ordering::Acquire) {
                continue;
            }
            let slot = self.sched.task_slot(info.id).map(|s| s.status());
            let waiting: Vec<_> = info
                .producers
                .iter()
                .filter(|&&p| !self.completed[p as usize].load(Ordering::Acquire))
                .map(|&p| (p, self.info(p).id))
                .collect();
            let _ = writeln!(
                s,
                "  not completed: #{g} {:?} {:?} popped {} subtasks {}/{} slot {:?}, waiting for {:?}",
                info.id,
                info.shape,
                self.popped[g as usize].load(Ordering::Acquire),
                self.subtasks_done[g as usize].load(Ordering::Acquire),
                info.subtasks,
                slot,
                waiting
            );
            shown += 1;
            if shown == 8 {
                break;
            }
        }
        s
    }
}

/// Spins, and every `SPINS_BEFORE_YIELD` consecutive failures yields the CPU.
fn back_off(spins: &mut u32) {
    *spins += 1;
    if (*spins).is_multiple_of(SPINS_BEFORE_YIELD) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Marks the board stopped if the thread owning it unwinds, and counts the thread out.
struct Exit<'b, 's>(&'b Board<'s>);

impl Drop for Exit<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop.store(true, Ordering::SeqCst);
        }
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---- scheduler side -------------------------------------------------------------------------

struct Scheduler<'b, 's> {
    board: &'b Board<'s>,
    me: usize,
    ops: u64,
    rng: Rng,
    idle_spins: u32,
}

impl Scheduler<'_, '_> {
    fn run(&mut self) {
        let b = self.board;
        let mut idle = 0u32;
        loop {
            if b.stopped() {
                return;
            }
            let mut progressed = false;
            let taken = b.work.lock().unwrap().pop();
            if let Some((g, id)) = taken {
                b.cross_thread_subtasks.fetch_add(1, Ordering::Relaxed);
                self.finish_subtask(g, id);
                progressed = true;
            }
            for shape in SHAPES {
                if let Some(id) = b.sched.pop_ready(shape) {
                    self.ops += 1;
                    b.pops[shape as usize].fetch_add(1, Ordering::Relaxed);
                    self.dispatch(id, shape);
                    progressed = true;
                }
            }
            if progressed {
                idle = 0;
                continue;
            }
            if b.done.load(Ordering::Acquire)
                && b.completed_count.load(Ordering::Acquire)
                    == b.schedulable.load(Ordering::Acquire)
            {
                return;
            }
            idle += 1;
            if idle.is_multiple_of(self.idle_spins) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn dispatch(&mut self, id: TaskId, shape: ResourceShape) {
        let b = self.board;
        let g = b.lookup_popped(id);
        let info = b.info(g);
        let me = self.me;
        assert!(
            !info.alloc,
            "scheduler {me}: allocation task #{g} {id:?} was in a ready queue"
        );
        assert!(
            !b.popped[g as usize].swap(true, Ordering::AcqRel),
            "scheduler {me}: task #{g} {id:?} popped twice (second time from the {shape:?} queue)"
        );
        assert_eq!(
            shape, info.shape,
            "scheduler {me}: task #{g} {id:?} with mask {:?} popped from the {shape:?} queue",
            info.mask
        );
        for &p in info.producers.iter() {
            assert!(
                b.completed[p as usize].load(Ordering::Acquire),
                "scheduler {me}: task #{g} {id:?} popped before its producer #{p} {:?} completed\n{}",
                b.info(p).id,
                b.dump()
            );
        }
        let slot = b.sched.task_slot(id).unwrap_or_else(|| {
            panic!(
                "scheduler {me}: popped task #{g} {id:?} no longer occupies its slot (slot holds {:?})",
                b.sched.slot_ref(id).map(|r| b.sched.slot(r).task_id())
            )
        });
        assert_eq!(
            slot.active_mask(),
            info.mask,
            "scheduler {me}: task #{g} {id:?}: slot mask differs from the submitted one"
        );
        assert_eq!(
            slot.status(),
            SlotStatus::Ready,
            "scheduler {me}: popped task #{g} {id:?} is not READY in its slot"
        );
        if shape == ResourceShape::Dummy {
            assert!(
                !b.completed[g as usize].swap(true, Ordering::AcqRel),
                "scheduler {me}: dummy task #{g} {id:?} completed twice"
            );
            b.completed_count.fetch_add(1, Ordering::AcqRel);
            self.ops += 1;
            b.sched.complete(id);
            b.lib_completed[g as usize].store(true, Ordering::Release);
            return;
        }
        self.ops += 1;
        assert!(
            b.sched.mark_running(id),
            "scheduler {me}: mark_running refused popped task #{g} {id:?} (slot status {:?})",
            b.sched.task_slot(id).map(|s| s.status())
        );
        let status = b.sched.task_slot(id).map(|s| s.status());
        assert_eq!(
            status,
            Some(SlotStatus::Running),
            "scheduler {me}: task #{g} {id:?} not RUNNING in its slot after mark_running"
        );
        // Hand the other subtasks to whichever scheduler comes first, most of the time.
        let mut local = 1;
        if info.subtasks > 1 {
            if self.rng.chance(75) {
                let mut work = b.work.lock().unwrap();
                for _ in 1..info.subtasks {
                    work.push((g, id));
                }
            } else {
                local = info.subtasks;
            }
        }
        for _ in 0..local {
            self.finish_subtask(g, id);
        }
    }

    fn finish_subtask(&mut self, g: u32, id: TaskId) {
        let b = self.board;
        let me = self.me;
        let n = b.info(g).subtasks;
        let k = b.subtasks_done[g as usize].fetch_add(1, Ordering::AcqRel) + 1;
        assert!(
            k <= n,
            "scheduler {me}: task #{g} {id:?}: subtask {k} of {n} finished"
        );
        if k == n {
            assert!(
                !b.completed[g as usize].swap(true, Ordering::AcqRel),
                "scheduler {me}: task #{g} {id:?} completed twice"
            );
            b.completed_count.fetch_add(1, Ordering::AcqRel);
        }
        self.ops += 1;
        if b.sched.complete_subtask(id) {
            let done = b.subtasks_done[g as usize].load(Ordering::Acquire);
            assert_eq!(
                done, n,
                "scheduler {me}: complete_subtask completed task #{g} {id:?} after {done} of {n} subtasks"
            );
            assert!(
                !b.lib_completed[g as usize].swap(true, Ordering::AcqRel),
                "scheduler {me}: complete_subtask reported task #{g} {id:?} completed twice"
            );
        }
    }
}

// ---- orchestrator side ----------------------------------------------------------------------

/// The orchestrator's waiting policy: spin, then yield; give up after `WAIT_LIMIT` on one
/// submit (or at once if another thread failed).
struct SpinWaiter<'b, 's> {
    board: &'b Board<'s>,
    since: Option<Instant>,
    spins: u32,
    /// Wait calls per resource: task ring, heap, edge pool, TensorMap.
    waits: [u64; 4],
    gave_up: Option<Blocked>,
}

impl SpinWaiter<'_, '_> {
    fn reset(&mut self) {
        self.since = None;
        self.spins = 0;
        self.gave_up = None;
    }
}

impl Waiter for SpinWaiter<'_, '_> {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        self.waits[match on {
            Blocked::TaskRing { .. } => 0,
            Blocked::Heap { .. } => 1,
            Blocked::EdgePool { .. } => 2,
            Blocked::TensorMap { .. } => 3,
            // Only `Rt` waits for a producer; these submits go to the orchestrator directly.
            Blocked::Producer { .. } | Blocked::Consumers { .. } => {
                unreachable!("a submit never waits for a producer or its consumers")
            }
        }] += 1;
        if self.board.stopped() {
            self.gave_up = Some(on);
            return Err(GaveUp);
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        self.spins += 1;
        if self.spins < SPINS_BEFORE_YIELD {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
            if since.elapsed() > WAIT_LIMIT {
                self.gave_up = Some(on);
                return Err(GaveUp);
            }
        }
        Ok(())
    }
}

/// A tensor some task produced (an OUTPUT), usable while the scope it was made in is open.
#[derive(Clone, Copy)]
struct Produced {
    tensor: TaskTensor,
    owner: TaskId,
    /// 0-based index of the scope the owner was submitted in.
    depth: usize,
}

struct Driver<'o, 'a, 'b, 's> {
    orch: &'o mut Orchestrator<'a>,
    board: &'b Board<'s>,
    rng: Rng,
    waiter: SpinWaiter<'b, 's>,
    buffers: [TaskTensor; BUFFERS],
    /// Tasks each open scope holds.
    scope_tasks: Vec<u64>,
    /// Tasks, heap bytes and edges submitted on each ring since its outermost open scope
    /// began.
    ring_tasks: [u32; MAX_RINGS],
    ring_heap: [u64; MAX_RINGS],
    ring_edges: [u64; MAX_RINGS],
    produced: VecDeque<Produced>,
    recent: VecDeque<TaskId>,
    /// A task the next `.1` submits wait for.
    gate: Option<(TaskId, u32)>,
    ops: u64,
    next: u32,
    tasks: u32,
    stats: Stats,
}

/// What the orchestrator saw, for the report.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    /// Waiter calls per resource: task ring, heap, edge pool, TensorMap.
    waits: [u64; 4],
    max_fanin: usize,
    edges: u64,
    allocs: u64,
    dummies: u64,
    /// Explicit dependencies the submit skipped because the task had already completed.
    explicit_skipped: u64,
    scopes: u64,
}

impl Driver<'_, '_, '_, '_> {
    fn begin(&mut self) {
        self.orch.scope_begin(ScopeMode::Auto).expect("scope_begin");
        self.scope_tasks.push(0);
    }

    fn end(&mut self) {
        self.orch.scope_end().expect("scope_end");
        let held = self.scope_tasks.pop().expect("an open scope");
        self.ops += held;
        self.stats.scopes += 1;
        let closed = self.scope_tasks.len();
        if closed < MAX_RINGS {
            self.ring_tasks[closed] = 0;
            self.ring_heap[closed] = 0;
            self.ring_edges[closed] = 0;
        }
        // Outputs of the closed scope's tasks may retire from now on.
        self.produced.retain(|p| p.depth < closed);
    }

    fn run(&mut self) {
        self.begin();
        while self.next < self.tasks {
            let depth = self.scope_tasks.len();
            let ring = ring_for_depth(depth - 1);
            let roll = self.rng.below(100);
            if roll < 5 && depth < MAX_DEPTH {
                self.begin();
            } else if roll < 10
                || self.ring_tasks[ring] >= TASK_BUDGET
                || self.ring_heap[ring] >= HEAP_BUDGET
                || self.ring_edges[ring] >= EDGE_BUDGET
            {
                self.end();
                if self.scope_tasks.is_empty() {
                    self.begin();
                }
            } else {
                *self.scope_tasks.last_mut().unwrap() += 1;
                let (heap, edges) = self.submit_one();
                self.ring_tasks[ring] += 1;
                self.ring_heap[ring] += heap;
                self.ring_edges[ring] += edges;
            }
        }
        while !self.scope_tasks.is_empty() {
            self.end();
        }
    }

    fn view(&mut self, b: usize, whole: bool) -> TaskTensor {
        let t = self.buffers[b];
        if whole {
            return t;
        }
        let rng = &mut self.rng;
        if t.ndims() == 2 {
            let (h, w) = (rng.range(1, 16), rng.range(1, 16));
            let (r, c) = (rng.range(0, 64 - h), rng.range(0, 64 - w));
            t.view(&[h, w], &[r, c]).unwrap()
        } else {
            let len = rng.range(16, 256);
            let off = rng.range(0, BUFFER_ELEMS - len);
            t.view(&[len], &[off]).unwrap()
        }
    }

    /// A runtime-allocated output: mostly 1 KiB or less, a quarter 4 to 16 KiB.
    fn output(&mut self) -> TaskArg {
        let len = if self.rng.chance(25) {
            self.rng.range(1024, 4096)
        } else {
            self.rng.range(16, 256)
        };
        TaskArg {
            tensor: TaskTensor::create_info(&[len], DataType::Float32).unwrap(),
            tag: TensorArgType::Output,
        }
    }

    /// Submits one random task; returns the heap bytes and edges it took on its ring.
    fn submit_one(&mut self) -> (u64, u64) {
        let b = self.board;
        let g = self.next;
        let depth = self.scope_tasks.len() - 1;
        if self.rng.chance(3) {
            // An allocation task: complete as soon as it exists.
            let mut outs = [self.output()];
            self.waiter.reset();
            let result = self.orch.alloc_tensors(&mut outs, &mut self.waiter);
            let id = self.check_submitted(g, result);
            self.ops += 1;
            self.stats.allocs += 1;
            // Complete before anything can consume its output.
            b.completed[g as usize].store(true, Ordering::Release);
            b.lib_completed[g as usize].store(true, Ordering::Release);
            self.record(g, id, ActiveMask::empty(), 0, Vec::new(), true);
            self.keep_produced(outs[0].tensor, id, depth);
            return (heap_bytes(&outs), 0);
        }

        let mask = if self.rng.chance(10) {
            ActiveMask::empty()
        } else {
            const MASKS: [u8; 10] = [1, 1, 2, 2, 4, 3, 5, 6, 7, 7];
            ActiveMask::from_bits_truncate(MASKS[self.rng.below(MASKS.len() as u64) as usize])
        };
        let block_num = if !mask.is_empty() && self.rng.chance(20) {
            2
        } else {
            1
        };

        let mut args = Vec::with_capacity(3);
        let mut creators = Vec::new();
        for _ in 0..self.rng.below(4) {
            if !self.produced.is_empty() && self.rng.chance(20) {
                let p = self.produced[self.rng.below(self.produced.len() as u64) as usize];
                let tag = if self.rng.chance(30) {
                    TensorArgType::InOut
                } else {
                    TensorArgType::Input
                };
                args.push(TaskArg {
                    tensor: p.tensor,
                    tag,
                });
                creators.push(p.owner);
                continue;
            }
            let roll = self.rng.below(100);
            let buf = self.rng.below(BUFFERS as u64) as usize;
            let whole = self.rng.chance(2);
            let arg = if roll < 40 {
                TaskArg {
                    tensor: self.view(buf, whole),
                    tag: TensorArgType::Input,
                }
            } else if roll < 60 {
                TaskArg {
                    tensor: self.view(buf, whole),
                    tag: TensorArgType::InOut,
                }
            } else if roll < 80 {
                TaskArg {
                    tensor: self.view(buf, false),
                    tag: TensorArgType::OutputExisting,
                }
            } else {
                self.output()
            };
            args.push(arg);
        }

        let mut deps = Vec::new();
        // A fan-out burst: the next few tasks all wait for one gate, so they turn ready
        // together when it completes and the schedulers race for them in the queues.
        if let Some((gate, left)) = self.gate {
            deps.push(ExplicitDep::wait(gate));
            self.gate = (left > 1).then_some((gate, left - 1));
        }
        if !self.recent.is_empty() && self.rng.chance(20) {
            for _ in 0..self.rng.range(1, 2) {
                let task = self.recent[self.rng.below(self.recent.len() as u64) as usize];
                let flags = match self.rng.below(20) {
                    0 => DepFlags::RETAIN,
                    1..=9 => DepFlags::WAIT,
                    _ => DepFlags::WAIT | DepFlags::RETAIN,
                };
                deps.push(ExplicitDep { task, flags });
            }
        }

        self.waiter.reset();
        let result = self.orch.submit(
            Task {
                mask,
                block_num,
                args: &mut args,
                deps: &deps,
                predicate: None,
            },
            &mut self.waiter,
        );
        let id = self.check_submitted(g, result);
        self.ops += 1;

        // The task is live (its scope holds it): its fanin is readable now.
        let fanin: Vec<(TaskId, DepFlags)> = b.sched.fanin(id).collect();
        self.stats.max_fanin = self.stats.max_fanin.max(fanin.len());
        self.stats.edges += fanin.len() as u64;
        let mut producers = Vec::with_capacity(fanin.len() + deps.len());
        for &(p, flags) in &fanin {
            let pg = b.lookup(p).unwrap_or_else(|| {
                panic!("task #{g} {id:?}: fanin names {p:?}, which no earlier submit produced")
            });
            assert!(
                pg < g,
                "task #{g} {id:?}: fanin names a later task #{pg} {p:?}"
            );
            if flags.contains(DepFlags::WAIT) {
                producers.push(pg);
            }
        }
        let flags_of = |t: TaskId| {
            fanin
                .iter()
                .filter(|e| e.0 == t)
                .fold(DepFlags::empty(), |f, e| f | e.1)
        };
        for &owner in &creators {
            let f = flags_of(owner);
            assert!(
                f.contains(DepFlags::WAIT | DepFlags::RETAIN),
                "task #{g} {id:?}: input produced by live {owner:?} but its fanin edge is {f:?}; fanin {fanin:?}"
            );
        }
        for dep in &deps {
            let f = flags_of(dep.task);
            let pg = b.lookup(dep.task).expect("a recent task was recorded");
            if f.is_empty() {
                // Skipped: legal only for a producer that retired or was consumed.
                assert!(
                    b.completed[pg as usize].load(Ordering::Acquire),
                    "task #{g} {id:?}: explicit dependency on #{pg} {:?} ({:?}) recorded no edge, yet it has not completed",
                    dep.task,
                    dep.flags
                );
                self.stats.explicit_skipped += 1;
            } else {
                assert!(
                    f.contains(dep.flags),
                    "task #{g} {id:?}: explicit {:?} dependency on {:?} recorded as {f:?}",
                    dep.flags,
                    dep.task
                );
            }
            if dep.flags.contains(DepFlags::WAIT) {
                producers.push(pg);
            }
        }
        producers.sort_unstable();
        producers.dedup();

        let norm = mask.normalized();
        let subtasks = block_num as u32 * norm.bits().count_ones().max(1);
        if norm.is_empty() {
            self.stats.dummies += 1;
        }
        self.record(g, id, norm, subtasks, producers, false);
        for a in args.iter().filter(|a| a.tag == TensorArgType::Output) {
            assert_eq!(
                a.tensor.owner_task_id(),
                id,
                "task #{g}: OUTPUT not bound to its producer"
            );
            self.keep_produced(a.tensor, id, depth);
        }
        if self.recent.len() == 16 {
            self.recent.pop_front();
        }
        self.recent.push_back(id);
        if self.gate.is_none() && self.rng.chance(GATE_PERCENT) {
            self.gate = Some((id, self.rng.range(6, 16)));
        }
        (heap_bytes(&args), fanin.len() as u64)
    }

    fn check_submitted(&self, g: u32, result: Result<TaskId, SubmitError>) -> TaskId {
        match result {
            Ok(id) => id,
            Err(_) if self.board.stopped() => {
                panic!("submit #{g} abandoned: a scheduler failed (its message is above)")
            }
            Err(e) => panic!(
                "submit #{g} failed: {e} ({e:?}); {}; waits so far [task ring, heap, edge pool, \
                 tensor map] {:?}\n{}",
                match self.waiter.gave_up {
                    Some(on) => format!("the waiter gave up after {WAIT_LIMIT:?} on {on:?}"),
                    None => "the waiter did not give up: the library reported it".to_string(),
                },
                self.waiter.waits,
                self.board.dump()
            ),
        }
    }

    fn record(
        &mut self,
        g: u32,
        id: TaskId,
        mask: ActiveMask,
        subtasks: u32,
        producers: Vec<u32>,
        alloc: bool,
    ) {
        let b = self.board;
        let ring = id.ring() as usize;
        assert!(
            ring < MAX_RINGS && (id.local() as usize) < b.index[ring].len(),
            "task #{g}: id {id:?} out of range"
        );
        let info = Info {
            id,
            mask,
            shape: mask.shape(),
            subtasks,
            producers: producers.into_boxed_slice(),
            alloc,
        };
        if b.infos[g as usize].set(info).is_err() {
            panic!("task #{g} recorded twice");
        }
        let prev = b.index[ring][id.local() as usize].swap(g + 1, Ordering::AcqRel);
        assert_eq!(
            prev,
            0,
            "task #{g}: id {id:?} already given to task #{}",
            prev.wrapping_sub(1)
        );
        if !alloc {
            b.schedulable.fetch_add(1, Ordering::AcqRel);
        }
        b.recorded.store(g + 1, Ordering::Release);
        self.next = g + 1;
    }

    fn keep_produced(&mut self, tensor: TaskTensor, owner: TaskId, depth: usize) {
        if self.produced.len() == 32 {
            self.produced.pop_front();
        }
        self.produced.push_back(Produced {
            tensor,
            owner,
            depth,
        });
    }
}

/// Heap bytes a task's outputs take (each aligned to 1 KiB).
fn heap_bytes(args: &[TaskArg]) -> u64 {
    args.iter()
        .filter(|a| a.tag == TensorArgType::Output)
        .map(|a| a.tensor.extent_bytes().div_ceil(1024) * 1024)
        .sum()
}

fn external_buffers() -> [TaskTensor; BUFFERS] {
    std::array::from_fn(|b| {
        let handle = BufferHandle {
            addr: EXT_BASE + b as u64 * 0x10_0000,
            size: BUFFER_ELEMS as u64 * 4,
        };
        let (shapes, strides): (&[u32], &[u32]) = if b % 4 == 3 {
            (&[64, 64], &[64, 1])
        } else {
            (&[BUFFER_ELEMS], &[1])
        };
        TaskTensor::new(
            handle,
            0,
            shapes,
            strides,
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap()
    })
}

/// The tests of this file run one at a time: each wants both CPUs of a small machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn slot_transitions_and_ready_queues_under_three_schedulers() {
    let _alone = one_at_a_time();
    let seed = env_u64("SCHED_STRESS_SEED").unwrap_or(0x5EED_0005_7E55);
    let tasks = env_u64("SCHED_STRESS_TASKS").map_or(TASKS, |n| n as u32);
    println!("sched_stress: seed {seed:#x}, {tasks} tasks, {SCHEDULERS} schedulers");
    with_runtime(config(), |orch, shared| {
        let board = Board::new(shared, tasks);
        let board = &board;
        let mut report = None;
        std::thread::scope(|s| {
            // Watchdog: a thread stuck inside the library (a livelocked queue, a lock never
            // released) would hang the join below forever, so stop the process instead.
            s.spawn(move || {
                let mut last = (u32::MAX, u64::MAX);
                let mut since = Instant::now();
                while board.live.load(Ordering::SeqCst) != 0 {
                    let now = (
                        board.recorded.load(Ordering::Acquire),
                        board.completed_count.load(Ordering::Acquire),
                    );
                    if now != last {
                        (last, since) = (now, Instant::now());
                    }
                    let stalled = since.elapsed() > STALL_LIMIT;
                    if stalled || board.start.elapsed() > RUN_LIMIT {
                        eprintln!(
                            "sched_stress: {}; {} threads still running\n{}",
                            if stalled {
                                "no submit or completion for STALL_LIMIT"
                            } else {
                                "run exceeded RUN_LIMIT"
                            },
                            board.live.load(Ordering::SeqCst),
                            board.dump()
                        );
                        std::process::abort();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            for (me, &idle_spins) in SCHEDULER_IDLE_SPINS.iter().enumerate() {
                s.spawn(move || {
                    let _exit = Exit(board);
                    let mut sched = Scheduler {
                        board,
                        me,
                        ops: 0,
                        rng: Rng(SplitMix64(
                            seed ^ (me as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F),
                        )),
                        idle_spins,
                    };
                    sched.run();
                    board.ops.fetch_add(sched.ops, Ordering::Relaxed);
                });
            }
            let _exit = Exit(board);
            let mut driver = Driver {
                orch: &mut *orch,
                board,
                rng: Rng(SplitMix64(seed)),
                waiter: SpinWaiter {
                    board,
                    since: None,
                    spins: 0,
                    waits: [0; 4],
                    gave_up: None,
                },
                buffers: external_buffers(),
                scope_tasks: Vec::new(),
                ring_tasks: [0; MAX_RINGS],
                ring_heap: [0; MAX_RINGS],
                ring_edges: [0; MAX_RINGS],
                produced: VecDeque::new(),
                recent: VecDeque::new(),
                gate: None,
                ops: 0,
                next: 0,
                tasks,
                stats: Stats::default(),
            };
            driver.run();
            board.ops.fetch_add(driver.ops, Ordering::Relaxed);
            board.done.store(true, Ordering::Release);
            driver.stats.waits = driver.waiter.waits;
            report = Some(driver.stats);
        });
        let elapsed = board.start.elapsed();
        let stats = report.expect("the orchestrator finished");

        // Every task popped once (allocation tasks never) and completed once.
        for g in 0..tasks as usize {
            let info = board.info(g as u32);
            assert_eq!(
                board.popped[g].load(Ordering::Acquire),
                !info.alloc,
                "task #{g} {:?} (alloc: {}) popped state wrong at the end",
                info.id,
                info.alloc
            );
            assert!(
                board.completed[g].load(Ordering::Acquire),
                "task #{g} {:?} never completed",
                info.id
            );
            assert!(
                board.lib_completed[g].load(Ordering::Acquire),
                "task #{g} {:?}: complete_subtask never reported its completion",
                info.id
            );
        }
        assert!(
            board.work.lock().unwrap().is_empty(),
            "subtasks left in the work list"
        );
        // Everything retired; no slot leaked.
        let mut submitted = [0u32; MAX_RINGS];
        for (r, n) in submitted.iter_mut().enumerate() {
            *n = orch.submitted(r);
            assert_eq!(
                shared.flow(r).last_alive(),
                *n,
                "ring {r}: watermark stops short of the {n} tasks submitted on it\n{}",
                board.dump()
            );
            for i in 0..WINDOW {
                let slot = shared.slot(
                    shared
                        .slot_ref(TaskId::new(r as u32, i))
                        .expect("a valid ring"),
                );
                assert_eq!(
                    slot.status(),
                    SlotStatus::Free,
                    "ring {r} slot {i} ({:?}) not FREE after everything retired",
                    slot.task_id()
                );
            }
        }
        for shape in SHAPES {
            assert!(
                shared.pop_ready(shape).is_none(),
                "a task left in the {shape:?} queue"
            );
        }
        assert_eq!(
            submitted.iter().map(|&n| n as u64).sum::<u64>(),
            tasks as u64
        );

        let ops = board.ops.load(Ordering::Relaxed);
        let pops = board.pops.each_ref().map(|p| p.load(Ordering::Relaxed));
        println!(
            "sched_stress: {ops} state operations in {elapsed:.2?}\n  \
             tasks per ring {submitted:?} in {} scopes; {} allocation and {} dummy tasks\n  \
             pops [mix, aic, aiv, dummy] {pops:?}; {} subtasks finished from the shared work list\n  \
             fanin: {} edges, max {} per task; {} explicit deps on completed tasks skipped\n  \
             orchestrator waits [task ring, heap, edge pool, tensor map] {:?}",
            stats.scopes,
            stats.allocs,
            stats.dummies,
            board.cross_thread_subtasks.load(Ordering::Relaxed),
            stats.edges,
            stats.max_fanin,
            stats.explicit_skipped,
            stats.waits,
        );
        assert!(
            ops >= MIN_OPS || tasks < TASKS,
            "only {ops} state operations; the run must reach {MIN_OPS}"
        );
    });
}

/// Reduced from the stress test, which fails with it now and then: a submit waiting for a full
/// ring gets `FlowControlDeadlock` although the ring is draining and has room.
///
/// Each iteration submits t1 and t2 in one scope on ring 1, closes it, and submits t3 and t4 in
/// the next. The window is 4, so 3 tasks live: whenever a claim finds the ring full, the
/// tasks ahead of the open scope's belong to the closed scope before it, which the scheduler
/// thread is completing, so the claim must wait for them to retire and never fail.
///
/// `Orchestrator::claim` decides the ring is full from the watermark `sync_ring` read, then
/// asks `SchedState::head_pinned_by_scope`, which reads the watermark again. When the closed
/// scope's tasks retire between the two reads, the new head is the open scope's first task,
/// pinned by that scope, and the submit fails with `FlowControlDeadlock { head: Some(..) }`
/// while 1 task of 3 is live. (`Wiring::add_edge` checks the edge pool the same way, and the
/// heap wait in `claim` reports `HeapRingDeadlock` the same way.) The deadlock check has to
/// look at the head the fullness was computed from (or re-check fullness after a newer
/// watermark) before reporting.
#[test]
fn a_ring_draining_onto_a_scope_pinned_head_is_not_a_deadlock() {
    let _alone = one_at_a_time();
    const ITERATIONS: u32 = 50_000;
    const KERNEL_TIME: Duration = Duration::from_micros(10);
    /// Passes after this long even if the iterations are not done (a slow, loaded machine).
    const TIME_LIMIT: Duration = Duration::from_secs(10);
    let config = OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window: 4,
            heap_bytes: 1 << 16,
            edges: 16,
        }),
        map_buckets: 16,
        map_entries: 64,
        heap_base: HEAP_BASES,
    };
    /// Retries at once: the race needs the scheduler to retire tasks while the orchestrator is
    /// inside the claim loop, on another CPU. Yields now and then, so the scheduler thread gets
    /// a CPU even on a busy machine.
    struct Retry(Instant, u32);
    impl Waiter for Retry {
        fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
            self.1 += 1;
            if self.1.is_multiple_of(4096) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if self.0.elapsed() > WAIT_LIMIT {
                Err(GaveUp)
            } else {
                Ok(())
            }
        }
    }
    with_runtime(config, |orch, shared| {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let stop = &stop;
            // One scheduler: runs every ready task for a few microseconds, so the orchestrator
            // finds the ring full and waits in the claim loop while tasks retire.
            s.spawn(move || {
                let mut idle = 0u32;
                while !stop.load(Ordering::Acquire) {
                    match shared.pop_ready(ResourceShape::Aiv) {
                        Some(t) => {
                            assert!(shared.mark_running(t), "{t:?} popped but not READY");
                            let run = Instant::now();
                            while run.elapsed() < KERNEL_TIME {
                                std::hint::spin_loop();
                            }
                            assert!(shared.complete_subtask(t), "{t:?} has one subtask");
                        }
                        None => back_off(&mut idle),
                    }
                }
            });
            struct StopOnDrop<'f>(&'f AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _stop = StopOnDrop(stop);
            let submit = |orch: &mut Orchestrator<'_>, step: &str, i: u32| {
                let task = Task {
                    mask: ActiveMask::AIV0,
                    block_num: 1,
                    args: &mut [],
                    deps: &[],
                    predicate: None,
                };
                let result = orch.submit(task, &mut Retry(Instant::now(), 0));
                let flow = shared.flow(1);
                let (alive, current) = (
                    flow.last_alive(),
                    flow.current_task_index.load(Ordering::Acquire),
                );
                result.unwrap_or_else(|e| {
                    panic!(
                        "iteration {i}, {step}: {e:?}, yet ring 1 now has {} of 3 tasks live \
                         (last_alive {alive}, submitted {current})",
                        current - alive
                    )
                })
            };
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let start = Instant::now();
            for i in 0..ITERATIONS {
                if start.elapsed() > TIME_LIMIT {
                    println!("stopped after {i} iterations, at the time limit");
                    break;
                }
                orch.scope_begin(ScopeMode::Auto).unwrap();
                submit(orch, "t1", i);
                submit(orch, "t2", i);
                orch.scope_end().unwrap();
                orch.scope_begin(ScopeMode::Auto).unwrap();
                submit(orch, "t3", i);
                submit(orch, "t4", i);
                orch.scope_end().unwrap();
            }
            orch.scope_end().unwrap();
        });
    });
}
