//! Why a submit failed: [`SubmitError`], every refusal naming the value and the cap it broke.

use crate::scope::ScopeError;
use crate::task_tensor::TaskId;
use core::fmt;
/// Why a submit failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// A scope rule was broken (no open scope, too deep, too many held tasks).
    Scope(ScopeError),
    /// More tensor arguments than a task carries.
    TooManyTensors {
        /// Tensor arguments given.
        count: usize,
        /// The per-task cap, `CORE_MAX_TENSOR_ARGS`.
        limit: usize,
    },
    /// More explicit dependencies than a submit carries.
    TooManyDeps {
        /// Explicit dependencies given.
        count: usize,
        /// The per-submit cap, [`MAX_EXPLICIT_DEPS`](super::MAX_EXPLICIT_DEPS).
        limit: usize,
    },
    /// `block_num` of 0.
    ZeroBlocks,
    /// The outputs need more bytes than the ring's whole heap.
    OutputsTooLarge {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
        /// Bytes the task's outputs need (each output rounded up to 1024).
        bytes: u64,
        /// Bytes of that ring's whole heap.
        heap: u64,
    },
    /// The innermost scope holds as many tasks as its ring can keep live: none of them can
    /// retire before the scope ends, so the next claim could never succeed.
    ScopeDeadlock {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
        /// Tasks the innermost scope holds.
        tasks: usize,
        /// Task slots of that ring (its `RingConfig::window`).
        window: u32,
    },
    /// The heap is full and its oldest task is held by an open scope (or the waiter gave up).
    HeapRingDeadlock {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
        /// The task holding the ring's head, when known.
        head: Option<TaskId>,
    },
    /// The task window is full and its oldest task is held by an open scope (or the waiter
    /// gave up).
    FlowControlDeadlock {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
        /// The task holding the ring's head, when known.
        head: Option<TaskId>,
    },
    /// The dependency pool cannot hold this task's edges.
    DepPoolOverflow {
        /// Index of the ring (`0..MAX_RINGS`) the submit's scope depth selects.
        ring: usize,
    },
    /// The TensorMap cannot hold this task's writers.
    TensorMapOverflow {
        /// Free entries the task's inserts need.
        needed: u32,
        /// Entries free when the waiter gave up.
        free: u32,
    },
    /// An earlier submit failed after claiming its slot; the run must end.
    Fatal,
}

impl From<ScopeError> for SubmitError {
    fn from(e: ScopeError) -> Self {
        Self::Scope(e)
    }
}

impl fmt::Display for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Scope(e) => e.fmt(f),
            Self::TooManyTensors { count, limit } => write!(
                f,
                "task has {count} tensor arguments; a task carries at most {limit}"
            ),
            Self::TooManyDeps { count, limit } => write!(
                f,
                "submit has {count} explicit dependencies; a submit carries at most {limit}"
            ),
            Self::ZeroBlocks => f.write_str("block_num is 0; a task runs at least 1 block"),
            Self::OutputsTooLarge { ring, bytes, heap } => write!(
                f,
                "task outputs need {bytes} bytes; ring {ring}'s whole heap is {heap} bytes"
            ),
            Self::ScopeDeadlock {
                ring,
                tasks,
                window,
            } => write!(
                f,
                "scope holds {tasks} tasks on ring {ring} whose window is {window}: enlarge the window or split the scope"
            ),
            Self::HeapRingDeadlock { ring, head } => match head {
                Some(head) => write!(
                    f,
                    "ring {ring}'s heap cannot drain: its oldest task ({head}) is held by an open scope"
                ),
                None => write!(f, "ring {ring}'s heap is full and the waiter gave up"),
            },
            Self::FlowControlDeadlock { ring, head } => match head {
                Some(head) => write!(
                    f,
                    "ring {ring}'s task window cannot drain: its oldest task ({head}) is held by an open scope"
                ),
                None => write!(f, "ring {ring}'s task window is full and the waiter gave up"),
            },
            Self::DepPoolOverflow { ring } => write!(
                f,
                "ring {ring}'s dependency pool cannot hold this task's edges"
            ),
            Self::TensorMapOverflow { needed, free } => write!(
                f,
                "the TensorMap needs {needed} free entries for this task's writers; {free} are free"
            ),
            Self::Fatal => f.write_str("an earlier submit failed; the run must end"),
        }
    }
}

impl core::error::Error for SubmitError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Scope(e) => Some(e),
            _ => None,
        }
    }
}
