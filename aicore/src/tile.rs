//! Moving a tensor view between GM and a local f32 buffer, in row-major element order.
//!
//! FLOAT32 and BFLOAT16 views are supported (bf16 is widened on load and rounded to nearest
//! even on store). A view whose elements are dense in row-major order (each dimension's stride
//! the product of the inner shapes) is one run; otherwise each innermost row is one. An f32
//! run with stride 1 is one GM access straight into or out of the local buffer's bytes; a bf16
//! run moves through a stack buffer in chunks, widened or rounded on the way.

use crate::kernel::KernelFailure;
use crate::tile_ops::{Portable, TileOps};
use simpler_core::gm::{Gm, GmMut, GmRef};
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::{DataType, TaskTensor};

/// Largest innermost run moved in one access (elements).
const RUN: usize = 256;

/// Elements of `t` (the product of its shapes), checked against `limit`.
pub fn elems(t: &TaskTensor, limit: usize) -> Result<usize, KernelFailure> {
    let n = t.numel();
    if n > limit as u64 {
        return Err(KernelFailure::TooLarge {
            elems: n,
            limit: limit as u64,
        });
    }
    Ok(n as usize)
}

/// Calls `run(gm_addr, first_elem, len)` for each innermost run of the view, in row-major
/// order; runs are contiguous in GM only when the innermost stride is 1.
fn for_each_run(
    t: &TaskTensor,
    mut run: impl FnMut(u64, usize, usize, u64) -> Result<(), KernelFailure>,
) -> Result<(), KernelFailure> {
    // Only a zeroed TaskTensor has no dimensions; every constructor refuses rank 0.
    let (Some((&inner, outer_shapes)), Some((&inner_stride, outer_strides))) =
        (t.shapes().split_last(), t.strides().split_last())
    else {
        return Err(UNSUPPORTED);
    };
    let elem = t.dtype().elem_size() as u64;
    // Dense row-major (every stride the product of the inner shapes, a size-1 dimension's
    // stride aside): the tensor's cached answer, kept by every constructor and view.
    if t.is_contiguous() {
        let numel: usize = t.shapes().iter().map(|&s| s as usize).product();
        return run(t.buffer().addr + t.start_offset() * elem, 0, numel, elem);
    }
    let inner = inner as usize;
    let inner_stride = inner_stride as u64 * elem;
    let outer: usize = outer_shapes.iter().map(|&s| s as usize).product();
    let mut index = [0u32; MAX_TENSOR_DIMS];
    for row in 0..outer {
        let mut offset = t.start_offset();
        for (&i, &stride) in index.iter().zip(outer_strides) {
            offset += i as u64 * stride as u64;
        }
        run(
            t.buffer().addr + offset * elem,
            row * inner,
            inner,
            inner_stride,
        )?;
        // Advance the outer index, last outer dimension fastest.
        for (i, &shape) in index.iter_mut().zip(outer_shapes).rev() {
            *i += 1;
            if *i < shape {
                break;
            }
            *i = 0;
        }
    }
    Ok(())
}

/// Reads the f32 values at `addr` into `out`, one GM access.
#[inline(always)]
fn read_f32(gm: &dyn Gm, addr: u64, out: &mut [f32]) -> Result<(), KernelFailure> {
    // f32 to bytes never fails; the checked cast keeps the core loop free of panic paths.
    let raw = bytemuck::try_cast_slice_mut(out).map_err(|_| UNSUPPORTED)?;
    gm.read(addr, raw)?;
    // GM holds little-endian words: a no-op on little-endian hosts and devices.
    for v in out.iter_mut() {
        *v = f32::from_bits(u32::from_le(v.to_bits()));
    }
    Ok(())
}

/// Writes `values` to `addr`, one GM access; little-endian targets only (GM's byte order).
#[inline(always)]
fn write_f32(gm: &dyn Gm, addr: u64, values: &[f32]) -> Result<(), KernelFailure> {
    let raw = bytemuck::try_cast_slice(values).map_err(|_| UNSUPPORTED)?;
    Ok(gm.write(addr, raw)?)
}

/// What a view of another dtype, or an index the checks above rule out, reports.
const UNSUPPORTED: KernelFailure = KernelFailure::BadArguments { index: u32::MAX };

