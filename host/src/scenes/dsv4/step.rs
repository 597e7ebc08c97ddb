//! The decode step: the orchestration of a bind, written once over the op vocabulary
//! (`step`), its device entry point (`orchestrate`), and the fixed boundary array each
//! Graph submission is built in.
//!
//! Its own file because this is the outer level of the scene, the 129 host submissions per
//! bind; what each Graph does is in [`bodies`](super::bodies).

use super::bodies::*;
use super::csa_moe_key;
use super::inputs::*;
use super::ops::{Dev, Math, Ops, R};
use super::shapes::*;
use super::{EMB_CHUNKS, HASH_LAYERS, HEADS, LAYERS, MTP_GROUPS, ROUTED, VOCAB_GROUPS};
use bytemuck::Zeroable;
use simpler_aicpu::{GraphBody, Rt, RtError};
use simpler_core::{DataType, TensorArgType};

/// A boundary being built: a fixed array of the ops' arguments (no host heap on the device
/// side), reused from one Graph submission to the next and handed to [`Ops::graph`] as it is.
/// A push past the capacity is remembered, and the submission refused, rather than dropped or
/// grown.
struct Boundary<O: Ops> {
    items: [O::Arg; MAX_BOUNDARY],
    len: usize,
    overflow: bool,
}

