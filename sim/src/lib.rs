//! `simpler-sim`: the bundled simulator, the device every developer runs.
//!
//! A [`Device`] holds GM, the AICPU's orchestrator and scheduler threads and the AICore
//! cores' registers and local buffers, set up once and reused for every run. The device code
//! it runs (`simpler_aicpu`, `simpler_aicore`, `simpler_core`) is the firmware's code.
//!
//! Under `cfg(loom)` (the model checker's build, `tests/loom.sh`) the crate is built without
//! its device, for `tests/loom_wake.rs` to model-check the wakeup: the device's state is carved
//! by core's `Carver`, which hands out only loom's atomics there.
//!
//! ## Modules
//!
//! - [`device`]: the device: its threads, registers, runs and host requests.
//! - [`gm`]: GM as an arena of atomic words.
//! - [`ledger`]: the GM accesses in progress, which keep bulk copies and leases race-free.
//! - [`pages`]: how the large arenas are backed: zero pages from the kernel, committed as
//!   written; transparent huge pages for GM by default.
//! - [`tile_ops`]: the cores' tile math on the host's vector units.
//! - [`wake`]: the wakeup primitive idle threads block on, and when a scheduler thread wakes
//!   the orchestrator waiting for ring room.

#[cfg(not(loom))]
pub mod device;
pub mod gm;
pub mod ledger;
pub mod pages;
pub mod tile_ops;
pub mod wake;

#[cfg(not(loom))]
pub use device::gm_alloc::RUN_SLOTS;
#[cfg(not(loom))]
pub use device::{
    Device, DeviceConfig, DeviceError, DeviceLayouts, Job, OrchFn, Pending, Prebuilt, SharedHook,
    Topology, TraceSink,
};
pub use pages::Pages;
pub use simpler_aicore as aicore;
pub use simpler_aicpu as aicpu;
pub use simpler_aicpu::{RunError, RunOutcome};
