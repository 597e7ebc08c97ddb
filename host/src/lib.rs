//! `simpler-host`: everything that runs in the host process.
//!
//! Today it holds the host side of the task-argument wire: the [`TaskArgs`] builder that turns
//! tagged wire tensors and scalars into the blob a chip or sub-worker decodes. `ChipWorker`, the
//! device transport, the hbg runtime, the L3 `Worker` and the `simpler` tool build on it.
//!
//! Modules:
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The tagged task-argument builder and its blob encoding.
pub mod task_args;

pub use task_args::{TaskArgs, TaskArgsError};
