//! The AICPU's view of the hardware. The device implements it over memory-mapped registers;
//! the simulator implements it over its register blocks. Scheduler code names only this trait.

/// Index of a compute core in the chip's core table (AICs first, then AIVs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoreIndex(pub u32);

/// Register access, ordering and time for the AICPU program.
pub trait Platform {
    /// Writes a core's task register (the AICPU-to-core handshake word).
    fn write_task_register(&self, core: CoreIndex, value: u32);

    /// Reads a core's status register (ACK or FIN in bit 31, plus the task id).
    fn read_status_register(&self, core: CoreIndex) -> u32;

    /// Orders every earlier memory write before every later one, across the AICPU and the
    /// cores (a release fence on the device's coherent fabric).
    fn publish_fence(&self);

    /// Orders every later memory read after every earlier one (an acquire fence).
    fn observe_fence(&self);

    /// A monotonic cycle counter, for timing and the no-progress watchdog.
    fn cycles(&self) -> u64;
}
