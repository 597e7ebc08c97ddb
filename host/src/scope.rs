//! Scope-bound tensors: the typed orchestration handle [`Scope`] and the [`Tensor`] it hands out.
//!
//! An orchestration written against this module receives a `&mut Scope<'_>` and submits
//! through it ([`Scope::task`]). Every tensor it names is a [`Tensor<'s>`], branded with the
//! scope that owns it: an entry tensor with the orchestration's own scope, a tensor the runtime
//! allocates (a task's output, [`Scope::alloc`]) with the scope it was allocated in. An inner
//! scope ([`Scope::scope`]) runs a closure that must accept *any* brand, so nothing branded
//! with it can leave the closure: using a tensor after its scope has closed, when the runtime
//! may already have given its memory to a later scope, does not compile. Tensors of an
//! enclosing scope, still open, stay usable inside.
//!
//! ```
//! use simpler_host::prelude::*;
//! fn twice(s: &mut Scope<'_>, add: AivKernel, x: Tensor<'_>) -> Result<(), RtError> {
//!     let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
//!     // The accumulator must outlive the inner scopes, so the outer scope allocates it.
//!     let [acc] = s.alloc([info])?;
//!     for _ in 0..2 {
//!         s.scope(ScopeMode::Auto, |inner| {
//!             let t = inner.task(add).input(x).input(x).output(info).submit()?;
//!             inner.task(add).input(t.output(0)).inout(acc).submit()?;
//!             Ok(())
//!         })?;
//!     }
//!     s.task(add).input(acc).input(x).output(info).submit().map(drop)
//! }
//! ```
//!
//! Keeping an inner scope's tensor for later does not compile, whether it is stored outside the
//! closure or returned from it (the error is that the tensor's data escapes the closure):
//!
//! ```compile_fail,E0521
//! use simpler_host::prelude::*;
//! fn escape(s: &mut Scope<'_>, add: AivKernel, x: Tensor<'_>) -> Result<(), RtError> {
//!     let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
//!     let mut kept = None;
//!     s.scope(ScopeMode::Auto, |inner| {
//!         kept = Some(inner.task(add).input(x).output(info).submit()?.output(0));
//!         Ok(())
//!     })?;
//!     s.task(add).input(kept.unwrap()).output(info).submit().map(drop)
//! }
//! ```
//!
//! ```compile_fail
//! use simpler_host::prelude::*;
//! fn escape(s: &mut Scope<'_>, add: AivKernel, x: Tensor<'_>) -> Result<(), RtError> {
//!     let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
//!     // "lifetime may not live long enough": the closure's result would outlive its scope.
//!     let kept = s.scope(ScopeMode::Auto, |inner| {
//!         Ok(inner.task(add).input(x).output(info).submit()?.output(0))
//!     })?;
//!     s.task(add).input(kept).output(info).submit().map(drop)
//! }
//! ```
//!
//! An output description is not a tensor, so it cannot be read before a task has produced it:
//!
//! ```compile_fail,E0308
//! use simpler_host::prelude::*;
//! fn read_nothing(s: &mut Scope<'_>, add: AivKernel) -> Result<(), RtError> {
//!     let info = TensorInfo::new(&[64], DataType::Float32).expect("a valid shape");
//!     s.task(add).input(info).output(info).submit().map(drop)
//! }
//! ```
//!
//! The handle is the whole of what a typed orchestration can do: tasks (with explicit
//! dependencies, SPMD blocks, a dispatch predicate), dependency-only tasks, scopes, allocation,
//! element reads and writes, and a fatal stop. Graph submits and the raw argument arrays are
//! [`Rt`]'s, the low-level interface, whose tensors carry no scope and are the caller's to keep
//! within it.

use crate::task::{TaskBuilder, TaskKernels, TaskScratch};
use core::marker::PhantomData;
use simpler_aicpu::{MixedKernels, Rt, RtError};
use simpler_core::deps::ExplicitDep;
use simpler_core::orchestrator::TaskArg;
use simpler_core::predicate::Predicate;
use simpler_core::scope::ScopeMode;
use simpler_core::task_tensor::{AdoptError, ViewError};
use simpler_core::{DataType, TaskId, TaskTensor, TensorArgType};

/// Ties a value to scope `'s` without letting `'s` shrink or grow: invariant, so a tensor of
/// one scope is never taken for a tensor of another.
type Brand<'s> = PhantomData<fn(&'s ()) -> &'s ()>;

/// A tensor usable while scope `'s` is open: an entry tensor, or one the runtime allocated in
/// that scope. Copy it freely; it is a description (address, shape, producer), not the data.
#[derive(Clone, Copy)]
pub struct Tensor<'s> {
    raw: TaskTensor,
    _scope: Brand<'s>,
}

