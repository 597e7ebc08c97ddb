//! `simpler-aicpu`: the program the AICPU runs — the orchestrator thread's runtime API and the
//! scheduler threads of the tensormap_and_ringbuffer runtime.
//!
//! Everything here is generic over [`Platform`], the few primitives that differ between the
//! device firmware and the simulator: register access, payload buffers and a cycle counter.
//!
//! ## The orchestrator thread
//!
//! - [`runtime`]: the orchestration API handed to orchestration functions.
//! - [`payloads`]: per-slot task payloads written at submit and read at dispatch.
//!
//! ## The scheduler threads
//!
//! - [`scheduler`]: a scheduler thread's completion, fanout and dispatch pass.
//! - [`graph_exec`]: an outer GRAPH task expanded into its Definition's internal
//!   nodes.
//!
//! ## What differs per platform, and what a run reports
//!
//! - [`platform`]: the hardware primitives the AICPU program needs.
//! - [`run`]: how a run ended.
//! - [`trace`]: trace events a traced run records.
#![no_std]

pub mod graph_exec;
pub mod payloads;
pub mod platform;
pub mod run;
pub mod runtime;
pub mod scheduler;
pub mod trace;

pub use payloads::{MixedKernels, PayloadSink, TaskPayloads, NO_KERNEL};
pub use platform::Platform;
pub use run::{RunError, RunOutcome};
pub use runtime::{GraphBody, GraphRef, GraphSink, Rt, RtError, SubmitHook, SubmittedTask};
pub use scheduler::{CoreSlot, OwnedCore, Reach, SchedError, Scheduler};
pub use trace::{EventKind, TraceEvent};
