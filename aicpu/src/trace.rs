//! Trace events: what a traced run records, per thread, into preallocated buffers.
//!
//! Timestamps are nanoseconds from the run's start. Tracks name where an event happened: a
//! core (its index in the chip's core table), a scheduler thread, or the orchestrator.

use simpler_core::TaskId;

/// Track of scheduler thread `t` is `SCHEDULER_TRACK + t`.
pub const SCHEDULER_TRACK: u32 = 10_000;
/// The orchestrator thread's track.
pub const ORCHESTRATOR_TRACK: u32 = 20_000;
/// The host's track (staging, the run, copying back).
pub const HOST_TRACK: u32 = 30_000;

/// Host phases, in `TraceEvent::kernel` of a `Host` event.
pub const HOST_PHASES: [&str; 3] = ["stage", "run", "copy back"];

/// What an event records.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A core ran a task's kernel (one subtask).
    Exec = 0,
    /// The orchestrator submitted a task.
    Submit = 1,
    /// The completion-handling phase of a scheduler pass that made progress.
    Completion = 2,
    /// The dispatch phase (dummy tasks, then MIX, AIC, AIV) of a pass that made progress.
    Dispatch = 3,
    /// A scheduler thread waited for work.
    Idle = 4,
    /// A host phase (its index into `HOST_PHASES` in `kernel`).
    Host = 5,
    /// A counter's value at the end of the run (which counter in `kernel`, the value in
    /// `value`).
    Counter = 6,
}

/// Counter ids of `Counter` events: a scheduler thread's passes this run.
pub const COUNTER_LOOPS: u32 = 0;
/// Ready-queue pops it attempted.
pub const COUNTER_POPS: u32 = 1;
/// Ready-queue pops that found a task.
pub const COUNTER_POP_HITS: u32 = 2;

/// One span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Where it happened.
    pub track: u32,
    /// What it was.
    pub kind: EventKind,
    /// The task, when there is one (`TaskId::INVALID` otherwise).
    pub task: TaskId,
    /// The kernel, for `Exec`.
    pub kernel: u32,
    /// Start, ns from the run's start.
    pub start_ns: u64,
    /// End, ns from the run's start.
    pub end_ns: u64,
    /// A `Counter` event's value (0 otherwise).
    pub value: u64,
}
