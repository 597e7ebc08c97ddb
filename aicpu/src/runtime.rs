//! The orchestration API: what an orchestration function calls to build its task graph.
//!
//! An orchestration function receives an [`Rt`]: the entry arguments, submits of AIC, AIV,
//! MIX and dummy tasks, allocation tasks, AUTO and MANUAL scopes (as closures), explicit
//! dependencies, reading and writing single tensor elements, and a fatal report. The first
//! error latches: every later call returns it, and the run ends with it.

use crate::payloads::{MixedKernels, PayloadSink};
use crate::scheduler::{single, CoreSlot};
use core::fmt;
use simpler_core::cores::ActiveMask;
use simpler_core::deps::ExplicitDep;
use simpler_core::gm::{Gm, GmFault};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::{Blocked, Orchestrator, SubmitError, Task, TaskArg, Waiter};
use simpler_core::predicate::{Predicate, PredicateError};
use simpler_core::scope::{ScopeError, ScopeMode};
use simpler_core::slot::SlotStatus;
use simpler_core::sync::{AtomicU32, Ordering};
use simpler_core::{OrchArgs, TaskId, TaskTensor};

/// Why an orchestration call failed. The first one ends the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtError {
    /// The submit path refused the task.
    Submit(SubmitError),
    /// More scalars than a task carries.
    TooManyScalars {
        /// Scalars given.
        count: usize,
        /// Scalars one task carries at most.
        limit: usize,
    },
    /// A scope call was refused.
    Scope(ScopeError),
    /// A tensor element access outside the tensor.
    Index {
        /// The flat element index asked for.
        index: u64,
        /// Elements in the tensor.
        numel: u64,
    },
    /// Device memory refused an access.
    Memory(GmFault),
    /// The orchestration reported a fatal error with this code.
    Fatal(u32),
    /// The run was aborted from outside (a kernel failure, the watchdog).
    Aborted(u32),
    /// A dispatch predicate was refused.
    Predicate(PredicateError),
    /// The waiter gave up, and the run was not aborted, while an element read or write waited
    /// for a producer of the tensor to complete, or (a write) for its consumers to.
    NotProduced {
        /// The producer waited for (for its completion or its consumers').
        task: TaskId,
    },
}

impl fmt::Display for RtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Submit(_) => f.write_str("the submit was refused"),
            Self::TooManyScalars { count, limit } => write!(
                f,
                "task has {count} scalars; a task carries at most {limit}"
            ),
            Self::Scope(_) => f.write_str("the scope call was refused"),
            Self::Index { index, numel } => write!(
                f,
                "element {index} is past the end of a tensor of {numel} elements"
            ),
            Self::Memory(_) => f.write_str("device memory refused a tensor element access"),
            Self::Fatal(GRAPH_BOUNDARY_TOO_WIDE) => write!(
                f,
                "a Graph boundary is wider than an entry (at most {} tensors, {} scalars)",
                OrchArgs::MAX_TENSORS,
                OrchArgs::MAX_SCALARS
            ),
            Self::Fatal(code) => write!(f, "the orchestration reported fatal error {code:#x}"),
            Self::Aborted(code) => {
                write!(f, "the run was aborted from outside (abort code {code})")
            }
            Self::Predicate(_) => f.write_str("the dispatch predicate was refused"),
            Self::NotProduced { task } => {
                write!(f, "gave up waiting for {task} to complete")
            }
        }
    }
}

impl core::error::Error for RtError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Submit(e) => Some(e),
            Self::Scope(e) => Some(e),
            Self::Memory(e) => Some(e),
            Self::Predicate(e) => Some(e),
            Self::TooManyScalars { .. }
            | Self::Index { .. }
            | Self::Fatal(_)
            | Self::Aborted(_)
            | Self::NotProduced { .. } => None,
        }
    }
}

impl From<PredicateError> for RtError {
    fn from(e: PredicateError) -> Self {
        Self::Predicate(e)
    }
}

impl From<SubmitError> for RtError {
    fn from(e: SubmitError) -> Self {
        Self::Submit(e)
    }
}

