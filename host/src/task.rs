//! Kernels with identities and task arguments by builder: how a [`Scope`](crate::scope::Scope) submits.
//!
//! A [`KernelTable`] hands out one handle per kernel it holds, typed by the core the kernel
//! runs on: an [`AicKernel`] for the cube core, an [`AivKernel`] for a vector core. A handle can
//! only come from a table, so it always names a kernel that exists, and the core type is part of
//! the type: a MIX task ([`Mix`]) takes its cube part as an `AicKernel` and its vector parts as
//! `AivKernel`s, so a kernel cannot be put on the wrong core.
//!
//! ```
//! use simpler_host::prelude::*;
//! fn noop(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> { Ok(()) }
//! let mut table = KernelTable::new();
//! let (cube, vector) = (table.aic(noop), table.aiv(noop));
//! let mix = Mix::new().aic(cube).aiv0(vector).aiv1(vector);
//! # let _ = mix;
//! ```
//!
//! ```compile_fail,E0308
//! use simpler_host::prelude::*;
//! fn noop(_: &mut KernelCtx<'_>) -> Result<(), KernelFailure> { Ok(()) }
//! let mut table = KernelTable::new();
//! let cube = table.aic(noop);
//! let mix = Mix::new().aiv0(cube); // an AIC kernel on a vector core: does not compile
//! ```
//!
//! A task is built the way the reference's `add_input` / `add_output` / `add_inout` /
//! `add_scalar` read, and its runtime-allocated outputs come back as a value
//! ([`TaskOutputs`]):
//!
//! ```
//! use simpler_host::prelude::*;
//! fn add_then_scale<'s>(
//!     s: &mut Scope<'s>,
//!     add: AivKernel,
//!     scale: AivKernel,
//!     a: Tensor<'s>,
//!     b: Tensor<'s>,
//! ) -> Result<Tensor<'s>, RtError> {
//!     let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
//!     let sum = s.task(add).input(a).input(b).output(info).submit()?;
//!     let scaled = s.task(scale).input(sum.output(0)).output(info).scalar(0.5f32).submit()?;
//!     Ok(scaled.output(0)) // the tensor the runtime allocated for the second `info`
//! }
//! ```
//!
//! Scalars are typed at the call ([`TaskScalar`]); a kernel reads them back with the matching
//! accessor of `simpler_aicore::kernels::args`. The packing, once: a scalar travels as one
//! 64-bit word; an `f32` is its IEEE bits in the low 32 bits (high bits 0), an `i32` is
//! sign-extended, a `u32` zero-extended, a `bool` is 0 or 1, 64-bit values are as they are.
//!
//! ```compile_fail,E0277
//! use simpler_host::prelude::*;
//! fn orch(s: &mut Scope<'_>, k: AivKernel) -> Result<(), RtError> {
//!     s.task(k).scalar("0.5").submit().map(drop) // a string is no scalar: does not compile
//! }
//! ```

use crate::scope::{ScopeRt, Tensor, TensorInfo};
use core::marker::PhantomData;
use simpler_aicore::KernelFn;
pub use simpler_aicpu::NO_KERNEL;
use simpler_aicpu::{MixedKernels, RtError};
use simpler_core::deps::ExplicitDep;
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::{SubmitError, TaskArg, MAX_EXPLICIT_DEPS};
use simpler_core::predicate::{Predicate, PredicateError, PredicateOp};
use simpler_core::{TaskId, TaskTensor, TensorArgType};

/// A callable's kernels, indexed in the order they were added; each `aic` / `aiv` call returns
/// the handle a task names the kernel by.
#[derive(Default)]
pub struct KernelTable {
    kernels: Vec<KernelFn>,
}

/// A kernel for the cube core, from a [`KernelTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AicKernel(u32);

/// A kernel for a vector core, from a [`KernelTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AivKernel(u32);

