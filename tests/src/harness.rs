//! A host-side harness for the core runtime structures: memory for the shared state and the
//! orchestrator, a single-threaded stand-in for the schedulers, and the plain task and
//! argument builders the core-level suites submit with.

use simpler_core::cores::{ActiveMask, ResourceShape};
use simpler_core::layout::Line;
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Task, TaskArg, Waiter,
};
use simpler_core::sched::SchedState;
use simpler_core::{TaskId, TaskTensor, TensorArgType};

/// Zeroed, cache-line-aligned memory of at least `bytes` bytes.
pub fn region(bytes: usize) -> Vec<Line> {
    vec![Line([0; 64]); bytes.div_ceil(64)]
}

/// Runs `f` with an orchestrator of `config` and the shared state it feeds, in fresh memory.
pub fn with_runtime<R>(
    config: OrchestratorConfig,
    f: impl FnOnce(&mut Orchestrator<'_>, &SchedState<'_>) -> R,
) -> R {
    let layout = OrchestratorLayout::new(config).expect("a valid configuration");
    let mut shared_mem = region(layout.sched().size());
    let mut orch_mem = region(layout.size());
    let shared = SchedState::init(bytemuck::cast_slice_mut(&mut shared_mem), layout.sched())
        .expect("the region fits the layout");
    let mut orch = Orchestrator::init(bytemuck::cast_slice_mut(&mut orch_mem), &layout, &shared)
        .expect("the region fits the layout");
    f(&mut orch, &shared)
}

/// Stands in for the scheduler threads: takes every ready task, runs it (instantly) and
/// completes it, until nothing is ready.
pub struct Drain<'s> {
    shared: &'s SchedState<'s>,
    /// Tasks completed so far, in completion order.
    pub completed: Vec<TaskId>,
    /// Whether to record completion order (costs a push per task).
    pub record: bool,
    /// Times the orchestrator waited on each resource.
    pub waits: u64,
}

impl<'s> Drain<'s> {
    /// A drain over `shared`, recording completion order, with no waits counted yet.
    pub fn new(shared: &'s SchedState<'s>) -> Self {
        Self {
            shared,
            completed: Vec::new(),
            record: true,
            waits: 0,
        }
    }

    /// Completes ready tasks until none is ready; returns how many completed.
    pub fn run(&mut self) -> usize {
        let mut n = 0;
        loop {
            let mut progressed = false;
            for shape in [
                ResourceShape::Mix,
                ResourceShape::Aic,
                ResourceShape::Aiv,
                ResourceShape::Dummy,
            ] {
                while let Some(task) = self.shared.pop_ready(shape) {
                    if shape != ResourceShape::Dummy {
                        assert!(
                            self.shared.mark_running(task),
                            "{task:?} popped but not READY"
                        );
                        while !self.shared.complete_subtask(task) {}
                    } else {
                        self.shared.complete(task);
                    }
                    if self.record {
                        self.completed.push(task);
                    }
                    n += 1;
                    progressed = true;
                }
            }
            if !progressed {
                return n;
            }
        }
    }
}

impl Waiter for Drain<'_> {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        self.waits += 1;
        if self.run() > 0 {
            Ok(())
        } else {
            Err(GaveUp)
        }
    }
}

/// `tensor` passed as `tag`.
pub fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// `tensor` as an INPUT argument: the most common argument of the suites' tasks.
pub fn input(tensor: TaskTensor) -> TaskArg {
    arg(tensor, TensorArgType::Input)
}

/// A one-block AIV task over `args`, with no explicit dependency and no predicate: the plain
/// task the core-level suites submit.
pub fn aiv_task(args: &mut [TaskArg]) -> Task<'_> {
    Task {
        mask: ActiveMask::AIV0,
        block_num: 1,
        args,
        deps: &[],
        predicate: None,
    }
}
