//! `simpler-host`: everything that runs in the host process.
//!
//! The host side of the task-argument wire ([`TaskArgs`]), the [`ChipWorker`] that drives a
//! simulated chip, and the example scenes the `simpler` command runs.
//!
//! Modules:
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// One chip: device start-up, callables, runs with staging and copy-back.
pub mod chip_worker;
// A run's task graph, recorded at submit and written as JSON or Graphviz.
pub mod dag;
// The example scenes and their goldens.
pub mod scenes;
// The tagged task-argument builder and its blob encoding.
pub mod task_args;
// Chrome trace-event JSON from a run's trace events.
pub mod trace;
// How the host reaches a device; the simulator backend behind the `sim` feature.
pub mod transport;

pub use chip_worker::{
    CallableHandle, ChipArg, ChipWorker, DeviceTensor, HostTensor, RunReport, WorkerError,
};
pub use task_args::{TaskArgs, TaskArgsError};
pub use transport::{DeviceTransport, OrchFn, RunOptions, SharedHook, TraceSink, TransportError};
