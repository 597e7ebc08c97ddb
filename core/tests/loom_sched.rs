//! Loom models of the task-slot state machine, driven through the real submit path and the
//! real scheduler-side calls (`pop_ready`, `mark_running`, `complete_subtask`, `complete`,
//! `release_scope` through `scope_end`, and the watermark advance behind them), and the
//! keeping of readied tasks (`complete_subtask_keeping`, `Kept`, `queue_kept`).
//!
//! The orchestrator runs on the model's main thread and one or two loom threads play the
//! schedulers. Every ring is 4 slots, 4 edges and 1 KiB of heap, so a model of a handful of
//! tasks reuses slots and cells. Each model prints `loom <name> <N> interleavings`
//! (`tests/loom.sh` collects the lines). Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release -p simpler-core --test loom_sched -- --nocapture`.
#![cfg(loom)]
// The workspace denies unsafe code; a model needs it to free the state it leaked for its
// threads or to reach loom's cells through raw pointers. Each block says why it is sound.
#![allow(unsafe_code)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use simpler_core::cores::{ActiveMask, ResourceShape};
use simpler_core::deps::{DepFlags, ExplicitDep};
use simpler_core::layout::Line;
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Task, TaskArg, Waiter,
};
use simpler_core::ring::RingConfig;
use simpler_core::sched::{Kept, SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::slot::SlotStatus;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskId, TaskTensor, TensorArgType};

// ---- the harness ---------------------------------------------------------------------------

/// Tiny rings: a fourth task on a ring waits for the first to retire.
fn config() -> OrchestratorConfig {
    OrchestratorConfig {
        sched: SchedConfig::uniform(RingConfig {
            window: 4,
            heap_bytes: 4096,
            edges: 8,
        }),
        map_buckets: 4,
        map_entries: 8,
        heap_base: [0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000],
    }
}