/// The element size of a dtype this module moves, or [`UNSUPPORTED`].
fn moved_elem(dtype: DataType) -> Result<usize, KernelFailure> {
    match dtype {
        DataType::Float32 | DataType::Bfloat16 => Ok(dtype.elem_size() as usize),
        _ => Err(UNSUPPORTED),
    }
}

/// The GM range of a dense f32 view: its first byte and element count; `None` for any other
/// view (strided, or of another dtype).
pub fn dense_f32(t: &TaskTensor) -> Option<(u64, usize)> {
    if t.dtype() != DataType::Float32 || t.shapes().is_empty() || !t.is_contiguous() {
        return None;
    }
    let numel = usize::try_from(t.numel()).ok()?;
    let addr = t
        .buffer()
        .addr
        .checked_add(t.start_offset().checked_mul(4)?)?;
    Some((addr, numel))
}

/// Whether two views' GM ranges (from [`dense_f32`]) share a byte.
pub fn overlap((a, an): (u64, usize), (b, bn): (u64, usize)) -> bool {
    let (a_end, b_end) = (
        a.saturating_add(an as u64 * 4),
        b.saturating_add(bn as u64 * 4),
    );
    a < b_end && b < a_end
}

/// `t`'s elements lent in place for reading ([`Gm::lend`]), when `t` is a dense f32 view and
/// the platform lends that range; `None` means: load it instead. A lease the platform
/// refuses (outside GM, or in conflict with another access in progress) is the kernel's
/// failure.
pub fn lend<'g>(gm: &'g dyn Gm, t: &TaskTensor) -> Option<Result<GmRef<'g>, KernelFailure>> {
    let (addr, numel) = dense_f32(t)?;
    Some(gm.lend(addr, numel)?.map_err(KernelFailure::from))
}

/// `t`'s elements lent in place for reading and writing ([`Gm::lend_mut`]), as [`lend`] does.
pub fn lend_mut<'g>(gm: &'g dyn Gm, t: &TaskTensor) -> Option<Result<GmMut<'g>, KernelFailure>> {
    let (addr, numel) = dense_f32(t)?;
    Some(gm.lend_mut(addr, numel)?.map_err(KernelFailure::from))
}

/// Loads every element of `t` into `dst[..numel]` as f32. Returns the element count.
///
/// A bf16 view is widened by the portable loop; a kernel with a [`KernelCtx`](crate::KernelCtx)
/// calls [`load_on`] with its `ops`, which widens on the platform's vector unit.
pub fn load(gm: &dyn Gm, t: &TaskTensor, dst: &mut [f32]) -> Result<usize, KernelFailure> {
    load_on(&Portable, gm, t, dst)
}

/// [`load`], widening bf16 with `ops` ([`TileOps::widen_bf16`]); the same values.
pub fn load_on(
    ops: &dyn TileOps,
    gm: &dyn Gm,
    t: &TaskTensor,
    dst: &mut [f32],
) -> Result<usize, KernelFailure> {
    let n = elems(t, dst.len())?;
    let dtype = t.dtype();
    // A dense f32 view (most of the tiles kernels move) is one access straight into `dst`.
    if let Some((addr, _)) = dense_f32(t) {
        read_f32(gm, addr, dst.get_mut(..n).ok_or(UNSUPPORTED)?)?;
        return Ok(n);
    }
    let elem = moved_elem(dtype)?;
    // The staging buffer of the runs that are not one f32 access, zeroed on first use only:
    // a call that needs none (a dense f32 view) does not pay for clearing it.
    let mut staging: Option<[u32; RUN]> = None;
    for_each_run(t, |addr, first, len, stride| {
        if dtype == DataType::Float32 && stride == 4 {
            return read_f32(
                gm,
                addr,
                dst.get_mut(first..first + len).ok_or(UNSUPPORTED)?,
            );
        }
        let words = staging.get_or_insert([0u32; RUN]);
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(RUN);
            // Words to bytes or halves never fails; the checked casts keep the core loop free of
            // panic paths.
            let bytes: &mut [u8] =
                bytemuck::try_cast_slice_mut(&mut words[..]).map_err(|_| UNSUPPORTED)?;
            if stride == elem as u64 {
                let run = bytes.get_mut(..chunk * elem).ok_or(UNSUPPORTED)?;
                gm.read(addr.wrapping_add((done * elem) as u64), run)?;
            } else {
                // `elem` is 2 or 4 (`moved_elem`); `max(1)` shows the compiler it is not zero, so
                // the chunking has no panic path.
                for (i, b) in bytes.chunks_exact_mut(elem.max(1)).take(chunk).enumerate() {
                    gm.read(addr.wrapping_add((done + i) as u64 * stride), b)?;
                }
            }
            let out = dst
                .get_mut(first + done..first + done + chunk)
                .ok_or(UNSUPPORTED)?;
            // Widened from whole words and halves, not byte pairs, so the loops vectorise.
            if dtype == DataType::Float32 {
                for (o, &w) in out.iter_mut().zip(words.iter()) {
                    *o = f32::from_bits(u32::from_le(w));
                }
            } else {
                let halves: &mut [u16] =
                    bytemuck::try_cast_slice_mut(&mut words[..]).map_err(|_| UNSUPPORTED)?;
                let halves = halves.get_mut(..chunk).ok_or(UNSUPPORTED)?;
                // GM holds little-endian halves: nothing to do on little-endian hosts.
                if cfg!(target_endian = "big") {
                    for h in halves.iter_mut() {
                        *h = u16::from_le(*h);
                    }
                }
                ops.widen_bf16(halves, out);
            }
            done += chunk;
        }
        Ok(())
    })?;
    Ok(n)
}

