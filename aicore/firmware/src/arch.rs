//! The aarch64 primitives the firmware needs: the barriers that order register and memory
//! accesses between cores, the system counter as the cycle clock, and the CPU number.
//!
//! Register blocks and payloads are shared with other CPUs through ordinary (normal,
//! inner-shareable) memory or device memory; a store another CPU waits for is preceded by
//! [`release`], a load that publishes something is followed by [`acquire`].
#![allow(unsafe_code)]

use core::arch::asm;

/// Orders every earlier load and store before every later store (the release half of a
/// handshake): `dmb ish`.
#[inline(always)]
pub fn release() {
    // SAFETY: `dmb ish` is a barrier; it touches no register or memory the compiler tracks,
    // and the `asm!` has no operands (the default `memory` clobber keeps the compiler's own
    // accesses on their side of it).
    unsafe { asm!("dmb ish", options(nostack, preserves_flags)) }
}

/// Orders an earlier load before every later load and store (the acquire half): `dmb ish`.
#[inline(always)]
pub fn acquire() {
    // SAFETY: as in `release`: a barrier with no operands.
    unsafe { asm!("dmb ish", options(nostack, preserves_flags)) }
}

/// Completes every earlier memory access before any later instruction (before signalling
/// another CPU with `sev`, or before a device register write that starts work): `dsb sy`.
#[inline(always)]
pub fn complete() {
    // SAFETY: `dsb sy` waits for outstanding accesses; no operands, no memory of its own.
    unsafe { asm!("dsb sy", options(nostack, preserves_flags)) }
}

/// The system counter (`CNTVCT_EL0`), the firmware's cycle clock: monotonic, the same on
/// every CPU.
#[inline(always)]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: reading CNTVCT_EL0 has no side effect; EL1 may read it (the loader leaves
    // CNTKCTL/CNTHCTL at their reset values, which permit EL1 access).
    unsafe {
        asm!("isb", "mrs {v}, cntvct_el0", v = out(reg) v, options(nostack, nomem, preserves_flags))
    }
    v
}

/// Counter ticks per second (`CNTFRQ_EL0`, set by the platform).
#[inline(always)]
pub fn counter_hz() -> u64 {
    let v: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effect.
    unsafe { asm!("mrs {v}, cntfrq_el0", v = out(reg) v, options(nostack, nomem, preserves_flags)) }
    v
}

/// This CPU's number: MPIDR_EL1 affinity level 0.
#[inline(always)]
pub fn cpu() -> u32 {
    let v: u64;
    // SAFETY: reading MPIDR_EL1 has no side effect.
    unsafe { asm!("mrs {v}, mpidr_el1", v = out(reg) v, options(nostack, nomem, preserves_flags)) }
    (v & 0xff) as u32
}

/// Parks the CPU for good: interrupts masked, waiting for an event that is never acted on.
pub fn halt() -> ! {
    loop {
        // SAFETY: `wfe` only waits; masking interrupts (`msr daifset`) changes nothing the
        // compiler tracks.
        unsafe { asm!("msr daifset, #0xf", "wfe", options(nostack, nomem)) }
    }
}

/// Starts CPU `mpidr` at `entry` with `context` in its `x0`, through PSCI `CPU_ON` over the
/// `hvc` conduit (qemu's `virt` at EL1). Returns PSCI's status word (0 for success).
pub fn psci_cpu_on(mpidr: u64, entry: u64, context: u64) -> i64 {
    const CPU_ON_64: u64 = 0xC400_0003;
    let mut r: u64 = CPU_ON_64;
    // SAFETY: a PSCI call is a hypervisor call that follows the SMC calling convention: it
    // reads x0-x3, returns in x0 and may clobber x0-x17, all declared; it touches no memory
    // the compiler owns.
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") r,
            inout("x1") mpidr => _,
            inout("x2") entry => _,
            inout("x3") context => _,
            out("x4") _, out("x5") _, out("x6") _, out("x7") _,
            out("x8") _, out("x9") _, out("x10") _, out("x11") _,
            out("x12") _, out("x13") _, out("x14") _, out("x15") _,
            out("x16") _, out("x17") _,
            options(nostack),
        )
    }
    r as i64
}
