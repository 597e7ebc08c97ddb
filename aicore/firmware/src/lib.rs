//! `simpler-aicore-firmware`: the AICore image for `aarch64-unknown-none`, and the bare-metal
//! support it shares with the AICPU image (`aicpu/firmware`).
//!
//! The image's entry (`_start`) sets up a stack per CPU, turns on the FP/SIMD unit the kernels
//! use and calls the binary's `fw_entry` with the boot table the loader passed in `x0`. The
//! core then runs [`simpler_aicore::core_loop::CoreLoop`] over its register block
//! ([`port::MmioCorePort`]) until the AICPU sends the exit signal. No allocator: the registers,
//! the mailbox and the local buffer are memory the [`BootTable`](simpler_core::boot::BootTable)
//! names.
//!
//! ## Modules
//!
//! - [`arch`]: the aarch64 primitives: fences, the system counter, the CPU number, waiting.
//! - [`start`]: the entry code, the stacks and the exception vectors.
//! - [`semihosting`]: console output and exit through the debugger's (qemu's) semihosting.
//! - [`gm`]: GM over the physical memory the boot table names.
//! - [`port`]: a core's register block and mailbox, as the core loop's `CorePort`.
//! - [`run`]: the AICore's main loop.
//! - [`log`]: device logging through `defmt` over semihosting (feature `defmt`).
//!
//! ## Portability
//!
//! Built only for `aarch64-unknown-none` (AArch64, EL1, identity-mapped or MMU-off memory);
//! `tests/firmware.sh` builds it and boots it under `qemu-system-aarch64 -M virt`.
#![no_std]

pub mod arch;
pub mod gm;
pub mod log;
pub mod port;
pub mod run;
pub mod semihosting;
pub mod start;

pub use gm::PhysGm;
pub use port::MmioCorePort;
