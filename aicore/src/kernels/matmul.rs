//! Tiled matrix multiply: `C_b = A_b · B_b` for every batch slice `b`, f32 accumulation.
//!
//! The batch of a tensor is the product of all but its last two dimensions (1 for a matrix), so
//! bgemm's `[1, 1, M, K]` views of its input grids multiply into a `[M, N]` product. One slice
//! of each operand is in the local buffer at a time: `MK + KN + MN` words, 49,152 for
//! 128x128x128. Where the platform lends GM in place ([`tile::lend`]) and a slice's three views
//! are dense f32, the product reads `A` and `B` and writes `C` where they are in GM, with no
//! copy through the local buffer. While a slice is multiplied, the next slice's operands are
//! hinted to the platform ([`Gm::prefetch`]).

use super::args::{bad, operand, tensors};
use super::stage::carve;
use crate::kernel::{KernelCtx, KernelFailure};
use crate::tile;
use crate::tile_ops::TileOps;
use simpler_core::gm::Gm;
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::TaskTensor;

/// Largest `M`, `K` or `N` of one product.
pub const MAX_TILE: usize = 128;

/// `C = A · B` per batch slice. Tensors: `[A (.., M, K), B (.., K, N), C OUT (.., M, N)]`, each
/// f32 or bf16, with equal batch counts (their leading shapes may differ). `M`, `K`, `N` past
/// [`MAX_TILE`] report `TooLarge { elems: that extent, limit: MAX_TILE }`.
pub fn matmul(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let args = ctx.args;
    let [a, b, c] = tensors::<3>(args)?;
    let (batch, m, k) = batched(a, 0)?;
    let (b_batch, b_k, n) = batched(b, 1)?;
    let (c_batch, c_m, c_n) = batched(c, 2)?;
    if b_batch != batch || b_k != k {
        return Err(bad(1));
    }
    if c_batch != batch || c_m != m || c_n != n {
        return Err(bad(2));
    }
    if let Some(&dim) = [m, k, n].iter().find(|&&d| d > MAX_TILE) {
        return Err(KernelFailure::TooLarge {
            elems: dim as u64,
            limit: MAX_TILE as u64,
        });
    }
    let [a_buf, b_buf, c_buf] = carve(ctx.local, [m * k, k * n, m * n])?;
    for slice in 0..batch {
        let (a_s, b_s, c_s) = (
            batch_slice(a, 0, slice)?,
            batch_slice(b, 1, slice)?,
            batch_slice(c, 2, slice)?,
        );
        if slice + 1 < batch {
            // The next slice's operands can move in while this one is multiplied.
            for (t, index) in [(a, 0), (b, 1)] {
                let next = batch_slice(t, index, slice + 1)?;
                ctx.gm
                    .prefetch(next.data_addr(), next.extent_bytes() as usize);
            }
        }
        if in_place(ctx.gm, ctx.ops, [&a_s, &b_s, &c_s], k, n)? {
            continue;
        }
        tile::load_on(ctx.ops, ctx.gm, &a_s, a_buf)?;
        tile::load_on(ctx.ops, ctx.gm, &b_s, b_buf)?;
        ctx.ops.matmul(a_buf, b_buf, c_buf, k, n);
        tile::store_on(ctx.ops, ctx.gm, &c_s, c_buf)?;
    }
    Ok(())
}

/// `c = a · b` on the three views lent in place, if the platform lends all three; `false`
/// (nothing done) when one is not lent, or `c` overlaps an input (staging reads the inputs
/// whole before writing `c`, so that case stays correct there), for the caller to stage them.
fn in_place(
    gm: &dyn Gm,
    ops: &dyn TileOps,
    [a, b, c]: [&TaskTensor; 3],
    k: usize,
    n: usize,
) -> Result<bool, KernelFailure> {
    let (Some(ra), Some(rb), Some(rc)) =
        (tile::dense_f32(a), tile::dense_f32(b), tile::dense_f32(c))
    else {
        return Ok(false);
    };
    if tile::overlap(rc, ra) || tile::overlap(rc, rb) {
        return Ok(false);
    }
    let Some(a) = tile::lend(gm, a).transpose()? else {
        return Ok(false);
    };
    let Some(b) = tile::lend(gm, b).transpose()? else {
        return Ok(false);
    };
    let Some(mut c) = tile::lend_mut(gm, c).transpose()? else {
        return Ok(false);
    };
    ops.matmul(&a, &b, &mut c, k, n);
    Ok(true)
}

/// Checks tensor `index` and reads it as `(batch, rows, cols)`: its last two extents and the
/// product of the others. A tensor of rank below 2 is refused.
fn batched(t: &TaskTensor, index: usize) -> Result<(usize, usize, usize), KernelFailure> {
    let numel = operand(t, index)?;
    match *t.shapes() {
        [.., rows, cols] => {
            let (rows, cols) = (rows as usize, cols as usize);
            // Every shape is non-zero, so the division is exact and safe.
            Ok((numel / (rows * cols), rows, cols))
        }
        _ => Err(bad(index)),
    }
}

/// The view of batch slice `slice` (row-major over the leading dimensions) of tensor `index`.
fn batch_slice(t: &TaskTensor, index: usize, slice: usize) -> Result<TaskTensor, KernelFailure> {
    let shapes = t.shapes();
    let rank = shapes.len();
    if rank <= 2 {
        return Ok(*t);
    }
    let mut view_shapes = [0u32; MAX_TENSOR_DIMS];
    let mut offsets = [0u32; MAX_TENSOR_DIMS];
    view_shapes[..rank].copy_from_slice(shapes);
    let mut rest = slice;
    for d in (0..rank - 2).rev() {
        let extent = (shapes[d] as usize).max(1);
        offsets[d] = (rest % extent) as u32;
        view_shapes[d] = 1;
        rest /= extent;
    }
    t.view(&view_shapes[..rank], &offsets[..rank])
        .map_err(|_| bad(index))
}
