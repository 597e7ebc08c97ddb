//! [`TaskStream`]: the runtime calls a scene's orchestration makes, as a trait, so that one
//! task stream serves both the device and a bare orchestrator.
//!
//! The `paged_attention` and `bgemm` scenes write their orchestration once, as a function
//! generic over this trait (`paged_attention_manual_scope` shares paged attention's per-tile
//! plumbing this way). On a device it runs on [`Rt`] (the impl below, which forwards to
//! `Rt`'s own methods); the `submit` benchmark of `simpler-tests` runs the same function on a
//! bare `simpler_core::orchestrator::Orchestrator`, with no kernels and no device, so the stream
//! it times is the scene's by construction and the two cannot drift apart.
//!
//! Such a runtime has no device memory holding the scene's inputs, so each of those scenes
//! also describes a case's entry as its stream sees it ([`StreamEntry`], from its
//! `stream_entry`): every tensor's shape and dtype, and the bytes of only the tensors the
//! stream reads elements of, without drawing the inputs the kernels would need or computing a
//! golden (bgemm's Case0 alone would be 312 MiB of inputs and four billion multiply-adds).
//!
//! It is its own file because both scenes use it and neither owns it.

use crate::chip_worker::HostTensor;
use simpler_aicpu::scheduler::single;
use simpler_aicpu::{CoreSlot, Rt, RtError};
use simpler_core::deps::ExplicitDep;
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{DataType, TaskId, TaskTensor};

/// One entry tensor as a task stream sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamTensor {
    /// Extents, outermost first (the entry tensor is dense and row-major).
    pub shapes: Vec<u32>,
    /// Element type.
    pub dtype: DataType,
    /// Row-major contents for a tensor the stream reads elements of
    /// ([`TaskStream::read_element`]), exactly as the scene's `prepare` stages it; `None` for
    /// one the stream only hands to tasks.
    pub data: Option<Vec<u8>>,
}

impl StreamTensor {
    /// A tensor the stream only hands to tasks: its shape and dtype, no contents.
    pub fn opaque(shapes: &[u32], dtype: DataType) -> Self {
        Self {
            shapes: shapes.to_vec(),
            dtype,
            data: None,
        }
    }

    /// A tensor the stream reads elements of, with `host`'s shape, dtype and bytes.
    pub fn readable(host: HostTensor) -> Self {
        Self {
            shapes: host.shapes,
            dtype: host.dtype,
            data: Some(host.data),
        }
    }
}

/// A scene case's entry as its task stream sees it, and the graph the stream builds from it.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamEntry {
    /// The entry tensors, in the callable's signature order.
    pub tensors: Vec<StreamTensor>,
    /// The entry scalars, as `prepare` passes them.
    pub scalars: Vec<u64>,
    /// Tasks the stream submits (allocation tasks included): the case's `Prepared::tasks`.
    pub tasks: u64,
    /// Producer-consumer edges those tasks have: the case's `Prepared::edges`.
    pub edges: u64,
}

/// What a scene's task stream asks of the runtime: its entry arguments, single-core submits
/// (with or without explicit dependencies), allocation tasks, scopes, reading an entry
/// tensor's element, and ending the run.
///
/// The method names and contracts are [`Rt`]'s; another implementation must keep them (the
/// first error ends the stream, a scope closes even when its body fails).
pub trait TaskStream {
    /// Why a call failed; the stream returns the first one unchanged.
    type Error;

    /// The entry tensors, in the callable's signature order.
    fn tensors(&self) -> &[TaskTensor];

    /// The entry scalars.
    fn scalars(&self) -> &[u64];

    /// Ends the run with the scene's fatal `code`; returns the error to propagate.
    fn fatal(&mut self, code: u32) -> Self::Error;

    /// Submits a task running kernel `kernel` (an index into the callable's kernel table) on
    /// one cube core, with `args` (OUTPUT descriptions are replaced by their allocated tensors),
    /// `scalars` and the explicit dependencies `deps` (beyond what its tensors imply).
    fn submit_aic_with_deps(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, Self::Error>;

    /// [`Self::submit_aic_with_deps`] for one vector core.
    fn submit_aiv_with_deps(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, Self::Error>;

    /// [`Self::submit_aic_with_deps`] with no explicit dependencies.
    fn submit_aic(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, Self::Error> {
        self.submit_aic_with_deps(kernel, args, scalars, &[])
    }

    /// [`Self::submit_aiv_with_deps`] with no explicit dependencies.
    fn submit_aiv(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, Self::Error> {
        self.submit_aiv_with_deps(kernel, args, scalars, &[])
    }

    /// Gives `outputs` (descriptions made by `TaskTensor::create_info`) their buffers in an
    /// allocation task, complete at once.
    fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, Self::Error>;

    /// Runs `body` inside a scope of `mode`, closing the scope whether or not `body` failed.
    fn scope<R>(
        &mut self,
        mode: ScopeMode,
        body: impl FnOnce(&mut Self) -> Result<R, Self::Error>,
    ) -> Result<R, Self::Error>;

    /// Element `index` (row-major) of `tensor` as raw little-endian bytes widened to a u64,
    /// once its creator and every TensorMap writer of it have completed (`Rt::read_element`).
    fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, Self::Error>;
}

impl TaskStream for Rt<'_, '_> {
    type Error = RtError;

    fn tensors(&self) -> &[TaskTensor] {
        self.args().tensors()
    }

    fn scalars(&self) -> &[u64] {
        self.args().scalars()
    }

    fn fatal(&mut self, code: u32) -> RtError {
        self.report_fatal(code)
    }

    fn submit_aic_with_deps(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        Rt::submit(self, single(CoreSlot::Aic, kernel), 1, args, scalars, deps)
    }

    fn submit_aiv_with_deps(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
        deps: &[ExplicitDep],
    ) -> Result<TaskId, RtError> {
        Rt::submit(self, single(CoreSlot::Aiv0, kernel), 1, args, scalars, deps)
    }

    fn submit_aic(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, RtError> {
        Rt::submit_aic(self, kernel, args, scalars)
    }

    fn submit_aiv(
        &mut self,
        kernel: u32,
        args: &mut [TaskArg],
        scalars: &[u64],
    ) -> Result<TaskId, RtError> {
        Rt::submit_aiv(self, kernel, args, scalars)
    }

    fn alloc_tensors(&mut self, outputs: &mut [TaskArg]) -> Result<TaskId, RtError> {
        Rt::alloc_tensors(self, outputs)
    }

    fn scope<R>(
        &mut self,
        mode: ScopeMode,
        body: impl FnOnce(&mut Self) -> Result<R, RtError>,
    ) -> Result<R, RtError> {
        Rt::scope(self, mode, body)
    }

    fn read_element(&mut self, tensor: &TaskTensor, index: u64) -> Result<u64, RtError> {
        Rt::read_element(self, tensor, index)
    }
}
