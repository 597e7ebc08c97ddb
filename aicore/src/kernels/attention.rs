//! Paged attention's four stages for one query tile of `H` heads against one KV block of `Bs`
//! tokens, head dimension `D`; the scene runs them per block and chains the blocks with the
//! online-softmax update (Milakov and Gimelshein, "Online normalizer calculation for softmax",
//! 2018; the FlashAttention recurrence):
//!
//! ```text
//!  pa_qk      s   = scale · q kᵀ                      (H, Bs)  f32
//!  pa_softmax m   = rowmax(s),  p = exp(s - m),  l = rowsum(p)   p bf16
//!  pa_pv      o   = p · v                             (H, D)   f32
//!  pa_update  m' = max(mi, m),  oi = e^(mi-m') oi + e^(m-m') o,  li likewise
//!             out = oi / li                           after the last block
//! ```
//!
//! Inputs are bf16 in the scene (f32 is accepted too); all math is f32. A tensor is read as a
//! matrix over its innermost extent, so leading size-1 dimensions (the scene's `[1, H, D]`
//! views) are transparent, and outputs are checked by element count.

use super::args::{
    bad, matrix, operand, operand_of, product, scalar, scalar_f32, scalar_flag, tensors,
};
use super::stage::carve;
use crate::kernel::{KernelCtx, KernelFailure};
use crate::tile;
use crate::tile_ops::TileOps;
use simpler_core::DataType;

/// `s = scale · q kᵀ`. Tensors: `[q (H, D), k (Bs, D), s OUT (H·Bs elements)]`; scalar 0 holds
/// `scale` as f32 bits in its low 32 bits.
pub fn pa_qk(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [q, k, s] = tensors::<3>(args)?;
    let (h, d) = matrix(q, 0)?;
    let (bs, k_d) = matrix(k, 1)?;
    if k_d != d {
        return Err(bad(1));
    }
    operand_of(s, 2, product(h, bs, 2)?)?;
    let scale = scalar_f32(args, 0)?;
    let [q_buf, k_buf, s_buf] = carve(ctx.local, [h * d, bs * d, h * bs])?;
    tile::load_on(ctx.ops, ctx.gm, q, q_buf)?;
    tile::load_on(ctx.ops, ctx.gm, k, k_buf)?;
    ctx.ops.matmul_bt(q_buf, k_buf, s_buf, d, bs, scale);
    tile::store_on(ctx.ops, ctx.gm, s, s_buf)
}

/// Row softmax numerators of one block. Tensors: `[s (H, Bs), p OUT (H·Bs), m OUT (H),
/// l OUT (H)]`; scalar 0 is the number of valid columns `v`, `1..=Bs`.
///
/// `m` is the row max over the valid columns, `p = exp(s - m)` on them and 0 on the masked
/// columns `v..Bs`, and `l` sums the row of `p` as stored: each term is rounded to `p`'s dtype
/// first, so `pa_pv`'s numerator and `l` weight every token identically.
pub fn pa_softmax(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [s, p, m, l] = tensors::<4>(args)?;
    let (h, bs) = matrix(s, 0)?;
    operand_of(p, 1, product(h, bs, 1)?)?;
    operand_of(m, 2, h)?;
    operand_of(l, 3, h)?;
    let valid = scalar(args, 0)?;
    if valid == 0 || valid > bs as u64 {
        return Err(bad(args.tensors().len()));
    }
    let valid = valid as usize;
    let round = p.dtype() == DataType::Bfloat16;
    let [s_buf, m_buf, l_buf] = carve(ctx.local, [h * bs, h, h])?;
    tile::load_on(ctx.ops, ctx.gm, s, s_buf)?;
    ctx.ops.softmax_rows(s_buf, m_buf, l_buf, bs, valid, round);
    tile::store_on(ctx.ops, ctx.gm, p, s_buf)?;
    tile::store_on(ctx.ops, ctx.gm, m, m_buf)?;
    tile::store_on(ctx.ops, ctx.gm, l, l_buf)
}

/// `o = p · v`. Tensors: `[p (H, Bs), v (Bs, D), o OUT (H·D)]`.
pub fn pa_pv(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [p, v, o] = tensors::<3>(args)?;
    let (h, bs) = matrix(p, 0)?;
    let (v_bs, d) = matrix(v, 1)?;
    if v_bs != bs {
        return Err(bad(1));
    }
    operand_of(o, 2, product(h, d, 2)?)?;
    let [p_buf, v_buf, o_buf] = carve(ctx.local, [h * bs, bs * d, h * d])?;
    tile::load_on(ctx.ops, ctx.gm, p, p_buf)?;
    tile::load_on(ctx.ops, ctx.gm, v, v_buf)?;
    ctx.ops.matmul(p_buf, v_buf, o_buf, bs, d);
    tile::store_on(ctx.ops, ctx.gm, o, o_buf)
}

/// The running triple `(mi, li, oi)` and one block's `(mij, lij, otmp)`, on local buffers:
/// `H` rows, `oi` and `otmp` `d` wide.
pub(super) struct Fold<'a> {
    pub(super) mi: &'a mut [f32],
    pub(super) li: &'a mut [f32],
    pub(super) oi: &'a mut [f32],
    pub(super) mij: &'a [f32],
    pub(super) lij: &'a [f32],
    pub(super) otmp: &'a [f32],
    pub(super) d: usize,
}

/// Rows [`Fold::run`] rescales per call of the unit's `exp` (its arguments sit on the stack).
const FOLD_ROWS: usize = 64;