impl KernelTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, kernel: KernelFn) -> u32 {
        self.kernels.push(kernel);
        u32::try_from(self.kernels.len() - 1).expect("fewer than 2^32 kernels")
    }

    /// Adds a kernel that runs on the cube core.
    pub fn aic(&mut self, kernel: KernelFn) -> AicKernel {
        AicKernel(self.add(kernel))
    }

    /// Adds a kernel that runs on a vector core.
    pub fn aiv(&mut self, kernel: KernelFn) -> AivKernel {
        AivKernel(self.add(kernel))
    }

    /// The kernels in id order, for [`crate::ChipWorker::register_callable`].
    pub fn into_kernels(self) -> Vec<KernelFn> {
        self.kernels
    }
}

impl AicKernel {
    /// The kernel's id in its table (`func_id` in the reference).
    pub fn id(self) -> u32 {
        self.0
    }
}

impl AivKernel {
    /// The kernel's id in its table (`func_id` in the reference).
    pub fn id(self) -> u32 {
        self.0
    }
}

/// A MIX task's parts: a cube kernel and one or two vector kernels, run together on one
/// cluster. Each part is optional; at least two make it a MIX task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mix {
    aic: Option<AicKernel>,
    aiv0: Option<AivKernel>,
    aiv1: Option<AivKernel>,
}

impl Mix {
    /// No parts yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cube core's part.
    pub fn aic(mut self, kernel: AicKernel) -> Self {
        self.aic = Some(kernel);
        self
    }

    /// The left vector core's part.
    pub fn aiv0(mut self, kernel: AivKernel) -> Self {
        self.aiv0 = Some(kernel);
        self
    }

    /// The right vector core's part.
    pub fn aiv1(mut self, kernel: AivKernel) -> Self {
        self.aiv1 = Some(kernel);
        self
    }
}

/// What a task runs: one cube kernel, one vector kernel, or a [`Mix`].
pub trait TaskKernels: sealed::Sealed {
    /// The kernel of each core slot, [`NO_KERNEL`] where the task has none.
    fn kernels(self) -> MixedKernels;
}

mod sealed {
    /// Only this module's kernel handles name what a task runs.
    pub trait Sealed {}
    impl Sealed for super::AicKernel {}
    impl Sealed for super::AivKernel {}
    impl Sealed for super::Mix {}
}

impl TaskKernels for AicKernel {
    fn kernels(self) -> MixedKernels {
        MixedKernels {
            aic: self.0,
            ..MixedKernels::NONE
        }
    }
}

impl TaskKernels for AivKernel {
    fn kernels(self) -> MixedKernels {
        MixedKernels {
            aiv0: self.0,
            ..MixedKernels::NONE
        }
    }
}

impl TaskKernels for Mix {
    fn kernels(self) -> MixedKernels {
        MixedKernels {
            aic: self.aic.map_or(NO_KERNEL, AicKernel::id),
            aiv0: self.aiv0.map_or(NO_KERNEL, AivKernel::id),
            aiv1: self.aiv1.map_or(NO_KERNEL, AivKernel::id),
        }
    }
}

/// A value a task carries as a scalar, packed into one 64-bit word as the module docs say.
pub trait TaskScalar: Copy {
    /// The word the kernel receives.
    fn to_word(self) -> u64;
    /// The value back from its word (the bits [`Self::to_word`] does not set are ignored).
    fn from_word(word: u64) -> Self;
}

impl TaskScalar for f32 {
    fn to_word(self) -> u64 {
        u64::from(self.to_bits())
    }

    fn from_word(word: u64) -> Self {
        f32::from_bits(word as u32)
    }
}

impl TaskScalar for i32 {
    fn to_word(self) -> u64 {
        i64::from(self) as u64
    }

    fn from_word(word: u64) -> Self {
        word as u32 as i32
    }
}

impl TaskScalar for u32 {
    fn to_word(self) -> u64 {
        u64::from(self)
    }

    fn from_word(word: u64) -> Self {
        word as u32
    }
}

impl TaskScalar for i64 {
    fn to_word(self) -> u64 {
        self as u64
    }

    fn from_word(word: u64) -> Self {
        word as i64
    }
}