/// Runs `body` against a freshly formatted shared state and orchestrator, once per explored
/// execution. `body` must join every thread it spawns before it returns.
fn with_state(body: impl Fn(&mut Orchestrator<'static>, &'static SchedState<'static>)) {
    let layout = OrchestratorLayout::new(config()).expect("a valid configuration");
    let lines = |bytes: usize| vec![Line([0; 64]); bytes.div_ceil(64)].into_boxed_slice();
    let shared_mem: &'static mut [Line] = Box::leak(lines(layout.sched().size()));
    let orch_mem: &'static mut [Line] = Box::leak(lines(layout.size()));
    let (shared_ptr, orch_ptr) = (shared_mem as *mut [Line], orch_mem as *mut [Line]);
    let shared: &'static SchedState<'static> = Box::leak(Box::new(
        SchedState::init(bytemuck::cast_slice_mut(shared_mem), layout.sched()).expect("fits"),
    ));
    let state_ptr = shared as *const SchedState<'static> as *mut SchedState<'static>;
    {
        let mut orch =
            Orchestrator::init(bytemuck::cast_slice_mut(orch_mem), &layout, shared).expect("fits");
        body(&mut orch, shared);
    }
    // SAFETY: the three allocations were leaked above only to give the threads of one
    // execution `'static` references; `body` joined every thread it spawned and the
    // orchestrator is dropped, so no reference into them is left. Each pointer came from
    // `Box::leak` of a box of exactly that type and is freed once.
    unsafe {
        drop(Box::from_raw(state_ptr));
        drop(Box::from_raw(shared_ptr));
        drop(Box::from_raw(orch_ptr));
    }
}

/// Counts the executions of a model and prints the figure `tests/loom.sh` collects.
fn model(name: &str, preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = loom::model::Builder::new();
    // The schedulers poll while the orchestrator submits: a long run of branches, not a spin
    // lock that never ends.
    builder.max_branches = 100_000;
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    println!(
        "loom {name} {} interleavings",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A full ring makes the orchestrator yield to the schedulers.
struct Yield;

impl Waiter for Yield {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        loom::thread::yield_now();
        Ok(())
    }
}

fn buffer(addr: u64) -> TaskTensor {
    TaskTensor::new(
        BufferHandle { addr, size: 64 },
        0,
        &[16],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .expect("a valid tensor")
}

fn output() -> TaskArg {
    TaskArg {
        tensor: TaskTensor::create_info(&[16], DataType::Float32).expect("a valid shape"),
        tag: TensorArgType::Output,
    }
}

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

fn task<'t>(mask: ActiveMask, args: &'t mut [TaskArg], deps: &'t [ExplicitDep]) -> Task<'t> {
    Task {
        mask,
        block_num: 1,
        args,
        deps,
        predicate: None,
    }
}

/// What the model expects of one task: its id and the producers it must wait for.
#[derive(Clone)]
struct Expect {
    id: TaskId,
    waits_for: Vec<TaskId>,
}

/// Bookkeeping the scheduler threads share: the tasks the model submits (declared before any
/// thread starts, so read without a lock) and how often each was popped.
struct Board {
    tasks: Vec<Expect>,
    popped: Vec<AtomicUsize>,
    /// Set (Relaxed) by a task's "kernel" just before it completes: what a reader ordered
    /// after the completion must see.
    ran: Vec<AtomicUsize>,
    finished: AtomicUsize,
}

impl Board {
    /// `tasks`: each task's id (known in advance: ring and submit order) and the producers it
    /// must wait for.
    fn new(tasks: &[(TaskId, &[TaskId])]) -> Arc<Self> {
        Arc::new(Self {
            tasks: tasks
                .iter()
                .map(|&(id, waits)| Expect {
                    id,
                    waits_for: waits.to_vec(),
                })
                .collect(),
            popped: tasks.iter().map(|_| AtomicUsize::new(0)).collect(),
            ran: tasks.iter().map(|_| AtomicUsize::new(0)).collect(),
            finished: AtomicUsize::new(0),
        })
    }

    fn index_of(&self, id: TaskId) -> (usize, &Expect) {
        let i = self
            .tasks
            .iter()
            .position(|e| e.id == id)
            .unwrap_or_else(|| panic!("{id:?} was popped but never declared"));
        (i, &self.tasks[i])
    }
}

/// Whether `producer` has completed: its slot says COMPLETED, CONSUMED or FREE, or it holds a
/// later task. The status is read before the task id: a slot being claimed again stores the
/// new id before its BUILDING status, so a BUILDING (or later) status read here comes with the
/// new id, while a stale status of the producer's own comes with the producer's id.
fn has_completed(shared: &SchedState<'_>, producer: TaskId) -> bool {
    let slot = shared.slot(shared.slot_ref(producer).expect("a ring of the model"));
    let status = slot.status();
    matches!(
        status,
        SlotStatus::Completed | SlotStatus::Consumed | SlotStatus::Free
    ) || slot.task_id() != producer
}

/// One scheduler thread: pops every queue, checks what it popped, runs it at once.
fn scheduler(shared: &'static SchedState<'static>, board: Arc<Board>) {
    scheduler_of(shared, board, &ALL_SHAPES)
}

/// The shapes the models submit (each poll of a queue is a few more branches to explore).
const ALL_SHAPES: [ResourceShape; 3] =
    [ResourceShape::Dummy, ResourceShape::Aic, ResourceShape::Aiv];

/// A scheduler thread that pops only the queues of `shapes`.
fn scheduler_of(shared: &'static SchedState<'static>, board: Arc<Board>, shapes: &[ResourceShape]) {
    while board.finished.load(Ordering::Acquire) < board.tasks.len() {
        let mut progress = false;
        for &shape in shapes {
            if let Some(id) = shared.pop_ready(shape) {
                progress = true;
                run_popped(shared, &board, id, shape);
            }
        }
        if !progress {
            loom::thread::yield_now();
        }
    }
}

/// A scheduler thread as `simpler_aicpu`'s runs: each pass takes, shape by shape, the task
/// its own completions kept for it before the queue's, keeps what its completions make ready,
/// and queues what it kept and did not run when the pass ends.
fn keeping_scheduler(shared: &'static SchedState<'static>, board: Arc<Board>) {
    let mut kept = Kept::default();
    while board.finished.load(Ordering::Acquire) < board.tasks.len() {
        let mut progress = false;
        for shape in ALL_SHAPES {
            if let Some(id) = kept.take(shape).or_else(|| shared.pop_ready(shape)) {
                progress = true;
                run_task(shared, &board, id, shape, Some(&mut kept));
            }
        }
        progress |= shared.queue_kept(&mut kept);
        assert!(kept.is_empty(), "a pass ended with a task kept");
        if !progress {
            loom::thread::yield_now();
        }
    }
}

/// Two [`keeping_scheduler`]s run the tasks submitted so far while the orchestrator closes
/// its scope; then every task must have run once and the rings drained.
fn run_keeping_schedulers(
    orch: &mut Orchestrator<'static>,
    shared: &'static SchedState<'static>,
    board: &Arc<Board>,
) {
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let board = board.clone();
            loom::thread::spawn(move || keeping_scheduler(shared, board))
        })
        .collect();
    orch.scope_end().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    check_drained(shared, orch, board);
}

/// Checks a task just popped from the `shape` queue (popped once, READY, every producer it
/// waits for completed) and runs it at once, as a scheduler would.
fn run_popped(shared: &SchedState<'_>, board: &Board, id: TaskId, shape: ResourceShape) {
    run_task(shared, board, id, shape, None);
}

/// [`run_popped`] for a task popped or kept, completing it with `kept` (if any) keeping what it
/// makes ready.
fn run_task(
    shared: &SchedState<'_>,
    board: &Board,
    id: TaskId,
    shape: ResourceShape,
    kept: Option<&mut Kept>,
) {
    let (i, e) = board.index_of(id);
    assert_eq!(
        board.popped[i].fetch_add(1, Ordering::AcqRel),
        0,
        "{id:?} popped twice"
    );
    let slot = shared
        .task_slot(id)
        .expect("a popped task occupies its slot");
    assert_eq!(
        slot.status(),
        SlotStatus::Ready,
        "{id:?} popped but not READY"
    );
    for &p in &e.waits_for {
        assert!(
            has_completed(shared, p),
            "{id:?} became ready before its producer {p:?} completed: {:?} holds {:?}; fanin {:?}",
            shared.slot_ref(p).map(|r| shared.slot(r).status()),
            shared.slot_ref(p).map(|r| shared.slot(r).task_id()),
            shared.fanin(id).collect::<Vec<_>>()
        );
    }
    board.ran[i].store(1, Ordering::Relaxed);
    if shape == ResourceShape::Dummy {
        shared.complete(id);
    } else {
        assert!(shared.mark_running(id), "{id:?} refused by mark_running");
        assert!(
            shared.complete_subtask_keeping(id, kept),
            "{id:?} did not complete"
        );
    }
    board.finished.fetch_add(1, Ordering::AcqRel);
}

/// After every thread joined: every task ran once, every ring retired all it was given, every
/// slot is FREE.
fn check_drained(shared: &SchedState<'_>, orch: &Orchestrator<'_>, board: &Board) {
    for (i, n) in board.popped.iter().enumerate() {
        assert_eq!(n.load(Ordering::Relaxed), 1, "task #{i} popped {n:?} times");
    }
    let dump = || {
        let mut out = String::new();
        for ring in 0..4 {
            let flow = shared.flow(ring);
            out += &format!(
                "ring {ring}: submitted {} watermark {}\n",
                orch.submitted(ring),
                flow.last_alive()
            );
            for local in 0..orch.submitted(ring) {
                let id = TaskId::new(ring as u32, local);
                let slot = shared.slot(shared.slot_ref(id).unwrap());
                out += &format!("  {:?}: {:?} {:?}\n", id, slot.task_id(), slot.status());
            }
        }
        out
    };
    assert!(shared.drained(), "a ring kept a task\n{}", dump());
    for shape in [
        ResourceShape::Aic,
        ResourceShape::Aiv,
        ResourceShape::Mix,
        ResourceShape::Dummy,
    ] {
        assert_eq!(
            shared.pop_ready(shape),
            None,
            "left in the {shape:?} queue (made ready twice)"
        );
    }
    for ring in 0..4 {
        let flow = shared.flow(ring);
        assert_eq!(
            flow.last_alive(),
            orch.submitted(ring),
            "ring {ring} watermark"
        );
        for local in 0..orch.submitted(ring) {
            let slot = shared.slot(shared.slot_ref(TaskId::new(ring as u32, local)).unwrap());
            assert_eq!(
                slot.status(),
                SlotStatus::Free,
                "ring {ring} slot of task {local}"
            );
        }
    }
}

fn spawn_schedulers(
    n: usize,
    shared: &'static SchedState<'static>,
    board: &Arc<Board>,
) -> Vec<loom::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let board = board.clone();
            loom::thread::spawn(move || scheduler(shared, board))
        })
        .collect()
}