impl core::fmt::Debug for Tensor<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tensor")
            .field("shapes", &self.raw.shapes())
            .field("dtype", &self.raw.dtype())
            .field("producer", &self.raw.owner_task_id())
            .finish()
    }
}

impl<'s> Tensor<'s> {
    /// Brands `raw` with scope `'s`: only this crate's typed handles do, for tensors they know
    /// to belong to that scope.
    pub(crate) fn new(raw: TaskTensor) -> Self {
        Self {
            raw,
            _scope: PhantomData,
        }
    }

    /// The window `shapes` at `offsets` (one per dimension) of this tensor, in the same scope.
    pub fn view(&self, shapes: &[u32], offsets: &[u32]) -> Result<Self, ViewError> {
        self.raw.view(shapes, offsets).map(Self::new)
    }

    /// The extent of each dimension.
    pub fn shapes(&self) -> &[u32] {
        self.raw.shapes()
    }

    /// The element type.
    pub fn dtype(&self) -> DataType {
        self.raw.dtype()
    }

    /// Elements in the tensor.
    pub fn numel(&self) -> u64 {
        self.raw.numel()
    }

    /// The runtime's descriptor, to inspect (it cannot be submitted through a [`Scope`]).
    pub fn raw(&self) -> &TaskTensor {
        &self.raw
    }
}

/// The shape and element type of a tensor the runtime is to allocate: what
/// [`TaskBuilder::output`] and [`Scope::alloc`] take. Not a tensor: it has no memory yet.
#[derive(Clone, Copy)]
pub struct TensorInfo(TaskTensor);

impl core::fmt::Debug for TensorInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TensorInfo")
            .field("shapes", &self.0.shapes())
            .field("dtype", &self.0.dtype())
            .finish()
    }
}

impl TensorInfo {
    /// A row-major tensor of `shapes` and `dtype`; refused for no dimensions, more than the
    /// runtime supports, or a zero extent.
    pub fn new(shapes: &[u32], dtype: DataType) -> Result<Self, AdoptError> {
        TaskTensor::create_info(shapes, dtype).map(Self)
    }

    /// The description as the runtime's OUTPUT argument.
    pub(crate) fn raw(self) -> TaskTensor {
        self.0
    }
}

/// What a [`Scope`] needs of the runtime, object-safe so that a scope names one lifetime
/// whatever the runtime's own.
pub(crate) trait ScopeRt {
    fn submit(
        &mut self,
        predicate: Option<&Predicate>,
        kernels: MixedKernels,
        block_num: u16,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError>;
    fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, RtError>;
    fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError>;
    fn write_element(&mut self, tensor: &TaskTensor, index: u64, value: u64)
        -> Result<(), RtError>;
    fn report_fatal(&mut self, code: u32) -> RtError;
    fn scope(
        &mut self,
        mode: ScopeMode,
        body: &mut dyn FnMut(&mut dyn ScopeRt) -> Result<(), RtError>,
    ) -> Result<(), RtError>;
}

impl ScopeRt for Rt<'_, '_> {
    fn submit(
        &mut self,
        predicate: Option<&Predicate>,
        kernels: MixedKernels,
        block_num: u16,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        match predicate {
            None => Rt::submit(self, kernels, block_num, args, scalars, deps),
            Some(p) => Rt::submit_predicated(self, p, kernels, block_num, args, scalars, deps),
        }
    }

    fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, RtError> {
        Rt::alloc_tensors(self, outputs)
    }

    fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError> {
        Rt::read_element(self, tensor, index)
    }

    fn write_element(
        &mut self,
        tensor: &TaskTensor,
        index: u64,
        value: u64,
    ) -> Result<(), RtError> {
        Rt::write_element(self, tensor, index, value)
    }

    fn report_fatal(&mut self, code: u32) -> RtError {
        Rt::report_fatal(self, code)
    }

    fn scope(
        &mut self,
        mode: ScopeMode,
        body: &mut dyn FnMut(&mut dyn ScopeRt) -> Result<(), RtError>,
    ) -> Result<(), RtError> {
        Rt::scope(self, mode, |rt| body(rt))
    }
}

/// The typed orchestration handle over one open scope `'s`; see the module docs.
pub struct Scope<'s> {
    rt: &'s mut dyn ScopeRt,
    /// The task builder's arrays, one set for the whole orchestration (each builder borrows
    /// them in turn), so starting a task neither initialises nor moves them.
    scratch: &'s mut TaskScratch,
    _scope: Brand<'s>,
}

