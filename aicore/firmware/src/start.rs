//! The entry code every image starts with, its stacks and its exception vectors.
//!
//! `_start` is where the loader enters the image's first CPU, with the boot table's address in
//! `x0`; it clears `.bss`. `_secondary_start` is where further CPUs enter (PSCI `CPU_ON`'s
//! entry point, with the boot table as its context), after the first has cleared `.bss`. Both
//! then take the CPU's stack (by its MPIDR affinity-0 number, from the linker script's stack
//! region), enable FP/SIMD at EL1 (the kernels and the golden use it), install the vectors and
//! call the binary's `fw_entry(boot, cpu)`, which never returns. The whole stack is filled with
//! a pattern first, so [`stack_used`] can tell afterwards how deep it went.
//!
//! An exception (an abort, an undefined instruction) lands in `fw_exception`, which reports
//! the syndrome and exits through semihosting with a failure: firmware that faults says so
//! instead of hanging.
#![allow(unsafe_code)]

core::arch::global_asm!(
    r#"
    .section .text._start, "ax"
    .global _start
    .global _secondary_start
_start:
    mov     x19, x0
    adrp    x9, __bss_start
    add     x9, x9, :lo12:__bss_start
    adrp    x10, __bss_end
    add     x10, x10, :lo12:__bss_end
1:  cmp     x9, x10
    b.hs    2f
    str     xzr, [x9], #8
    b       1b
2:  mov     x0, x19
_secondary_start:
    mov     x19, x0
    mrs     x20, mpidr_el1
    and     x20, x20, #0xff
    mov     x9, #(3 << 20)
    msr     cpacr_el1, x9
    adrp    x9, fw_vectors
    add     x9, x9, :lo12:fw_vectors
    msr     vbar_el1, x9
    isb
    adrp    x9, __stack_end
    add     x9, x9, :lo12:__stack_end
    ldr     x10, =__stack_per_cpu
    mul     x10, x10, x20
    sub     x9, x9, x10
    mov     sp, x9
    ldr     x11, =__stack_per_cpu
    sub     x10, x9, x11
    ldr     x12, =0x5AA55AA55AA55AA5
4:  cmp     x10, x9
    b.hs    5f
    str     x12, [x10], #8
    b       4b
5:
    mov     x0, x19
    mov     x1, x20
    bl      fw_entry
3:  wfe
    b       3b

    .section .text.fw_vectors, "ax"
    .balign 2048
fw_vectors:
    .set    vec, 0
    .rept   16
    .balign 128
    mov     x0, #vec
    mrs     x1, esr_el1
    mrs     x2, elr_el1
    mrs     x3, far_el1
    b       fw_exception
    .set    vec, vec + 1
    .endr
"#
);

/// Reports an exception taken to EL1 (vector `vector`, its syndrome, return and fault
/// addresses) and exits with failure.
#[no_mangle]
extern "C" fn fw_exception(vector: u64, esr: u64, elr: u64, far: u64) -> ! {
    use core::fmt::Write;
    let mut out = crate::semihosting::Console::new();
    let _ = writeln!(
        out,
        "FAIL exception on cpu {}: vector {vector} esr {esr:#x} elr {elr:#x} far {far:#x}",
        crate::arch::cpu()
    );
    out.flush();
    crate::semihosting::exit(3)
}

/// The bottom and top of CPU `cpu`'s stack, from the linker script's symbols.
pub fn stack_bounds(cpu: u32) -> (usize, usize) {
    extern "C" {
        static __stack_end: u8;
        static __stack_per_cpu: u8;
    }
    // Only the symbols' addresses are taken, never their (absent) contents.
    let (end, per) = {
        (
            core::ptr::addr_of!(__stack_end) as usize,
            core::ptr::addr_of!(__stack_per_cpu) as usize,
        )
    };
    let top = end - per * cpu as usize;
    (top - per, top)
}

/// What the entry code fills a stack with (`_secondary_start`'s `ldr x12`).
const STACK_PAINT: u64 = 0x5AA5_5AA5_5AA5_5AA5;

/// Bytes of CPU `cpu`'s stack ever used: the entry code fills the whole stack with a pattern
/// before calling `fw_entry`; this measures from the top down to the lowest word that no longer
/// holds it.
pub fn stack_used(cpu: u32) -> usize {
    let (bottom, top) = stack_bounds(cpu);
    let mut p = bottom;
    // SAFETY: reads of this CPU's own stack region, word by word, all below `top`.
    while p < top && unsafe { core::ptr::read_volatile(p as *const u64) } == STACK_PAINT {
        p += 8;
    }
    top - p
}
