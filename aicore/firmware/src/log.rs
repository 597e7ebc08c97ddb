//! Device logging. With the `defmt` feature, cold-path events (a core up, a run's end) go
//! through `defmt` to the global logger the image links (semihosting in the qemu image);
//! without it every function here is empty and inlines to nothing. Never called per task.
//!
//! The logger writes defmt's encoded frames to the host file `defmt.log` (in qemu's working
//! directory) through semihosting, one CPU at a time; `defmt-print -e IMAGE < defmt.log`
//! decodes them with the image's symbol table.

/// Core `index` is up and about to take tokens.
#[inline(always)]
pub fn info_core_up(index: u32) {
    #[cfg(feature = "defmt")]
    defmt::info!("aicore {=u32} up", index);
    #[cfg(not(feature = "defmt"))]
    let _ = index;
}

/// Core `index` has exited after running `tasks` tasks.
#[inline(always)]
pub fn info_core_exited(index: u32, tasks: u64) {
    #[cfg(feature = "defmt")]
    defmt::info!("aicore {=u32} exited after {=u64} tasks", index, tasks);
    #[cfg(not(feature = "defmt"))]
    let _ = (index, tasks);
}

/// The AICPU has seen `cores` cores report IDLE.
#[inline(always)]
pub fn info_cores_up(cores: u32) {
    #[cfg(feature = "defmt")]
    defmt::info!("aicpu: {=u32} cores idle", cores);
    #[cfg(not(feature = "defmt"))]
    let _ = cores;
}

/// A run retired `tasks` tasks in `ticks` system-counter ticks.
#[inline(always)]
pub fn info_run_done(tasks: u64, ticks: u64) {
    #[cfg(feature = "defmt")]
    defmt::info!(
        "aicpu: run of {=u64} tasks done in {=u64} ticks",
        tasks,
        ticks
    );
    #[cfg(not(feature = "defmt"))]
    let _ = (tasks, ticks);
}

#[cfg(feature = "defmt")]
#[allow(unsafe_code)]
mod logger {
    use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Held while a frame is written: the CPUs share one encoder and one file.
    static TAKEN: AtomicBool = AtomicBool::new(false);
    /// The host file's handle, opened on the first frame (`u64::MAX` until then).
    static HANDLE: AtomicU64 = AtomicU64::new(u64::MAX);
    /// Only touched between `acquire` and `release`, under `TAKEN`.
    static mut ENCODER: defmt::Encoder = defmt::Encoder::new();

    fn put(bytes: &[u8]) {
        let mut h = HANDLE.load(Ordering::Relaxed);
        if h == u64::MAX {
            h = crate::semihosting::open_write(b"defmt.log\0").unwrap_or(u64::MAX - 1);
            HANDLE.store(h, Ordering::Relaxed);
        }
        if h != u64::MAX - 1 {
            crate::semihosting::write(h, bytes);
        }
    }

    #[defmt::global_logger]
    struct SemihostingLogger;

    // SAFETY: `acquire` takes the `TAKEN` spin lock before any frame is started and `release`
    // gives it back after the frame ends, so the encoder and the file see one frame at a time.
    unsafe impl defmt::Logger for SemihostingLogger {
        fn acquire() {
            while TAKEN
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                core::hint::spin_loop();
            }
            // SAFETY: the lock is held; no other reference to the encoder exists.
            unsafe { (*core::ptr::addr_of_mut!(ENCODER)).start_frame(put) }
        }

        unsafe fn flush() {}

        unsafe fn release() {
            // SAFETY: called by defmt after `acquire`, with the lock held.
            unsafe { (*core::ptr::addr_of_mut!(ENCODER)).end_frame(put) };
            TAKEN.store(false, Ordering::Release);
        }

        unsafe fn write(bytes: &[u8]) {
            // SAFETY: called by defmt between `acquire` and `release`, with the lock held.
            unsafe { (*core::ptr::addr_of_mut!(ENCODER)).write(bytes, put) }
        }
    }

    defmt::timestamp!("{=u64}", crate::arch::counter());
}
