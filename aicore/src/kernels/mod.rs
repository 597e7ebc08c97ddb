//! The reference kernels the example scenes run: elementwise vector ops, a tiled matmul with
//! its accumulate step (bgemm), and the four stages of paged attention's online softmax, per
//! query tile and batched over a chunk of sequences.
//!
//! Every kernel checks its arguments before it touches GM and reports a typed
//! [`KernelFailure`] for any input it cannot run, never a panic:
//!
//! - a wrong tensor count is `BadArguments { index }` with `index` the first missing or extra
//!   position (`min(count, expected)`);
//! - a tensor whose rank, dtype (FLOAT32 or BFLOAT16 only), element count or shape does not fit
//!   is `BadArguments` naming its position among the tensors;
//! - a missing or out-of-range scalar is `BadArguments` with `index` = tensor count + the
//!   scalar's position, so every argument has one index in submission order (a
//!   [`simpler_core::CoreTaskArgs`] holds its tensors before its scalars);
//! - operands that do not fit the local buffer, or a matmul tile dimension past [`MAX_TILE`],
//!   are `TooLarge`;
//! - an access outside GM is `Memory`.
//!
//! Kernels keep their working data only in [`KernelCtx::local`], carved into one buffer per
//! operand; math is f32 whatever the tensors' dtypes (bf16 is widened on load and rounded to
//! nearest even on store).
//!
//! The two helper modules are public, for kernels of a user's own:
//!
//! - [`args`]: checking tensor counts, tensors and scalars, each failure naming the argument's
//!   position (`index`: a tensor's position among the tensors; a scalar's, the tensor count plus
//!   its position);
//! - [`stage`]: carving the local buffer into one buffer per operand, and moving an element
//!   range of a tensor through it, so a tensor larger than the buffer streams in chunks.
//!
//! The kernels' own modules, `vector`, `matmul`, `attention` and `batch_attention`, are
//! private; their kernels are re-exported here.

use crate::kernel::{KernelCtx, KernelFailure, KernelFn};

pub mod args;
mod attention;
mod batch_attention;
mod matmul;
pub mod stage;
mod vector;

pub use attention::{pa_pv, pa_qk, pa_softmax, pa_update};
pub use batch_attention::{pa_pv_batch, pa_qk_batch, pa_softmax_batch, pa_update_batch};
pub use matmul::{matmul, MAX_TILE};
pub use vector::{accumulate, add, add_scalar, mul};

/// The code the [`fail`] kernel reports.
pub const FAIL_CODE: u32 = 0xFA11;

/// Always fails with [`KernelFailure::Code`]`(`[`FAIL_CODE`]`)`, touching nothing: the fault
/// path's test kernel.
pub fn fail(_ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    Err(KernelFailure::Code(FAIL_CODE))
}

/// Does nothing and succeeds: measures dispatch with no kernel work.
pub fn empty(_ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    Ok(())
}

/// Every kernel of this module by name, the table a callable's kernel ids index into.
pub const ALL: &[(&str, KernelFn)] = &[
    ("add", add),
    ("mul", mul),
    ("add_scalar", add_scalar),
    ("matmul", matmul),
    ("accumulate", accumulate),
    ("pa_qk", pa_qk),
    ("pa_softmax", pa_softmax),
    ("pa_pv", pa_pv),
    ("pa_update", pa_update),
    ("pa_qk_batch", pa_qk_batch),
    ("pa_softmax_batch", pa_softmax_batch),
    ("pa_pv_batch", pa_pv_batch),
    ("pa_update_batch", pa_update_batch),
    ("fail", fail),
    ("empty", empty),
];