impl TaskScalar for u64 {
    fn to_word(self) -> u64 {
        self
    }

    fn from_word(word: u64) -> Self {
        word
    }
}

impl TaskScalar for bool {
    fn to_word(self) -> u64 {
        u64::from(self)
    }

    fn from_word(word: u64) -> Self {
        word & 1 != 0
    }
}

/// The arrays a task is built in, at the task caps: one set per orchestration, which every
/// [`TaskBuilder`] borrows in turn from its [`Scope`](crate::scope::Scope).
pub(crate) struct TaskScratch {
    args: [TaskArg; CORE_MAX_TENSOR_ARGS],
    scalars: [u64; CORE_MAX_SCALAR_ARGS],
    deps: [ExplicitDep; MAX_EXPLICIT_DEPS],
}

impl TaskScratch {
    pub(crate) fn new() -> Self {
        let none = TaskArg {
            tensor: bytemuck::Zeroable::zeroed(),
            tag: TensorArgType::Input,
        };
        Self {
            args: [none; CORE_MAX_TENSOR_ARGS],
            scalars: [0; CORE_MAX_SCALAR_ARGS],
            deps: [ExplicitDep::on(TaskId::INVALID); MAX_EXPLICIT_DEPS],
        }
    }
}

/// One task's arguments, in the order they are added, from [`Scope::task`](crate::scope::Scope::task) or
/// [`Scope::dummy`](crate::scope::Scope::dummy); see the module docs. The arguments go into
/// the scope's arrays at the task caps, so building a task allocates nothing and the builder
/// itself is small; past a cap the builder only counts, and [`Self::submit`] refuses.
pub struct TaskBuilder<'t, 's> {
    rt: &'t mut dyn ScopeRt,
    scratch: &'t mut TaskScratch,
    kernels: MixedKernels,
    block_num: u16,
    /// Tensors, scalars and dependencies added (possibly past the arrays).
    counts: [usize; 3],
    predicate: Option<Result<Predicate, PredicateError>>,
    _scope: PhantomData<Tensor<'s>>,
}

/// Stores `value` at `items[*count]` if there is room; counts it either way.
fn push<T>(items: &mut [T], count: &mut usize, value: T) {
    if let Some(slot) = items.get_mut(*count) {
        *slot = value;
    }
    *count += 1;
}

impl<'t, 's> TaskBuilder<'t, 's> {
    pub(crate) fn new(
        rt: &'t mut dyn ScopeRt,
        scratch: &'t mut TaskScratch,
        kernels: MixedKernels,
    ) -> Self {
        Self {
            rt,
            scratch,
            kernels,
            block_num: 1,
            counts: [0; 3],
            predicate: None,
            _scope: PhantomData,
        }
    }

    fn arg(mut self, tensor: TaskTensor, tag: TensorArgType) -> Self {
        let arg = TaskArg { tensor, tag };
        push(&mut self.scratch.args, &mut self.counts[0], arg);
        self
    }

    /// A tensor the task reads.
    pub fn input(self, tensor: Tensor<'_>) -> Self {
        self.arg(*tensor.raw(), TensorArgType::Input)
    }

    /// A tensor the runtime allocates in this scope for the task to write, described by
    /// `info`; [`TaskOutputs::output`] returns it.
    pub fn output(self, info: TensorInfo) -> Self {
        self.arg(info.raw(), TensorArgType::Output)
    }

    /// A tensor the task reads and writes in place.
    pub fn inout(self, tensor: Tensor<'_>) -> Self {
        self.arg(*tensor.raw(), TensorArgType::InOut)
    }

    /// An existing tensor the task writes without reading.
    pub fn output_existing(self, tensor: Tensor<'_>) -> Self {
        self.arg(*tensor.raw(), TensorArgType::OutputExisting)
    }

    /// A scalar, packed as the module docs say.
    pub fn scalar(mut self, value: impl TaskScalar) -> Self {
        push(
            &mut self.scratch.scalars,
            &mut self.counts[1],
            value.to_word(),
        );
        self
    }

