//! `simpler-host`: everything that runs in the host process.
//!
//! The host side of the task-argument wire ([`TaskArgs`]), the [`ChipWorker`] that drives a
//! simulated chip, and the example scenes the `simpler` command runs.
//!
//! Modules:
// The OS calls (mmap, fork, futex, thread accounting and scheduling) live in `os`, which holds
// the crate's `unsafe` but for the call sites of its few `unsafe fn`s (in `l3`); every block
// carries a SAFETY comment.

// Heap allocations per bind phase, read through a counter the program installs.
pub mod alloc_count;
// One chip: device start-up, callables, runs with staging and copy-back.
pub mod chip_worker;
// A run's task graph, recorded at submit and written as JSON or Graphviz.
pub mod dag;
// The host-built-graph runtime: the orchestration on the host into a mirror, shipped once.
pub mod hbg;
// hbg's payload records, written in the image's format as the orchestration submits.
mod image_payloads;
// Graph recording for hbg: a body recorded once into a Definition, on retained storage.
pub mod record;
// Level 3: chips and sub-workers in forked children, shared buffers, the import registry.
pub mod l3;
// The crate's OS calls: mappings, shared memory, processes, futexes, thread accounting.
pub(crate) mod os;
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
