//! `simpler-sim`: the bundled simulator, the device every developer runs.
//!
//! It will own GM memory, a register block per core, and the execution of the `aicpu` and
//! `aicore` programs unchanged, for the a2a3 and a5 topologies. Until that lands (the simulator
//! issue), this crate only fixes its place in the dependency order:
//! `core` ← `aicpu`, `aicore` ← `sim` ← `host`.

pub use simpler_aicore as aicore;
pub use simpler_aicpu as aicpu;
