//! Task-stream generators shaped like the reference scenes: they drive an [`Orchestrator`] with
//! the tasks, tensors and tags of a scene, and run no kernels and touch no data. The external
//! tensors are descriptors over made-up device addresses; runtime outputs live in the heap rings,
//! which are address ranges only.
//!
//! - [`paged_attention`] (reference `examples/.../paged_attention`, 16x16 sim version): per batch
//!   element one `alloc_tensors` task and 4 tasks per KV block, each element in its own AUTO
//!   scope. Batch 64 with 65 blocks per sequence is the 16,704-task stream the reference's AICPU
//!   submit figure (0.874 us per task) was measured on.
//! - [`bgemm`] (reference `examples/.../benchmark_bgemm`): per group and K step a GEMM and an ADD
//!   accumulating into C, each group in its own AUTO scope. Case0 is 250 groups x grid_k 2 =
//!   1000 tasks.
//!
//! Both submit into the ring of the next scope depth, so the caller opens the outer scope (the
//! runtime's scope around an orchestration function) first. Each generator also exists as a
//! struct ([`PagedAttention`], [`Bgemm`]) that submits one element or group at a time, so a
//! caller can act between them (a benchmark drains the scheduler side there) and reuse the
//! precomputed descriptors: submitting an element allocates nothing on the host heap.

use simpler_core::cores::ActiveMask;
use simpler_core::geometry::row_major_strides;
use simpler_core::limits::MAX_TENSOR_DIMS;
use simpler_core::orchestrator::{Orchestrator, SubmitError, Task, TaskArg, Waiter};
use simpler_core::scope::ScopeMode;
use simpler_core::{AddressSpace, BufferHandle, DataType, TaskTensor, TensorArgType};

/// Query heads of the paged-attention scene (one 16-row q tile).
pub const PA_HEADS: u32 = 16;
/// Head dimension of the paged-attention scene.
pub const PA_HEAD_DIM: u32 = 16;
/// Tokens per KV block of the paged-attention scene.
pub const PA_BLOCK_SIZE: u32 = 16;

/// Tasks [`paged_attention`] submits: `batch * (1 + 4 * blocks_per_seq)`.
pub const fn paged_attention_tasks(batch: u32, blocks_per_seq: u32) -> usize {
    batch as usize * (1 + 4 * blocks_per_seq as usize)
}

/// Tasks [`bgemm`] submits: `2 * groups * grid_k`.
pub const fn bgemm_tasks(groups: u32, grid_k: u32) -> usize {
    2 * groups as usize * grid_k as usize
}

/// A dense row-major external tensor of `shapes` over `[addr, addr + bytes)`.
fn external(addr: u64, shapes: &[u32], dtype: DataType) -> TaskTensor {
    let mut full = [0u32; MAX_TENSOR_DIMS];
    full[..shapes.len()].copy_from_slice(shapes);
    let strides = row_major_strides(shapes.len() as u32, &full);
    let elems: u64 = shapes.iter().map(|&s| s as u64).product();
    TaskTensor::new(
        BufferHandle {
            addr,
            size: elems * dtype.elem_size() as u64,
        },
        0,
        shapes,
        &strides[..shapes.len()],
        dtype,
        AddressSpace::Device,
    )
    .expect("a valid external tensor")
}

fn info(shapes: &[u32], dtype: DataType) -> TaskTensor {
    TaskTensor::create_info(shapes, dtype).expect("a valid output description")
}

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

fn task(mask: ActiveMask, args: &mut [TaskArg]) -> Task<'_> {
    Task {
        mask,
        block_num: 1,
        args,
        deps: &[],
        predicate: None,
    }
}

