//! `simpler-aicore`: the program each simulated or real AICore runs.
//!
//! A kernel receives one task's [`CoreTaskArgs`] (its tensors as runtime
//! [`simpler_core::TaskTensor`]s and its scalars), moves tiles between GM and the core's local
//! buffer, and reports success or a typed failure.
//!
//! ## Modules
//!
//! - [`core_loop`]: the core's loop body over the AICPU-AICore handshake.
//! - [`kernel`]: the kernel calling convention.
//! - [`tile`]: moving tensor views between GM and the local buffer.
//! - [`tile_ops`]: the heavy tile operations as a service the platform provides.
//! - [`kernels`]: the reference kernels the example scenes use.
#![no_std]

pub mod core_loop;
pub mod kernel;
pub mod kernels;
pub mod tile;
pub mod tile_ops;

pub use kernel::{KernelCtx, KernelFailure, KernelFn, KernelId, LOCAL_BUFFER_WORDS};
pub use simpler_core::gm::{self, Gm, GmFault};
pub use simpler_core::CoreTaskArgs;
pub use tile_ops::{Portable, TileOps};
