//! One import for writing kernels and orchestrations and running them:
//! `use simpler_host::prelude::*;`.
//!
//! It gathers what a user of the runtime names, from whichever crate defines it, so that a
//! program depends on `simpler-host` alone:
//!
//! - running: [`ChipWorker`], its argument and report types, [`RunOptions`], and (with the
//!   default `sim` feature) the simulator's [`DeviceConfig`] and [`Topology`];
//! - orchestrating: a [`Callable`] (an orchestration, its [`KernelTable`] and [`Signature`],
//!   the [`Entry`] it receives), the typed handle [`Scope`] with its scope-bound [`Tensor`]s and
//!   [`TensorInfo`] descriptions, typed kernel handles ([`AicKernel`], [`AivKernel`], [`Mix`]),
//!   the task builder ([`Scope::task`]) and its [`TaskOutputs`], typed scalars ([`TaskScalar`]),
//!   scopes ([`ScopeMode`]), explicit dependencies ([`ExplicitDep`], [`DepFlags`]) and dispatch
//!   predicates ([`PredicateOp`]);
//! - the low-level runtime interface [`Rt`], which Graph bodies use: raw task arguments
//!   ([`TaskArg`], [`TensorArgType`], [`TaskTensor`], [`DataType`]), Graph keys ([`graph_key`],
//!   [`make_key`]) and [`Predicate`]s; its tensors carry no scope, so keeping them within theirs
//!   is the caller's care;
//! - kernels: the kernel context [`KernelCtx`], [`KernelFn`], [`KernelFailure`], device memory
//!   ([`Gm`]), argument checks ([`kernel_args`]), the tile moves between GM and the local buffer
//!   ([`tile`]) and the chunked moves that stream a tensor larger than it ([`stage`]), and the
//!   buffer's size ([`LOCAL_BUFFER_WORDS`]);
//! - scenes: the [`Scene`] a program defines for [`crate::app`], its [`Prepared`] case and the
//!   golden check ([`golden_check`], [`golden_checks`], [`Tolerance`], [`Check`], [`CheckFn`]);
//! - the errors each of these return, and [`ErrorChain`] to print one with its causes.
//!
//! A whole program, an own kernel and a two-task orchestration, with this import alone:
//!
//! ```
//! use simpler_host::prelude::*;
//!
//! /// `out = 2 * in` over tensors of one element count, streamed through the local buffer in
//! /// chunks so a tensor of any size fits.
//! fn double(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
//!     let [input, output] = kernel_args::tensors::<2>(ctx.args)?;
//!     let n = kernel_args::operand(input, 0)?;
//!     kernel_args::operand_of(output, 1, n)?;
//!     let room = ctx.local.len();
//!     if room == 0 {
//!         return Err(KernelFailure::TooLarge { elems: n as u64, limit: 0 });
//!     }
//!     let mut done = 0;
//!     while done < n {
//!         let chunk = &mut ctx.local[..(n - done).min(room)];
//!         stage::load_range(ctx.gm, input, 0, done, chunk)?;
//!         chunk.iter_mut().for_each(|v| *v *= 2.0);
//!         stage::store_range(ctx.gm, output, 1, done, chunk)?;
//!         done += chunk.len();
//!     }
//!     Ok(())
//! }
//!
//! /// More elements than the local buffer holds, so `double` streams them in two chunks.
//! const N: u32 = LOCAL_BUFFER_WORDS as u32 + 1000;
//!
//! let mut table = KernelTable::new();
//! let double = table.aiv(double);
//! let signature = Signature::new([ArgDirection::In, ArgDirection::Out]);
//! let callable = Callable::new(table, signature, move |s, entry| {
//!     let Entry { tensors: [x, y], .. } = entry;
//!     s.scope(ScopeMode::Auto, |s| {
//!         // The intermediate lives in this scope; the runtime allocates it.
//!         let info = TensorInfo::new(&[N], DataType::Float32).expect("a valid shape");
//!         let mid = s.task(double).input(x).output(info).submit()?;
//!         s.task(double).input(mid.output(0)).output_existing(y).submit()?;
//!         Ok(())
//!     })
//! });
//!
//! let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
//! let callable = worker.register(callable);
//! let input: Vec<f32> = (0..N).map(|i| (i % 1000) as f32).collect();
//! let mut tensors = [
//!     HostTensor::f32(&input, &[N], ArgDirection::In),
//!     HostTensor::f32(&vec![0.0; N as usize], &[N], ArgDirection::Out),
//! ];
//! let report = worker
//!     .run(callable, &mut tensors, &[], RunOptions::default())
//!     .expect("the run succeeds");
//! assert_eq!(report.outcome.tasks, 2);
//! let want: Vec<f32> = input.iter().map(|v| 4.0 * v).collect();
//! assert_eq!(tensors[1].to_f32(), want);
//! ```

pub use crate::callable::{Callable, Entry, Signature};
pub use crate::chip_worker::{
    CallableHandle, ChipArg, ChipWorker, DeviceTensor, EntryArg, HostTensor, RunReport, WorkerError,
};
pub use crate::error::ErrorChain;
pub use crate::hbg::HbgError;
pub use crate::scenes::{golden_check, golden_checks, Check, CheckFn, Prepared, Scene, Tolerance};
pub use crate::scope::{Scope, Tensor, TensorInfo};
pub use crate::task::{
    AicKernel, AivKernel, KernelTable, Mix, TaskBuilder, TaskKernels, TaskOutputs, TaskScalar,
};
pub use crate::transport::{RunOptions, Runtime};
pub use simpler_aicore::kernels::{args as kernel_args, stage};
pub use simpler_aicore::LOCAL_BUFFER_WORDS;
pub use simpler_aicore::{tile, CoreTaskArgs, Gm, GmFault, KernelCtx, KernelFailure, KernelFn};
pub use simpler_aicpu::{Rt, RtError, RunError, SchedError};
pub use simpler_core::deps::{DepFlags, ExplicitDep};
pub use simpler_core::graph::{graph_key, make_key};
pub use simpler_core::orchestrator::{SubmitError, TaskArg};
pub use simpler_core::predicate::{Predicate, PredicateOp};
pub use simpler_core::scope::ScopeMode;
pub use simpler_core::{AccessMode, ActiveMask, ArgDirection, Bf16, DataType, TaskId};
pub use simpler_core::{TaskTensor, TensorArgType};
#[cfg(feature = "sim")]
pub use simpler_sim::{DeviceConfig, Topology};
