//! Checking a task's arguments before a kernel touches GM. The failure each check reports is
//! described in the parent module.

use crate::kernel::KernelFailure;
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::{CoreTaskArgs, DataType, TaskTensor};

/// `BadArguments` naming argument `index` (saturated to `u32::MAX`).
pub fn bad(index: usize) -> KernelFailure {
    KernelFailure::BadArguments {
        index: u32::try_from(index).unwrap_or(u32::MAX),
    }
}

/// The task's tensors, which must be exactly `N`.
pub fn tensors<const N: usize>(args: &CoreTaskArgs) -> Result<&[TaskTensor; N], KernelFailure> {
    let all = args.tensors();
    <&[TaskTensor; N]>::try_from(all).map_err(|_| bad(all.len().min(N)))
}

/// Scalar `i`.
pub fn scalar(args: &CoreTaskArgs, i: usize) -> Result<u64, KernelFailure> {
    args.scalars()
        .get(i)
        .copied()
        .ok_or_else(|| bad(args.tensors().len().saturating_add(i)))
}

/// Scalar `i` read as an f32 held in its low 32 bits.
pub fn scalar_f32(args: &CoreTaskArgs, i: usize) -> Result<f32, KernelFailure> {
    Ok(f32::from_bits(scalar(args, i)? as u32))
}

/// Scalar `i` read as an i32 held sign-extended (its low 32 bits, as `simpler_host`'s task
/// builder packs an `i32`).
pub fn scalar_i32(args: &CoreTaskArgs, i: usize) -> Result<i32, KernelFailure> {
    Ok(scalar(args, i)? as u32 as i32)
}

/// Scalar `i` read as a u32, which must fit in 32 bits.
pub fn scalar_u32(args: &CoreTaskArgs, i: usize) -> Result<u32, KernelFailure> {
    u32::try_from(scalar(args, i)?).map_err(|_| bad(args.tensors().len().saturating_add(i)))
}

/// Scalar `i` read as a flag, which must be 0 or 1.
pub fn scalar_flag(args: &CoreTaskArgs, i: usize) -> Result<bool, KernelFailure> {
    match scalar(args, i)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(bad(args.tensors().len().saturating_add(i))),
    }
}

/// Checks tensor `index` can be moved by the tile helpers and returns its element count.
///
/// Accepted: rank `1..=MAX_TENSOR_DIMS`, FLOAT32 or BFLOAT16, every shape non-zero, and every
/// byte address the view reaches (`addr + (start_offset + span + 1) * elem_size`) representable
/// in 64 bits, so the helpers' address arithmetic cannot overflow. A tensor built by
/// [`TaskTensor::new`] or `adopt` always passes the geometry part; these checks guard against
/// a tensor whose bytes were written some other way.
pub fn operand(t: &TaskTensor, index: usize) -> Result<usize, KernelFailure> {
    let rank = t.ndims() as usize;
    if rank == 0 || rank > MAX_TENSOR_DIMS {
        return Err(bad(index));
    }
    if !matches!(t.dtype(), DataType::Float32 | DataType::Bfloat16) {
        return Err(bad(index));
    }
    let mut numel: u64 = 1;
    let mut span: u64 = 0;
    for (&shape, &stride) in t.shapes().iter().zip(t.strides()) {
        if shape == 0 {
            return Err(bad(index));
        }
        numel = numel.checked_mul(shape as u64).ok_or(bad(index))?;
        // (2^32 - 1)^2 < 2^64: one term never overflows; only the sum can.
        span = span
            .checked_add((shape as u64 - 1) * stride as u64)
            .ok_or(bad(index))?;
    }
    t.start_offset()
        .checked_add(span)
        .and_then(|last| last.checked_add(1))
        .and_then(|end| end.checked_mul(t.dtype().elem_size() as u64))
        .and_then(|bytes| bytes.checked_add(t.buffer().addr))
        .ok_or(bad(index))?;
    usize::try_from(numel).map_err(|_| bad(index))
}

/// Checks tensor `index` like [`operand`] and reads it as a matrix: `(rows, cols)` with `cols`
/// its innermost extent and `rows` the product of the others (1 for a rank-1 tensor), so
/// leading size-1 dimensions (a `[1, H, D]` view of a batch) are transparent.
pub fn matrix(t: &TaskTensor, index: usize) -> Result<(usize, usize), KernelFailure> {
    let numel = operand(t, index)?;
    let cols = t.shapes().last().map_or(1, |&c| c as usize);
    Ok((numel / cols.max(1), cols))
}

/// Checks tensor `index` like [`operand`] and requires exactly `numel` elements.
pub fn operand_of(t: &TaskTensor, index: usize, numel: usize) -> Result<(), KernelFailure> {
    if operand(t, index)? != numel {
        return Err(bad(index));
    }
    Ok(())
}

/// `a * b`, or `BadArguments` naming `index` when the product does not fit `usize`.
pub fn product(a: usize, b: usize, index: usize) -> Result<usize, KernelFailure> {
    a.checked_mul(b).ok_or(bad(index))
}
