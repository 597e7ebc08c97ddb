//! Batched paged attention: the four stages of [`attention`](super::attention) for a chunk of
//! `count` sequences at once, each task handed the whole entry tensors (query, caches, block
//! table, context lengths, output) and finding its sequences' rows itself from scalars, as the
//! reference's `batch_paged_attention` kernels do.
//!
//! Sequence `b` of the chunk is entry sequence `start + b`. A chunk's intermediates hold its
//! sequences back to back: `sij` and `pij` `(count · H, Bs)`, `mij`, `lij`, `mi`, `li`
//! `(count · H)`, `oi_new` and `oi` `(count · H, D)`, with `H` the query tile's heads (the
//! intermediate's rows over `count`). KV block `bn` of sequence `r` is physical block
//! `block_table[r, bn]`; a block past a sequence's context gives it `m = -1e30`, `l = 0` and
//! `p = 0`, so its update leaves the running triple as it was.
//!
//! Every range is checked by the staging helpers: a physical block or row past its tensor is
//! `BadArguments` naming that tensor.

use super::args::{bad, matrix, operand, scalar, scalar_f32, scalar_flag, tensors};
use super::attention::{normalise, Fold};
use super::stage::{carve, load_range, store_range};
use crate::kernel::{KernelCtx, KernelFailure};
use simpler_core::gm::Gm;
use simpler_core::{DataType, TaskTensor};

/// `m` of a block past the sequence: finite, so `exp(m - m')` is 0 rather than NaN.
const NEG_LARGE: f32 = -1e30;

/// Element `index` of int32 tensor `t` (argument `arg`).
fn read_i32(gm: &dyn Gm, t: &TaskTensor, arg: usize, index: u64) -> Result<i32, KernelFailure> {
    if t.dtype() != DataType::Int32 {
        return Err(bad(arg));
    }
    let addr = t.element_addr(index).ok_or(bad(arg))?;
    let mut bytes = [0u8; 4];
    gm.read(addr, &mut bytes)?;
    Ok(i32::from_le_bytes(bytes))
}

/// Scalar `i` as a count or index that fits `usize`.
fn index_scalar(ctx: &KernelCtx<'_>, i: usize) -> Result<usize, KernelFailure> {
    let args = ctx.args;
    usize::try_from(scalar(args, i)?).map_err(|_| bad(args.tensors().len() + i))
}

/// Rows per sequence of an intermediate of `rows` rows over `count` sequences (`count > 0`,
/// dividing `rows`), else `BadArguments` naming argument `arg`.
fn per_sequence(rows: usize, count: usize, arg: usize) -> Result<usize, KernelFailure> {
    if count == 0 || rows % count != 0 {
        return Err(bad(arg));
    }
    Ok(rows / count)
}

/// Physical block of KV block `bn` of entry sequence `row` (argument 2 is the block table).
fn physical_block(
    gm: &dyn Gm,
    table: &TaskTensor,
    row: usize,
    block_num: usize,
    bn: usize,
) -> Result<usize, KernelFailure> {
    let index = row
        .checked_mul(block_num)
        .and_then(|i| i.checked_add(bn))
        .ok_or(bad(2))?;
    let block = read_i32(gm, table, 2, index as u64)?;
    usize::try_from(block).map_err(|_| bad(2))
}

/// `sij = q kᵀ` per sequence (unscaled: `pa_softmax_batch` scales). Tensors: `[query
/// (.., D), key_cache (.., Bs, .., D), block_table int32, sij OUT (count · H, Bs)]`; scalars:
/// `count`, `bn`, `q_offset`, `block_num` (the table's width), `num_heads`, `start`.
pub fn pa_qk_batch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [query, key, table, sij] = tensors::<4>(args)?;
    let (_, d) = matrix(query, 0)?;
    let (_, k_d) = matrix(key, 1)?;
    let (rows, bs) = matrix(sij, 3)?;
    if k_d != d {
        return Err(bad(1));
    }
    let [count, bn, q_offset, block_num, num_heads, start] =
        [0, 1, 2, 3, 4, 5].map(|i| index_scalar(ctx, i));
    let (count, bn, q_offset, block_num, num_heads, start) =
        (count?, bn?, q_offset?, block_num?, num_heads?, start?);
    let h = per_sequence(rows, count, 3)?;
    let [q_buf, k_buf, s_buf] = carve(ctx.local, [h * d, bs * d, h * bs])?;
    for b in 0..count {
        let row = start + b;
        let block = physical_block(ctx.gm, table, row, block_num, bn)?;
        let q_first = (row * num_heads + q_offset) * d;
        load_range(ctx.gm, query, 0, q_first, q_buf)?;
        load_range(ctx.gm, key, 1, block * bs * d, k_buf)?;
        ctx.ops.matmul_bt(q_buf, k_buf, s_buf, d, bs, 1.0);
        store_range(ctx.gm, sij, 3, b * h * bs, s_buf)?;
    }
    Ok(())
}

