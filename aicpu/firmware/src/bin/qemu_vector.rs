//! The qemu test image: both programs in one image for `qemu-system-aarch64 -M virt -smp 5`.
//!
//! CPU 0 is first the loader: it lays out the register blocks, mailboxes, local buffers, GM
//! and the AICPU's working memory in RAM, writes the boot table and vector_example's inputs and
//! entry arguments, and starts CPUs 1-3 (one cluster: AIC, AIV0, AIV1) through PSCI at the
//! AICore loop and CPU 4 at the AICPU's scheduler. Then it is the AICPU's orchestration, side
//! by side with the scheduler on CPU 4. When the run ends it checks
//! the output against the golden, f = (a + b + 1)(a + b + 2) + (a + b) computed in f64 here,
//! prints what it measured and PASS or FAIL through semihosting, and exits with 0 for PASS.
#![no_std]
#![no_main]
#![allow(unsafe_code)]

use core::fmt::Write;
use simpler_aicore::{kernels, KernelFn};
use simpler_aicore_firmware::semihosting::{exit, Console};
use simpler_aicore_firmware::{arch, run, start};
use simpler_core::boot::{
    BootTable, CoreMailbox, Region, BOOT_MAGIC, BOOT_VERSION, REG_BLOCK_BYTES,
};
use simpler_core::{AddressSpace, BufferHandle, ChipStorageTaskArgs, ChipTensor, DataType};

/// The AICore kernel table (the ids `simpler_aicpu_firmware::orchestrations` names).
static KERNELS: [KernelFn; 3] = [kernels::add, kernels::add_scalar, kernels::mul];

/// The loader's memory map, in qemu `virt` RAM (0x4000_0000, 512 MiB with `-m 512M`).
const BOOT_AT: u64 = 0x4800_0000;
const REGS: u64 = 0x4800_1000;
const MAILBOXES: u64 = 0x4801_0000;
const LOCALS: u64 = 0x4810_0000;
const LOCAL_WORDS: u64 = simpler_aicore::LOCAL_BUFFER_WORDS as u64;
const GM: Region = Region {
    base: 0x4900_0000,
    bytes: 64 << 20,
};
const WORK: Region = Region {
    base: 0x4D00_0000,
    bytes: 16 << 20,
};
const CORES: u32 = 3;
/// The AICPU's scheduler CPU, after the AICores'.
const SCHEDULER_CPU: u32 = CORES + 1;
/// vector_example's tensors: 128 x 128 f32, placed after the entry arguments.
const ROWS: u32 = 128;
const N: u64 = (ROWS * ROWS) as u64;
const TENSORS: u64 = GM.base + (1 << 20);

fn a(i: u64) -> f32 {
    2.0 + i as f32 / 1024.0
}

fn b(i: u64) -> f32 {
    3.0 - i as f32 / 2048.0
}

fn tensor_addr(k: u64) -> u64 {
    TENSORS + k * N * 4
}

/// Writes the boot table, clears the cores' blocks, and stages the inputs and entry.
///
/// # Safety
///
/// Runs once, on CPU 0, before any other CPU starts; every address is RAM of qemu's `virt`.
unsafe fn load() -> &'static BootTable {
    let mailbox = core::mem::size_of::<CoreMailbox>() as u64;
    let entry_bytes = core::mem::size_of::<ChipStorageTaskArgs>() as u64;
    let table = BootTable {
        magic: BOOT_MAGIC,
        version: BOOT_VERSION,
        cores: CORES,
        reg_base: REGS,
        reg_stride: REG_BLOCK_BYTES,
        mailboxes: Region {
            base: MAILBOXES,
            bytes: mailbox * CORES as u64,
        },
        locals: Region {
            base: LOCALS,
            bytes: LOCAL_WORDS * 4 * CORES as u64,
        },
        local_words: LOCAL_WORDS,
        gm: GM,
        aicpu_work: WORK,
        entry_args: Region {
            base: GM.base,
            bytes: entry_bytes,
        },
        orchestration: 0,
        aicore_cpu_base: 1,
        scheduler_cpu: SCHEDULER_CPU,
        reserved: 0,
    };
    // SAFETY: the loader's own RAM (this function's contract); nothing else runs yet.
    unsafe {
        core::ptr::write_bytes(
            REGS as usize as *mut u8,
            0,
            (REG_BLOCK_BYTES * CORES as u64) as usize,
        );
        core::ptr::write_bytes(
            MAILBOXES as usize as *mut u8,
            0,
            (mailbox * CORES as u64) as usize,
        );
        for i in 0..N {
            core::ptr::write((tensor_addr(0) + 4 * i) as usize as *mut f32, a(i));
            core::ptr::write((tensor_addr(1) + 4 * i) as usize as *mut f32, b(i));
            core::ptr::write((tensor_addr(2) + 4 * i) as usize as *mut f32, 0.0);
        }
        let entry_at = GM.base as usize as *mut ChipStorageTaskArgs;
        core::ptr::write_bytes(entry_at, 0, 1);
        let entry = &mut *entry_at;
        for k in 0..3 {
            let mut c = ChipTensor {
                buffer: BufferHandle {
                    addr: tensor_addr(k),
                    size: N * 4,
                },
                ndims: 2,
                dtype: DataType::Float32.raw(),
                address_space: AddressSpace::Device as u8,
                ..ChipTensor::default()
            };
            c.shapes[..2].copy_from_slice(&[ROWS, ROWS]);
            c.strides[..2].copy_from_slice(&[ROWS, 1]);
            if entry.push_tensor(c).is_err() {
                fail("entry arguments refused");
            }
        }
        core::ptr::write(BOOT_AT as usize as *mut BootTable, table);
        &*(BOOT_AT as usize as *const BootTable)
    }
}