// ---- the models ----------------------------------------------------------------------------

/// Submit racing completion on one consumer: a consumer waits on a running AIV producer (a
/// creator edge, WAIT | RETAIN), a dummy producer (an explicit WAIT-only dependency; it
/// completes inline from READY) and an allocation task's output (completed before the
/// consumer exists). The producers can complete while the consumer is being wired, before,
/// or after its publish; the consumer must become ready exactly once and only after both
/// running producers released it.
#[test]
fn consumer_becomes_ready_once_after_every_producer() {
    model("consumer_ready_once", Some(3), || {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let ring = |o: &Orchestrator<'_>| (0..4).find(|&r| o.submitted(r) > 0);
            // The allocation task in a scope of its own, closed at once: the consumer's creator
            // edge pins it (a ring of 4 lets one scope hold 3 tasks).
            let mut alloc = [output()];
            orch.alloc_tensors(&mut alloc, &mut Yield).unwrap();
            let r = ring(orch).unwrap() as u32;
            orch.scope_end().unwrap();
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let (p, d, c) = (TaskId::new(r, 1), TaskId::new(r, 2), TaskId::new(r, 3));
            let board = Board::new(&[(p, &[]), (d, &[]), (c, &[p, d])]);
            let threads = spawn_schedulers(1, shared, &board);
            let mut pa = [arg(buffer(0x1000), TensorArgType::Input), output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut pa, &[]), &mut Yield),
                Ok(p)
            );
            assert_eq!(
                orch.submit(task(ActiveMask::empty(), &mut [], &[]), &mut Yield),
                Ok(d)
            );
            let mut ca = [
                arg(pa[1].tensor, TensorArgType::Input),
                arg(alloc[0].tensor, TensorArgType::Input),
                output(),
            ];
            let deps = [ExplicitDep::wait(d)];
            assert_eq!(
                orch.submit(task(ActiveMask::AIC, &mut ca, &deps), &mut Yield),
                Ok(c)
            );
            orch.scope_end().unwrap();
            for t in threads {
                t.join().unwrap();
            }
            check_drained(shared, orch, &board);
        });
    });
}

