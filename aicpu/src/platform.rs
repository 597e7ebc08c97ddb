//! The AICPU's view of the hardware. The device implements it over memory-mapped registers;
//! the simulator over its register blocks. Scheduler code names only this trait.

use simpler_core::handshake::DispatchPayload;
use simpler_core::sync::AtomicU64;

/// Register access, payload buffers and time for the cores one scheduler thread owns.
/// Cores are named by their index in the chip's core table.
pub trait Platform {
    /// Writes a core's task register. Release: the payload written before it is visible to
    /// the core first.
    fn write_task(&mut self, core: usize, value: u32);

    /// Reads a core's status register. Acquire: the kernel's GM writes and the error word are
    /// visible once its FIN is.
    fn read_status(&self, core: usize) -> u32;

    /// Reads why a core's last task failed: an error code (0 for none) and a detail word.
    fn read_error(&self, core: usize) -> (u32, u32);

    /// The payload buffer of `parity` for `core`, to fill before writing its task register.
    fn payload_mut(&mut self, core: usize, parity: u32) -> &mut DispatchPayload;

    /// A monotonic cycle counter.
    fn cycles(&self) -> u64;

    /// Hints that `words` will be read soon (a cache prefetch where the platform has one);
    /// reads and changes nothing. By default, nothing.
    fn hint_read(&self, words: &[AtomicU64]) {
        let _ = words;
    }
}
