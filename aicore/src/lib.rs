//! `simpler-aicore`: the program each simulated or real AICore runs.
//!
//! This crate holds the kernel ABI: a kernel receives one task's [`CoreTaskArgs`] (its tensors
//! as runtime [`simpler_core::TaskTensor`]s and its scalars) and reports success or a typed
//! failure. The per-core handshake loop and the reference kernels build on it.
//!
//! Modules:
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The kernel calling convention.
pub mod kernel;

pub use kernel::{KernelFailure, KernelFn, KernelId};
pub use simpler_core::CoreTaskArgs;