/// Kept tasks: two schedulers keep what their completions make ready. A chain AIV → AIC →
/// AIV runs while it is submitted: the AIC consumer is made ready in the pass's AIV turn,
/// after its AIC turn, so it is queued at the pass's end (where the other thread may take
/// it); the last AIV task is kept and run in the same pass by whichever thread completed its
/// producer. Each task must run exactly once, after its producer, and nothing may stay kept
/// or queued.
#[test]
fn kept_tasks_run_once_and_a_pass_leaves_none_kept() {
    model("kept_tasks", Some(1), || {
        with_state(|orch, shared| {
            // Submitted before the schedulers start: the race modelled is theirs (the models
            // above race the submit path against completions).
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let (p, c, d) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2));
            let board = Board::new(&[(p, &[]), (c, &[p]), (d, &[c])]);
            let mut pa = [output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut pa, &[]), &mut Yield),
                Ok(p)
            );
            let mut ca = [arg(pa[0].tensor, TensorArgType::Input), output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIC, &mut ca, &[]), &mut Yield),
                Ok(c)
            );
            let mut da = [arg(ca[1].tensor, TensorArgType::Input)];
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut da, &[]), &mut Yield),
                Ok(d)
            );
            run_keeping_schedulers(orch, shared, &board);
        });
    });
}

