//! The AICPU image: its first CPU runs the boot table's orchestration and the scheduler pass
//! over every core the table names, then sends the cores the exit signal.
#![no_std]
#![no_main]
#![allow(unsafe_code)]

use simpler_aicore_firmware::arch;
use simpler_core::boot::BootTable;

// Links the shared entry code, vectors and panic handler.
use simpler_aicore_firmware as _;

/// Called by `_start` with the boot table the loader passed.
#[no_mangle]
extern "C" fn fw_entry(boot: *const BootTable, _cpu: u64) -> ! {
    // SAFETY: the loader passes the address of a boot table it has written and keeps, and
    // starts the AICores that table names.
    let _ = unsafe { simpler_aicpu_firmware::aicpu_main(&*boot) };
    arch::halt()
}
