//! Staging tensors through the core's local buffer: carving it into one buffer per operand, and
//! moving an element range of a tensor (in row-major element order) between GM and a buffer,
//! so a tensor larger than the buffer streams through it in chunks.
//!
//! A range of a tensor's row-major elements is not one strided view in general, but it is a
//! short sequence of views: `for_each_view` covers `[lo, hi)` greedily, each time with the
//! outermost dimension whose step the current position is aligned to, so a range of whole
//! rows is one view and any range needs at most `2 * rank - 1`.

use super::args::{bad, operand};
use crate::kernel::KernelFailure;
use crate::tile;
use simpler_core::gm::Gm;
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::TaskTensor;

/// Splits the front of `local` into `N` buffers of `sizes`, or reports `TooLarge` with their
/// total.
pub fn carve<const N: usize>(
    local: &mut [f32],
    sizes: [usize; N],
) -> Result<[&mut [f32]; N], KernelFailure> {
    let need = sizes.iter().try_fold(0usize, |sum, &s| sum.checked_add(s));
    match need {
        Some(need) if need <= local.len() => {}
        _ => {
            return Err(KernelFailure::TooLarge {
                elems: need.map_or(u64::MAX, |n| n as u64),
                limit: local.len() as u64,
            })
        }
    }
    let mut rest = local;
    // The total fits, so every split is in range.
    Ok(sizes.map(|s| {
        let (head, tail) = core::mem::take(&mut rest).split_at_mut(s);
        rest = tail;
        head
    }))
}

/// Loads elements `[first, first + dst.len())` of tensor `index` into `dst`.
pub fn load_range(
    gm: &dyn Gm,
    t: &TaskTensor,
    index: usize,
    first: usize,
    dst: &mut [f32],
) -> Result<(), KernelFailure> {
    let end = first.checked_add(dst.len()).ok_or(bad(index))?;
    for_each_view(t, index, first, end, |view, at| {
        let to = dst.get_mut(at..).ok_or(bad(index))?;
        tile::load(gm, view, to).map(drop)
    })
}

/// Stores `src` into elements `[first, first + src.len())` of tensor `index`.
pub fn store_range(
    gm: &dyn Gm,
    t: &TaskTensor,
    index: usize,
    first: usize,
    src: &[f32],
) -> Result<(), KernelFailure> {
    let end = first.checked_add(src.len()).ok_or(bad(index))?;
    for_each_view(t, index, first, end, |view, at| {
        let from = src.get(at..).ok_or(bad(index))?;
        tile::store(gm, view, from)
    })
}

/// Calls `f(view, at)` for views of `t` that together cover its row-major elements `[lo, hi)`
/// in order; `at` is the view's first element counted from `lo`.
fn for_each_view(
    t: &TaskTensor,
    index: usize,
    lo: usize,
    hi: usize,
    mut f: impl FnMut(&TaskTensor, usize) -> Result<(), KernelFailure>,
) -> Result<(), KernelFailure> {
    if hi > operand(t, index)? {
        return Err(bad(index));
    }
    let shapes = t.shapes();
    let rank = shapes.len();
    // step[d]: elements one index of dimension d advances (the product of the inner shapes).
    // Every shape is non-zero and their product fits usize (checked above), so each step is
    // at least 1 and no product overflows.
    let mut step_store = [1usize; MAX_TENSOR_DIMS];
    let steps = step_store.get_mut(..rank).ok_or(bad(index))?;
    let mut inner = 1usize;
    for (st, &shape) in steps.iter_mut().zip(shapes).rev() {
        *st = inner;
        inner = inner.saturating_mul(shape as usize);
    }
    let steps: &[usize] = steps;
    let mut pos = lo;
    while pos < hi {
        let left = hi - pos;
        // The outermost dimension whose step `pos` is aligned to and the range still holds;
        // the innermost (step 1) always qualifies.
        let d = steps
            .iter()
            .position(|&st| st != 0 && pos % st == 0 && st <= left)
            .unwrap_or(rank.saturating_sub(1));
        let (Some(&st), Some(&extent)) = (steps.get(d), shapes.get(d)) else {
            return Err(bad(index));
        };
        let extent = extent as usize;
        if st == 0 || extent == 0 {
            return Err(bad(index));
        }
        let at = (pos / st) % extent;
        let count = (left / st).min(extent - at);
        if count == 0 {
            return Err(bad(index));
        }
        let mut view_shapes = [0u32; MAX_TENSOR_DIMS];
        let mut view_offsets = [0u32; MAX_TENSOR_DIMS];
        let dims = view_shapes.iter_mut().zip(view_offsets.iter_mut());
        for (e, ((vs, vo), (&shape, &st_e))) in dims.zip(shapes.iter().zip(steps)).enumerate() {
            (*vs, *vo) = if e < d {
                // `st_e` and `shape` are non-zero (checked by `operand`).
                (1, ((pos / st_e.max(1)) % (shape as usize).max(1)) as u32)
            } else if e == d {
                (count as u32, at as u32)
            } else {
                (shape, 0)
            };
        }
        let (Some(vs), Some(vo)) = (view_shapes.get(..rank), view_offsets.get(..rank)) else {
            return Err(bad(index));
        };
        let view = t.view(vs, vo).map_err(|_| bad(index))?;
        f(&view, pos - lo)?;
        pos += count * st;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_core::{AddressSpace, BufferHandle, DataType};

    #[test]
    fn views_tile_every_range_in_order_and_stay_few() {
        // Dense, so a view's start offset is its first element's row-major position.
        let t = TaskTensor::new(
            BufferHandle {
                addr: 0x1000,
                size: 3 * 4 * 5 * 4,
            },
            0,
            &[3, 4, 5],
            &[20, 5, 1],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap();
        for lo in 0..60 {
            for hi in lo + 1..=60 {
                let (mut next, mut views) = (lo, 0);
                for_each_view(&t, 0, lo, hi, |view, at| {
                    assert_eq!(lo + at, next, "[{lo}, {hi}): gap or overlap");
                    assert_eq!(view.start_offset(), next as u64, "[{lo}, {hi})");
                    next += view.numel() as usize;
                    views += 1;
                    Ok(())
                })
                .unwrap();
                assert_eq!(next, hi, "[{lo}, {hi}): not covered");
                // At most 2 * rank - 1 views for rank 3.
                assert!(views <= 5, "[{lo}, {hi}): {views} views");
            }
        }
        // Whole rows are one view; a range past the end is refused.
        let mut views = 0;
        for_each_view(&t, 0, 20, 60, |_, _| {
            views += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(views, 1);
        assert_eq!(
            for_each_view(&t, 4, 0, 61, |_, _| Ok(())),
            Err(KernelFailure::BadArguments { index: 4 })
        );
    }

    #[test]
    fn carve_splits_exactly_or_reports_the_total() {
        let mut local = [0.0f32; 10];
        let [a, b, c] = carve(&mut local, [3, 0, 7]).unwrap();
        assert_eq!((a.len(), b.len(), c.len()), (3, 0, 7));
        assert_eq!(
            carve(&mut local, [6, 5]).map(|_| ()),
            Err(KernelFailure::TooLarge {
                elems: 11,
                limit: 10
            })
        );
        assert_eq!(
            carve(&mut local, [usize::MAX, 2]).map(|_| ()),
            Err(KernelFailure::TooLarge {
                elems: u64::MAX,
                limit: 10
            })
        );
    }
}
