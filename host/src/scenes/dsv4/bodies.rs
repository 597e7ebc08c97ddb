//! The eight Graph bodies (their arithmetic over the op vocabulary, and the device entry point
//! of each that reads its boundary from the run's arguments), with the helpers they share: the
//! width check, the pairwise sum tree and the expert.
//!
//! Its own file because a body is recorded once into a Definition and replayed: what is here
//! is the structure of the eight Definitions, written once for the device and the golden.

use super::ops::{Dev, Ops, R};
use super::shapes::*;
use super::{EMB_CHUNKS, HEADS, HIDDEN, MTP_EXPERTS, MTP_GROUPS, ROUTED, TOKENS, VOCAB_GROUPS};
use bytemuck::Zeroable;
use simpler_aicpu::{Rt, RtError};
use simpler_core::TaskTensor;

/// Checks a body's boundary widths.
fn widths<O: Ops>(o: &mut O, b: &[O::T], s: &[f32], tensors: usize, scalars: usize) -> R<()> {
    if b.len() != tensors || s.len() != scalars {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    Ok(())
}

/// `out = Σ xs` by a pairwise tree, level by level (an odd one out moves up a level): one
/// add per input but one, the last one into `out`.
fn sum_tree<O: Ops>(o: &mut O, xs: &[O::T], out: O::T) -> R<()> {
    let mut n = xs.len();
    if !(2..=MAX_SUM).contains(&n) {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    // One fixed array, each level written over the front of the one before: entry `i` of
    // the next level reads entries `2i` and `2i + 1`, never one already overwritten.
    let mut level = [xs[0]; MAX_SUM];
    level[..n].copy_from_slice(xs);
    while n > 2 {
        let mut next = 0;
        for i in (0..n).step_by(2) {
            level[next] = if i + 1 < n {
                o.add(level[i], level[i + 1])?
            } else {
                level[i]
            };
            next += 1;
        }
        n = next;
    }
    o.add_to(level[0], level[1], out)
}

/// A body's boundary and scalars, copied out of its entry arguments into fixed arrays: the
/// body needs the runtime mutably while it reads them, and a copy into a `Vec` would
/// allocate on every run of the body.
struct BodyArgs {
    tensors: [TaskTensor; MAX_BOUNDARY],
    scalars: [f32; MAX_SCALARS],
    n: usize,
    m: usize,
}

impl BodyArgs {
    fn tensors(&self) -> &[TaskTensor] {
        &self.tensors[..self.n]
    }

    fn scalars(&self) -> &[f32] {
        &self.scalars[..self.m]
    }
}

/// The boundary and scalars of a body's run, as its entry arguments; wider than any body's
/// is fatal (no body would accept it).
fn entry(rt: &mut Rt<'_, '_>) -> R<BodyArgs> {
    let (n, m) = (rt.args().tensors().len(), rt.args().scalars().len());
    if n > MAX_BOUNDARY || m > MAX_SCALARS {
        return Err(rt.report_fatal(BAD_BOUNDARY));
    }
    let mut a = BodyArgs {
        tensors: [Zeroable::zeroed(); MAX_BOUNDARY],
        scalars: [0.0; MAX_SCALARS],
        n,
        m,
    };
    let args = rt.args();
    a.tensors[..n].copy_from_slice(args.tensors());
    for (s, &v) in a.scalars.iter_mut().zip(args.scalars()) {
        *s = f32::from_bits(v as u32);
    }
    Ok(a)
}

/// `embed` (48 tensors: the token one-hots and embedding rows of 23 vocabulary chunks, the
/// positions; writes `HS[0]`): `HS[0] = Σ_c onehot_c · emb_c + pos + bias`, the chunk
/// products summed by an `accumulate` chain. 47 nodes.
pub(super) fn embed<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let c = EMB_CHUNKS as usize;
    widths(o, b, s, EMBED_TENSORS, EMB_BIAS.len())?;
    let mut parts = [b[0]; EMB_CHUNKS as usize];
    for (i, p) in parts.iter_mut().enumerate() {
        *p = o.mm(b[i], b[c + i])?;
    }
    let acc = o.add(parts[0], parts[1])?;
    for &p in &parts[2..] {
        o.acc(p, acc)?;
    }
    let x = o.add(acc, b[2 * c])?;
    o.adds_to(x, s[0], b[2 * c + 1])
}

pub(super) fn embed_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    embed(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `attn_csa` (31 tensors: `x = HS[l]`, its gain, per head `Wq`, `Wk`, the compressed keys
/// (transposed), the sparse selection mask, the compressed values, `Wo`; writes the new key
/// per head and `A_OUT[l]`): per head `y_h = (((xn·Wq)·Kc + bias_h) ⊙ mask)·Vc·Wo` and
/// `key_h = xn·Wk`, `A_OUT = Σ_h y_h`. 32 nodes.
pub(super) fn attn_csa<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let h = HEADS as usize;
    widths(o, b, s, CSA_TENSORS, CSA_BIAS.len())?;
    let xn = o.mul(b[0], b[1])?;
    let mut ys = [xn; HEADS as usize];
    for (i, y) in ys.iter_mut().enumerate() {
        let q = o.mm(xn, b[2 + i])?;
        o.mm_to(xn, b[2 + h + i], b[2 + 6 * h + i])?;
        let sc = o.mm(q, b[2 + 2 * h + i])?;
        let sc = o.adds(sc, s[i])?;
        let p = o.mul(sc, b[2 + 3 * h + i])?;
        let a = o.mm(p, b[2 + 4 * h + i])?;
        *y = o.mm(a, b[2 + 5 * h + i])?;
    }
    sum_tree(o, &ys, b[2 + 7 * h])
}

pub(super) fn attn_csa_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    attn_csa(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `attn_hca` (27 tensors: `x = HS[l]`, its gain, per head `Wq`, one shared `Wk`, shared
/// compressed keys and values, per head window keys and values, an output gate and `Wo`;
/// writes the shared new key and `A_OUT[l]`): per head
/// `y_h = ((q·Kc)·Vc + ((q·Kw) + bias)·Vw) ⊙ gate_h · Wo_h`, `A_OUT = Σ_h y_h`. 41 nodes.
pub(super) fn attn_hca<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let h = HEADS as usize;
    widths(o, b, s, HCA_TENSORS, HCA_BIAS.len())?;
    let (wk, kc, vc) = (b[2 + h], b[3 + h], b[4 + h]);
    let xn = o.mul(b[0], b[1])?;
    o.mm_to(xn, wk, b[5 + 5 * h])?;
    let mut ys = [xn; HEADS as usize];
    for (i, y) in ys.iter_mut().enumerate() {
        let q = o.mm(xn, b[2 + i])?;
        let sc = o.mm(q, kc)?;
        let sw = o.mm(q, b[5 + h + i])?;
        let sw = o.adds(sw, s[0])?;
        let oc = o.mm(sc, vc)?;
        let ow = o.mm(sw, b[5 + 2 * h + i])?;
        let a = o.add(oc, ow)?;
        let a = o.mul(a, b[5 + 3 * h + i])?;
        *y = o.mm(a, b[5 + 4 * h + i])?;
    }
    sum_tree(o, &ys, b[6 + 5 * h])
}

pub(super) fn attn_hca_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    attn_hca(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// One expert: `out = ((xn·Wu) ⊙ (xn·Wg) [⊙ route]) · Wd`. 4 nodes, 5 with a route.
fn expert<O: Ops>(o: &mut O, xn: O::T, w: [O::T; 3], route: Option<O::T>, out: O::T) -> R<()> {
    let u = o.mm(xn, w[0])?;
    let v = o.mm(xn, w[1])?;
    let mut h = o.mul(u, v)?;
    if let Some(r) = route {
        h = o.mul(h, r)?;
    }
    o.mm_to(h, w[2], out)
}

/// `csa_moe` (28 tensors: `x = MID[l]`, its gain, the router, per expert (shared + 4 routed)
/// `Wu`, `Wg`, `Wd`, per routed expert its routing weights; writes every expert's output into
/// its combine buffer `EO[l, e]` and `M_OUT[l]`): `M_OUT = Σ_e EO[l, e]`.
///
/// `HASHED`: the routed experts take the hash routing's fixed weights as they are, and the
/// learned gate `xn·Wr + bias` scales the shared expert (32 nodes). Otherwise each routed
/// expert's weights are the learned gate masked by its routing weights, and the shared expert
/// is ungated (35 nodes).
pub(super) fn csa_moe<O: Ops, const HASHED: bool>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let (nx, r) = (NX as usize, ROUTED as usize);
    widths(o, b, s, MOE_TENSORS, ROUTER_BIAS.len())?;
    let xn = o.mul(b[0], b[1])?;
    let gate = o.mm(xn, b[2])?;
    let gate = o.adds(gate, s[0])?;
    let w = |e: usize| [b[3 + e], b[3 + nx + e], b[3 + 2 * nx + e]];
    let eo = |e: usize| b[3 + 3 * nx + r + e];
    let shared_route = HASHED.then_some(gate);
    expert(o, xn, w(0), shared_route, eo(0))?;
    for e in 1..nx {
        let weights = b[3 + 3 * nx + e - 1];
        let route = if HASHED {
            weights
        } else {
            o.mul(gate, weights)?
        };
        expert(o, xn, w(e), Some(route), eo(e))?;
    }
    let outs: [O::T; NX as usize] = std::array::from_fn(eo);
    sum_tree(o, &outs, b[3 + 4 * nx + r])
}

pub(super) fn csa_moe_hashed_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    csa_moe::<_, true>(&mut Dev { rt }, a.tensors(), a.scalars())
}

pub(super) fn csa_moe_learned_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    csa_moe::<_, false>(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `mtp` (45 tensors: `H_FIN`, the next token's one-hot and embedding, a gain, per expert
/// group its `Wu`, `Wg`, `Wd` and routing weights as `[1, 16, ..]` rows; writes the group
/// outputs `MO[g]` and `MTP_OUT`): `xn = (H_FIN + onehot·emb) ⊙ gain`; 128 routed experts
/// whose outputs land in four allocation tasks of 32 tensors; `MO[g] = Σ` of the group's 16,
/// `MTP_OUT = Σ_g MO[g]`. 774 nodes.
pub(super) fn mtp<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let (g, p) = (MTP_GROUPS as usize, MTP_EXPERTS as usize);
    widths(o, b, s, MTP_TENSORS, 0)?;
    let en = o.mm(b[1], b[2])?;
    let x = o.add(b[0], en)?;
    let xn = o.mul(x, b[3])?;
    let mut ds = [xn; (MG * MP) as usize];
    for chunk in ds.chunks_mut(MAX_ALLOC) {
        o.alloc(TOKENS, HIDDEN, chunk)?;
    }
    for gi in 0..g {
        for pi in 0..p {
            let k = pi as u32;
            let w = [
                o.slice(b[4 + gi], k)?,
                o.slice(b[4 + g + gi], k)?,
                o.slice(b[4 + 2 * g + gi], k)?,
            ];
            let route = o.slice(b[4 + 3 * g + gi], k)?;
            expert(o, xn, w, Some(route), ds[gi * p + pi])?;
        }
        sum_tree(o, &ds[gi * p..(gi + 1) * p], b[4 + 4 * g + gi])?;
    }
    let groups: [O::T; MG as usize] = std::array::from_fn(|gi| b[4 + 4 * g + gi]);
    sum_tree(o, &groups, b[4 + 5 * g])
}

pub(super) fn mtp_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    mtp(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `lm_head` (42 tensors: `H_FIN`, per vocabulary group its `[1, 6, 64, 64]` weight row;
/// writes per group its `[1, 6, 16, 64]` logits row and `ZS`): per chunk `z = H_FIN · W`,
/// `logits = z + bias` (twelve biases, round robin), `ZS = Σ z`. 359 nodes.
pub(super) fn lm_head<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let g = VOCAB_GROUPS as usize;
    widths(o, b, s, HEAD_TENSORS, HEAD_BIAS.len())?;
    // Chunk `n` is chunk `n % K` of group `n / K`, group by group.
    let mut zs = [b[0]; (NG * K) as usize];
    for (n, z) in zs.iter_mut().enumerate() {
        let (gi, k) = (n / K as usize, (n % K as usize) as u32);
        let w = o.slice(b[1 + gi], k)?;
        *z = o.mm(b[0], w)?;
        let logits = o.slice(b[1 + g + gi], k)?;
        o.adds_to(*z, s[n % s.len()], logits)?;
    }
    sum_tree(o, &zs, b[1 + 2 * g])
}

pub(super) fn lm_head_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    lm_head(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `draft_agree` (42 tensors: `MTP_OUT`, the LM head's weight rows and the logits it wrote;
/// writes `AGREE`): per chunk the draft logits `MTP_OUT · W` times the main logits,
/// `AGREE = Σ` over the chunks. 359 nodes.
pub(super) fn draft_agree<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let g = VOCAB_GROUPS as usize;
    widths(o, b, s, HEAD_TENSORS, 0)?;
    // Chunk `n` is chunk `n % K` of group `n / K`, group by group, as in `lm_head`.
    let mut ps = [b[0]; (NG * K) as usize];
    for (n, p) in ps.iter_mut().enumerate() {
        let (gi, k) = (n / K as usize, (n % K as usize) as u32);
        let w = o.slice(b[1 + gi], k)?;
        let draft = o.mm(b[0], w)?;
        let main = o.slice(b[1 + g + gi], k)?;
        *p = o.mul(draft, main)?;
    }
    sum_tree(o, &ps, b[1 + 2 * g])
}

pub(super) fn draft_agree_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    draft_agree(&mut Dev { rt }, a.tensors(), a.scalars())
}
