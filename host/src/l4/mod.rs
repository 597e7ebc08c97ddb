//! Level 4: several hosts, one MPI job. Rank 0 orchestrates; ranks 1..N-1 each own an L3
//! [`Worker`](crate::l3::Worker) and serve rank 0's commands.
//!
//! ```text
//!  mpirun -np N simpler l4
//!  rank 0: L4Worker ── L4Orch::submit_* (TensorMap by identity + byte range) ── MPI ──► rank r
//!          own L3 Worker: one SUB child, no chip          rank r: command loop ── L3 Worker
//!          (gather buffers and the final reduce)          (chips_per_rank chips + 1 SUB child)
//! ```
//!
//! ## Decisions
//!
//! - **Rank 0 has a Worker, with SUB children only.** The gather step needs buffers on rank 0
//!   and a task to reduce them, built from the runtime's own tasks; a SUB child gives both
//!   without putting device work on the orchestrating rank. A SUB task on rank 0 runs inline on
//!   rank 0's MPI thread when it becomes ready (it is a short host reduce), so rank 0 never
//!   needs a second MPI thread.
//! - **One MPI thread per rank** (`MPI_THREAD_SINGLE` is enough): rank 0's orchestration thread
//!   is its MPI thread; a worker rank's main thread runs the command loop and blocks in a
//!   receive from rank 0. The L3 Workers are forked **before** `MPI_Init` (the rank is read from
//!   `OMPI_COMM_WORLD_RANK`), so no child inherits an MPI library state.
//! - **Which rank owns a buffer.** `BufferDescriptor` has no rank field. A descriptor's
//!   `identity.owner_instance_id` is the nonce of the L3 Worker that minted it, and each rank
//!   has exactly one Worker, so the nonce names the rank: at start-up every rank reports its
//!   nonce and rank 0 hands the whole table to every rank. [`L4Buffer`] carries the rank next to
//!   the descriptor for the orchestrator's convenience; the ranks trust only the nonce.
//! - **No address crosses a host.** Task arguments travel as the L3 `TaskArgs` blob of wire
//!   tensors, with the tags beside it (tags do not travel in the blob). The receiving rank
//!   resolves each descriptor against the buffers its own Worker created (field for field,
//!   [`crate::l3::import::differing_fields`]) and refuses another rank's with
//!   [`RankError::ForeignRank`] before anything runs; its L3 children then materialize the
//!   tensors through their [`ImportRegistry`](crate::l3::ImportRegistry) as at level 3.
//! - **What a level-4 task runs.** An [`L4Callable`] names a chip callable (run on the rank's
//!   chip 0), a SUB callable, or a [`RankOrch`]: an orchestration registered on every rank that
//!   runs as one L3 run over the task's arguments and can spread them over all of the rank's
//!   chips and SUB children, the L3 TensorMap ordering what it submits. That is how level 4
//!   uses several chips per rank without a second message per chip: the rank's next level is
//!   its own L3 orchestration, as in the reference's hierarchy.
//! - **Bytes move only by `copy_to` / `copy_from`** between rank 0 and one rank (MPI
//!   point-to-point). Rank 0 checks its own end, the remote rank checks its end and answers, and
//!   only then does a byte move.
//! - **Dependencies** come from the same [`TensorMap`](crate::l3) code as level 3 (moved to
//!   `l3::tensormap`), keyed by identity and byte range: RAW, WAW and WAR.
//! - **Failure.** A task that fails on a rank comes back as [`L4Error::TaskFailed`] naming the
//!   rank and task; its consumers fail with [`L4Error::Upstream`]; independent tasks run. A rank
//!   that does not answer within [`L4Config::reply_timeout`] makes the group terminal
//!   ([`L4Error::RankLost`], then [`L4Error::GroupTerminal`] for every later call). The wait
//!   polls `MPI_Improbe` against a deadline (MPI has no receive with a timeout). Every rank
//!   forks a reaper at start-up, which removes the rank's shared-memory names from its host
//!   once the rank is gone, so a killed rank leaves none behind either.
//!
//! ## Not built
//!
//! The reference's other transport (its own command and health TCP sockets to remote workers;
//! here MPI is the only one, over whichever byte transport Open MPI picks, TCP included) and
//! its communication domains (symmetric device-memory windows over a subset of ranks for
//! collectives; here a reduce across ranks is built from tasks and copies through rank 0).
//! Scope-owned intermediates at level 4 (`scope` nests, but `alloc` is not offered), copies
//! between two worker ranks without rank 0, overlapping a rank's tasks (a rank runs the tasks
//! it is sent one after another, each as one L3 run), buffer release on a remote rank, and
//! recovery of a group after a rank is lost (the surviving ranks' replies to tasks abandoned
//! then are not drained: `close()` only needs each one's next answer). A lost rank also means
//! rank 0 leaves without `MPI_Finalize`, which is collective and would wait for it; mpirun
//! then reports the job as ended abnormally, and keeps rank 0 alive that long only with
//! `--mca orte_abort_on_non_zero_status 0`. Copies go through one staging vector on each side
//! (about 0.4-0.65 GB/s here for 64 MiB over shared memory).
//!
//! # Submodules
//!
//! - `wire` (private): the command and reply messages and their byte encoding;
//! - `rank` (private): what a worker rank runs;
//! - `reaper` (private): the process that removes a dead rank's shared-memory names;
//! - `worker` (private): [`L4Worker`] on rank 0: start-up, buffers, copies, close;
//! - `orch` (private): [`L4Orch`], the dependency engine over ranks.

