//! Task slots: the per-task scheduling state shared by the orchestrator and the schedulers.
//!
//! ```text
//!            (1) claim                (2) publish              (3) last fanin released
//!   FREE ──────────────▶ BUILDING ──────────────▶ PENDING ─────────────────────▶ READY
//!    ▲                      │                                                      │
//!    │                      │ (7) alloc task: outputs only                         │ (4) dispatch
//!    │                      ▼                                                      ▼
//!    │  (9) watermark     COMPLETED ◀──────────────────────────────────────────── RUNNING
//!    │      passes           │        (5) last subtask finished
//!    │                       │        (6) a dummy task completes inline from READY
//!    │                       ▼ (8) completed, and every fanout reference released
//!    └──────────────────── CONSUMED
//! ```
//!
//! | # | transition | performed by | function |
//! |---|---|---|---|
//! | 1 | FREE → BUILDING | orchestrator, claiming the slot | [`crate::orchestrator::Orchestrator::submit`] (`claim_slot`) |
//! | 2 | BUILDING → PENDING | orchestrator, after wiring fanin | `SchedState::publish` (crate-private) |
//! | 3 | PENDING → READY | whichever thread releases the last fanin (or the orchestrator at publish) | `SchedState::release_fanin_keeping` (private) |
//! | 4 | READY → RUNNING | the scheduler that popped it | [`crate::sched::SchedState::mark_running`] |
//! | 5 | RUNNING → COMPLETED | the scheduler owning its last core | [`crate::sched::SchedState::complete`] |
//! | 6 | READY → COMPLETED | a scheduler, for a DUMMY task | [`crate::sched::SchedState::complete`] |
//! | 7 | BUILDING → COMPLETED | orchestrator, for an allocation task | `SchedState::publish_completed` (crate-private) |
//! | 8 | COMPLETED → CONSUMED | whichever thread releases the last reference | `SchedState::release_fanout` (crate-private) |
//! | 9 | CONSUMED → FREE | whichever thread advances the ring's watermark | `SchedState::advance` (crate-private) |
//!
//! **Readiness.** `fanin_refcount` counts up to the crate-private constant `FANIN_READY` (2^31).
//! Each WAIT producer that had not completed when its edge was linked adds one when it completes;
//! the orchestrator, once wiring is done, adds the rest (`FANIN_READY` minus the linked edges), so
//! a task cannot become ready half-wired: before the publish the count is at most the number of
//! linked edges, far below the target. The one increment that reaches `FANIN_READY` performs
//! transition 3, and it knows so from its own read-modify-write alone. Nothing else of the slot may
//! be read to decide: a release that is not the last leaves the task free to run and retire, and
//! its slot to be claimed again, before the releasing thread's next instruction (deciding by a
//! later load of a per-task target once let such a release match a later occupant's count and make
//! that task ready before its producers released it). `fanin_count` keeps the number of WAIT edges
//! plus one, for reports only.
//!
//! **Edges.** A WAIT edge is linked into its producer's fanout list, or counted as released if
//! the producer already completed, under the producer's lock as the edge is recorded. A RETAIN
//! edge claims a fanout reference (a pin) in the same critical section, so a retained producer
//! cannot be consumed before its consumer completes. A WAIT-only edge takes no pin: once linked
//! into an uncompleted producer's list, the producer cannot be consumed before it completes and
//! releases the consumer.
//!
//! **Lifetime.** `fanout_count` starts at [`SCOPE_BIT`] (the owning scope's reference) plus
//! [`SELF_REF`] (the task's own completion's) and gains one per RETAIN edge claimed at submit.
//! `fanout_refcount` gains one per RETAIN edge when its consumer completes, [`SCOPE_BIT`] when
//! the scope ends, and [`SELF_REF`] as the last step of the task's completion (at publish for
//! an allocation task, which never runs). A completed task whose two counts agree is CONSUMED.
//!
//! The self reference keeps the slot the task's own until its completion is done with it. The
//! completing thread releases its consumers first, then the producers it retained, reading its
//! edge list from the slot; a consumer released early can complete and drop the last other
//! reference meanwhile. Without the self reference that consumed the task mid-completion, its
//! slot could be reclaimed and claimed again, and the completion went on to release the
//! RETAIN producers of the slot's next task: one release too many, which left that producer's
//! counts unequal for good, so it never retired and its ring filled up.
//!
//! ## Memory ordering
//!
//! `fanout_lock` (Acquire on take, Release on drop) guards `fanout_count`, `fanout_head` and
//! the COMPLETED/CONSUMED transitions, which makes "the orchestrator claims an edge on a
//! producer" atomic with respect to "the producer is consumed", and "the orchestrator links an
//! edge" with respect to "the producer snapshots its list at completion". Counters outside the
//! lock are read-modify-write atomics (AcqRel), so the thread whose increment completes a count
//! sees everything the other incrementers wrote before theirs. Slot fields written by the
//! orchestrator before publish are Relaxed stores made visible by the Release of the publish.

