//! `simpler-aicpu`: the program the AICPU runs — the orchestrator thread and the scheduler
//! threads of the tensormap_and_ringbuffer runtime, and the host_build_graph schedulers.
//!
//! Everything here is generic over [`Platform`], the few primitives that differ between the
//! device firmware and the simulator: register access, fences and a cycle counter.
//!
//! Modules:
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The hardware primitives the AICPU program needs.
pub mod platform;

pub use platform::{CoreIndex, Platform};
