//! `simpler-aicpu-firmware`: the AICPU image for `aarch64-unknown-none`, and the qemu test
//! image that holds both programs.
//!
//! The AICPU program is `simpler_aicpu` unchanged: [`platform::MmioCores`] is one more
//! [`simpler_aicpu::Platform`], over the cores' memory-mapped register blocks, and
//! [`run::aicpu_main`] carves the runtime's state out of the working memory the boot table
//! hands over, runs an orchestration through the submit path and drives the scheduler pass
//! until the graph drains, itself or, when the boot table names a scheduler CPU, with
//! [`run::aicpu_scheduler_main`] running the passes on that CPU side by side. No allocator:
//! every structure lives in boot-table memory.
//!
//! ## Modules
//!
//! - [`platform`]: the cores' register blocks and mailboxes as the scheduler's `Platform`.
//! - [`run`]: one run on the AICPU: memory carved, cores opened, orchestration and scheduler
//!   (on one CPU or two), exit.
//! - [`orchestrations`]: the orchestrations the image links, by index.
//!
//! ## Portability
//!
//! `aarch64-unknown-none` at EL1 only; the entry, fences, semihosting and GM come from
//! `simpler-aicore-firmware`, which both images share.
#![no_std]

pub mod orchestrations;
pub mod platform;
pub mod run;

pub use platform::MmioCores;
pub use run::{aicpu_main, aicpu_scheduler_main, FwError, RunReport};
