//! The one door every piece of shared state goes through for its atomics and spin hints.
//!
//! Normally these are `core::sync::atomic` and `core::hint::spin_loop`. Built with
//! `RUSTFLAGS="--cfg loom"` they are the `loom` model checker's, so the same source of the slot
//! machine, the rings, the ready queues and the flow-control words runs under a checker that
//! explores every interleaving (and every value a relaxed load may return) of a small model.
//! `tests/loom.sh` runs the models.
//!
//! Under loom, a spin loop must yield to the checker's scheduler (otherwise a thread spinning on
//! a flag another thread will set is an infinite loop to it): [`spin_loop`] does. Loom's atomics
//! carry the checker's bookkeeping, so they cannot be carved out of raw bytes:
//! [`crate::layout::Carver`] constructs them in place instead (see its `atomic_with`).

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A spin-wait hint: the processor's pause instruction; under loom, a yield to the checker.
#[inline(always)]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}