fn fail(why: &str) -> ! {
    let mut out = Console::new();
    let _ = writeln!(out, "FAIL {why}");
    out.flush();
    exit(1)
}

/// Checks f against the golden; returns the number of elements outside the tolerance and the
/// first of them.
fn check() -> (u64, Option<(u64, f32, f64)>) {
    let mut bad = 0;
    let mut first = None;
    for i in 0..N {
        // SAFETY: the output tensor in GM, written by the cores before their FIN, which the
        // AICPU acquired before the run ended.
        let got =
            unsafe { core::ptr::read_volatile((tensor_addr(2) + 4 * i) as usize as *const f32) };
        let s = a(i) as f64 + b(i) as f64;
        let want = (s + 1.0) * (s + 2.0) + s;
        let err = (got as f64 - want).abs();
        // A NaN compares false, so it counts as off the golden.
        let within = err <= 1e-6 + 1e-6 * want.abs();
        if !within {
            bad += 1;
            first.get_or_insert((i, got, want));
        }
    }
    (bad, first)
}

/// Called by `_start` (CPU 0) and `_secondary_start` (CPUs 1-4). Each role is a function of its
/// own, so a CPU's stack holds only its role's frames.
#[no_mangle]
extern "C" fn fw_entry(boot: *const BootTable, cpu: u64) -> ! {
    match cpu as u32 {
        0 => aicpu(),
        SCHEDULER_CPU => {
            // SAFETY: the CPU the boot table names as the scheduler's, started once by CPU 0,
            // which runs `aicpu_main` with that table.
            unsafe { simpler_aicpu_firmware::aicpu_scheduler_main() };
            arch::halt()
        }
        c => aicore(boot, c),
    }
}

/// An AICore: the loop of core `cpu - aicore_cpu_base` until the exit signal.
#[inline(never)]
fn aicore(boot: *const BootTable, cpu: u32) -> ! {
    // SAFETY: CPU 0 wrote the table before starting this CPU and keeps it.
    let boot = unsafe { &*boot };
    if boot.validate(run::MAX_CORES).is_ok() {
        // SAFETY: validated; CPU `cpu` is the only one running core `cpu - 1`.
        let _ = unsafe { run::aicore_main(boot, cpu - boot.aicore_cpu_base, &KERNELS) };
    }
    arch::halt()
}

/// CPU 0: the loader, then the AICPU, then the check.
#[inline(never)]
fn aicpu() -> ! {
    // SAFETY: CPU 0, before any other CPU runs.
    let boot = unsafe { load() };
    extern "C" {
        fn _secondary_start();
    }
    // `-append silent-scheduler`: the fault test. CPU 4 is left off although the boot table
    // names it, and the run must end with `SchedulerSilent` after the watchdog period.
    let mut line = [0u8; 256];
    let silent = simpler_aicore_firmware::semihosting::cmdline(&mut line)
        .is_some_and(|l| l.windows(16).any(|w| w == b"silent-scheduler"));
    let last = if silent { CORES } else { SCHEDULER_CPU };
    for c in 1..=last as u64 {
        let r = arch::psci_cpu_on(
            c,
            _secondary_start as *const () as u64,
            boot as *const BootTable as u64,
        );
        if r != 0 {
            fail("PSCI CPU_ON refused a CPU (run qemu with -smp 5)");
        }
    }
    // SAFETY: the table was just written; CPUs 1-3 run the cores it names, CPU 4 the scheduler.
    let report = unsafe { simpler_aicpu_firmware::aicpu_main(boot) };
    let mut out = Console::new();
    if silent {
        let (code, verdict) = match report {
            Err(simpler_aicpu_firmware::FwError::SchedulerSilent) => (0, "PASS"),
            _ => (1, "FAIL"),
        };
        let _ = writeln!(out, "{verdict} silent scheduler CPU: {report:?}");
        out.flush();
        exit(code)
    }
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(out, "FAIL run: {e:?}");
            out.flush();
            exit(1)
        }
    };
    let (bad, first) = check();
    let _ = writeln!(
        out,
        "run tasks {} dispatched {} passes {} ticks {} (counter {} Hz)",
        report.tasks,
        report.dispatched,
        report.passes,
        report.ticks,
        arch::counter_hz()
    );
    let _ = writeln!(out, "stack aicpu {} bytes", start::stack_used(0));
    let _ = writeln!(out, "work aicpu {} bytes", report.work_bytes);
    let aicore = (1..=CORES).map(start::stack_used).max().unwrap_or(0);
    let _ = writeln!(out, "stack aicore {aicore} bytes");
    let scheduler = start::stack_used(SCHEDULER_CPU);
    let _ = writeln!(out, "stack scheduler {scheduler} bytes");
    if bad != 0 || report.tasks != 5 || report.dispatched != 5 {
        let _ = writeln!(
            out,
            "FAIL {bad} of {N} elements off the golden, first {first:?}"
        );
        out.flush();
        exit(1)
    }
    let _ = writeln!(out, "PASS vector_example: {N} elements match the golden");
    out.flush();
    exit(0)
}
