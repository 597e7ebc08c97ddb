//! Graph recording for the hbg runtime: a body recorded once into a Graph Definition.
//!
//! A [`Recording`] is one recorder thread's retained storage. It records a body (an ordinary
//! orchestration function whose boundary arrives as its entry arguments) by running it through
//! a private copy of the runtime — an orchestrator, its TensorMap (the recording's hazard map)
//! and a task ring whose heap lives in the virtual range at [`GRAPH_RECORD_VIRTUAL_BASE`] — so
//! the dependencies a Definition holds are computed by exactly the code that computes them for
//! per-task submission. A submit hook turns every submitted task into a node: its kernels, its
//! tensors (copied whole into the packed tensor region, each element written from a fresh
//! value, so no field of a wider earlier tensor survives), each tensor's source (boundary
//! exact, boundary view, an earlier node's output, the node's own output), its scalars and
//! their sources, and its producers. The Definition image is then built by
//! `simpler_core::graph` into a retained buffer.
//!
//! Storage is stood up once (the runtime regions, the packed region sized at the node cap times
//! the per-node tensor cap, every flat array at its cap) and reused: a recording resets
//! `node_count` and the cursors, never the node slots, and every traversal is bounded by
//! `node_count`. `storage_ready` is set only when every stand-up allocation succeeded. A
//! recording past the node cap keeps running (the body finishes) but is unsupported, and gives
//! back any array that grew past its cap at the next reset.
//!
//! Boundary scalars are per invocation when the body forwards them: a task whose scalars are
//! the body's own entry scalars (a slice of `rt.args().scalars()`, told apart by address)
//! records each as boundary scalar `i`, stored as 0, and every replay supplies its own values
//! (hbg stages them after the boundary tensors). Any other scalar is static Definition data,
//! captured by value at recording: a constant, and also a value the body computed from a
//! boundary scalar (arithmetic on it, or a copy of it into storage of the body's own). A replay
//! with different boundary scalars reuses such a value as recorded (the reference's documented
//! trap). So two invocations match ([`GraphBoundary::matches`]) whatever their scalar values,
//! as long as they have as many.
//!
//! # Submodules
//!
//! One file per part of the recording path, each re-exported here, so every `record::Item`
//! path names the item whichever file holds it:
//!
//! - [`boundary`]: the deep copy of an invocation's boundary, the cacheability gate and the
//!   replay match;
//! - [`recording`]: a recorder's retained storage and the recording itself ([`Recording`]);
//! - `node_sink` (private): the submit hook that turns each task of the body into a node;
//! - [`inflight`]: one key being recorded during a bind, shared by the submitting thread and
//!   the recorder thread ([`Inflight`]);
//! - [`pool`]: the recorder threads and their one queue ([`RecorderPool`]).

pub mod boundary;
pub mod inflight;
mod node_sink;
pub mod pool;
pub mod recording;

pub use boundary::{alias_reps, GraphBoundary, Uncacheable};
pub use inflight::{Inflight, InflightInner, InflightStatus};
pub use pool::{RecorderPool, RECORDERS_AT_START, RECORDERS_MAX};
pub use recording::Recording;

use simpler_aicpu::RtError;
use simpler_core::graph::DefinitionError;
use simpler_core::orchestrator::{Blocked, GaveUp, Waiter};
use std::fmt;

pub use simpler_aicpu::GraphBody;

/// Where recorded outputs live: a virtual range no device heap reaches.
pub const GRAPH_RECORD_VIRTUAL_BASE: u64 = 1 << 63;

/// Which stand-up allocation to fail (tests of the `storage_ready` rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandUpPart {
    /// The hazard map (the private orchestrator's region).
    HazardMap,
    /// The packed tensor region, with the rest of the private runtime's regions (its
    /// scheduler state and payload records): the second allocation.
    PackedRegion,
}

/// Why a recording failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// No boundary was given (checked before anything reads one).
    NoBoundary,
    /// The boundary cannot be recorded.
    Uncacheable(Uncacheable),
    /// The storage could not be stood up (nothing was kept; the next recording retries).
    StandUp(StandUpPart),
    /// The body, or the private runtime under it, returned this error (a full recording ring
    /// is [`Self::Unsupported`] instead).
    Body(RtError),
    /// The recording is unsupported (it ran to the end but cannot become a Definition).
    Unsupported(&'static str),
    /// The Definition image was refused.
    Definition(DefinitionError),
}

impl fmt::Display for StandUpPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HazardMap => "the hazard map",
            Self::PackedRegion => "the packed tensor region",
        })
    }
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBoundary => f.write_str("the recording has no boundary"),
            Self::Uncacheable(_) => f.write_str("the boundary cannot be recorded"),
            Self::StandUp(p) => write!(f, "recording storage could not be stood up ({p})"),
            Self::Body(_) => f.write_str("the body failed"),
            Self::Unsupported(why) => write!(f, "recording unsupported: {why}"),
            Self::Definition(_) => f.write_str("the Definition image was refused"),
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Uncacheable(e) => Some(e),
            Self::Body(e) => Some(e),
            Self::Definition(e) => Some(e),
            Self::NoBoundary | Self::StandUp(_) | Self::Unsupported(_) => None,
        }
    }
}

/// The [`Waiter`] of a host build, where nothing retires while the orchestration runs (the hbg
/// mirror, a recording's private ring): it refuses every wait at once, as
/// `simpler_core::orchestrator::NoWait` does, and keeps what the submit was blocked on, so the
/// caller can tell a full ring, heap or dependency pool from the body's own error.
#[derive(Default)]
pub(crate) struct RefusingWaiter {
    /// What the first refused wait was blocked on (`None`: no submit had to wait).
    pub(crate) blocked: Option<Blocked>,
}

impl Waiter for RefusingWaiter {
    fn wait(&mut self, on: Blocked) -> Result<(), GaveUp> {
        self.blocked.get_or_insert(on);
        Err(GaveUp)
    }
}
