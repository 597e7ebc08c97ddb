//! `simpler-aicore`: the program each simulated or real AICore runs.
//!
//! A kernel receives one task's [`CoreTaskArgs`] (its tensors as runtime
//! [`simpler_core::TaskTensor`]s and its scalars), moves tiles between GM and the core's local
//! buffer, and reports success or a typed failure.
//!
//! Modules:
#![no_std]

// The core's loop body over the AICPU-AICore handshake.
pub mod core_loop;
// The kernel calling convention.
pub mod kernel;
// The reference kernels the example scenes use.
pub mod kernels;
// Moving tensor views between GM and the local buffer.
pub mod tile;

pub use kernel::{KernelCtx, KernelFailure, KernelFn, KernelId};
pub use simpler_core::gm::{self, Gm, GmFault};
pub use simpler_core::CoreTaskArgs;
