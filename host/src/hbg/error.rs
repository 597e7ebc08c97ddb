//! Why a host-built run failed before reaching the device.

use simpler_aicpu::RtError;
use simpler_core::image::ImageError;
use simpler_core::TaskId;
use std::fmt;

/// Why a host-built run failed before reaching the device.
#[derive(Debug)]
pub enum HbgError {
    /// The graph does not fit the mirror (a ring, the heap or the dependency pool is full);
    /// nothing is retired while building, so this never waits.
    GraphTooLarge(RtError),
    /// The orchestration waited for a task to complete, or for its consumers to (to read or
    /// write an element of a tensor it produces, `Rt::read_element` / `Rt::write_element`): no
    /// task runs while the host builds the graph, so the wait could never end. Not a graph too large for the mirror.
    TaskNotRun {
        /// The task waited for.
        task: TaskId,
        /// The error the orchestration ended with.
        error: RtError,
    },
    /// The orchestration function, or the runtime under it, returned this error (one that is
    /// not a full mirror).
    Orchestration(RtError),
    /// The image could not be measured or written.
    Image(ImageError),
    /// The host mirror could not be mapped.
    Mirror(String),
    /// A Graph's recording failed after its outer task was submitted: the bind is refused
    /// as invalid arguments (the reference's run status -5).
    GraphFailed {
        /// The Graph's full key.
        key: u64,
        /// Why its recording failed.
        reason: String,
    },
    /// Verification ([`GraphRetention::verify`](super::GraphRetention::verify)) recorded a body again and its Definition
    /// differs from the one retained under the same key and boundary signature: the body
    /// changed what it submits without changing its key (a captured value, a host-side read
    /// of tensor data). Give such a body a key of its own (`make_key`).
    GraphChanged {
        /// The Graph's full key.
        key: u64,
        /// The first node whose record, output window, producers, tensors, scalars or
        /// predicate differ (the nodes both Definitions have, in order; the shorter one's
        /// node count when one is a prefix of the other); `None` when every node agrees and
        /// the difference is elsewhere (the boundary signatures, the header).
        node: Option<u32>,
    },
    /// Replay verification ([`BindReplay::verify`](super::BindReplay::verify)): a bind whose
    /// guard matched the slot's last bind built a different image, so a replay would have
    /// shipped the wrong graph: the orchestration depends on something its guard does not
    /// hold (a captured value, a read of memory that is not an entry tensor).
    ReplayChanged {
        /// The first byte at which the images differ (the shared state's image, then the
        /// payloads', then the Graph staging's).
        offset: usize,
    },
}

impl fmt::Display for HbgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GraphTooLarge(_) => f.write_str(
                "the graph does not fit the host mirror, where no task retires while it is \
                 built; enlarge the rings or the heap",
            ),
            Self::TaskNotRun { task, .. } => write!(
                f,
                "the orchestration waited for {task} to complete, but no task runs until the \
                 host has built the whole graph; read or write that element on the device \
                 runtime (tmr) instead"
            ),
            Self::Orchestration(_) => f.write_str("the orchestration failed"),
            Self::Image(_) => f.write_str("the live image could not be measured or written"),
            Self::Mirror(e) => write!(f, "the host mirror could not be mapped: {e}"),
            Self::GraphFailed { key, reason } => write!(
                f,
                "invalid arguments: the recording of graph {key:#x} failed after its outer task was submitted: {reason}"
            ),
            Self::ReplayChanged { offset } => write!(
                f,
                "the bind matched the guard of the slot's last bind but built a different image \
                 (first difference at byte {offset}): its orchestration depends on something \
                 the guard does not hold"
            ),
            Self::GraphChanged { key, node } => {
                write!(
                    f,
                    "graph {key:#x} recorded a different Definition than the one retained under \
                     its key and boundary signature ("
                )?;
                match node {
                    Some(n) => write!(f, "first differing node {n}")?,
                    None => f.write_str("every node agrees; the difference is outside them")?,
                }
                f.write_str(
                    "): its body depends on something its key does not name; give it its own \
                     key (make_key)",
                )
            }
        }
    }
}

impl std::error::Error for HbgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::GraphTooLarge(e) | Self::Orchestration(e) => Some(e),
            Self::TaskNotRun { error, .. } => Some(error),
            Self::Image(e) => Some(e),
            Self::Mirror(_)
            | Self::GraphFailed { .. }
            | Self::GraphChanged { .. }
            | Self::ReplayChanged { .. } => None,
        }
    }
}