/// A completion that readies two consumers of one shape keeps both: the thread that ran the
/// producer takes one in the same pass and queues the other at the pass's end, where either
/// thread may take it. Each consumer must run exactly once, after the producer, and nothing
/// may stay kept or queued.
#[test]
fn two_kept_tasks_of_one_shape_run_once_each() {
    model("kept_two_of_a_shape", Some(1), || {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let (p, c1, c2) = (TaskId::new(0, 0), TaskId::new(0, 1), TaskId::new(0, 2));
            let board = Board::new(&[(p, &[]), (c1, &[p]), (c2, &[p])]);
            let mut pa = [output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIC, &mut pa, &[]), &mut Yield),
                Ok(p)
            );
            for c in [c1, c2] {
                let mut ca = [arg(pa[0].tensor, TensorArgType::Input)];
                assert_eq!(
                    orch.submit(task(ActiveMask::AIV0, &mut ca, &[]), &mut Yield),
                    Ok(c)
                );
            }
            run_keeping_schedulers(orch, shared, &board);
        });
    });
}

/// `fanout_released` (what an element write waits for) reads true only once every retaining
/// consumer has released the producer, and then sees everything the consumer did before it
/// completed: the slot lock it reads under orders it after each release.
#[test]
fn fanout_released_sees_the_consumers_work() {
    model("fanout_released", Some(3), || {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut pa = [output()];
            let p = orch
                .submit(task(ActiveMask::AIV0, &mut pa, &[]), &mut Yield)
                .unwrap();
            let c = TaskId::new(p.ring(), p.local() + 1);
            let board = Board::new(&[(p, &[]), (c, &[p])]);
            let threads = spawn_schedulers(1, shared, &board);
            let mut ca = [arg(pa[0].tensor, TensorArgType::Input), output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIC, &mut ca, &[]), &mut Yield),
                Ok(c)
            );
            while !shared.fanout_released(p) {
                loom::thread::yield_now();
            }
            let (ci, _) = board.index_of(c);
            assert_eq!(
                board.ran[ci].load(Ordering::Relaxed),
                1,
                "released before the consumer's work is visible"
            );
            orch.scope_end().unwrap();
            for t in threads {
                t.join().unwrap();
            }
            check_drained(shared, orch, &board);
        });
    });
}

/// Two consumers wired against one producer while two schedulers complete it (the fanout
/// lock: an edge is either linked before the completion snapshots the list, or counted as
/// released because the producer had completed; never both, never neither).
#[test]
fn fanout_lock_orders_attach_against_the_completion_walk() {
    model("fanout_lock", Some(3), || {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let r = 0; // the outermost scope's ring
            let (p, c1, c2) = (TaskId::new(r, 0), TaskId::new(r, 1), TaskId::new(r, 2));
            let board = Board::new(&[(p, &[]), (c1, &[p]), (c2, &[p])]);
            let threads = spawn_schedulers(1, shared, &board);
            let mut pa = [output()];
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut pa, &[]), &mut Yield),
                Ok(p)
            );
            for c in [c1, c2] {
                let mut ca = [arg(pa[0].tensor, TensorArgType::Input)];
                assert_eq!(
                    orch.submit(task(ActiveMask::AIV0, &mut ca, &[]), &mut Yield),
                    Ok(c)
                );
            }
            orch.scope_end().unwrap();
            for t in threads {
                t.join().unwrap();
            }
            check_drained(shared, orch, &board);
        });
    });
}

