//! The AICPU image: its first CPU runs the boot table's orchestration and, unless the table
//! names a scheduler CPU of its own, the scheduler pass over every core the table names; the
//! scheduler CPU, when the loader starts one, runs the scheduler side by side. Then the cores
//! are sent the exit signal.
#![no_std]
#![no_main]
#![allow(unsafe_code)]

use simpler_aicore_firmware::arch;
use simpler_core::boot::BootTable;

// Links the shared entry code, vectors and panic handler.
use simpler_aicore_firmware as _;

/// Called by `_start` (CPU 0) and `_secondary_start` (the scheduler CPU) with the boot table
/// the loader passed.
#[no_mangle]
extern "C" fn fw_entry(boot: *const BootTable, cpu: u64) -> ! {
    // SAFETY: the loader passes the address of a boot table it has written and keeps, and
    // starts the AICores that table names.
    let boot = unsafe { &*boot };
    if cpu == 0 {
        // SAFETY: as above.
        let _ = unsafe { simpler_aicpu_firmware::aicpu_main(boot) };
    } else if cpu == boot.scheduler_cpu as u64 {
        // SAFETY: the CPU the table names as the scheduler's, while CPU 0 runs the AICPU.
        unsafe { simpler_aicpu_firmware::aicpu_scheduler_main() };
    }
    arch::halt()
}