/// Scaled row softmax numerators per sequence. Tensors: `[sij (count · H, Bs), context_lens
/// int32, pij OUT (count · H, Bs), mij OUT (count · H), lij OUT (count · H)]`; scalars:
/// `scale` (f32 bits), `count`, `bn`, `start`. Sequence `r`'s valid columns are
/// `clamp(context_lens[r] - bn · Bs, 0, Bs)`; with none, the block is masked out entirely.
pub fn pa_softmax_batch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [sij, lens, pij, mij, lij] = tensors::<5>(args)?;
    let (rows, bs) = matrix(sij, 0)?;
    if operand(pij, 2)? != rows * bs || operand(mij, 3)? != rows || operand(lij, 4)? != rows {
        return Err(bad(2));
    }
    let scale = scalar_f32(args, 0)?;
    let count = index_scalar(ctx, 1)?;
    let bn = index_scalar(ctx, 2)?;
    let start = index_scalar(ctx, 3)?;
    let h = per_sequence(rows, count, 0)?;
    let round = pij.dtype() == DataType::Bfloat16;
    let [s_buf, m_buf, l_buf] = carve(ctx.local, [h * bs, h, h])?;
    for b in 0..count {
        let ctx_len = read_i32(ctx.gm, lens, 1, (start + b) as u64)?;
        let begin = (bn * bs) as i64;
        let valid = (ctx_len as i64 - begin).clamp(0, bs as i64) as usize;
        if valid == 0 {
            s_buf.fill(0.0);
            m_buf.fill(NEG_LARGE);
            l_buf.fill(0.0);
        } else {
            load_range(ctx.gm, sij, 0, b * h * bs, s_buf)?;
            ctx.ops.scale(s_buf, scale);
            ctx.ops.softmax_rows(s_buf, m_buf, l_buf, bs, valid, round);
        }
        store_range(ctx.gm, pij, 2, b * h * bs, s_buf)?;
        store_range(ctx.gm, mij, 3, b * h, m_buf)?;
        store_range(ctx.gm, lij, 4, b * h, l_buf)?;
    }
    Ok(())
}

/// `oi_new = p · v` per sequence. Tensors: `[pij (count · H, Bs), value_cache (.., Bs, ..,
/// D), block_table int32, oi_new OUT (count · H, D)]`; scalars: `count`, `bn`, `block_num`,
/// `start`.
pub fn pa_pv_batch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [pij, value, table, oi_new] = tensors::<4>(args)?;
    let (rows, bs) = matrix(pij, 0)?;
    let (_, d) = matrix(value, 1)?;
    let (o_rows, o_d) = matrix(oi_new, 3)?;
    if o_rows != rows || o_d != d {
        return Err(bad(3));
    }
    let count = index_scalar(ctx, 0)?;
    let bn = index_scalar(ctx, 1)?;
    let block_num = index_scalar(ctx, 2)?;
    let start = index_scalar(ctx, 3)?;
    let h = per_sequence(rows, count, 0)?;
    let [p_buf, v_buf, o_buf] = carve(ctx.local, [h * bs, bs * d, h * d])?;
    for b in 0..count {
        let block = physical_block(ctx.gm, table, start + b, block_num, bn)?;
        load_range(ctx.gm, pij, 0, b * h * bs, p_buf)?;
        load_range(ctx.gm, value, 1, block * bs * d, v_buf)?;
        ctx.ops.matmul(p_buf, v_buf, o_buf, bs, d);
        store_range(ctx.gm, oi_new, 3, b * h * d, o_buf)?;
    }
    Ok(())
}

/// Folds each sequence's block into its running triple. Tensors: `[mij, lij (count · H),
/// oi_new (count · H, D), mi INOUT, li INOUT (count · H), oi INOUT (count · H, D), out INOUT
/// (.., D)]`; scalars: `is_first`, `is_last`, `count`, `q_offset`, `num_heads`, `start`.
/// After the last block, sequence `r`'s heads `q_offset..q_offset + H` of `out` get
/// `oi / li`.
pub fn pa_update_batch(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [mij, lij, oi_new, mi, li, oi, out] = tensors::<7>(args)?;
    let rows = operand(mij, 0)?;
    let (o_rows, d) = matrix(oi_new, 2)?;
    if operand(lij, 1)? != rows || o_rows != rows {
        return Err(bad(1));
    }
    if operand(mi, 3)? != rows || operand(li, 4)? != rows || operand(oi, 5)? != rows * d {
        return Err(bad(3));
    }
    operand(out, 6)?;
    let is_first = scalar_flag(args, 0)?;
    let is_last = scalar_flag(args, 1)?;
    let count = index_scalar(ctx, 2)?;
    let q_offset = index_scalar(ctx, 3)?;
    let num_heads = index_scalar(ctx, 4)?;
    let start = index_scalar(ctx, 5)?;
    let h = per_sequence(rows, count, 0)?;
    let [mij_buf, lij_buf, otmp_buf, mi_buf, li_buf, oi_buf] =
        carve(ctx.local, [h, h, h * d, h, h, h * d])?;
    for b in 0..count {
        load_range(ctx.gm, mij, 0, b * h, mij_buf)?;
        load_range(ctx.gm, lij, 1, b * h, lij_buf)?;
        load_range(ctx.gm, oi_new, 2, b * h * d, otmp_buf)?;
        if !is_first {
            load_range(ctx.gm, mi, 3, b * h, mi_buf)?;
            load_range(ctx.gm, li, 4, b * h, li_buf)?;
            load_range(ctx.gm, oi, 5, b * h * d, oi_buf)?;
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
        store_range(ctx.gm, mi, 3, b * h, mi_buf)?;
        store_range(ctx.gm, li, 4, b * h, li_buf)?;
        store_range(ctx.gm, oi, 5, b * h * d, oi_buf)?;
        if is_last {
            normalise(oi_buf, li_buf, d);
            let first = ((start + b) * num_heads + q_offset) * d;
            store_range(ctx.gm, out, 6, first, oi_buf)?;
        }
    }
    Ok(())
}