/// Completion racing scope release and the watermark: six tasks on a ring of four slots, a
/// chain through INOUT on one buffer plus RETAIN pins, in a scope the orchestrator closes while
/// the scheduler completes them. The fifth and sixth submits must wait for slots; no slot may
/// be reclaimed while a completion, a consumer or the scope still holds its task, and the
/// watermark passes tasks in order (a popped task always still occupies its slot, and at the
/// end every slot is FREE with the watermark at the count submitted).
#[test]
fn slots_are_reclaimed_in_order_and_only_when_released() {
    model("scope_release_watermark", Some(2), || {
        with_state(|orch, shared| {
            const N: u32 = 6;
            let r = 0;
            let ids: Vec<TaskId> = (0..N).map(|i| TaskId::new(r, i)).collect();
            let expect: Vec<(TaskId, &[TaskId])> = (0..ids.len())
                .map(|i| (ids[i], &ids[i.saturating_sub(1)..i]))
                .collect();
            let board = Board::new(&expect);
            let threads = spawn_schedulers(1, shared, &board);
            let acc = buffer(0x2000);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            for (i, &id) in ids.iter().enumerate() {
                let mut a = [arg(acc, TensorArgType::InOut)];
                assert_eq!(
                    orch.submit(task(ActiveMask::AIV0, &mut a, &[]), &mut Yield),
                    Ok(id)
                );
                // Close the scope halfway, so that later tasks find earlier ones released by
                // their scope while they still run.
                if i == 2 {
                    orch.scope_end().unwrap();
                    orch.scope_begin(ScopeMode::Auto).unwrap();
                }
            }
            orch.scope_end().unwrap();
            for t in threads {
                t.join().unwrap();
            }
            check_drained(shared, orch, &board);
        });
    });
}

/// A RETAIN-only explicit dependency (a pin without ordering) and a WAIT | RETAIN one on the
/// same producer in one submit: the edge is recorded once with both kinds, the pin keeps the
/// producer's slot until the consumer completes.
#[test]
fn explicit_dependencies_merge_into_one_edge() {
    model("explicit_deps", Some(3), || {
        with_state(|orch, shared| {
            let r = 0;
            let (p, q, c) = (TaskId::new(r, 0), TaskId::new(r, 1), TaskId::new(r, 2));
            let board = Board::new(&[(p, &[]), (q, &[]), (c, &[q])]);
            let threads = spawn_schedulers(1, shared, &board);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut [], &[]), &mut Yield),
                Ok(p)
            );
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut [], &[]), &mut Yield),
                Ok(q)
            );
            let deps = [
                ExplicitDep {
                    task: p,
                    flags: DepFlags::RETAIN,
                },
                ExplicitDep::on(q),
                ExplicitDep::wait(q),
            ];
            assert_eq!(
                orch.submit(task(ActiveMask::AIV0, &mut [], &deps), &mut Yield),
                Ok(c)
            );
            orch.scope_end().unwrap();
            for t in threads {
                t.join().unwrap();
            }
            check_drained(shared, orch, &board);
        });
    });
}

/// The orchestrator thread's own scheduler: while a ring is full (and at the end) it runs the
/// ready tasks of `shapes` itself, so a model needs one thread fewer.
struct RunInline<'b> {
    shared: &'static SchedState<'static>,
    board: &'b Board,
    shapes: &'b [ResourceShape],
}

impl RunInline<'_> {
    /// Runs every ready task of its shapes; whether it ran any.
    fn drain(&self) -> bool {
        let mut ran = false;
        while let Some((id, shape)) = self
            .shapes
            .iter()
            .find_map(|&s| self.shared.pop_ready(s).map(|t| (t, s)))
        {
            ran = true;
            run_popped(self.shared, self.board, id, shape);
        }
        ran
    }
}

