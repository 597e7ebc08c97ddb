//! The AICore's main loop: the core loop stepped over the core's register block until the
//! AICPU sends the exit signal, and the panic handler every image links.
#![allow(unsafe_code)]

use crate::gm::PhysGm;
use crate::port::MmioCorePort;
use simpler_aicore::core_loop::{CoreLoop, Step};
use simpler_aicore::KernelFn;
use simpler_core::boot::{BootError, BootTable};
use simpler_core::gm::Gm;
use simpler_core::handshake::{AICORE_IDLE, AICPU_IDLE};

/// The most cores a boot table may name for this firmware.
pub const MAX_CORES: u32 = 108;

/// One step of the core loop: a hot-path root of the panic-reachability check
/// (`tests/firmware.sh`), so it is a real function in the image.
#[no_mangle]
#[inline(never)]
pub extern "Rust" fn simpler_fw_core_step(
    core: &mut CoreLoop,
    port: &MmioCorePort,
    gm: &PhysGm,
    kernels: &[KernelFn],
    local: &mut [f32],
) -> Step {
    core.step(port, gm as &dyn Gm, kernels, local)
}

/// Runs AICore `index` of `boot` with `kernels` until the exit signal: reports IDLE, then takes
/// each token the AICPU writes. Returns the tasks run.
///
/// # Safety
///
/// `boot` passed [`BootTable::validate`]; this CPU is the only one running core `index`, and
/// the memory the table names is mapped and not referenced elsewhere in this image.
pub unsafe fn aicore_main(
    boot: &BootTable,
    index: u32,
    kernels: &[KernelFn],
) -> Result<u64, BootError> {
    // SAFETY: forwarded from this function's contract.
    let port = unsafe { MmioCorePort::new(boot, index)? };
    // SAFETY: the validated GM region, shared with the other CPUs by the handshake.
    let gm = unsafe { PhysGm::new(boot.gm) };
    let words = boot.local_words as usize;
    let local_base = boot.locals.base as usize + index as usize * words * 4;
    // SAFETY: core `index`'s local buffer inside the validated `locals` region (index is below
    // `cores`, each buffer `local_words` f32 words, 4-byte aligned); only this CPU uses it.
    let local = unsafe { core::slice::from_raw_parts_mut(local_base as *mut f32, words) };
    // The AICPU opens the window (AICPU_IDLE) first; IDLE answers it, and only after IDLE
    // does the AICPU dispatch, so no token can be mistaken for the opening.
    while simpler_aicore::core_loop::CorePort::read_task(&port) != AICPU_IDLE {
        core::hint::spin_loop();
    }
    simpler_aicore::core_loop::CorePort::write_status(&port, AICORE_IDLE);
    let mut core = CoreLoop::new();
    let mut ran = 0u64;
    crate::log::info_core_up(index);
    loop {
        match simpler_fw_core_step(&mut core, &port, &gm, kernels, local) {
            Step::Idle => core::hint::spin_loop(),
            Step::Ran(_) => ran += 1,
            Step::Exited => return Ok(ran),
        }
    }
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::fmt::Write;
    let mut out = crate::semihosting::Console::new();
    let _ = writeln!(
        out,
        "FAIL panic on cpu {}: {}",
        crate::arch::cpu(),
        info.message()
    );
    out.flush();
    crate::semihosting::exit(101)
}