impl Fold<'_> {
    /// Folds the block into the running triple (the first block copies it); the rescaling
    /// factors `e^(mi - m')` and `e^(mij - m')` come from `ops`' `exp`, [`FOLD_ROWS`] rows of
    /// them per call.
    pub(super) fn run(self, ops: &dyn TileOps, is_first: bool) {
        let d = self.d;
        if is_first {
            self.mi.copy_from_slice(self.mij);
            self.li.copy_from_slice(self.lij);
            self.oi.copy_from_slice(self.otmp);
        } else {
            // `max(1)`: the chunk sizes are not zero, which keeps the loops free of panic paths.
            let d = d.max(1);
            let span = (FOLD_ROWS * d).max(1);
            let running = self
                .mi
                .chunks_mut(FOLD_ROWS)
                .zip(self.li.chunks_mut(FOLD_ROWS))
                .zip(self.oi.chunks_mut(span));
            let block = self
                .mij
                .chunks(FOLD_ROWS)
                .zip(self.lij.chunks(FOLD_ROWS))
                .zip(self.otmp.chunks(span));
            for (((m_run, l_run), o_run), ((m_blk, l_blk), o_blk)) in running.zip(block) {
                // The factors' arguments, `mi - m'` and `mij - m'`, exponentiated a chunk at a
                // time.
                let mut alpha = [0.0f32; FOLD_ROWS];
                let mut beta = [0.0f32; FOLD_ROWS];
                let mut rows = 0;
                let maxima = m_run
                    .iter_mut()
                    .zip(m_blk)
                    .zip(alpha.iter_mut().zip(&mut beta));
                for ((m_r, &m_b), (a, b)) in maxima {
                    let m_new = m_r.max(m_b);
                    *a = *m_r - m_new;
                    *b = m_b - m_new;
                    *m_r = m_new;
                    rows += 1;
                }
                for f in [&mut alpha, &mut beta] {
                    if let Some(live) = f.get_mut(..rows) {
                        ops.exp_sub(live, 0.0);
                    }
                }
                let outs = o_run.chunks_exact_mut(d).zip(o_blk.chunks_exact(d));
                let sums = l_run.iter_mut().zip(l_blk);
                let factors = alpha.iter().zip(&beta).take(rows);
                for (((o_r, o_b), (l_r, &l_b)), (&a, &b)) in outs.zip(sums).zip(factors) {
                    *l_r = a * *l_r + b * l_b;
                    for (x, &y) in o_r.iter_mut().zip(o_b) {
                        *x = a * *x + b * y;
                    }
                }
            }
        }
    }
}

/// `oi / li` row by row, in place: the output after the last block.
pub(super) fn normalise(oi: &mut [f32], li: &[f32], d: usize) {
    for (row, &l_run) in oi.chunks_exact_mut(d).zip(li) {
        for x in row.iter_mut() {
            *x /= l_run;
        }
    }
}

/// Folds one block's `(mij, lij, otmp)` into the running `(mi, li, oi)`. Tensors: `[mij (H),
/// lij (H), otmp (H·D), mi INOUT (H), li INOUT (H), oi INOUT (H·D)]`, plus `out OUT (H·D)`
/// exactly when it is the last block; scalar 0 is `is_first`, scalar 1 `is_last` (each 0 or 1).
///
/// The first block copies its triple into the running one; a later block rescales both to the
/// larger max. After the last block `out = oi / li` row by row.
pub fn pa_update(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let all = args.tensors();
    let [mij, lij, otmp, mi, li, oi] = match all {
        [mij, lij, otmp, mi, li, oi, ..] => [mij, lij, otmp, mi, li, oi],
        _ => return Err(bad(all.len())),
    };
    let is_first = scalar_flag(args, 0)?;
    let is_last = scalar_flag(args, 1)?;
    let expected = if is_last { 7 } else { 6 };
    if all.len() != expected {
        return Err(bad(all.len().min(expected)));
    }
    let out = all.get(6);
    let h = operand(mij, 0)?;
    operand_of(lij, 1, h)?;
    let hd = operand(otmp, 2)?;
    if hd % h != 0 {
        return Err(bad(2));
    }
    let d = hd / h;
    operand_of(mi, 3, h)?;
    operand_of(li, 4, h)?;
    operand_of(oi, 5, hd)?;
    if let Some(out) = out {
        operand_of(out, 6, hd)?;
    }
    let [mij_buf, lij_buf, otmp_buf, mi_buf, li_buf, oi_buf] =
        carve(ctx.local, [h, h, hd, h, h, hd])?;
    tile::load_on(ctx.ops, ctx.gm, mij, mij_buf)?;
    tile::load_on(ctx.ops, ctx.gm, lij, lij_buf)?;
    tile::load_on(ctx.ops, ctx.gm, otmp, otmp_buf)?;
    if !is_first {
        tile::load_on(ctx.ops, ctx.gm, mi, mi_buf)?;
        tile::load_on(ctx.ops, ctx.gm, li, li_buf)?;
        tile::load_on(ctx.ops, ctx.gm, oi, oi_buf)?;
    }
    Fold {
        mi: mi_buf,
        li: li_buf,
        oi: oi_buf,
        mij: mij_buf,
        lij: lij_buf,
        otmp: otmp_buf,
        d,
    }
    .run(ctx.ops, is_first);
    tile::store_on(ctx.ops, ctx.gm, mi, mi_buf)?;
    tile::store_on(ctx.ops, ctx.gm, li, li_buf)?;
    tile::store_on(ctx.ops, ctx.gm, oi, oi_buf)?;
    if let Some(out) = out {
        normalise(oi_buf, li_buf, d);
        tile::store_on(ctx.ops, ctx.gm, out, oi_buf)?;
    }
    Ok(())
}