impl Waiter for RunInline<'_> {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        if !self.drain() {
            loom::thread::yield_now();
        }
        Ok(())
    }
}

/// The premature-ready race. Consumer C (inner scope, ring 1) waits on D (outer scope, ring 0,
/// completed by a thread of its own) and on a dummy E. D completes while C is being wired: its
/// release lands before C's publish, and its thread is preempted right after the increment.
/// The publish and E's release make C ready; C runs and retires; ring 1 moves on (ring 0
/// cannot: D's completion still holds D) and C's slot is claimed again by C', which has no
/// producers (fanin count 1, equal to D's thread's stale sum). D's thread then resumes.
/// Deciding readiness by loading the slot's count after the increment made C' ready a second
/// time (a task queued twice, or queued before its producers); deciding by the increment's own
/// result cannot. The orchestrator thread runs every other task itself, so the model has two
/// threads; two preemptions reach the race.
#[test]
fn a_release_that_is_not_the_last_decides_nothing() {
    model("stale_release", Some(2), || {
        with_state(|orch, shared| {
            let (d, e, c) = (TaskId::new(0, 0), TaskId::new(1, 0), TaskId::new(1, 1));
            let x = |i| TaskId::new(1, i);
            let c2 = x(5);
            let board = Board::new(&[
                (d, &[]),
                (e, &[]),
                (c, &[d, e]),
                (x(2), &[]),
                (x(3), &[]),
                (x(4), &[]),
                (c2, &[]),
            ]);
            let d_thread = {
                let board = board.clone();
                loom::thread::spawn(move || {
                    let popped = loop {
                        match shared.pop_ready(ResourceShape::Aiv) {
                            Some(t) => break t,
                            None => loom::thread::yield_now(),
                        }
                    };
                    assert_eq!(popped, d);
                    board.popped[0].fetch_add(1, Ordering::AcqRel);
                    assert!(shared.mark_running(d));
                    assert!(shared.complete_subtask(d));
                    board.finished.fetch_add(1, Ordering::AcqRel);
                })
            };
            let mut inline = RunInline {
                shared,
                board: &board,
                shapes: &[ResourceShape::Dummy, ResourceShape::Aic],
            };
            let mut submit = |orch: &mut Orchestrator<'static>,
                              mask: ActiveMask,
                              args: &mut [TaskArg],
                              deps: &[ExplicitDep]| {
                orch.submit(task(mask, args, deps), &mut inline).unwrap()
            };
            let none = ActiveMask::empty();
            orch.scope_begin(ScopeMode::Auto).unwrap();
            assert_eq!(submit(orch, ActiveMask::AIV0, &mut [], &[]), d);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            assert_eq!(submit(orch, none, &mut [], &[]), e);
            let deps = [ExplicitDep::wait(d), ExplicitDep::wait(e)];
            assert_eq!(submit(orch, ActiveMask::AIC, &mut [], &deps), c);
            orch.scope_end().unwrap();
            for i in 2..4 {
                orch.scope_begin(ScopeMode::Auto).unwrap();
                assert_eq!(submit(orch, none, &mut [], &[]), x(i));
                orch.scope_end().unwrap();
            }
            orch.scope_begin(ScopeMode::Auto).unwrap();
            assert_eq!(submit(orch, none, &mut [], &[]), x(4));
            orch.scope_end().unwrap();
            // C' has no producers: fanin count 1, equal to the stale sum of a release of C
            // made while C was being wired.
            orch.scope_begin(ScopeMode::Auto).unwrap();
            assert_eq!(submit(orch, ActiveMask::AIC, &mut [], &[]), c2);
            orch.scope_end().unwrap();
            orch.scope_end().unwrap();
            while board.finished.load(Ordering::Acquire) < board.tasks.len() {
                if !inline.drain() {
                    loom::thread::yield_now();
                }
            }
            d_thread.join().unwrap();
            check_drained(shared, orch, &board);
        });
    });
}