/// splitmix64: the deterministic pseudo-random source of the block table.
const fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The paged-attention scene (16x16 sim version of the reference's `paged_attention`).
///
/// External tensors (descriptors only, at fixed made-up device addresses):
/// - `query` `[batch, 16, 16]` bf16; element `b` reads its row-slice view `[1, 16, 16]` at `[b, 0, 0]`;
/// - `key_cache`, `value_cache` `[total_blocks, 16, 16]` bf16 with
///   `total_blocks = batch * blocks_per_seq`; block `j` of element `b` reads the `[1, 16, 16]`
///   view at `[block_table(b, j), 0, 0]`, the block table being a deterministic pseudo-random
///   map into `0..total_blocks` (the reference's is random too);
/// - `out` `[batch, 16, 16]` f32; element `b` writes its row `[1, 16, 16]` at `[b, 0, 0]`.
///
/// Per element, in its own AUTO scope: one `alloc_tensors` task creating the accumulators
/// `oi` `[16, 16]` f32, `li` `[16]` f32 and `mi` `[16]` f32, then per KV block:
/// - `QK` (AIC): INPUT query view, INPUT key block; OUTPUT `sij` `[16, 16]` f32;
/// - `SF` (AIV): INPUT `sij`; OUTPUT `pij` `[16, 16]` bf16, `mij` `[16]` f32, `lij` `[16]` f32;
/// - `PV` (AIC): INPUT `pij`, INPUT value block; OUTPUT `oi_tmp` `[16, 16]` f32;
/// - `UP` (AIV): INPUT `mij`, `lij`, `oi_tmp`; INOUT `mi`, `li`, `oi`; on the last block also
///   OUTPUT_EXISTING the element's row of `out`.
///
/// Edges per element with `n` blocks: `2n` (QK→SF, SF→PV) + `2n` (SF→UP, PV→UP) + `n` creator
/// edges alloc→UP + `n - 1` UP→UP through the INOUT accumulators = `6n - 1` (17 for the
/// reference's CaseSmall1, n = 3).
///
/// Differences from the reference's current orchestration, which this stream does not model:
/// it opens a further scope per KV block (`PTO2_SCOPE_GUARD`), passes `out` as INOUT on every
/// block, and reads a `sij` sub-view of the valid length.
#[derive(Clone, Debug)]
pub struct PagedAttention {
    batch: u32,
    blocks_per_seq: u32,
    query: TaskTensor,
    key_cache: TaskTensor,
    value_cache: TaskTensor,
    out: TaskTensor,
    tile_f32: TaskTensor,
    tile_bf16: TaskTensor,
    row_f32: TaskTensor,
}

impl PagedAttention {
    /// The scene for `batch` sequences of `blocks_per_seq` KV blocks each.
    pub fn new(batch: u32, blocks_per_seq: u32) -> Self {
        assert!(batch > 0 && blocks_per_seq > 0, "an empty scene");
        let (h, d, bs) = (PA_HEADS, PA_HEAD_DIM, PA_BLOCK_SIZE);
        let total_blocks = batch * blocks_per_seq;
        let bf16 = DataType::Bfloat16;
        Self {
            batch,
            blocks_per_seq,
            query: external(0x1_0000_0000, &[batch, h, d], bf16),
            key_cache: external(0x2_0000_0000, &[total_blocks, bs, d], bf16),
            value_cache: external(0x3_0000_0000, &[total_blocks, bs, d], bf16),
            out: external(0x4_0000_0000, &[batch, h, d], DataType::Float32),
            tile_f32: info(&[h, d], DataType::Float32),
            tile_bf16: info(&[h, bs], bf16),
            row_f32: info(&[h], DataType::Float32),
        }
    }

    /// Batch elements.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// Tasks a whole stream submits.
    pub fn tasks(&self) -> usize {
        paged_attention_tasks(self.batch, self.blocks_per_seq)
    }

    /// The physical KV block of logical block `j` of element `b`.
    pub fn block_table(&self, b: u32, j: u32) -> u32 {
        let total = (self.batch * self.blocks_per_seq) as u64;
        (mix(((b as u64) << 32) | j as u64) % total) as u32
    }

    /// Submits element `b`'s tasks in their own AUTO scope; returns how many.
    pub fn element(
        &self,
        orch: &mut Orchestrator<'_>,
        waiter: &mut impl Waiter,
        b: u32,
    ) -> Result<usize, SubmitError> {
        use TensorArgType::{InOut, Input, Output, OutputExisting};
        let (h, d, bs) = (PA_HEADS, PA_HEAD_DIM, PA_BLOCK_SIZE);
        let qi = self.query.view(&[1, h, d], &[b, 0, 0]).expect("in bounds");
        let out_row = self.out.view(&[1, h, d], &[b, 0, 0]).expect("in bounds");

        orch.scope_begin(ScopeMode::Auto)?;
        let mut acc = [
            arg(self.tile_f32, Output),
            arg(self.row_f32, Output),
            arg(self.row_f32, Output),
        ];
        orch.alloc_tensors(&mut acc, waiter)?;
        let [oi, li, mi] = acc.map(|a| a.tensor);
        for j in 0..self.blocks_per_seq {
            let block = self.block_table(b, j);
            let kj = self
                .key_cache
                .view(&[1, bs, d], &[block, 0, 0])
                .expect("in bounds");
            let vj = self
                .value_cache
                .view(&[1, bs, d], &[block, 0, 0])
                .expect("in bounds");

            let mut qk = [arg(qi, Input), arg(kj, Input), arg(self.tile_f32, Output)];
            orch.submit(task(ActiveMask::AIC, &mut qk), waiter)?;
            let sij = qk[2].tensor;

            let mut sf = [
                arg(sij, Input),
                arg(self.tile_bf16, Output),
                arg(self.row_f32, Output),
                arg(self.row_f32, Output),
            ];
            orch.submit(task(ActiveMask::AIV0, &mut sf), waiter)?;
            let (pij, mij, lij) = (sf[1].tensor, sf[2].tensor, sf[3].tensor);

            let mut pv = [arg(pij, Input), arg(vj, Input), arg(self.tile_f32, Output)];
            orch.submit(task(ActiveMask::AIC, &mut pv), waiter)?;
            let oi_tmp = pv[2].tensor;

            let mut up = [
                arg(mij, Input),
                arg(lij, Input),
                arg(oi_tmp, Input),
                arg(mi, InOut),
                arg(li, InOut),
                arg(oi, InOut),
                arg(out_row, OutputExisting),
            ];
            let n = if j + 1 == self.blocks_per_seq { 7 } else { 6 };
            orch.submit(task(ActiveMask::AIV0, &mut up[..n]), waiter)?;
        }
        orch.scope_end()?;
        Ok(1 + 4 * self.blocks_per_seq as usize)
    }

    /// Submits every element in order; returns the task count.
    pub fn run(
        &self,
        orch: &mut Orchestrator<'_>,
        waiter: &mut impl Waiter,
    ) -> Result<usize, SubmitError> {
        let mut n = 0;
        for b in 0..self.batch {
            n += self.element(orch, waiter, b)?;
        }
        Ok(n)
    }
}

/// Submits the paged-attention stream ([`PagedAttention`] has the shapes) inside the caller's
/// open scope; returns the task count, `batch * (1 + 4 * blocks_per_seq)` (16,704 for batch 64
/// and 65 blocks per sequence).
pub fn paged_attention(
    orch: &mut Orchestrator<'_>,
    waiter: &mut impl Waiter,
    batch: u32,
    blocks_per_seq: u32,
) -> Result<usize, SubmitError> {
    PagedAttention::new(batch, blocks_per_seq).run(orch, waiter)
}

/// The batched-GEMM scene (the reference's `benchmark_bgemm`, one tile per view).
///
/// External tensors (descriptors only, f32):
/// - `A`, `B` `[groups, grid_k, tile, tile]`; GEMM (g, k) reads the [1, 1, tile, tile] views at
///   `[g, k, 0, 0]`;
/// - `C` `[groups, tile, tile]`; group g accumulates into the [1, tile, tile] view at `[g, 0, 0]`.
///
/// Per group, in its own AUTO scope (the reference's `PTO2_SCOPE_GUARD` in its group loop), per
/// K step k:
/// - `GEMM` (AIC): INPUT A[g, k], INPUT B[g, k]; OUTPUT `P` `[tile, tile]` f32;
/// - `ADD` (AIV): INPUT `P`; INOUT `C[g]`.
///
/// Edges per group: `grid_k` GEMM→ADD plus `grid_k - 1` ADD→ADD through C (750 for Case0).
///
/// Differences from the reference, not modelled: its views span `incore_loop` tiles (4 in
/// Case0) rather than one, and both tasks also read a small int64 `config` tensor as INPUT.
#[derive(Clone, Debug)]
pub struct Bgemm {
    groups: u32,
    grid_k: u32,
    tile: u32,
    a: TaskTensor,
    b: TaskTensor,
    c: TaskTensor,
    product: TaskTensor,
}

impl Bgemm {
    /// The scene for `groups` groups of `grid_k` K steps on `tile` x `tile` f32 tiles.
    pub fn new(groups: u32, grid_k: u32, tile: u32) -> Self {
        assert!(groups > 0 && grid_k > 0 && tile > 0, "an empty scene");
        let f32 = DataType::Float32;
        Self {
            groups,
            grid_k,
            tile,
            a: external(0x10_0000_0000, &[groups, grid_k, tile, tile], f32),
            b: external(0x20_0000_0000, &[groups, grid_k, tile, tile], f32),
            c: external(0x30_0000_0000, &[groups, tile, tile], f32),
            product: info(&[tile, tile], f32),
        }
    }

    /// Groups.
    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// Tasks a whole stream submits.
    pub fn tasks(&self) -> usize {
        bgemm_tasks(self.groups, self.grid_k)
    }

    /// Submits group `g`'s tasks in their own AUTO scope; returns how many.
    pub fn group(
        &self,
        orch: &mut Orchestrator<'_>,
        waiter: &mut impl Waiter,
        g: u32,
    ) -> Result<usize, SubmitError> {
        use TensorArgType::{InOut, Input, Output};
        let t = self.tile;
        let c = self.c.view(&[1, t, t], &[g, 0, 0]).expect("in bounds");
        orch.scope_begin(ScopeMode::Auto)?;
        for k in 0..self.grid_k {
            let a = self
                .a
                .view(&[1, 1, t, t], &[g, k, 0, 0])
                .expect("in bounds");
            let b = self
                .b
                .view(&[1, 1, t, t], &[g, k, 0, 0])
                .expect("in bounds");
            let mut gemm = [arg(a, Input), arg(b, Input), arg(self.product, Output)];
            orch.submit(task(ActiveMask::AIC, &mut gemm), waiter)?;
            let mut add = [arg(gemm[2].tensor, Input), arg(c, InOut)];
            orch.submit(task(ActiveMask::AIV0, &mut add), waiter)?;
        }
        orch.scope_end()?;
        Ok(2 * self.grid_k as usize)
    }

    /// Submits every group in order; returns the task count.
    pub fn run(
        &self,
        orch: &mut Orchestrator<'_>,
        waiter: &mut impl Waiter,
    ) -> Result<usize, SubmitError> {
        let mut n = 0;
        for g in 0..self.groups {
            n += self.group(orch, waiter, g)?;
        }
        Ok(n)
    }
}

/// Submits the bgemm stream ([`Bgemm`] has the shapes) inside the caller's open scope; returns
/// the task count, `2 * groups * grid_k` (1000 for Case0: 250 groups, grid_k 2, tile 128).
pub fn bgemm(
    orch: &mut Orchestrator<'_>,
    waiter: &mut impl Waiter,
    groups: u32,
    grid_k: u32,
    tile: u32,
) -> Result<usize, SubmitError> {
    Bgemm::new(groups, grid_k, tile).run(orch, waiter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{with_runtime, Drain};
    use simpler_core::orchestrator::OrchestratorConfig;
    use simpler_core::TaskId;

    const HEAPS: [u64; 4] = [
        0x100_0000_0000,
        0x200_0000_0000,
        0x300_0000_0000,
        0x400_0000_0000,
    ];

    /// Submits a stream in an outer scope and counts the edges of the tasks on ring 1.
    fn tasks_and_edges(
        stream: impl FnOnce(&mut Orchestrator<'_>, &mut Drain<'_>) -> usize,
    ) -> (usize, usize, usize) {
        with_runtime(OrchestratorConfig::with_heaps(HEAPS), |orch, shared| {
            let mut drain = Drain::new(shared);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let n = stream(orch, &mut drain);
            let submitted = orch.submitted(1) as usize;
            let edges = (0..submitted as u32)
                .map(|i| shared.fanin(TaskId::new(1, i)).count())
                .sum();
            orch.scope_end().unwrap();
            drain.run();
            (n, submitted, edges)
        })
    }

    #[test]
    fn paged_attention_case_small1_has_the_reference_counts() {
        let (n, submitted, edges) =
            tasks_and_edges(|orch, drain| paged_attention(orch, drain, 1, 3).unwrap());
        assert_eq!((n, submitted, edges), (13, 13, 17));
        assert_eq!(paged_attention_tasks(64, 65), 16_704);
    }

    #[test]
    fn bgemm_case1_has_the_reference_counts() {
        let (n, submitted, edges) =
            tasks_and_edges(|orch, drain| bgemm(orch, drain, 32, 2, 128).unwrap());
        assert_eq!((n, submitted, edges), (128, 128, 96));
        assert_eq!(bgemm_tasks(250, 2), 1000);
    }

    #[test]
    fn the_block_table_is_deterministic_and_in_range() {
        let pa = PagedAttention::new(64, 65);
        for b in 0..64 {
            for j in 0..65 {
                assert!(pa.block_table(b, j) < 64 * 65);
                assert_eq!(pa.block_table(b, j), pa.block_table(b, j));
            }
        }
    }
}
