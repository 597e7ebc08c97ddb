//! The 40 entry tensors of the scene's signature (`ENTRIES`: shape, direction and how each
//! is filled), the index of each in it, and the deterministic fill (`fill`).
//!
//! Its own file because the table is the scene's input side alone: the device orchestration
//! and the golden both index the entry tensors by the constants here, and both see the same
//! filled data.

use super::shapes::*;
use super::{XorShift, EMB_CHUNKS, ROUTED};
use simpler_core::ArgDirection;

/// How an input is filled.
#[derive(Clone, Copy)]
pub(super) enum Init {
    /// Uniform in `[lo, hi)`.
    Uniform(f32, f32),
    /// 0 or 1, evenly.
    Mask,
    /// One 1 per token row across the chunks (a token id in the vocabulary).
    OneHot,
    /// Zero (an output).
    Zero,
}

/// One entry tensor of the signature: rank 4, f32.
pub(super) struct EntrySpec {
    /// `[n0, n1, rows, cols]`.
    pub(super) shape: [u32; 4],
    /// In for the inputs, Out for the outputs the golden checks.
    pub(super) dir: ArgDirection,
    /// How [`fill`] fills it.
    pub(super) init: Init,
}

/// An input of `shape`, filled as `init`.
const fn input(shape: [u32; 4], init: Init) -> EntrySpec {
    EntrySpec {
        shape,
        dir: ArgDirection::In,
        init,
    }
}

/// An output of `shape`, zeroed (the golden checks it).
const fn output(shape: [u32; 4]) -> EntrySpec {
    EntrySpec {
        shape,
        dir: ArgDirection::Out,
        init: Init::Zero,
    }
}

// The fills the weights, caches, gains and routing weights share.
const W: Init = Init::Uniform(-0.1, 0.1);
const KV: Init = Init::Uniform(-0.25, 0.25);
const GAIN: Init = Init::Uniform(0.5, 1.5);
const UNIT: Init = Init::Uniform(0.0, 1.0);

// The entry tensors' indices in the signature (and in `ENTRIES`).
pub(super) const ONEHOT: usize = 0;
pub(super) const EMB: usize = 1;
pub(super) const POS: usize = 2;
pub(super) const G_ATTN: usize = 3;
pub(super) const WQ: usize = 4;
pub(super) const WK: usize = 5;
pub(super) const KC: usize = 6;
pub(super) const MSK: usize = 7;
pub(super) const VCACHE: usize = 8;
pub(super) const WO: usize = 9;
pub(super) const KW: usize = 10;
pub(super) const VW: usize = 11;
pub(super) const GT: usize = 12;
pub(super) const G_FFN: usize = 13;
pub(super) const WR: usize = 14;
pub(super) const WU: usize = 15;
pub(super) const WG: usize = 16;
pub(super) const WD: usize = 17;
pub(super) const RT: usize = 18;
pub(super) const G_FIN: usize = 19;
// The entry tensors' indices in the signature (and in `ENTRIES`).
pub(super) const ONEHOT_NEXT: usize = 20;
pub(super) const EMB_NEXT: usize = 21;
pub(super) const G_MTP: usize = 22;
pub(super) const MWU: usize = 23;
pub(super) const MWG: usize = 24;
pub(super) const MWD: usize = 25;
pub(super) const MRT: usize = 26;
pub(super) const WV: usize = 27;
pub(super) const HS: usize = 28;
pub(super) const MID: usize = 29;
pub(super) const A_OUT: usize = 30;
pub(super) const M_OUT: usize = 31;
pub(super) const KV_OUT: usize = 32;
pub(super) const EO: usize = 33;
pub(super) const H_FIN: usize = 34;
pub(super) const MO: usize = 35;
pub(super) const MTP_OUT: usize = 36;
pub(super) const LG: usize = 37;
pub(super) const ZS: usize = 38;
pub(super) const AGREE: usize = 39;