use crate::cores::ActiveMask;
use crate::deps::NIL;
use crate::layout::AtomicPod;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::task_tensor::TaskId;

/// The owning scope's reference in `fanout_count` / `fanout_refcount`.
pub const SCOPE_BIT: u32 = 0x8000_0000;

/// The task's own completion's reference in `fanout_count` / `fanout_refcount`.
pub const SELF_REF: u32 = 1;

/// `fanin_count` of a task still being wired (reports only; readiness does not read it).
pub(crate) const UNPUBLISHED: u32 = u32::MAX;

/// `fanin_refcount` of a task every producer and its publish have released: the count the
/// one increment that makes the task ready reaches. Far above any number of edges.
pub(crate) const FANIN_READY: u32 = 1 << 31;

/// Where a task is in its life. Zeroed memory is `Free`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlotStatus {
    /// No task.
    Free = 0,
    /// Claimed by the orchestrator, being wired.
    Building = 1,
    /// Published, waiting for producers.
    Pending = 2,
    /// In a ready queue.
    Ready = 3,
    /// Dispatched to cores.
    Running = 4,
    /// Finished; its outputs are valid.
    Completed = 5,
    /// Finished and released by everything that referenced it; reclaimable.
    Consumed = 6,
}

impl SlotStatus {
    /// Decodes a status word (unknown words read as `Free`, which nothing acts on).
    pub fn from_raw(raw: u32) -> Self {
        match raw {
            1 => Self::Building,
            2 => Self::Pending,
            3 => Self::Ready,
            4 => Self::Running,
            5 => Self::Completed,
            6 => Self::Consumed,
            _ => Self::Free,
        }
    }
}

/// A slot named across rings: ring in the top two bits, slot index below. Only the shared
/// state makes one (`SchedState::slot_ref`), so every `SlotRef` names a slot that exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotRef(pub(crate) u32);

impl SlotRef {
    /// Bits of the slot index.
    pub const INDEX_BITS: u32 = 30;

    /// Slot `index` of `ring`.
    pub(crate) const fn new(ring: usize, index: u32) -> Self {
        Self(((ring as u32) << Self::INDEX_BITS) | index)
    }

    /// Index of the slot's ring, `0..MAX_RINGS` (the top two bits).
    pub const fn ring(self) -> usize {
        (self.0 >> Self::INDEX_BITS) as usize
    }

    /// The index within the ring.
    pub const fn index(self) -> usize {
        (self.0 & ((1 << Self::INDEX_BITS) - 1)) as usize
    }
}

