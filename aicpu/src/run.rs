//! How a run ended: the account a device gives its host, whatever the transport.

use crate::runtime::RtError;
use crate::scheduler::SchedError;
use core::time::Duration;

/// Why a run failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The orchestration function (or the submit path under it) failed.
    Orchestration(RtError),
    /// A scheduler stopped the run (a kernel failure).
    Scheduler(SchedError),
    /// No progress for the watchdog period.
    Timeout,
    /// A host-built image did not fit or did not parse (hbg).
    Image(simpler_core::image::ImageError),
}

impl core::fmt::Display for RunError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Orchestration(_) => "the orchestration failed",
            Self::Scheduler(_) => "a scheduler stopped the run",
            Self::Timeout => "the run made no progress for the watchdog period",
            Self::Image(_) => "the host-built image did not fit or did not parse",
        })
    }
}

impl core::error::Error for RunError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Orchestration(e) => Some(e),
            Self::Scheduler(e) => Some(e),
            Self::Timeout => None,
            Self::Image(e) => Some(e),
        }
    }
}

/// The outcome of one run.
#[derive(Clone, Copy, Debug)]
pub struct RunOutcome {
    /// Success, or why the run ended.
    pub result: Result<(), RunError>,
    /// Tasks submitted (including allocation and dummy tasks).
    pub tasks: u64,
    /// Producer-consumer edges the submits recorded.
    pub edges: u64,
    /// Subtasks dispatched to cores.
    pub dispatched: u64,
    /// Time in the orchestration function.
    pub orchestration: Duration,
    /// Time the device took to set the run up before its schedulers started: returning its
    /// shared state to the formatted state and, for a host-built graph, importing the image.
    pub init: Duration,
    /// Time from the run's start until every scheduler stopped.
    pub device: Duration,
    /// Trace events that did not fit the per-thread buffers (0 when not tracing).
    pub trace_dropped: u64,
}
