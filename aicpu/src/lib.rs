//! `simpler-aicpu`: the program the AICPU runs — the orchestrator thread's runtime API and the
//! scheduler threads of the tensormap_and_ringbuffer runtime.
//!
//! Everything here is generic over [`Platform`], the few primitives that differ between the
//! device firmware and the simulator: register access, payload buffers and a cycle counter.
//!
//! Modules:
#![no_std]

// Graph execution: an outer GRAPH task expanded into its Definition's internal nodes.
pub mod graph_exec;
// Per-slot task payloads written at submit and read at dispatch.
pub mod payloads;
// The hardware primitives the AICPU program needs.
pub mod platform;
// How a run ended.
pub mod run;
// The orchestration API handed to orchestration functions.
pub mod runtime;
// A scheduler thread's completion, fanout and dispatch pass.
pub mod scheduler;
// Trace events a traced run records.
pub mod trace;

pub use payloads::{MixedKernels, PayloadSink, TaskPayloads, NO_KERNEL};
pub use platform::Platform;
pub use run::{RunError, RunOutcome};
pub use runtime::{GraphBody, GraphRef, GraphSink, Rt, RtError, SubmitHook, SubmittedTask};
pub use scheduler::{CoreSlot, OwnedCore, SchedError, Scheduler};
pub use trace::{EventKind, TraceEvent};
