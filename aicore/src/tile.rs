//! Moving a tensor view between GM and a local f32 buffer, in row-major element order.
//!
//! FLOAT32 and BFLOAT16 views are supported (bf16 is widened on load and rounded to nearest
//! even on store). A view whose elements are dense in row-major order (each dimension's stride
//! the product of the inner shapes) is one run; otherwise each innermost row is one. An f32
//! run with stride 1 is one GM access straight into or out of the local buffer's bytes; a bf16
//! run moves through a stack buffer in chunks, widened or rounded on the way.

use crate::kernel::KernelFailure;
use simpler_core::gm::Gm;
use simpler_core::{Bf16, DataType, TaskTensor};

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
    let shapes = t.shapes();
    let strides = t.strides();
    let rank = shapes.len();
    if rank == 0 {
        // Only a zeroed TaskTensor has no dimensions; every constructor refuses rank 0.
        return Err(KernelFailure::BadArguments { index: u32::MAX });
    }
    let elem = t.dtype().elem_size() as u64;
    if is_dense(shapes, strides) {
        let numel: usize = shapes.iter().map(|&s| s as usize).product();
        return run(t.buffer().addr + t.start_offset() * elem, 0, numel, elem);
    }
    let inner = shapes[rank - 1] as usize;
    let inner_stride = strides[rank - 1] as u64 * elem;
    let outer: usize = shapes[..rank - 1].iter().map(|&s| s as usize).product();
    let mut index = [0u32; 5];
    for row in 0..outer {
        let mut offset = t.start_offset();
        for d in 0..rank - 1 {
            offset += index[d] as u64 * strides[d] as u64;
        }
        run(
            t.buffer().addr + offset * elem,
            row * inner,
            inner,
            inner_stride,
        )?;
        // Advance the outer index, last outer dimension fastest.
        for d in (0..rank - 1).rev() {
            index[d] += 1;
            if index[d] < shapes[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Ok(())
}

/// Whether a view's elements are contiguous in row-major order: every stride is the product
/// of the inner shapes (a size-1 dimension's stride does not matter).
fn is_dense(shapes: &[u32], strides: &[u32]) -> bool {
    let mut step = 1u64;
    for (&shape, &stride) in shapes.iter().zip(strides).rev() {
        if shape != 1 && stride as u64 != step {
            return false;
        }
        step *= shape as u64;
    }
    true
}

/// Loads every element of `t` into `dst[..numel]` as f32.
pub fn load(gm: &dyn Gm, t: &TaskTensor, dst: &mut [f32]) -> Result<usize, KernelFailure> {
    let n = elems(t, dst.len())?;
    let dtype = t.dtype();
    let elem = dtype.elem_size() as usize;
    let mut bytes = [0u8; RUN * 4];
    for_each_run(t, |addr, first, len, stride| {
        if dtype == DataType::Float32 && stride == 4 {
            let out = &mut dst[first..first + len];
            gm.read(addr, bytemuck::cast_slice_mut(out))?;
            // GM holds little-endian words: a no-op on little-endian hosts and devices.
            for v in out.iter_mut() {
                *v = f32::from_bits(u32::from_le(v.to_bits()));
            }
            return Ok(());
        }
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(RUN);
            if stride == elem as u64 {
                gm.read(
                    addr.wrapping_add((done * elem) as u64),
                    &mut bytes[..chunk * elem],
                )?;
            } else {
                for i in 0..chunk {
                    let at = addr.wrapping_add((done + i) as u64 * stride);
                    gm.read(at, &mut bytes[i * elem..(i + 1) * elem])?;
                }
            }
            let out = &mut dst[first + done..first + done + chunk];
            match dtype {
                DataType::Float32 => {
                    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
                DataType::Bfloat16 => {
                    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                        *o = Bf16(u16::from_le_bytes([b[0], b[1]])).to_f32();
                    }
                }
                _ => return Err(KernelFailure::BadArguments { index: u32::MAX }),
            }
            done += chunk;
        }
        Ok(())
    })?;
    Ok(n)
}

/// Stores `src[..numel]` into every element of `t`, converting to its dtype.
pub fn store(gm: &dyn Gm, t: &TaskTensor, src: &[f32]) -> Result<(), KernelFailure> {
    elems(t, src.len())?;
    let dtype = t.dtype();
    let elem = dtype.elem_size() as usize;
    let mut bytes = [0u8; RUN * 4];
    for_each_run(t, |addr, first, len, stride| {
        let values = &src[first..first + len];
        if dtype == DataType::Float32 && stride == 4 && cfg!(target_endian = "little") {
            return Ok(gm.write(addr, bytemuck::cast_slice(values))?);
        }
        let mut done = 0;
        while done < len {
            let chunk = (len - done).min(RUN);
            let values = &src[first + done..first + done + chunk];
            match dtype {
                DataType::Float32 => {
                    for (b, v) in bytes.chunks_exact_mut(4).zip(values) {
                        b.copy_from_slice(&v.to_le_bytes());
                    }
                }
                DataType::Bfloat16 => {
                    for (b, v) in bytes.chunks_exact_mut(2).zip(values) {
                        b.copy_from_slice(&Bf16::from_f32(*v).0.to_le_bytes());
                    }
                }
                _ => return Err(KernelFailure::BadArguments { index: u32::MAX }),
            }
            if stride == elem as u64 {
                gm.write(
                    addr.wrapping_add((done * elem) as u64),
                    &bytes[..chunk * elem],
                )?;
            } else {
                for i in 0..chunk {
                    let at = addr.wrapping_add((done + i) as u64 * stride);
                    gm.write(at, &bytes[i * elem..(i + 1) * elem])?;
                }
            }
            done += chunk;
        }
        Ok(())
    })
}
