//! Dependency vocabulary: edge kinds, explicit dependencies, and the per-tag rules.
//!
//! | tag | creator edge (`owner_task_id`) | looks up earlier writers | registers as a writer |
//! |---|---|---|---|
//! | INPUT | yes | yes | no |
//! | INOUT | yes | yes (and evicts writers it COVERS) | yes |
//! | OUTPUT | — (a new runtime allocation) | no | no: consumers find it through its creator |
//! | OUTPUT_EXISTING | yes | no | yes |
//! | NO_DEP | yes | no | no |
//!
//! In a MANUAL scope, and for a tensor marked `manual_dep`, nothing is looked up or registered:
//! only creator edges and explicit dependencies order tasks.
//!
//! ## Write-after-read is the user's to express
//!
//! Readers (INPUT) are never recorded, so a later writer of a region does not wait for earlier
//! readers of it. This is the reference's decision: recording readers puts every INPUT on the
//! insert path and makes every writer walk the readers of its region. A task that must not
//! overwrite data still being read either declares the reader as a dependency explicitly, which
//! keeps readers concurrent, or makes the reader INOUT, which serialises readers. An INOUT
//! writer that evicts a COVERED entry keeps later readers correct transitively: they depend on
//! the new writer, which depends on the evicted one.
//!
//! [`crate::orchestrator::Orchestrator::set_track_war`] offers the tracking as an option: INPUT
//! arguments are then recorded as readers, and every writer (INOUT and OUTPUT_EXISTING) waits
//! for the earlier readers and writers of its region. A writer covering a reader's region
//! supersedes its entry; OUTPUT_EXISTING looks up writers in this mode (without evicting them)
//! so a later writer reaches a superseded reader through the writer that superseded it. The
//! `submit` benchmark measures what it costs.

use crate::arg::TensorArgType;
use crate::task_tensor::TaskId;
use bitflags::bitflags;

/// The "no entry" index of every index-linked list in core.
pub const NIL: u32 = u32::MAX;

bitflags! {
    /// What an edge from a producer to a consumer does.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct DepFlags: u32 {
        /// Ordering: the consumer becomes ready only after the producer completes.
        const WAIT = 0b01;
        /// Lifetime: the producer's slot and output buffer stay alive until the consumer
        /// completes.
        const RETAIN = 0b10;
    }
}

/// An explicit dependency a task asks for, beyond what its tensors imply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExplicitDep {
    /// The task depended on. A task that already retired is skipped, as in the reference.
    pub task: TaskId,
    /// The edge's kinds; `WAIT | RETAIN` unless ordering alone is wanted.
    pub flags: DepFlags,
}

impl ExplicitDep {
    /// A `WAIT | RETAIN` dependency on `task`.
    pub const fn on(task: TaskId) -> Self {
        Self {
            task,
            flags: DepFlags::WAIT.union(DepFlags::RETAIN),
        }
    }

    /// A `WAIT`-only dependency: ordering without keeping `task`'s buffers alive.
    pub const fn wait(task: TaskId) -> Self {
        Self {
            task,
            flags: DepFlags::WAIT,
        }
    }
}

/// Whether a tensor with `tag` follows its creator (`owner_task_id`).
pub const fn follows_creator(tag: TensorArgType) -> bool {
    !matches!(tag, TensorArgType::Output)
}

/// Whether a tensor with `tag` looks up earlier writers (outside MANUAL scopes and
/// `manual_dep`).
pub const fn looks_up_writers(tag: TensorArgType) -> bool {
    matches!(tag, TensorArgType::Input | TensorArgType::InOut)
}

/// Whether a tensor with `tag` registers itself as a writer (outside MANUAL scopes and
/// `manual_dep`).
pub const fn registers_writer(tag: TensorArgType) -> bool {
    matches!(tag, TensorArgType::InOut | TensorArgType::OutputExisting)
}