/// One task's scheduling state. 64 bytes, one cache line.
#[repr(C, align(64))]
#[cfg_attr(loom, derive(Default))]
pub struct SlotState {
    pub(crate) status: AtomicU32,
    pub(crate) fanout_lock: AtomicU32,
    /// Under `fanout_lock`: SCOPE_BIT, SELF_REF, plus RETAIN edges claimed.
    pub(crate) fanout_count: AtomicU32,
    /// Under `fanout_lock`: head of the list of WAIT edges to notify at completion.
    pub(crate) fanout_head: AtomicU32,
    pub(crate) fanout_refcount: AtomicU32,
    pub(crate) fanin_count: AtomicU32,
    pub(crate) fanin_refcount: AtomicU32,
    /// First of this task's fanin edges, as a linear index into its ring's edge pool.
    pub(crate) edge_start: AtomicU32,
    /// The task occupying the slot (its generation).
    pub(crate) task_id: AtomicU64,
    /// Number of this task's fanin edges.
    pub(crate) edge_count: AtomicU32,
    /// Active core mask (bits 0..8) and subtasks to complete (bits 8..24).
    pub(crate) shape: AtomicU32,
    pub(crate) completed_subtasks: AtomicU32,
    /// Orchestrator-private: end of the task's heap claim (the ring's heap tail once this task
    /// is the newest retired one).
    pub(crate) heap_end: AtomicU32,
    /// Orchestrator-private: the submit (epoch) that last recorded an edge from this task,
    /// and that edge's cell, for merging a second request into the first.
    pub(crate) seen_epoch: AtomicU32,
    pub(crate) seen_edge: AtomicU32,
}

#[cfg(not(loom))]
crate::assert_layout!(SlotState, size = 64);

// SAFETY: SlotState is #[repr(C)] made only of atomic integers, so every bit pattern (zero
// included) is valid and all mutation is atomic.
#[allow(unsafe_code)]
unsafe impl AtomicPod for SlotState {}

impl SlotState {
    /// The slot's status now (an acquire load: what the transition that set it published is
    /// visible).
    pub fn status(&self) -> SlotStatus {
        SlotStatus::from_raw(self.status.load(Ordering::Acquire))
    }

    /// The task occupying the slot.
    pub fn task_id(&self) -> TaskId {
        TaskId(self.task_id.load(Ordering::Acquire))
    }

    /// The task's active core mask.
    pub fn active_mask(&self) -> ActiveMask {
        ActiveMask::from_bits_truncate(self.shape.load(Ordering::Relaxed) as u8)
    }

    /// Takes the slot's fanout lock (a spin lock held for a few instructions).
    pub(crate) fn lock(&self) -> SlotGuard<'_> {
        while self
            .fanout_lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            crate::sync::spin_loop();
        }
        SlotGuard { slot: self }
    }

    /// Prepares the slot for a new task (transition 1). Only the orchestrator calls this, on a
    /// FREE slot no other thread references.
    pub(crate) fn claim(
        &self,
        task: TaskId,
        mask: ActiveMask,
        subtasks: u32,
        edge_start: u32,
        heap_end: u32,
    ) {
        self.task_id.store(task.0, Ordering::Relaxed);
        self.heap_end.store(heap_end, Ordering::Relaxed);
        self.fanout_count
            .store(SCOPE_BIT + SELF_REF, Ordering::Relaxed);
        self.fanout_head.store(NIL, Ordering::Relaxed);
        self.fanout_refcount.store(0, Ordering::Relaxed);
        self.fanin_count.store(UNPUBLISHED, Ordering::Relaxed);
        self.fanin_refcount.store(0, Ordering::Relaxed);
        self.edge_start.store(edge_start, Ordering::Relaxed);
        self.edge_count.store(0, Ordering::Relaxed);
        self.shape.store(
            mask.bits() as u32 | (subtasks.min(0xFFFF) << 8),
            Ordering::Relaxed,
        );
        self.completed_subtasks.store(0, Ordering::Relaxed);
        self.status
            .store(SlotStatus::Building as u32, Ordering::Release);
    }
}

/// Holds a slot's fanout lock; released on drop.
pub(crate) struct SlotGuard<'s> {
    slot: &'s SlotState,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.slot.fanout_lock.store(0, Ordering::Release);
    }
}
