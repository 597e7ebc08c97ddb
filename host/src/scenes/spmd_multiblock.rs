//! `spmd_multiblock_aiv` and `spmd_multiblock_mix`: SPMD tasks with more blocks than a
//! cluster (or the whole device) has cores, each block writing its block index at its own
//! place (the reference's scene tests of those names, case `Case1` each).
//!
//! Entry: one f32 tensor (INOUT, zeros on entry) of whole 16-float cache lines, and no
//! scalars. Five tasks, each INOUT on the whole tensor with one scalar, the cache line its
//! blocks start at (`base`):
//!
//! - AIV: one kernel (`SPMD_WRITE_AIV`, 0); block `b` writes `b` at element `16 (base + b)`.
//!   Blocks and bases (4, 0), (16, 4), (24, 20), (48, 44), (96, 92): 188 cache lines.
//! - MIX: AIC + AIV0 + AIV1 (`SPMD_MIX_AIC` 0, `SPMD_MIX_AIV0` 1, `SPMD_MIX_AIV1` 2, the two
//!   vector ones the same function, as in the reference); block `b` takes three cache lines
//!   from `base + 3b`: the cube core writes `b` at the first, vector core `v` (its sub-block)
//!   at the `2 + v`th. Blocks and bases (2, 0), (8, 6), (12, 30), (24, 66), (48, 138): 282
//!   cache lines.
//!
//! The default device has 8 clusters (16 AIV cores), so every task past the first asks for
//! more blocks than there are cores of its shape and runs in several rounds; the largest is
//! twice what the reference's 24-cluster device holds at once.
//!
//! The graph: the INOUT of the one tensor chains the five tasks through the TensorMap, 5
//! tasks and 4 edges, each task after the one before (the blocks' regions do not overlap, but
//! every task names the whole tensor). The golden is exact: the block indices at the first
//! element of each cache line a block owns, zero everywhere else.

use super::{compare_each, Prepared, Scene};
use crate::callable::{Callable, Signature};
use crate::chip_worker::HostTensor;
use crate::task::{KernelTable, Mix, TaskKernels};
use simpler_aicore::kernels::{args as kernel_args, stage};
use simpler_aicore::{KernelCtx, KernelFailure};
use simpler_core::ArgDirection::InOut;

/// The AIV scene.
pub struct SpmdMultiblockAiv;

/// The MIX scene.
pub struct SpmdMultiblockMix;

/// f32 elements per cache line.
const FLOATS_PER_CACHE_LINE: usize = 16;
/// Cache lines one MIX block owns: one per core of its cluster.
const SLOTS_PER_BLOCK: usize = 3;
/// `(blocks, first cache line)` of each AIV task.
const AIV_TASKS: [(u16, u32); 5] = [(4, 0), (16, 4), (24, 20), (48, 44), (96, 92)];
/// `(blocks, first cache line)` of each MIX task.
const MIX_TASKS: [(u16, u32); 5] = [(2, 0), (8, 6), (12, 30), (24, 66), (48, 138)];

/// Writes `ctx.block_idx` as f32 at the first element of cache line `base + line` of tensor
/// 0, `base` being scalar 0.
fn write_block_index(ctx: &mut KernelCtx<'_>, line: u32) -> Result<(), KernelFailure> {
    let [out] = kernel_args::tensors::<1>(ctx.args)?;
    let base = kernel_args::scalar_u32(ctx.args, 0)?;
    let at = (base as usize + line as usize) * FLOATS_PER_CACHE_LINE;
    stage::store_range(ctx.gm, out, 0, at, &[ctx.block_idx as f32])
}

/// AIV: block `b` writes `b` at cache line `base + b`.
fn spmd_write_aiv(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    write_block_index(ctx, ctx.block_idx)
}

/// AIC of a MIX block: block `b` writes `b` at cache line `base + 3b`.
fn spmd_mix_aic(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    write_block_index(ctx, ctx.block_idx * SLOTS_PER_BLOCK as u32)
}

/// AIV of a MIX block: block `b`'s vector core `v` writes `b` at cache line `base + 3b + 1 + v`.
fn spmd_mix_aiv(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    write_block_index(
        ctx,
        ctx.block_idx * SLOTS_PER_BLOCK as u32 + 1 + ctx.sub_block,
    )
}

/// The orchestration: one task per `(blocks, base)` of `tasks`, each INOUT on the entry tensor.
fn callable<K: TaskKernels + Copy + Send + Sync + 'static>(
    table: KernelTable,
    kernels: K,
    tasks: [(u16, u32); 5],
) -> Callable {
    Callable::new(table, Signature::new([InOut]), move |s, entry| {
        let [out] = entry.tensors;
        for (blocks, base) in tasks {
            let task = s.task(kernels).inout(out).scalar(base).blocks(blocks);
            task.submit()?;
        }
        Ok(())
    })
}

