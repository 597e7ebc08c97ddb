//! The kernel calling convention shared by the AICore loop and every kernel.

use simpler_core::CoreTaskArgs;

/// A kernel's index in the callable's kernel table (`func_id` in the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(pub u32);

/// Why a kernel could not complete its task. Reported to the scheduler, which ends the run with
/// a typed status naming the task and the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFailure {
    /// The task's arguments do not match what the kernel expects (count, dtype, shape).
    BadArguments {
        /// Which argument, by position among the tensors.
        index: u32,
    },
    /// A kernel-specific failure code.
    Code(u32),
}

/// A kernel: reads and writes the memory its task's tensors name.
///
/// Memory access goes through the platform the core runs on, so the signature names only the
/// arguments; the per-core loop supplies the rest.
pub type KernelFn = fn(&CoreTaskArgs) -> Result<(), KernelFailure>;