impl From<ScopeError> for RtError {
    fn from(e: ScopeError) -> Self {
        Self::Scope(e)
    }
}

/// A task as submitted, shown to a [`SubmitHook`].
pub struct SubmittedTask<'t> {
    /// Its id.
    pub id: TaskId,
    /// Its kernel per core slot.
    pub kernels: MixedKernels,
    /// SPMD blocks.
    pub block_num: u16,
    /// Its tensors (OUTPUT tensors with their allocated buffers).
    pub args: &'t [TaskArg],
    /// Its explicit dependencies.
    pub deps: &'t [ExplicitDep],
    /// Its scalars, as the orchestration passed them (the Graph recorder tells a forwarded
    /// boundary scalar by where it lives).
    pub scalars: &'t [u64],
    /// Scope depth it was submitted at (1 = the run's outer scope).
    pub scope_depth: usize,
    /// Whether it is an allocation task.
    pub alloc: bool,
    /// Its dispatch predicate (`None` for a kernel-less task, which drops one).
    pub predicate: Option<&'t Predicate>,
}

/// Sees every task right after it is submitted, with the edges its submit recorded
/// (producer, kinds). Off by default; used to dump a run's dependency graph.
pub trait SubmitHook {
    /// Called as a submit starts (before the task exists).
    fn before_submit(&mut self) {}

    /// Called once per submitted task, while the task is still held by its scope.
    fn submitted(
        &mut self,
        task: &SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (TaskId, simpler_core::deps::DepFlags)>,
    );
}

/// A Graph body: an orchestration function whose entry arguments are its boundary.
pub type GraphBody = fn(&mut Rt<'_, '_>) -> Result<(), RtError>;

/// A Graph the sink accepted: the outer task is submitted with placeholders that the sink
/// patches (Definition and heap addresses, scalars 1 and 4) once the recording is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphRef {
    /// The boundary's device address (scalar 2): its tensors, then its scalars.
    pub boundary: u64,
    /// The boundary scalars staged after the tensors.
    pub scalars: u32,
}

/// Where Graph submissions go on a host-built run (hbg). Without one (the device runtime, or
/// a body being recorded), a Graph's body runs inline on the ordinary path.
pub trait GraphSink {
    /// Accepts an invocation of `full_key` over this boundary (starting its recording if the
    /// key is new, comparing with the recorded boundary otherwise) and stages the boundary for
    /// the device; `None` runs the body inline (a boundary that does not match, too many
    /// Definitions, no room to stage).
    fn definition(
        &mut self,
        full_key: u64,
        body: GraphBody,
        boundary: &[TaskArg],
        scalars: &[u64],
    ) -> Option<GraphRef>;
    /// The outer task of the invocation `definition` last accepted.
    fn submitted(&mut self, outer: TaskId);
}

/// The fatal code of a Graph boundary wider than an entry (256 tensors, 128 scalars).
pub const GRAPH_BOUNDARY_TOO_WIDE: u32 = 0x6772_0001;

/// The orchestration function's handle on the runtime.
pub struct Rt<'r, 'a> {
    orch: &'r mut Orchestrator<'a>,
    payloads: &'r dyn PayloadSink,
    waiter: &'r mut dyn Waiter,
    gm: &'r dyn Gm,
    args: &'r OrchArgs,
    abort: &'r AtomicU32,
    error: Option<RtError>,
    hook: Option<&'r mut dyn SubmitHook>,
    graphs: Option<&'r mut dyn GraphSink>,
}

impl<'r, 'a> Rt<'r, 'a> {
    /// A handle over one run's orchestrator. `abort` is non-zero once the run is aborted.
    pub fn new(
        orch: &'r mut Orchestrator<'a>,
        payloads: &'r dyn PayloadSink,
        waiter: &'r mut dyn Waiter,
        gm: &'r dyn Gm,
        args: &'r OrchArgs,
        abort: &'r AtomicU32,
    ) -> Self {
        Self {
            orch,
            payloads,
            waiter,
            gm,
            args,
            abort,
            error: None,
            hook: None,
            graphs: None,
        }
    }

