//! Device logging. With the `defmt` feature, cold-path events (a core up, a run's end) go
//! through `defmt` to the global logger the image links (semihosting in the qemu image);
//! without it every function here is empty and inlines to nothing. Never called per task.

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
    defmt::info!("aicpu: run of {=u64} tasks done in {=u64} ticks", tasks, ticks);
    #[cfg(not(feature = "defmt"))]
    let _ = (tasks, ticks);
}
