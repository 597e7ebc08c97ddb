//! What one run is given: the [`Job`] the host sends, the orchestration function it names
//! ([`OrchFn`]), a graph the host already built ([`Prebuilt`]) and a hook on every submit
//! ([`SharedHook`]).
//!
//! Its own file because it is the whole of the run request's vocabulary: the host's transport
//! builds these and nothing else to start a run.

use super::trace::TraceSink;
use simpler_aicore::KernelFn;
use simpler_aicpu::{Rt, RtError};
use simpler_core::OrchArgs;
use std::sync::{Arc, Mutex};

/// An orchestration function: called once per run on the device thread with the run's
/// runtime, it submits the run's tasks; an error ends the run as
/// [`RunError::Orchestration`](crate::RunError::Orchestration).
pub type OrchFn = Arc<dyn Fn(&mut Rt<'_, '_>) -> Result<(), RtError> + Send + Sync>;

/// A submit hook shared with the device thread for one run: locked for the whole
/// orchestration, it sees every submitted task and its fanin (the DAG writer and the tests'
/// dependency oracle use it).
pub type SharedHook = Arc<Mutex<dyn simpler_aicpu::SubmitHook + Send>>;

/// One run's work, sent to [`Device::run`](super::Device::run).
pub struct Job {
    /// The orchestration function, run inside one automatic outer scope.
    pub orch: OrchFn,
    /// The kernel table: a task's function id indexes it.
    pub kernels: Arc<[KernelFn]>,
    /// The adopted entry arguments the orchestration function reads (`Rt::args`).
    pub args: Box<OrchArgs>,
    /// Sees every submitted task, when set.
    pub hook: Option<SharedHook>,
    /// Receives the run's trace events, when set (and the crate's `trace` feature is on).
    pub trace: Option<TraceSink>,
    /// A graph the host built (hbg): the device imports it and runs its schedulers only; the
    /// orchestration function is not called.
    pub prebuilt: Option<Arc<Prebuilt>>,
}

/// A task graph built on the host into a mirror of the shared state, as shipped: the compact
/// live images of the shared state and of the payload records (see `simpler_core::image`).
#[derive(Clone, Debug, Default)]
pub struct Prebuilt {
    /// What the images hold: the tasks per ring and the watermarks the import checks.
    pub usage: simpler_core::image::Usage,
    /// `SchedState::export` of the mirror.
    pub sched: Vec<u8>,
    /// The payload records' image (the format `TaskPayloads::import` reads).
    pub payloads: Vec<u8>,
    /// Edges the host's submits recorded, reported as the run's `edges` (the device records
    /// none of its own for a prebuilt graph).
    pub edges: u64,
}