    /// An explicit dependency on `task` (ordering and lifetime, `WAIT | RETAIN`), besides the
    /// ones the tensors imply; the way to order tasks in a MANUAL scope.
    pub fn after(self, task: &TaskOutputs<'_>) -> Self {
        self.dep(ExplicitDep::on(task.task()))
    }

    /// An explicit dependency with the kinds `dep` names.
    pub fn dep(mut self, dep: ExplicitDep) -> Self {
        push(&mut self.scratch.deps, &mut self.counts[2], dep);
        self
    }

    /// SPMD blocks (1 unless set).
    pub fn blocks(mut self, block_num: u16) -> Self {
        self.block_num = block_num;
        self
    }

    /// Runs the task only if `operand[indices] op target` holds when it is ready to dispatch;
    /// otherwise it retires without running, and its consumers go on. The operand's producer
    /// becomes the task's producer. A bad operand or index is refused at [`Self::submit`].
    pub fn when(
        mut self,
        operand: &Tensor<'_>,
        indices: &[u32],
        op: PredicateOp,
        target: i64,
    ) -> Self {
        self.predicate = Some(Predicate::new(operand.raw(), indices, op, target));
        self
    }

    /// Submits the task. Every cap is checked here, so a task built past one is refused with
    /// the error a plain submit gives.
    pub fn submit(mut self) -> Result<TaskOutputs<'s>, RtError> {
        let [tensors, scalars, deps] = self.counts;
        if tensors > CORE_MAX_TENSOR_ARGS {
            return Err(RtError::Submit(SubmitError::TooManyTensors {
                count: tensors,
                limit: CORE_MAX_TENSOR_ARGS,
            }));
        }
        if scalars > CORE_MAX_SCALAR_ARGS {
            return Err(RtError::TooManyScalars {
                count: scalars,
                limit: CORE_MAX_SCALAR_ARGS,
            });
        }
        if deps > MAX_EXPLICIT_DEPS {
            return Err(RtError::Submit(SubmitError::TooManyDeps {
                count: deps,
                limit: MAX_EXPLICIT_DEPS,
            }));
        }
        let predicate = match self.predicate.take().transpose() {
            Ok(p) => p,
            Err(e) => return Err(RtError::Predicate(e)),
        };
        let scratch = &mut *self.scratch;
        let args = &mut scratch.args[..tensors];
        let task = self.rt.submit(
            predicate.as_ref(),
            self.kernels,
            self.block_num,
            args,
            &scratch.scalars[..scalars],
            &scratch.deps[..deps],
        )?;
        let mut outputs = heapless::Vec::new();
        for a in args.iter().filter(|a| a.tag == TensorArgType::Output) {
            // At most as many outputs as arguments, which fit the cap (checked above).
            let _ = outputs.push(a.tensor);
        }
        Ok(TaskOutputs {
            task,
            outputs,
            _scope: PhantomData,
        })
    }
}

/// What a submitted task gives back: its id and the tensors the runtime allocated for its
/// outputs in scope `'s`, in the order they were added (the reference's `TaskOutputTensors`).
pub struct TaskOutputs<'s> {
    task: TaskId,
    /// The allocated output tensors, in order (storage for the cap, initialised as filled).
    outputs: heapless::Vec<TaskTensor, CORE_MAX_TENSOR_ARGS>,
    _scope: PhantomData<Tensor<'s>>,
}

impl<'s> TaskOutputs<'s> {
    /// The task, for an explicit dependency of a later one ([`TaskBuilder::after`]).
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// Output `i` (counting only [`TaskBuilder::output`] arguments).
    ///
    /// # Panics
    ///
    /// If the task has fewer outputs: the builder that added them is in the same function, so
    /// this is a programming error, not a runtime condition.
    pub fn output(&self, i: usize) -> Tensor<'s> {
        let n = self.outputs.len();
        let t = self.outputs.get(i);
        Tensor::new(*t.unwrap_or_else(|| panic!("output {i} of a task with {n} outputs")))
    }

    /// How many outputs the task has.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    /// Whether the task has no outputs.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }
}