/// The entry tensors, in signature order (the index constants above).
pub(super) const ENTRIES: [EntrySpec; 40] = [
    // ONEHOT: the step's tokens, one-hot over the embedding's vocabulary chunks
    input([1, EMB_CHUNKS, T, VC], Init::OneHot),
    // EMB: the embedding rows of each chunk
    input([1, EMB_CHUNKS, VC, D], Init::Uniform(-1.0, 1.0)),
    // POS: the positions' embedding
    input([1, 1, T, D], Init::Uniform(-0.5, 0.5)),
    // G_ATTN: the attention norm's gain per layer
    input([L, 1, T, D], GAIN),
    // WQ, WK: per layer and head (HCA layers use head 0's WK only)
    input([L, H, D, E], W),
    input([L, H, D, E], W),
    // KC: compressed keys, transposed (HCA: head 0's, shared)
    input([L, H, E, S], KV),
    // MSK: the sparse selection of the CSA layers
    input([L, H, T, S], Init::Mask),
    // VCACHE: compressed values (HCA: head 0's, shared)
    input([L, H, S, E], KV),
    // WO
    input([L, H, E, D], KV),
    // KW, VW: the HCA layers' window keys (transposed) and values
    input([L, H, E, S], KV),
    input([L, H, S, E], KV),
    // GT: the HCA layers' output gates
    input([L, H, T, E], UNIT),
    // G_FFN: the MoE norm's gain per layer
    input([L, 1, T, D], GAIN),
    // WR: the router
    input([L, 1, D, F], W),
    // WU, WG, WD: per layer the shared expert (0) and the routed ones
    input([L, NX, D, F], W),
    input([L, NX, D, F], W),
    input([L, NX, F, D], W),
    // RT: per layer the routed experts' routing weights
    input([L, ROUTED, T, F], UNIT),
    // G_FIN: the final norm's gain
    input([1, 1, T, D], GAIN),
    // ONEHOT_NEXT, EMB_NEXT: the MTP block's next token and its embedding
    input([1, 1, T, VC], Init::OneHot),
    input([1, 1, VC, D], Init::Uniform(-1.0, 1.0)),
    // G_MTP
    input([1, 1, T, D], GAIN),
    // MWU, MWG, MWD, MRT: the MTP experts, by group
    input([MG, MP, D, F], W),
    input([MG, MP, D, F], W),
    input([MG, MP, F, D], W),
    input([MG, MP, T, F], UNIT),
    // WV: the LM head, by vocabulary group and chunk
    input([NG, K, D, VC], W),
    // HS: the hidden state entering each layer, and the last layer's output
    output([L + 1, 1, T, D]),
    // MID: after each layer's attention
    output([L, 1, T, D]),
    // A_OUT, M_OUT: each layer's attention and MoE outputs
    output([L, 1, T, D]),
    output([L, 1, T, D]),
    // KV_OUT: the new keys (HCA layers write head 0 only)
    output([L, H, T, E]),
    // EO: the MoE combine buffers, one per expert
    output([L, NX, T, D]),
    // H_FIN: after the final norm
    output([1, 1, T, D]),
    // MO: the MTP expert groups' outputs
    output([MG, 1, T, D]),
    // MTP_OUT
    output([1, 1, T, D]),
    // LG: the logits
    output([NG, K, T, VC]),
    // ZS: the sum of the logits' chunks (before bias)
    output([1, 1, T, VC]),
    // AGREE: the draft/main agreement
    output([1, 1, T, VC]),
];

/// The data of entry `spec`, drawn from `rng` (zero for an output).
pub(super) fn fill(rng: &mut XorShift, spec: &EntrySpec) -> Vec<f32> {
    let [n0, n1, r, c] = spec.shape.map(|x| x as usize);
    let n = n0 * n1 * r * c;
    match spec.init {
        Init::Uniform(lo, hi) => (0..n).map(|_| lo + (hi - lo) * rng.unit()).collect(),
        Init::Mask => (0..n).map(|_| (rng.next_u64() >> 63) as f32).collect(),
        Init::Zero => vec![0.0; n],
        Init::OneHot => {
            // [1, chunks, tokens, chunk width]: token t's id picks one chunk and one column.
            let mut v = vec![0.0; n];
            for t in 0..r {
                let id = (rng.next_u64() % (n1 * c) as u64) as usize;
                v[((id / c) * r + t) * c + id % c] = 1.0;
            }
            v
        }
    }
}
