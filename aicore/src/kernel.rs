//! The kernel calling convention shared by the AICore loop and every kernel.

use simpler_core::gm::{Gm, GmFault};
use simpler_core::CoreTaskArgs;

use crate::tile_ops::TileOps;

/// The core's local (unified) buffer, in f32 words: what [`KernelCtx::local`] holds on the
/// simulator's default device (`DeviceConfig::local_words`). A kernel must not assume more; one
/// whose operands may not fit streams them through it (`kernels::stage`).
pub const LOCAL_BUFFER_WORDS: usize = 64 * 1024;

/// A kernel's index in the callable's kernel table (`func_id` in the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId(pub u32);

/// Why a kernel could not complete its task. Reported through the status register; the
/// scheduler ends the run with a typed status naming the task and the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelFailure {
    /// The task's arguments do not match what the kernel expects.
    BadArguments {
        /// Which tensor (position among the tensors), or the tensor count when too few.
        index: u32,
    },
    /// The data does not fit the core's local buffer.
    TooLarge {
        /// Elements needed.
        elems: u64,
        /// Elements the local buffer holds.
        limit: u64,
    },
    /// A GM access was refused: a tensor names memory outside GM, or the access conflicted
    /// with another core's in progress (the fault's `kind` says which).
    Memory(GmFault),
    /// A kernel-specific failure code (kernels written to fail, and user kernels).
    Code(u32),
}

impl core::fmt::Display for KernelFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::BadArguments { index } => write!(
                f,
                "the kernel refused its arguments at tensor {index} (the tensor count, when too few)"
            ),
            Self::TooLarge { elems, limit } => write!(
                f,
                "data of {elems} elements does not fit the local buffer of {limit}"
            ),
            Self::Memory(fault) => match fault.kind {
                simpler_core::gm::GmFaultKind::Outside => {
                    f.write_str("a tensor names memory outside GM")
                }
                simpler_core::gm::GmFaultKind::Conflict => {
                    f.write_str("a GM access conflicted with another core's in progress")
                }
            },
            Self::Code(code) => write!(f, "the kernel failed with code {code}"),
        }
    }
}

impl core::error::Error for KernelFailure {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Memory(fault) => Some(fault),
            _ => None,
        }
    }
}

impl From<GmFault> for KernelFailure {
    fn from(f: GmFault) -> Self {
        Self::Memory(f)
    }
}

/// What a kernel runs with: GM, its task's arguments, the core's local buffer, and where it
/// sits in an SPMD launch.
pub struct KernelCtx<'a> {
    /// Device memory.
    pub gm: &'a dyn Gm,
    /// The task's tensors and scalars.
    pub args: &'a CoreTaskArgs,
    /// The core's local (unified) buffer, in f32 words.
    pub local: &'a mut [f32],
    /// The platform's tile operations (matrix products, elementwise math, reductions) on
    /// buffers carved from `local`; [`crate::Portable`] where the platform has nothing faster.
    pub ops: &'a dyn TileOps,
    /// This block's index in an SPMD launch (0 for an ordinary task).
    pub block_idx: u32,
    /// Blocks in the launch (1 for an ordinary task).
    pub block_num: u32,
    /// 0 on AIC and AIV0, 1 on AIV1.
    pub sub_block: u32,
}

/// A kernel: reads and writes the memory its task's tensors name.
pub type KernelFn = fn(&mut KernelCtx<'_>) -> Result<(), KernelFailure>;
