//! Elementwise kernels over tensors of equal element count, in row-major element order.
//!
//! Operands stream through the local buffer in chunks (halves of it for two inputs, all of it
//! for one), so a tensor of any size runs; a 128x128 tile or a 16,384-element vector is one
//! chunk with a 64 Ki-word buffer. An output may alias an input exactly: each chunk is loaded
//! whole before it is stored.

use super::args::{bad, operand, operand_of, scalar_f32, tensors};
use super::stage::{load_range, store_range};
use crate::kernel::{KernelCtx, KernelFailure};
use crate::tile;
use crate::tile_ops::TileOps;
use simpler_core::TaskTensor;

/// `c = a + b`. Tensors: `[a, b, c OUT]`, equal element counts, f32 or bf16 each.
pub fn add(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [a, b, c] = tensors::<3>(args)?;
    binary(ctx, [a, b], (c, 2), |ops, x, y| ops.add(x, y))
}

/// `c = a * b`. Tensors: `[a, b, c OUT]`, equal element counts, f32 or bf16 each.
pub fn mul(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [a, b, c] = tensors::<3>(args)?;
    binary(ctx, [a, b], (c, 2), |ops, x, y| ops.mul(x, y))
}

/// `c = a + s`. Tensors: `[a, c OUT]`, equal element counts; scalar 0 holds `s` as f32 bits in
/// its low 32 bits.
pub fn add_scalar(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [a, c] = tensors::<2>(args)?;
    let n = operand(a, 0)?;
    operand_of(c, 1, n)?;
    let s = scalar_f32(args, 0)?;
    let chunk = ctx.local.len();
    if chunk == 0 {
        return Err(too_large(n, chunk));
    }
    let mut lo = 0;
    while lo < n {
        let x = &mut ctx.local[..(n - lo).min(chunk)];
        load_range(ctx.gm, a, 0, lo, x)?;
        ctx.ops.add_scalar(x, s);
        store_range(ctx.gm, c, 1, lo, x)?;
        lo += x.len();
    }
    Ok(())
}

/// `c += p`. Tensors: `[p, c INOUT]` of the same shape, where leading size-1 dimensions do not
/// count (bgemm adds a `[M, N]` product into a `[1, M, N]` view of its output).
pub fn accumulate(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [p, c] = tensors::<2>(args)?;
    operand(p, 0)?;
    operand(c, 1)?;
    if squeeze(p.shapes()) != squeeze(c.shapes()) {
        return Err(bad(1));
    }
    if accumulate_in_place(ctx, p, c)? {
        return Ok(());
    }
    binary(ctx, [p, c], (c, 1), |ops, x, y| ops.add(x, y))
}

/// `c += p` on both views lent in place (f32 addition commutes, so this is the staged
/// `p + c` bit for bit), if the platform lends both and they do not overlap; `false` (nothing
/// done) otherwise, for the caller to stage them.
fn accumulate_in_place(
    ctx: &KernelCtx<'_>,
    p: &TaskTensor,
    c: &TaskTensor,
) -> Result<bool, KernelFailure> {
    let (Some(rp), Some(rc)) = (tile::dense_f32(p), tile::dense_f32(c)) else {
        return Ok(false);
    };
    if tile::overlap(rp, rc) {
        return Ok(false);
    }
    let Some(p) = tile::lend(ctx.gm, p).transpose()? else {
        return Ok(false);
    };
    let Some(mut c) = tile::lend_mut(ctx.gm, c).transpose()? else {
        return Ok(false);
    };
    ctx.ops.add(&mut c, &p);
    Ok(true)
}

/// `out = op(x, y)` over equal-count inputs `[x, y]` (tensors 0 and 1), `op` updating a chunk
/// of `x` in place with the platform's tile operations; `out` is tensor `out_index`.
fn binary(
    ctx: &mut KernelCtx<'_>,
    [x, y]: [&TaskTensor; 2],
    (out, out_index): (&TaskTensor, usize),
    op: fn(&dyn TileOps, &mut [f32], &[f32]),
) -> Result<(), KernelFailure> {
    let n = operand(x, 0)?;
    operand_of(y, 1, n)?;
    operand_of(out, out_index, n)?;
    let half = ctx.local.len() / 2;
    let (xs, ys) = ctx.local.split_at_mut(half);
    if half == 0 {
        return Err(too_large(n, ctx.local.len()));
    }
    let mut lo = 0;
    while lo < n {
        let len = (n - lo).min(half);
        // `len` is at most `half`, the length of `xs` and at most that of `ys`.
        let (Some(xs), Some(ys)) = (xs.get_mut(..len), ys.get_mut(..len)) else {
            return Err(too_large(n, half));
        };
        load_range(ctx.gm, x, 0, lo, xs)?;
        load_range(ctx.gm, y, 1, lo, ys)?;
        op(ctx.ops, xs, ys);
        store_range(ctx.gm, out, out_index, lo, xs)?;
        lo += len;
    }
    Ok(())
}

/// `shapes` without its leading size-1 dimensions (the innermost always stays).
fn squeeze(shapes: &[u32]) -> &[u32] {
    let lead = shapes.iter().take_while(|&&s| s == 1).count();
    shapes
        .get(lead.min(shapes.len().saturating_sub(1))..)
        .unwrap_or(shapes)
}

fn too_large(elems: usize, limit: usize) -> KernelFailure {
    KernelFailure::TooLarge {
        elems: elems as u64,
        limit: limit as u64,
    }
}
