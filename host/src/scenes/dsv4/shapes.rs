//! The numbers the other files size things by: short aliases of the model's dimensions, the
//! kernel ids and fatal codes, the per-Definition scalar constants, each body's boundary width
//! and the capacities of the fixed arrays the device side works in.
//!
//! Its own file because every other part reads these, and each capacity is derived from the
//! widths it must hold, so a change to the model's shape changes them in one place.

use super::{
    CHUNKS_PER_GROUP, EMB_CHUNKS, FFN, HEADS, HEAD_DIM, HIDDEN, KV_LEN, LAYERS, MTP_ALLOC,
    MTP_EXPERTS, MTP_GROUPS, ROUTED, TOKENS, VOCAB_CHUNK, VOCAB_GROUPS,
};

// Kernel ids (the order of `Prepared::kernels`).
/// `kernels::add`: `c = a + b`.
pub(super) const ADD: u32 = 0;
/// `kernels::mul`: `c = a * b`, elementwise.
pub(super) const MUL: u32 = 1;
/// `kernels::add_scalar`: `c = a + s`.
pub(super) const ADD_SCALAR: u32 = 2;
/// `kernels::matmul`: `c = a · b` (on an AIC core).
pub(super) const MATMUL: u32 = 3;
/// `kernels::accumulate`: `c += p`.
pub(super) const ACCUMULATE: u32 = 4;

// Fatal codes, what `RtError::Fatal` carries when the orchestration refuses its input.
/// The entry tensors are not the 40 of [`ENTRIES`](super::inputs::ENTRIES) (count, shape or
/// dtype).
pub(super) const BAD_ENTRY: u32 = 1;
/// A view or slice out of its tensor's range, or of a tensor of the wrong rank.
pub(super) const BAD_VIEW: u32 = 2;
/// A boundary, scalar list or sum wider or narrower than its body takes.
pub(super) const BAD_BOUNDARY: u32 = 3;
/// Operands whose shapes do not fit the op.
pub(super) const BAD_SHAPE: u32 = 4;

// The per-Definition scalar constants (static Definition data, the same every invocation).
/// `embed`'s bias, added to `HS[0]`.
pub(super) const EMB_BIAS: [f32; 1] = [0.125];
/// `attn_csa`'s per-head score bias.
pub(super) const CSA_BIAS: [f32; 4] = [0.0625, -0.03125, 0.09375, -0.0625];
/// `attn_hca`'s window score bias.
pub(super) const HCA_BIAS: [f32; 1] = [-0.046875];
/// `csa_moe`'s router bias.
pub(super) const ROUTER_BIAS: [f32; 1] = [0.25];
/// `lm_head`'s logit biases, round robin over the chunks.
pub(super) const HEAD_BIAS: [f32; 12] = [
    0.5, -0.25, 0.125, -0.0625, 0.375, -0.5, 0.25, 0.0, -0.125, 0.0625, -0.375, 0.1875,
];

// Short names of the model's dimensions, for the shapes of the entry table and the bodies.
pub(super) const T: u32 = TOKENS;
pub(super) const D: u32 = HIDDEN;
pub(super) const E: u32 = HEAD_DIM;
pub(super) const S: u32 = KV_LEN;
pub(super) const F: u32 = FFN;
pub(super) const L: u32 = LAYERS;
pub(super) const H: u32 = HEADS;
pub(super) const VC: u32 = VOCAB_CHUNK;

/// Experts of a layer's MoE: the shared one and the routed ones.
pub(super) const NX: u32 = ROUTED + 1;
pub(super) const MG: u32 = MTP_GROUPS;
pub(super) const MP: u32 = MTP_EXPERTS;
pub(super) const NG: u32 = VOCAB_GROUPS;
pub(super) const K: u32 = CHUNKS_PER_GROUP;

// Each body's boundary: tensors (its scalars are the lengths of the constants above).
pub(super) const EMBED_TENSORS: usize = 2 * EMB_CHUNKS as usize + 2;
pub(super) const CSA_TENSORS: usize = 3 + 7 * H as usize;
pub(super) const HCA_TENSORS: usize = 7 + 5 * H as usize;
pub(super) const MOE_TENSORS: usize = 4 + 4 * NX as usize + ROUTED as usize;
pub(super) const MTP_TENSORS: usize = 5 + 5 * MG as usize;
pub(super) const HEAD_TENSORS: usize = 2 + 2 * NG as usize;

/// The largest of `xs` (a `const` context has no `Iterator::max`).
const fn max_of(xs: &[usize]) -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < xs.len() {
        if xs[i] > m {
            m = xs[i];
        }
        i += 1;
    }
    m
}

// The capacities of the fixed arrays the runtime side works in, so that a warm bind
// allocates nothing on the host heap: every boundary, scalar list, sum and allocation task
// of the scene fits them by construction, and one that would not is a fatal error, not a
// growth.

/// The widest boundary (`embed`'s 48 tensors).
pub(super) const MAX_BOUNDARY: usize = max_of(&[
    EMBED_TENSORS,
    CSA_TENSORS,
    HCA_TENSORS,
    MOE_TENSORS,
    MTP_TENSORS,
    HEAD_TENSORS,
]);
/// The most scalars of a body (`lm_head`'s 12).
pub(super) const MAX_SCALARS: usize = max_of(&[
    EMB_BIAS.len(),
    CSA_BIAS.len(),
    HCA_BIAS.len(),
    ROUTER_BIAS.len(),
    HEAD_BIAS.len(),
]);
/// The widest sum tree (`lm_head`'s and `draft_agree`'s 120 chunks).
pub(super) const MAX_SUM: usize = max_of(&[
    H as usize,
    NX as usize,
    MP as usize,
    MG as usize,
    (NG * K) as usize,
]);
/// The most tensors of one allocation task (the per-task cap the MTP block uses).
pub(super) const MAX_ALLOC: usize = MTP_ALLOC as usize;