/// A case: the entry of `lines` zeroed cache lines, and the golden with `value(line)` at the
/// first element of each line that has one.
fn prepare(callable: Callable, lines: usize, golden: &[(usize, f64)]) -> Prepared {
    let n = lines * FLOATS_PER_CACHE_LINE;
    let mut want = vec![0.0f64; n];
    for &(line, value) in golden {
        want[line * FLOATS_PER_CACHE_LINE] = value;
    }
    let want = vec![(0, want)];
    Prepared::new(
        callable,
        vec![HostTensor::f32(&vec![0.0; n], &[n as u32], InOut)],
        Box::new(move |t| compare_each(t, &want, 0.0, 0.0)),
    )
    .with_counts(5, 4)
}

impl Scene for SpmdMultiblockAiv {
    fn name(&self) -> &'static str {
        "spmd_multiblock_aiv"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["Case1"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "Case1" {
            return None;
        }
        let mut table = KernelTable::new();
        let write = table.aiv(spmd_write_aiv);
        let lines: usize = AIV_TASKS.iter().map(|&(b, _)| b as usize).sum();
        let golden: Vec<(usize, f64)> = AIV_TASKS
            .iter()
            .flat_map(|&(blocks, base)| {
                (0..blocks).map(move |b| (base as usize + b as usize, b as f64))
            })
            .collect();
        Some(prepare(callable(table, write, AIV_TASKS), lines, &golden))
    }
}

impl Scene for SpmdMultiblockMix {
    fn name(&self) -> &'static str {
        "spmd_multiblock_mix"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["Case1"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "Case1" {
            return None;
        }
        let mut table = KernelTable::new();
        let mix = Mix::new()
            .aic(table.aic(spmd_mix_aic))
            .aiv0(table.aiv(spmd_mix_aiv))
            .aiv1(table.aiv(spmd_mix_aiv));
        let lines: usize = MIX_TASKS
            .iter()
            .map(|&(b, _)| b as usize * SLOTS_PER_BLOCK)
            .sum();
        let golden: Vec<(usize, f64)> = MIX_TASKS
            .iter()
            .flat_map(|&(blocks, base)| {
                (0..blocks as usize).flat_map(move |b| {
                    (0..SLOTS_PER_BLOCK)
                        .map(move |slot| (base as usize + b * SLOTS_PER_BLOCK + slot, b as f64))
                })
            })
            .collect();
        Some(prepare(callable(table, mix, MIX_TASKS), lines, &golden))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's sizes: 188 and 282 cache lines, each task's lines right after the
    /// previous task's.
    #[test]
    fn the_tasks_tile_the_tensor() {
        let mut next = 0;
        for (blocks, base) in AIV_TASKS {
            assert_eq!(base, next);
            next += blocks as u32;
        }
        assert_eq!(next, 188);
        let mut next = 0;
        for (blocks, base) in MIX_TASKS {
            assert_eq!(base, next);
            next += blocks as u32 * SLOTS_PER_BLOCK as u32;
        }
        assert_eq!(next, 282);
    }

    /// The check fails a block index one off, and a value one element past its place.
    #[test]
    fn the_check_is_exact() {
        for p in [
            SpmdMultiblockAiv.prepare("Case1").unwrap(),
            SpmdMultiblockMix.prepare("Case1").unwrap(),
        ] {
            let n = p.tensors[0].to_f32().len();
            let ok = |v: &[f32]| (p.check)(&[HostTensor::f32(v, &[n as u32], InOut)]).pass;
            assert!(!ok(&vec![0.0; n]));
            // Build the expected output from the task list, then perturb it.
            let mut good = vec![0.0f32; n];
            let mut line = 0;
            let mix = n == 282 * FLOATS_PER_CACHE_LINE;
            let tasks = if mix { MIX_TASKS } else { AIV_TASKS };
            for (blocks, _) in tasks {
                for b in 0..blocks {
                    for _ in 0..if mix { SLOTS_PER_BLOCK } else { 1 } {
                        good[line * FLOATS_PER_CACHE_LINE] = b as f32;
                        line += 1;
                    }
                }
            }
            assert!(ok(&good));
            let last = (line - 1) * FLOATS_PER_CACHE_LINE;
            let mut off = good.clone();
            off[last] += 1.0;
            assert!(!ok(&off));
            let mut moved = good.clone();
            moved.swap(last, last + 1);
            assert!(!ok(&moved));
        }
    }
}