impl<O: Ops> Boundary<O> {
    /// An empty boundary; `fill` only initialises the unused slots.
    fn new(fill: O::T) -> Self {
        Self {
            items: [O::arg(fill, TensorArgType::Input); MAX_BOUNDARY],
            len: 0,
            overflow: false,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.overflow = false;
    }

    #[inline(always)]
    fn push(&mut self, (t, tag): (O::T, TensorArgType)) {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                *slot = O::arg(t, tag);
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }
}

/// [`Ops::graph`] over a built boundary.
fn submit<O: Ops>(
    o: &mut O,
    key: u64,
    body: GraphBody,
    math: Math<O>,
    b: &mut Boundary<O>,
    scalars: &[f32],
) -> R<()> {
    if b.overflow {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    o.graph(key, body, math, &mut b.items[..b.len], scalars)
}

/// The decode step over the entry tensors `e` (see the module documentation).
pub(super) fn step<O: Ops>(o: &mut O, e: &[O::T]) -> R<()> {
    use TensorArgType::{Input as I, OutputExisting as X};
    let mut b = Boundary::new(e[ONEHOT]);
    // embed
    for c in 0..EMB_CHUNKS {
        b.push((o.view(e[ONEHOT], 0, Some(c))?, I));
    }
    for c in 0..EMB_CHUNKS {
        b.push((o.view(e[EMB], 0, Some(c))?, I));
    }
    b.push((o.view(e[POS], 0, Some(0))?, I));
    b.push((o.view(e[HS], 0, Some(0))?, X));
    submit(o, 0, embed_body, embed::<O>, &mut b, &EMB_BIAS)?;

    for l in 0..LAYERS {
        let hs = o.view(e[HS], l, Some(0))?;
        let a_out = o.view(e[A_OUT], l, Some(0))?;
        b.clear();
        b.push((hs, I));
        b.push((o.view(e[G_ATTN], l, Some(0))?, I));
        if l % 2 == 0 {
            for t in [WQ, WK, KC, MSK, VCACHE, WO] {
                for h in 0..HEADS {
                    b.push((o.view(e[t], l, Some(h))?, I));
                }
            }
            for h in 0..HEADS {
                b.push((o.view(e[KV_OUT], l, Some(h))?, X));
            }
            b.push((a_out, X));
            submit(o, 0, attn_csa_body, attn_csa::<O>, &mut b, &CSA_BIAS)?;
        } else {
            for h in 0..HEADS {
                b.push((o.view(e[WQ], l, Some(h))?, I));
            }
            for t in [WK, KC, VCACHE] {
                b.push((o.view(e[t], l, Some(0))?, I));
            }
            for t in [KW, VW, GT, WO] {
                for h in 0..HEADS {
                    b.push((o.view(e[t], l, Some(h))?, I));
                }
            }
            b.push((o.view(e[KV_OUT], l, Some(0))?, X));
            b.push((a_out, X));
            submit(o, 0, attn_hca_body, attn_hca::<O>, &mut b, &HCA_BIAS)?;
        }
        let mid = o.view(e[MID], l, Some(0))?;
        o.add_to(hs, a_out, mid)?;

        let m_out = o.view(e[M_OUT], l, Some(0))?;
        b.clear();
        b.push((mid, I));
        b.push((o.view(e[G_FFN], l, Some(0))?, I));
        b.push((o.view(e[WR], l, Some(0))?, I));
        for t in [WU, WG, WD] {
            for x in 0..NX {
                b.push((o.view(e[t], l, Some(x))?, I));
            }
        }
        for r in 0..ROUTED {
            b.push((o.view(e[RT], l, Some(r))?, I));
        }
        for x in 0..NX {
            b.push((o.view(e[EO], l, Some(x))?, X));
        }
        b.push((m_out, X));
        let hashed = l < HASH_LAYERS;
        if hashed {
            let math = csa_moe::<O, true>;
            submit(
                o,
                csa_moe_key(true),
                csa_moe_hashed_body,
                math,
                &mut b,
                &ROUTER_BIAS,
            )?;
        } else {
            let math = csa_moe::<O, false>;
            submit(
                o,
                csa_moe_key(false),
                csa_moe_learned_body,
                math,
                &mut b,
                &ROUTER_BIAS,
            )?;
        }
        let next = o.view(e[HS], l + 1, Some(0))?;
        o.add_to(mid, m_out, next)?;
    }
    let h_fin = o.view(e[H_FIN], 0, Some(0))?;
    let last = o.view(e[HS], LAYERS, Some(0))?;
    let gain = o.view(e[G_FIN], 0, Some(0))?;
    o.mul_to(last, gain, h_fin)?;

    // mtp
    b.clear();
    b.push((h_fin, I));
    for t in [ONEHOT_NEXT, EMB_NEXT, G_MTP] {
        b.push((o.view(e[t], 0, Some(0))?, I));
    }
    for t in [MWU, MWG, MWD, MRT] {
        for g in 0..MTP_GROUPS {
            b.push((o.view(e[t], g, None)?, I));
        }
    }
    for g in 0..MTP_GROUPS {
        b.push((o.view(e[MO], g, Some(0))?, X));
    }
    let mtp_out = o.view(e[MTP_OUT], 0, Some(0))?;
    b.push((mtp_out, X));
    submit(o, 0, mtp_body, mtp::<O>, &mut b, &[])?;

    // lm_head
    b.clear();
    b.push((h_fin, I));
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[WV], g, None)?, I));
    }
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[LG], g, None)?, X));
    }
    b.push((o.view(e[ZS], 0, Some(0))?, X));
    submit(o, 0, lm_head_body, lm_head::<O>, &mut b, &HEAD_BIAS)?;

    // draft_agree
    b.clear();
    b.push((mtp_out, I));
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[WV], g, None)?, I));
    }
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[LG], g, None)?, I));
    }
    b.push((o.view(e[AGREE], 0, Some(0))?, X));
    submit(o, 0, draft_agree_body, draft_agree::<O>, &mut b, &[])
}

/// The scene's orchestration function: checks the entry tensors against [`ENTRIES`] and runs
/// the step on the device.
// Never inlined: `tests/benches/orch-instructions.sh` counts what runs inside this function.
#[inline(never)]
pub(super) fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let given = rt.args().tensors();
    let ok = given.len() == ENTRIES.len()
        && given
            .iter()
            .zip(&ENTRIES)
            .all(|(t, spec)| t.shapes() == spec.shape && t.dtype() == DataType::Float32);
    if !ok {
        return Err(rt.report_fatal(BAD_ENTRY));
    }
    // A copy (the ops need `rt` mutably), into an array rather than a `Vec`.
    let mut e = [Zeroable::zeroed(); ENTRIES.len()];
    e.copy_from_slice(rt.args().tensors());
    step(&mut Dev { rt }, &e)
}