    /// Sends Graph submissions to `graphs` (hbg) instead of running their bodies inline.
    pub fn with_graphs(mut self, graphs: &'r mut dyn GraphSink) -> Self {
        self.graphs = Some(graphs);
        self
    }

    /// Submits a Graph: `body` over `boundary` (its tensors with their tags) and `scalars`,
    /// keyed by `key`, or by the body's identity when `key` is 0. On a host-built run with a
    /// recorded (or now recorded) Definition this adds one outer task that the device expands
    /// into the body's nodes; otherwise — no Graph sink, an uncacheable boundary (empty, more
    /// than the task's room, an OUTPUT tag), a refused recording — the body runs inline, here,
    /// with `boundary` as its entry. Returns the outer task, or `None` when it ran inline.
    pub fn submit_graph(
        &mut self,
        key: u64,
        body: GraphBody,
        boundary: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<Option<TaskId>, RtError> {
        self.check()?;
        let full_key = if key == 0 { body as usize as u64 } else { key };
        let cacheable = !boundary.is_empty()
            && boundary.len() <= simpler_core::graph::GRAPH_MAX_TENSOR_ARGS
            && scalars.len() <= simpler_core::graph::GRAPH_MAX_SCALAR_ARGS
            && boundary
                .iter()
                .all(|a| a.tag != simpler_core::TensorArgType::Output);
        if cacheable {
            if let Some(g) = self
                .graphs
                .as_deref_mut()
                .and_then(|sink| sink.definition(full_key, body, boundary, scalars))
            {
                if let Some(id) = self.submit_outer(g, &mut *boundary)? {
                    if let Some(sink) = self.graphs.as_deref_mut() {
                        sink.submitted(id);
                    }
                    return Ok(Some(id));
                }
            }
        }
        self.run_inline(body, boundary, scalars)?;
        Ok(None)
    }

    /// Submits the outer task of one Graph invocation. It carries the boundary's writers and
    /// as many of its readers as fit; readers past the task's room are carried by kernel-less
    /// prelude tasks it waits for, so every boundary tensor orders the Graph as an argument
    /// would. Its heap block lives outside the ring (the sink reserves and patches it).
    fn submit_outer(
        &mut self,
        g: GraphRef,
        boundary: &mut [TaskArg],
    ) -> Result<Option<TaskId>, RtError> {
        use simpler_core::TensorArgType as Tag;
        const ROOM: usize = simpler_core::limits::CORE_MAX_TENSOR_ARGS;
        // The Definition's and the heap block's addresses (scalars 1 and 4) are patched in by
        // the sink once the recording is done.
        let scalars = [
            crate::graph_exec::GRAPH_MAGIC,
            0,
            g.boundary,
            boundary.len() as u64 | (g.scalars as u64) << 32,
            0,
        ];
        // A boundary that fits is the outer task's arguments as it is (it holds no OUTPUT,
        // so the submit rewrites nothing in it).
        if boundary.len() <= ROOM {
            return self
                .submit(MixedKernels::NONE, 1, boundary, &scalars, &[])
                .map(Some);
        }
        // Fills the unused argument slots (never submitted).
        let Ok(filler) = TaskTensor::create_info(&[1], simpler_core::DataType::Uint8) else {
            return Ok(None);
        };
        let filler = TaskArg {
            tensor: filler,
            tag: Tag::Input,
        };
        let writes = |a: &&TaskArg| a.tag != Tag::Input;
        let writers = boundary.iter().filter(writes).count();
        if writers > CORE_MAX_TENSOR_ARGS {
            return Ok(None);
        }
        // Writers first, then as many readers as fit; each slot written once.
        let mut order = boundary
            .iter()
            .filter(writes)
            .chain(boundary.iter().filter(|a| !writes(a)));
        let mut args: [TaskArg; ROOM] =
            core::array::from_fn(|_| order.next().copied().unwrap_or(filler));
        let mut deps = [ExplicitDep::on(TaskId::INVALID); 4];
        let mut nd = 0;
        // The readers left over go to preludes of up to ROOM each.
        let mut left = boundary.len() - ROOM;
        while left > 0 {
            if nd == deps.len() {
                return Ok(None);
            }
            let m = left.min(ROOM);
            let mut prelude: [TaskArg; ROOM] =
                core::array::from_fn(|_| order.next().copied().unwrap_or(filler));
            deps[nd] = ExplicitDep::on(self.submit_dummy(&mut prelude[..m], &[])?);
            nd += 1;
            left -= m;
        }
        self.submit(MixedKernels::NONE, 1, &mut args, &scalars, &deps[..nd])
            .map(Some)
    }

    /// Runs `body` here with `boundary` as its entry, submitting through this runtime.
    fn run_inline(
        &mut self,
        body: GraphBody,
        boundary: &[TaskArg],
        scalars: &[u64],
    ) -> Result<(), RtError> {
        let mut args = OrchArgs::default();
        for a in boundary {
            if args.push_tensor(a.tensor).is_err() {
                return Err(self.fail(RtError::Fatal(GRAPH_BOUNDARY_TOO_WIDE)));
            }
        }
        for &v in scalars {
            if args.push_scalar(v).is_err() {
                return Err(self.fail(RtError::Fatal(GRAPH_BOUNDARY_TOO_WIDE)));
            }
        }
        let mut inner = Rt {
            orch: &mut *self.orch,
            payloads: self.payloads,
            waiter: &mut *self.waiter,
            gm: self.gm,
            args: &args,
            abort: self.abort,
            error: self.error,
            hook: match self.hook.as_deref_mut() {
                Some(h) => Some(h),
                None => None,
            },
            graphs: match self.graphs.as_deref_mut() {
                Some(g) => Some(g),
                None => None,
            },
        };
        let r = body(&mut inner);
        if let Some(e) = inner.error {
            self.error.get_or_insert(e);
        }
        r
    }

    /// Shows every submitted task to `hook`.
    pub fn with_hook(mut self, hook: &'r mut dyn SubmitHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Shows `task` to the hook, if there is one. The submit paths build the description
    /// only when there is a hook: without one, building it would be pure overhead on every
    /// submit.
    fn notify(&mut self, task: SubmittedTask<'_>) {
        if let Some(hook) = self.hook.as_deref_mut() {
            let shared = self.orch.shared();
            hook.submitted(&task, &mut shared.fanin(task.id));
        }
    }

    /// The run's entry arguments (tensors adopted from the chip entry, and scalars). The
    /// reference outlives this borrow of the runtime, so a Graph body can pass its boundary
    /// scalars straight to a submit (`rt.submit_aiv(k, &mut a, &rt.args().scalars()[..2])`):
    /// forwarded unchanged like that they stay per-invocation values of the recorded
    /// Definition, while a value computed from them (even a copy into a local) is recorded as
    /// static data that every replay reuses.
    pub fn args(&self) -> &'r OrchArgs {
        self.args
    }

    /// The first error of the run, if any.
    pub fn error(&self) -> Option<RtError> {
        self.error
    }

    /// Whether the run has failed (an error here or an abort from outside).
    pub fn is_fatal(&self) -> bool {
        self.error.is_some() || self.abort.load(Ordering::Acquire) != 0
    }

    /// Ends the run with `code`.
    pub fn report_fatal(&mut self, code: u32) -> RtError {
        self.fail(RtError::Fatal(code))
    }

    fn fail(&mut self, e: RtError) -> RtError {
        *self.error.get_or_insert(e)
    }

    fn check(&mut self) -> Result<(), RtError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        match self.abort.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(self.fail(RtError::Aborted(code))),
        }
    }

    /// Submits a task running `kernels` on one cluster (a MIX task when more than one slot is
    /// used), `block_num` SPMD blocks, with `args` (OUTPUT descriptions are replaced by their
    /// allocated tensors), `scalars` and explicit `deps`.
    pub fn submit(
        &mut self,
        kernels: MixedKernels,
        block_num: u16,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        self.submit_task(kernels, block_num, args, scalars, deps, None)
    }

    /// [`Self::submit`] with a dispatch predicate: the task runs only if `predicate` holds
    /// when it is ready to dispatch; otherwise it retires without running and its consumers
    /// go on (they see its outputs as it left them: unwritten, for runtime-allocated ones).
    /// The operand's producers become the task's producers. A kernel-less task drops it.
    pub fn submit_predicated(
        &mut self,
        predicate: &Predicate,
        kernels: MixedKernels,
        block_num: u16,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        self.submit_task(kernels, block_num, args, scalars, deps, Some(predicate))
    }

    fn submit_task(
        &mut self,
        kernels: MixedKernels,
        block_num: u16,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
        predicate: Option<&Predicate>,
    ) -> Result<TaskId, RtError> {
        self.check()?;
        if scalars.len() > CORE_MAX_SCALAR_ARGS {
            return Err(self.fail(RtError::TooManyScalars {
                count: scalars.len(),
                limit: CORE_MAX_SCALAR_ARGS,
            }));
        }
        let mut mask = ActiveMask::empty();
        for (bit, k) in [
            (ActiveMask::AIC, kernels.aic),
            (ActiveMask::AIV0, kernels.aiv0),
            (ActiveMask::AIV1, kernels.aiv1),
        ] {
            if k != crate::payloads::NO_KERNEL {
                mask |= bit;
            }
        }
        // An AIV1-only task runs as an AIV0 task.
        let kernels = if mask == ActiveMask::AIV1 {
            single(CoreSlot::Aiv0, kernels.aiv1)
        } else {
            kernels
        };
        if let Some(hook) = self.hook.as_deref_mut() {
            hook.before_submit();
        }
        let payloads = self.payloads;
        // Only a dispatch to a core reads a record's tensors: a kernel-less task (a Graph's
        // outer task, a dummy) keeps its header and scalars only, which also keeps it small
        // in an hbg image.
        let dispatched = !mask.is_empty();
        // Nothing to skip on a kernel-less task: its predicate is dropped, as the reference
        // drops it (no dependency on the operand either).
        let predicate = predicate.filter(|_| dispatched);
        let resolved = predicate.map(Predicate::resolve);
        let result = self.orch.submit_with(
            Task {
                mask,
                block_num,
                args: &mut *args,
                deps,
                predicate,
            },
            &mut self.waiter,
            |id, args| {
                let shown = if dispatched { args.len() } else { 0 };
                payloads.record(
                    id,
                    kernels,
                    block_num,
                    &args[..shown],
                    scalars,
                    resolved.as_ref(),
                )
            },
        );
        let id = result.map_err(|e| self.fail(e.into()))?;
        if self.hook.is_some() {
            let scope_depth = self.orch.scope_depth();
            self.notify(SubmittedTask {
                id,
                kernels,
                block_num,
                args,
                deps,
                scalars,
                scope_depth,
                alloc: false,
                predicate,
            });
        }
        Ok(id)
    }

    /// Submits a task for one vector core.
    pub fn submit_aiv(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, RtError> {
        self.submit(single(CoreSlot::Aiv0, kernel), 1, args, scalars, &[])
    }

    /// Submits a task for one cube core.
    pub fn submit_aic(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, RtError> {
        self.submit(single(CoreSlot::Aic, kernel), 1, args, scalars, &[])
    }

    /// Submits a dependency-only task: it takes part in dependency inference but runs nothing.
    pub fn submit_dummy(
        &mut self,
        args: &mut [TaskArg],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        self.submit(MixedKernels::NONE, 1, args, &[], deps)
    }

    /// Allocates runtime tensors (OUTPUT descriptions made by `TaskTensor::create_info`) in
    /// an allocation task, complete at once; consumers depend on it through the tensors.
    pub fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, RtError> {
        self.check()?;
        if let Some(hook) = self.hook.as_deref_mut() {
            hook.before_submit();
        }
        let result = self.orch.alloc_tensors(&mut *outputs, &mut self.waiter);
        let id = result.map_err(|e| self.fail(e.into()))?;
        if self.hook.is_some() {
            let scope_depth = self.orch.scope_depth();
            self.notify(SubmittedTask {
                id,
                kernels: MixedKernels::NONE,
                block_num: 1,
                args: outputs,
                deps: &[],
                scalars: &[],
                scope_depth,
                alloc: true,
                predicate: None,
            });
        }
        Ok(id)
    }

    /// Runs `f` inside a scope of `mode`; the scope's tasks are released when it ends.
    pub fn scope<R>(
        &mut self,
        mode: ScopeMode,
        f: impl FnOnce(&mut Self) -> Result<R, RtError>,
    ) -> Result<R, RtError> {
        self.check()?;
        if let Err(e) = self.orch.scope_begin(mode) {
            return Err(self.fail(e.into()));
        }
        let result = f(self);
        // The scope closes even when the body failed, so its tasks can retire.
        let ended = self.orch.scope_end();
        let value = result?;
        ended.map_err(|e| self.fail(e.into()))?;
        Ok(value)
    }

    /// Waits until every producer of `tensor` has completed (its creator, `owner_task_id`,
    /// and each TensorMap writer of an overlapping region), and with `consumers` also until
    /// each of them is released by its retaining consumers (see [`Rt::write_element`]). The
    /// producers are looked up again after each wait: the map does not change meanwhile (only
    /// this thread submits), and a producer found ready stays ready.
    fn wait_ready(&mut self, tensor: &TaskTensor, consumers: bool) -> Result<(), RtError> {
        loop {
            self.check()?;
            let Some(on) = self.first_unready(tensor, consumers) else {
                return Ok(());
            };
            if self.waiter.wait(on).is_err() {
                // A waiter gives up when the run is aborted (that abort is the error), or when
                // nothing can complete the task (a host build, where nothing runs).
                self.check()?;
                let task = match on {
                    Blocked::Producer { task } | Blocked::Consumers { task } => task,
                    _ => TaskId::INVALID,
                };
                return Err(self.fail(RtError::NotProduced { task }));
            }
        }
    }

    /// The first producer of `tensor` that is not ready yet, as what to wait for: not
    /// completed (`Producer`), or, with `consumers`, completed but not released (`Consumers`).
    fn first_unready(&mut self, tensor: &TaskTensor, consumers: bool) -> Option<Blocked> {
        let shared = self.orch.shared();
        let unready = |task: TaskId| {
            if !produced(shared, task) {
                Some(Blocked::Producer { task })
            } else if consumers && !released(shared, task) {
                Some(Blocked::Consumers { task })
            } else {
                None
            }
        };
        let owner = tensor.owner_task_id();
        if owner.is_valid() {
            if let Some(on) = unready(owner) {
                return Some(on);
            }
        }
        let mut first = None;
        self.orch.writers_of(tensor, |task| {
            if first.is_none() {
                first = unready(task);
            }
        });
        first
    }

    fn element_addr(&self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError> {
        tensor.element_addr(index).ok_or(RtError::Index {
            index,
            numel: tensor.numel(),
        })
    }

    /// Reads element `index` (row-major) of `tensor` as raw little-endian bytes widened to a
    /// u64, once every task that produces it has completed, as the reference's
    /// `get_tensor_data` does: its creator (`owner_task_id`; an external tensor has none) and
    /// every TensorMap writer of an overlapping region (INOUT and OUTPUT_EXISTING arguments of
    /// tasks submitted in AUTO scopes, not marked `manual_dep`). An earlier writer whose entry
    /// a later INOUT writer covering it took over is not looked up, but the later writer
    /// waited for it, so waiting for the later one waits for both.
    ///
    /// The wait goes through the run's [`Waiter`] as [`Blocked::Producer`]; a task that
    /// retired counts as completed. A waiter that gives up (a host build, where no task runs)
    /// fails the call with [`RtError::NotProduced`] naming the task; an aborted run fails with
    /// its abort.
    pub fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError> {
        self.check()?;
        self.wait_ready(tensor, false)?;
        let addr = self.element_addr(tensor, index).map_err(|e| self.fail(e))?;
        let mut bytes = [0u8; 8];
        let n = tensor.dtype().elem_size() as usize;
        self.gm
            .read(addr, &mut bytes[..n])
            .map_err(|f| self.fail(RtError::Memory(f)))?;
        Ok(u64::from_le_bytes(bytes))
    }

    /// Writes element `index` (row-major) of `tensor` from the low bytes of `value`, as the
    /// reference's `set_tensor_data` does: once every producer [`Rt::read_element`] waits for
    /// has completed, and each of them is also released by its consumers — every task holding a
    /// retaining edge on it (fanout refcount reached the fanout count, the scope's reference
    /// aside) has completed. The second wait is [`Blocked::Consumers`], woken like the first (a
    /// consumer releases its producers as it completes); it fails the same way.
    ///
    /// Which readers that orders: every task that passed a tensor its creator made (any tag:
    /// each takes a retaining creator edge), every task with a retaining explicit dependency
    /// on a producer, and every INOUT or OUTPUT_EXISTING task of the region (a producer
    /// itself). Not ordered, as in the reference: INPUT readers of a tensor with no creator
    /// and no writer registered (an external tensor only ever read), invisible to the
    /// TensorMap, and readers ordered only by a dependency on some other task. Unlike the
    /// reference, where every edge counts, an INPUT reader of an external tensor that found a
    /// writer through the TensorMap holds a WAIT-only edge here, which the counts do not
    /// include, so it is not waited for either. A reader that must finish before the
    /// orchestration overwrites what it reads takes the tensor INOUT (which makes it a
    /// writer, waited for directly), as the reference documents.
    pub fn write_element(
        &mut self,
        tensor: &TaskTensor,
        index: u64,
        value: u64,
    ) -> Result<(), RtError> {
        self.check()?;
        self.wait_ready(tensor, true)?;
        let addr = self.element_addr(tensor, index).map_err(|e| self.fail(e))?;
        let n = tensor.dtype().elem_size() as usize;
        self.gm
            .write(addr, &value.to_le_bytes()[..n])
            .map_err(|f| self.fail(RtError::Memory(f)))
    }
}

/// Whether task `task` is live: claimed this run and not yet retired.
///
/// A retired task's slot is FREE and keeps its id until a later task claims it, so the status
/// alone cannot tell "retired" from "not yet run"; the ring's watermark can. Only tasks in
/// `[last_task_alive, current_task_index)` are live, and only this thread (the orchestrator)
/// claims slots, each after the watermark has passed the slot's previous task, so a live task
/// still occupies its slot here. The watermark is read first: if it passes `task` after that
/// read, the slot reads FREE still naming `task` (nothing claims it while this thread waits),
/// with its fanout counts equal (a task is consumed only then), which the callers take as
/// done too.
/// An id neither live nor below the watermark names a task this run has not claimed; nothing
/// can produce it while the orchestrator waits, so waiting would never end, and the callers
/// take it as done (as an id whose slot names another task always is).
fn live(shared: &simpler_core::sched::SchedState<'_>, task: TaskId) -> bool {
    let flow = shared.flow(task.ring() as usize);
    let alive = flow.last_alive();
    // Written only by this thread, at each claim.
    let current = flow.current_task_index.load(Ordering::Relaxed);
    // Distances from the watermark, so the comparison holds across u32 wrap-around.
    task.local().wrapping_sub(alive) < current.wrapping_sub(alive)
}

/// Whether task `owner`'s outputs are ready: it has completed (COMPLETED, CONSUMED) or retired
/// (see [`live`]).
fn produced(shared: &simpler_core::sched::SchedState<'_>, owner: TaskId) -> bool {
    if !live(shared, owner) {
        return true;
    }
    match shared.task_slot(owner) {
        Some(s) => matches!(
            s.status(),
            SlotStatus::Completed | SlotStatus::Consumed | SlotStatus::Free
        ),
        None => true,
    }
}

/// Whether every retaining consumer of the completed task `producer` has released it (and its
/// own completion is done): the reference's "consumers released", its scope's reference aside.
/// A retired task was released by everything (see [`live`]); a live one is read under its
/// slot's lock, which orders the consumers' completions before this thread's next access.
fn released(shared: &simpler_core::sched::SchedState<'_>, producer: TaskId) -> bool {
    !live(shared, producer) || shared.fanout_released(producer)
}
