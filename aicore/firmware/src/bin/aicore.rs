//! The AICore image: each CPU the loader starts runs one AICore's loop (core
//! `cpu - aicore_cpu_base` of the boot table) with the reference kernels, until the AICPU's
//! exit signal.
#![no_std]
#![no_main]
#![allow(unsafe_code)]

use simpler_aicore::{kernels, KernelFn};
use simpler_aicore_firmware::{arch, run};
use simpler_core::boot::BootTable;

/// The image's kernel table: the ids the AICPU image's orchestrations name.
static KERNELS: [KernelFn; 3] = [kernels::add, kernels::add_scalar, kernels::mul];

/// Called by `_start` / `_secondary_start` with the boot table the loader passed.
#[no_mangle]
extern "C" fn fw_entry(boot: *const BootTable, cpu: u64) -> ! {
    // SAFETY: the loader passes the address of a boot table it has written and keeps.
    let boot = unsafe { &*boot };
    if boot.validate(run::MAX_CORES).is_err() {
        arch::halt();
    }
    let index = (cpu as u32).wrapping_sub(boot.aicore_cpu_base);
    // SAFETY: the table passed `validate`; the loader starts one CPU per core.
    if let Ok(tasks) = unsafe { run::aicore_main(boot, index, &KERNELS) } {
        simpler_aicore_firmware::log::info_core_exited(index, tasks);
    }
    arch::halt()
}