/// Stores `src[..numel]` into every element of `t`, converting to its dtype.
///
/// A bf16 view is rounded by the portable loop; [`store_on`] rounds with a kernel's `ops`.
pub fn store(gm: &dyn Gm, t: &TaskTensor, src: &[f32]) -> Result<(), KernelFailure> {
    store_on(&Portable, gm, t, src)
}

/// [`store`], rounding to bf16 with `ops` ([`TileOps::narrow_bf16`]); the same bits.
pub fn store_on(
    ops: &dyn TileOps,
    gm: &dyn Gm,
    t: &TaskTensor,
    src: &[f32],
) -> Result<(), KernelFailure> {
    let n = elems(t, src.len())?;
    let dtype = t.dtype();
    // As in `load_on`: a dense f32 view is one access straight from `src`.
    if let Some((addr, _)) = dense_f32(t).filter(|_| cfg!(target_endian = "little")) {
        return write_f32(gm, addr, src.get(..n).ok_or(UNSUPPORTED)?);
    }
    let elem = moved_elem(dtype)?;
    // As in `load`: zeroed only when a run needs it.
    let mut staging: Option<[u32; RUN]> = None;
    for_each_run(t, |addr, first, len, stride| {
        let values = src.get(first..first + len).ok_or(UNSUPPORTED)?;
        if dtype == DataType::Float32 && stride == 4 && cfg!(target_endian = "little") {
            return write_f32(gm, addr, values);
        }
        let words = staging.get_or_insert([0u32; RUN]);
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(RUN);
            let values = src
                .get(first + done..first + done + chunk)
                .ok_or(UNSUPPORTED)?;
            // Narrowed into whole words and halves, not byte pairs, so the loops vectorise.
            if dtype == DataType::Float32 {
                for (w, v) in words.iter_mut().zip(values) {
                    *w = v.to_bits().to_le();
                }
            } else {
                // As in `load`: the checked casts have no panic path.
                let halves: &mut [u16] =
                    bytemuck::try_cast_slice_mut(&mut words[..]).map_err(|_| UNSUPPORTED)?;
                let halves = halves.get_mut(..chunk).ok_or(UNSUPPORTED)?;
                ops.narrow_bf16(values, halves);
                if cfg!(target_endian = "big") {
                    for h in halves.iter_mut() {
                        *h = h.to_le();
                    }
                }
            }
            let bytes: &[u8] = bytemuck::try_cast_slice(&words[..]).map_err(|_| UNSUPPORTED)?;
            if stride == elem as u64 {
                let run = bytes.get(..chunk * elem).ok_or(UNSUPPORTED)?;
                gm.write(addr.wrapping_add((done * elem) as u64), run)?;
            } else {
                // As in `load`: `max(1)` keeps the chunking free of a panic path.
                for (i, b) in bytes.chunks_exact(elem.max(1)).take(chunk).enumerate() {
                    gm.write(addr.wrapping_add((done + i) as u64 * stride), b)?;
                }
            }
            done += chunk;
        }
        Ok(())
    })
}
