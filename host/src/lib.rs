//! `simpler-host`: everything that runs in the host process.
//!
//! The host side of the task-argument wire ([`TaskArgs`]), the [`ChipWorker`] that drives a
//! simulated chip, the scene framework behind the `simpler` command, and the example scenes it
//! runs.
//!
//! `unsafe` lives in one private module, `os` (mappings, shared memory, `fork`, futexes,
//! thread accounting and scheduling class), every block with its SAFETY comment. The only other
//! blocks call its `unsafe fn`s (`fork`, a mapping's or region's raw bytes, the mailbox's in-place
//! views) from `l3`, each under an item-level `allow` with the caller's SAFETY argument.
//!
//! ## Running on a chip
//!
//! - [`prelude`]: one import for writing kernels and orchestrations and running them.
//! - [`chip_worker`]: one chip: device start-up, callables, runs with staging and copy-back.
//! - [`transport`]: how the host reaches a device; the simulator backend behind the `sim` feature.
//! - [`scope`]: the typed orchestration handle [`scope::Scope`] and its scope-bound tensors.
//! - [`callable`]: a callable's signature, and the entry its orchestration receives.
//! - [`task`]: kernels with identities (typed by core) and task arguments by builder.
//! - [`task_args`]: the tagged task-argument builder and its blob encoding.
//!
//! ## The host-built graph (hbg)
//!
//! - [`hbg`]: the orchestration on the host into a mirror, shipped once.
//! - [`record`]: Graph recording: a body recorded once into a Definition, on retained storage.
//! - `image_payloads`: hbg's payload records, written in the image's format as the orchestration
//!   submits.
//!
//! ## Level 3
//!
//! - [`l3`]: chips and sub-workers in forked children, shared buffers, the import registry.
//! - `l4` (feature `mpi`): several hosts as one MPI job, rank 0 orchestrating L3 Workers.
//!
//! ## Errors
//!
//! - [`error`]: [`ErrorChain`], an error printed with its causes.
//!
//! ## Output and measurement
//!
//! - [`dag`]: a run's task graph, recorded at submit and written as JSON or Graphviz.
//! - [`trace`]: Chrome trace-event JSON from a run's trace events.
//! - [`alloc_count`]: heap allocations per bind phase, read through a counter the program installs.
//!
//! ## Platform services
//!
//! - `os`: the crate's OS calls: mappings, shared memory, processes, futexes, thread accounting.
//!
//! ## Scenes and the simpler command
//!
//! - [`scenes`]: the [`scenes::Scene`] a program defines, golden checks, and the example scenes
//!   and their goldens.
//! - [`app`]: the `simpler` command (`list`, `run`, `check`) for any program's scenes in one
//!   call, and the test helper that checks every case of a scene.

pub mod alloc_count;
#[cfg(feature = "sim")]
pub mod app;
pub mod callable;
pub mod chip_worker;
pub mod dag;
pub mod entry;
pub mod error;
pub mod hbg;
mod image_payloads;
pub mod l3;
#[cfg(feature = "mpi")]
pub mod l4;
pub(crate) mod os;
pub mod pipeline;
pub mod prelude;
pub mod record;
pub mod scenes;
pub mod scope;
pub mod task;
pub mod task_args;
pub mod trace;
pub mod transport;

pub use chip_worker::{
    CallableHandle, ChipArg, ChipWorker, DeviceTensor, EntryArg, HostTensor, RunReport, WorkerError,
};
pub use error::ErrorChain;
pub use task_args::{TaskArgs, TaskArgsError};
pub use transport::{
    DeviceTransport, OrchFn, RunOptions, Runtime, SharedHook, TraceSink, TransportError,
};