impl<'s> Scope<'s> {
    fn new(rt: &'s mut dyn ScopeRt, scratch: &'s mut TaskScratch) -> Self {
        Self {
            rt,
            scratch,
            _scope: PhantomData,
        }
    }

    /// Runs `f` on the handle of the orchestration's own scope, the run's outermost.
    pub(crate) fn top<R>(rt: &mut Rt<'_, '_>, f: impl for<'t> FnOnce(&mut Scope<'t>) -> R) -> R {
        let mut scratch = TaskScratch::new();
        f(&mut Scope::new(rt, &mut scratch))
    }

    /// Starts a task that runs `kernels`; its outputs belong to this scope.
    pub fn task<K: TaskKernels>(&mut self, kernels: K) -> TaskBuilder<'_, 's> {
        TaskBuilder::new(&mut *self.rt, &mut *self.scratch, kernels.kernels())
    }

    /// Starts a dependency-only task: it takes part in dependency inference (and may carry
    /// explicit dependencies) but runs nothing, the reference's dummy task.
    pub fn dummy(&mut self) -> TaskBuilder<'_, 's> {
        TaskBuilder::new(&mut *self.rt, &mut *self.scratch, MixedKernels::NONE)
    }

    /// Runs `f` inside a new scope of `mode`, whose tasks are released when it ends. What `f`
    /// allocates is branded with the new scope and cannot leave `f`: allocate a tensor that
    /// must outlive the inner scope here, in this one ([`Self::alloc`]).
    pub fn scope<R>(
        &mut self,
        mode: ScopeMode,
        f: impl for<'i> FnOnce(&mut Scope<'i>) -> Result<R, RtError>,
    ) -> Result<R, RtError> {
        let mut f = Some(f);
        let mut value = None;
        let scratch = &mut *self.scratch;
        self.rt.scope(mode, &mut |rt| {
            let f = f.take().expect("a scope body runs once");
            value = Some(f(&mut Scope::new(rt, scratch))?);
            Ok(())
        })?;
        Ok(value.expect("a scope that succeeded ran its body"))
    }

    /// Allocates one tensor per description in this scope, ready at once (an allocation task),
    /// for tasks of this scope or inner ones to write ([`TaskBuilder::inout`],
    /// [`TaskBuilder::output_existing`]).
    pub fn alloc<const N: usize>(
        &mut self,
        infos: [TensorInfo; N],
    ) -> Result<[Tensor<'s>; N], RtError> {
        let mut args = infos.map(|info| TaskArg {
            tensor: info.raw(),
            tag: TensorArgType::Output,
        });
        self.rt.alloc_tensors(&mut args)?;
        Ok(args.map(|a| Tensor::new(a.tensor)))
    }

    /// Element `index` (row-major) of `tensor`, as raw little-endian bytes widened to a u64,
    /// once every task producing it has completed (the orchestration waits): the task that
    /// created it, if any, and every task that writes an overlapping region of it (INOUT or
    /// OUTPUT_EXISTING, submitted in an AUTO scope), as the reference's `get_tensor_data`.
    ///
    /// On hbg nothing runs while the graph is built, so a read that would wait fails at once
    /// with `HbgError::TaskNotRun` (the error, `RtError::NotProduced`, names the task).
    pub fn read_element(&mut self, tensor: &Tensor<'_>, index: u64) -> Result<u64, RtError> {
        self.rt.read_element(&tensor.raw, index)
    }

    /// Writes element `index` (row-major) of `tensor` from the low bytes of `value`, as the
    /// reference's `set_tensor_data`: once every producer [`Scope::read_element`] waits for
    /// has completed and, further, each has been released by its consumers (every task that
    /// passed a tensor that producer created, in any direction, or depends on it explicitly,
    /// has completed).
    ///
    /// Readers the write does not wait for: an INPUT reader is never recorded in the
    /// TensorMap, so, as in the reference, a reader of a tensor with no creator and no writer
    /// (an entry tensor only ever read) runs unordered with the write, and so does a reader
    /// ordered only by a dependency on some other task. Unlike the reference, an INPUT reader
    /// of an entry tensor that a writer came before is not waited for either (its edge on the
    /// writer only orders, it does not retain, and only retaining edges are counted). A task that must read
    /// the old value before the orchestration overwrites it takes the tensor INOUT: that
    /// makes it a writer, which the write waits for. Fails on hbg as a read does.
    pub fn write_element(
        &mut self,
        tensor: &Tensor<'_>,
        index: u64,
        value: u64,
    ) -> Result<(), RtError> {
        self.rt.write_element(&tensor.raw, index, value)
    }

    /// Ends the run with `code`; return the error it gives.
    pub fn fail(&mut self, code: u32) -> RtError {
        self.rt.report_fatal(code)
    }
}
