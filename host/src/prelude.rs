//! One import for writing kernels and orchestrations and running them:
//! `use simpler_host::prelude::*;`.
//!
//! It gathers what a user of the runtime names, from whichever crate defines it, so that a
//! program depends on `simpler-host` alone:
//!
//! - running: [`ChipWorker`], its argument and report types, [`RunOptions`], and (with the
//!   default `sim` feature) the simulator's [`DeviceConfig`] and [`Topology`];
//! - orchestrating: the runtime API [`Rt`], typed kernel handles from a [`KernelTable`] and the
//!   task builder ([`TaskBuilderExt::task`]), task arguments ([`TaskArg`], [`TensorArgType`],
//!   [`TaskTensor`], [`DataType`]), scopes ([`ScopeMode`]), explicit dependencies
//!   ([`ExplicitDep`], [`DepFlags`]), Graph keys ([`graph_key`], [`make_key`]) and dispatch
//!   predicates ([`Predicate`], [`PredicateOp`]);
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
//! use std::sync::Arc;
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
//! const DOUBLE: u32 = 0;
//! /// More elements than the local buffer holds, so `double` streams them in two chunks.
//! const N: u32 = LOCAL_BUFFER_WORDS as u32 + 1000;
//!
//! fn orchestration(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
//!     let [x, y] = *rt.args().tensors() else {
//!         return Err(rt.report_fatal(1));
//!     };
//!     rt.scope(ScopeMode::Auto, |rt| {
//!         // The intermediate lives in this scope; the runtime allocates it.
//!         let mid = TaskTensor::create_info(&[N], DataType::Float32).expect("a valid shape");
//!         let mut first = [
//!             TaskArg { tensor: x, tag: TensorArgType::Input },
//!             TaskArg { tensor: mid, tag: TensorArgType::Output },
//!         ];
//!         rt.submit_aiv(DOUBLE, &mut first, &[])?;
//!         let mut second = [
//!             TaskArg { tensor: first[1].tensor, tag: TensorArgType::Input },
//!             TaskArg { tensor: y, tag: TensorArgType::OutputExisting },
//!         ];
//!         rt.submit_aiv(DOUBLE, &mut second, &[])?;
//!         Ok(())
//!     })
//! }
//!
//! let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("a device");
//! let callable = worker.register_callable(
//!     Arc::new(orchestration),
//!     vec![double],
//!     vec![ArgDirection::In, ArgDirection::Out],
//! );
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

pub use crate::chip_worker::{
    CallableHandle, ChipArg, ChipWorker, DeviceTensor, EntryArg, HostTensor, RunReport, WorkerError,
};
pub use crate::error::ErrorChain;
pub use crate::hbg::HbgError;
pub use crate::scenes::{golden_check, golden_checks, Check, CheckFn, Prepared, Scene, Tolerance};
pub use crate::task::{
    AicKernel, AivKernel, KernelTable, Mix, TaskBuilder, TaskBuilderExt, TaskKernels, TaskOutputs,
    TaskScalar,
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