mod orch;
mod rank;
mod reaper;
mod wire;
mod worker;

pub use orch::{L4Orch, L4Summary};
pub use rank::{start, Role};
pub use wire::RankError;
pub use worker::{Callables, L4Buffer, L4Callable, L4Config, L4Worker, RankOrch, RankSetup};

use crate::l3::L3Error;
use std::fmt;

/// Everything that can go wrong at level 4.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4Error {
    /// MPI or the job's shape is not usable.
    Mpi(String),
    /// A level-3 call on this rank failed.
    L3(L3Error),
    /// A rank refused a command.
    Rank {
        /// The rank that refused.
        rank: usize,
        /// Its typed refusal.
        error: RankError,
    },
    /// No such rank (or rank 0 where a worker rank is needed).
    UnknownRank {
        /// The rank given.
        rank: usize,
        /// Ranks in the job.
        size: usize,
    },
    /// A copy's end that should be on rank 0 is not a live rank-0 buffer.
    LocalEnd {
        /// What is wrong with it.
        reason: String,
    },
    /// A copy outside a buffer.
    Range {
        /// The access's first byte.
        offset: u64,
        /// Bytes it covers.
        len: u64,
        /// The buffer's size.
        nbytes: u64,
    },
    /// A group's rank list and argument list differ in length (or are empty), or a rank
    /// appears twice.
    GroupShape {
        /// Ranks given.
        ranks: usize,
        /// Argument lists given.
        args: usize,
    },
    /// A task failed on its rank.
    TaskFailed {
        /// The task's id.
        task: u64,
        /// Where it ran.
        rank: usize,
        /// The rank's message.
        message: String,
    },
    /// A task did not run because a producer failed.
    Upstream {
        /// The skipped task.
        task: u64,
        /// The failed producer.
        producer: u64,
    },
    /// A rank did not answer within the reply timeout; the group is terminal.
    RankLost {
        /// The silent rank.
        rank: usize,
        /// What it was asked.
        waiting_for: String,
    },
    /// The group lost a rank earlier (or closed); nothing more runs on it.
    GroupTerminal {
        /// The rank that was lost, if one was.
        lost: Option<usize>,
    },
    /// The orchestration function failed.
    Orchestration(String),
}

impl From<L3Error> for L4Error {
    fn from(e: L3Error) -> Self {
        Self::L3(e)
    }
}

impl fmt::Display for L4Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mpi(m) => write!(f, "MPI: {m}"),
            Self::L3(e) => write!(f, "level 3: {e}"),
            Self::Rank { rank, error } => write!(f, "rank {rank} refused: {error}"),
            Self::UnknownRank { rank, size } => {
                write!(f, "no worker rank {rank} (the job has {size} ranks)")
            }
            Self::LocalEnd { reason } => write!(f, "copy refused on rank 0: {reason}"),
            Self::Range { offset, len, nbytes } => write!(
                f,
                "access of {len} bytes at {offset} is outside the buffer's {nbytes}"
            ),
            Self::GroupShape { ranks, args } => write!(
                f,
                "a group needs distinct ranks, one argument list each (got {ranks} ranks, {args} lists)"
            ),
            Self::TaskFailed {
                task,
                rank,
                message,
            } => write!(f, "task {task} failed on rank {rank}: {message}"),
            Self::Upstream { task, producer } => {
                write!(f, "task {task} skipped: its producer task {producer} failed")
            }
            Self::RankLost { rank, waiting_for } => write!(
                f,
                "rank {rank} did not answer ({waiting_for}) within the reply timeout"
            ),
            Self::GroupTerminal { lost: Some(r) } => {
                write!(f, "the group is terminal: rank {r} was lost")
            }
            Self::GroupTerminal { lost: None } => f.write_str("the group is closed"),
            Self::Orchestration(m) => write!(f, "orchestration failed: {m}"),
        }
    }
}

impl std::error::Error for L4Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::L3(e) => Some(e),
            Self::Rank { error, .. } => Some(error),
            _ => None,
        }
    }
}
