//! `simpler-sim`: the bundled simulator, the device every developer runs.
//!
//! A [`Device`] holds GM, the AICPU's orchestrator and scheduler threads and the AICore
//! cores' registers and local buffers, set up once and reused for every run. The device code
//! it runs (`simpler_aicpu`, `simpler_aicore`, `simpler_core`) is the firmware's code.
//!
//! Modules:

// The device: its threads, registers, runs and host requests.
pub mod device;
// GM as an arena of atomic words.
pub mod gm;
// The wakeup primitive idle threads block on.
pub mod wake;

pub use device::{
    Device, DeviceConfig, DeviceError, DeviceLayouts, Job, OrchFn, Prebuilt, SharedHook, Topology,
    TraceSink,
};
pub use simpler_aicore as aicore;
pub use simpler_aicpu as aicpu;
pub use simpler_aicpu::{RunError, RunOutcome};
