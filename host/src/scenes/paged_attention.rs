//! `paged_attention`: decode-style paged attention with online softmax, bf16 inputs and f32
//! output (the reference's `paged_attention`, sim cases).
//!
//! Entry tensors, in the reference's order (without its `config` tensor):
//! - `query` `[batch, heads, head_dim]` bf16 IN;
//! - `key_cache`, `value_cache` `[total_blocks, block_size, 1, head_dim]` bf16 IN;
//! - `block_table` `[batch, max_blocks]` int32 IN: logical block `j` of sequence `b` is
//!   physical block `block_table[b, j]`;
//! - `context_lens` `[batch]` int32 IN: the valid tokens of each sequence;
//! - `out` `[batch, heads, head_dim]` f32 OUT;
//!
//! and scalar 0, `scale` (f32 bits, 1.0). The orchestration reads the geometry off the shapes
//! and the block table and context lengths off the tensors (`TaskStream::read_element`); the
//! kernels see only the tiles. It is written once, as [`stream`], generic over
//! [`TaskStream`]: the device runs it on `Rt`, the `submit` benchmark on a bare orchestrator.
//! [`paged_attention_manual_scope`](super::paged_attention_manual_scope) submits the same
//! tasks in MANUAL scopes with explicit dependencies; the cases, the entry checks, the
//! per-tile tensors and argument lists, the inputs and the golden here serve both.
//! [`multi_round_paged_attention`](super::multi_round_paged_attention) runs this scene's
//! orchestration under its own case names; [`batch_paged_attention`](super::batch_paged_attention)
//! and [`paged_attention_ringbuffer`](super::paged_attention_ringbuffer) take the entry checks,
//! the case geometry, the inputs and the golden, with their own orchestration and kernels.
//!
//! Per sequence `b` and query tile of at most 128 heads (one tile in every case here), in its
//! own AUTO scope: one `alloc_tensors` task for the running `oi` `[H, D]`, `li` `[H]` and `mi`
//! `[H]` (f32), then per KV block `j` of the `n = ceil(ctx / block_size)` blocks:
//! - `QK` (AIC, `pa_qk`, scalar `scale`): INPUT the query tile and key block, OUTPUT `sij`
//!   `[H, block_size]` f32;
//! - `SF` (AIV, `pa_softmax`, scalar: the block's valid tokens): INPUT `sij`, OUTPUT `pij`
//!   `[H, block_size]` bf16, `mij` and `lij` `[H]` f32;
//! - `PV` (AIC, `pa_pv`): INPUT `pij` and the value block, OUTPUT `oi_tmp` `[H, D]` f32;
//! - `UP` (AIV, `pa_update`, scalars `is_first`, `is_last`): INPUT `mij`, `lij`, `oi_tmp`, INOUT
//!   `mi`, `li`, `oi`, and on the last block OUTPUT_EXISTING the tile's rows of `out`.
//!
//! Tasks per tile: `1 + 4n`. Edges per tile: `2n` (QK→SF, SF→PV) + `2n` (SF→UP, PV→UP) + `n`
//! (alloc→UP, creator edges) + `n - 1` (UP→UP through the accumulators) = `6n - 1`; tiles share
//! nothing (17 for CaseSmall1, as the reference's dep-gen counts).
//!
//! | case | context lengths | max blocks | tasks | edges |
//! |---|---|---|---|---|
//! | CaseSmall1 | 33 | 16 | 13 | 17 |
//! | CaseSmall2 | 128 | 16 | 33 | 47 |
//! | CaseVarSeq2 | 33, 17 | 16 | 22 | 28 |
//! | CaseVarSeq4 | 33, 64, 128, 15 | 16 | 68 | 92 |
//! | Bench16704 | 64 × 1040 | 65 | 16,704 | 24,896 |
//!
//! Every case has 16 heads, head dimension 16 and blocks of 16 tokens; `max blocks` is
//! `max_model_len / block_size` (256 / 16, and 1040 / 16 for the benchmark, whose 64 sequences
//! of 65 blocks are the stream the reference's AICPU submit figure was measured on). The
//! physical blocks are a seeded permutation of `batch · max_blocks`.
//!
//! The golden is plain softmax attention in f64 over each sequence's valid tokens, from the
//! bf16 inputs as stored; tolerance 1e-3 absolute plus 1e-3 relative.

use super::stream::{StreamEntry, StreamTensor, TaskStream};
use super::{golden_check, Prepared, Scene, Tolerance};
use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use crate::transport::OrchFn;
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{ArgDirection, Bf16, DataType, TaskTensor, TensorArgType};
use std::sync::Arc;

/// The scene.
pub struct PagedAttention;

/// Kernel index of `QK` (`pa_qk`) in the scene's kernel table.
pub(crate) const PA_QK: u32 = 0;
/// Kernel index of `SF` (`pa_softmax`).
pub(crate) const PA_SOFTMAX: u32 = 1;
/// Kernel index of `PV` (`pa_pv`).
pub(crate) const PA_PV: u32 = 2;
/// Kernel index of `UP` (`pa_update`).
pub(crate) const PA_UPDATE: u32 = 3;

/// The fatal code of an entry whose tensors or scalars do not have the scene's layout.
pub(crate) const BAD_ENTRY: u32 = 1;
/// The fatal code of a context length of 0 or past `max_blocks · block_size`.
pub(crate) const BAD_CONTEXT_LEN: u32 = 2;
/// The fatal code of a block-table entry past the cache's blocks.
const BAD_BLOCK: u32 = 3;

/// Most heads one query tile holds (the reference's `q_tile = min(heads, 128)`).
pub(crate) const Q_TILE: u32 = 128;

const HEADS: u32 = 16;
const HEAD_DIM: u32 = 16;
const BLOCK_SIZE: u32 = 16;

const CASE_NAMES: &[&str] = &[
    "CaseSmall1",
    "CaseSmall2",
    "CaseVarSeq2",
    "CaseVarSeq4",
    "Bench16704",
];

/// How many physical KV blocks a case's caches hold, and how its block table maps onto them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KvPool {
    /// `batch · max_blocks` blocks, the table a seeded permutation of them.
    Full,
    /// `batch · ceil(max context / block_size)` blocks (the reference's input generator's
    /// size): the table's first `ceil(max context / block_size)` columns are a seeded
    /// permutation of them, its other columns (never read) seeded draws among them. The
    /// reference draws every entry independently, so its sequences may share blocks; a
    /// permutation keeps every block read by one sequence, which the kernels do not rely on.
    Used,
}

/// One case: each sequence's context length, the block table's width, the geometry and the
/// size of the KV caches.
pub(crate) struct Case {
    pub(crate) context_lens: &'static [u32],
    pub(crate) max_blocks: u32,
    pub(crate) heads: u32,
    pub(crate) head_dim: u32,
    pub(crate) block_size: u32,
    pub(crate) pool: KvPool,
}

impl Case {
    /// The case called `name` (any of [`CASE_NAMES`]).
    pub(crate) fn named(name: &str) -> Option<Self> {
        let (context_lens, max_model_len): (&'static [u32], u32) = match name {
            "CaseSmall1" => (&[33], 256),
            "CaseSmall2" => (&[128], 256),
            "CaseVarSeq2" => (&[33, 17], 256),
            "CaseVarSeq4" => (&[33, 64, 128, 15], 256),
            "Bench16704" => (&[65 * BLOCK_SIZE; 64], 65 * BLOCK_SIZE),
            _ => return None,
        };
        Some(Self::small(context_lens, max_model_len))
    }

    /// A case of the sim geometry (16 heads, head dimension 16, blocks of 16 tokens) over the
    /// [`KvPool::Full`] caches.
    pub(crate) fn small(context_lens: &'static [u32], max_model_len: u32) -> Self {
        Self {
            context_lens,
            max_blocks: max_model_len / BLOCK_SIZE,
            heads: HEADS,
            head_dim: HEAD_DIM,
            block_size: BLOCK_SIZE,
            pool: KvPool::Full,
        }
    }

    pub(crate) fn batch(&self) -> u32 {
        self.context_lens.len() as u32
    }

    /// The shape of `query` and `out`.
    fn q_shape(&self) -> [u32; 3] {
        [self.batch(), self.heads, self.head_dim]
    }

    /// Physical blocks each cache holds.
    fn total_blocks(&self) -> u32 {
        match self.pool {
            KvPool::Full => self.batch() * self.max_blocks,
            KvPool::Used => self.batch() * self.used_blocks(),
        }
    }

    /// KV blocks of the longest sequence.
    pub(crate) fn used_blocks(&self) -> u32 {
        let max_ctx = self.context_lens.iter().copied().max().unwrap_or(0);
        max_ctx.div_ceil(self.block_size)
    }

    /// The shape of `key_cache` and `value_cache`.
    fn kv_shape(&self) -> [u32; 4] {
        [self.total_blocks(), self.block_size, 1, self.head_dim]
    }

    /// The `block_table` entry tensor holding `table`.
    fn block_table_tensor(&self, table: &[u32]) -> HostTensor {
        i32_tensor(table, &[self.batch(), self.max_blocks])
    }

    /// The `context_lens` entry tensor.
    fn context_lens_tensor(&self) -> HostTensor {
        i32_tensor(self.context_lens, &[self.batch()])
    }

    /// KV blocks per sequence.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.context_lens
            .iter()
            .map(|&ctx| ctx.div_ceil(self.block_size) as u64)
    }

    /// Query tiles per sequence.
    pub(crate) fn tiles_per_sequence(&self) -> u64 {
        self.heads.div_ceil(Q_TILE) as u64
    }

    /// Tasks one run submits: per tile, the alloc task and four per KV block.
    pub(crate) fn tasks(&self) -> u64 {
        self.tiles_per_sequence() * self.blocks().map(|n| 1 + 4 * n).sum::<u64>()
    }

    /// Edges the AUTO graph has (the module docs count them).
    pub(crate) fn edges(&self) -> u64 {
        self.tiles_per_sequence() * self.blocks().map(|n| 6 * n - 1).sum::<u64>()
    }
}

/// The geometry the orchestration reads off the entry tensors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub(crate) batch: u32,
    pub(crate) heads: u32,
    pub(crate) head_dim: u32,
    pub(crate) block_size: u32,
    pub(crate) total_blocks: u32,
    pub(crate) max_blocks: u32,
}

/// The entry tensors, in signature order.
#[derive(Clone, Copy)]
pub(crate) struct EntryTensors {
    pub(crate) query: TaskTensor,
    pub(crate) key_cache: TaskTensor,
    pub(crate) value_cache: TaskTensor,
    pub(crate) block_table: TaskTensor,
    pub(crate) context_lens: TaskTensor,
    pub(crate) out: TaskTensor,
}

impl EntryTensors {
    pub(crate) fn of(tensors: &[TaskTensor]) -> Option<Self> {
        match *tensors {
            [query, key_cache, value_cache, block_table, context_lens, out] => Some(Self {
                query,
                key_cache,
                value_cache,
                block_table,
                context_lens,
                out,
            }),
            _ => None,
        }
    }

    /// The geometry, if every tensor has the scene's rank, dtype and agreeing extents.
    pub(crate) fn geometry(&self) -> Option<Geometry> {
        let &[batch, heads, head_dim] = self.query.shapes() else {
            return None;
        };
        let &[total_blocks, block_size, 1, kv_dim] = self.key_cache.shapes() else {
            return None;
        };
        let &[table_batch, max_blocks] = self.block_table.shapes() else {
            return None;
        };
        let ok = kv_dim == head_dim
            && self.value_cache.shapes() == self.key_cache.shapes()
            && table_batch == batch
            && self.context_lens.shapes() == [batch]
            && self.out.shapes() == self.query.shapes()
            && self.query.dtype() == DataType::Bfloat16
            && self.key_cache.dtype() == DataType::Bfloat16
            && self.value_cache.dtype() == DataType::Bfloat16
            && self.block_table.dtype() == DataType::Int32
            && self.context_lens.dtype() == DataType::Int32
            && self.out.dtype() == DataType::Float32;
        ok.then_some(Geometry {
            batch,
            heads,
            head_dim,
            block_size,
            total_blocks,
            max_blocks,
        })
    }
}

pub(crate) fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// `tensor`'s view of `shapes` at `offsets`, or the run's end with [`BAD_ENTRY`].
pub(crate) fn view<S: TaskStream>(
    s: &mut S,
    tensor: &TaskTensor,
    shapes: &[u32],
    offsets: &[u32],
) -> Result<TaskTensor, S::Error> {
    tensor.view(shapes, offsets).map_err(|_| s.fatal(BAD_ENTRY))
}

/// An output description, or the run's end with [`BAD_ENTRY`].
pub(crate) fn info<S: TaskStream>(
    s: &mut S,
    shapes: &[u32],
    dtype: DataType,
) -> Result<TaskTensor, S::Error> {
    TaskTensor::create_info(shapes, dtype).map_err(|_| s.fatal(BAD_ENTRY))
}

/// Element `index` of an int32 tensor.
pub(crate) fn read_i32<S: TaskStream>(
    s: &mut S,
    tensor: &TaskTensor,
    index: u64,
) -> Result<i32, S::Error> {
    // The low four bytes are the element, little-endian.
    Ok(s.read_element(tensor, index)? as u32 as i32)
}

/// The scene's orchestration on the device.
pub(crate) fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    stream(rt)
}

/// The scene's task stream (the module docs list it), on any [`TaskStream`]: [`Rt`] on the
/// device, a bare orchestrator in the `submit` benchmark.
pub fn stream<S: TaskStream>(s: &mut S) -> Result<(), S::Error> {
    each_query_tile(s, ScopeMode::Auto, query_tile)
}

/// Checks the entry, then opens one scope of `mode` per sequence and query tile (sequence
/// order, then head order) and runs `tile` in it. What the scene's two orchestrations share:
/// they differ only in the scope mode and in what each tile's tasks declare.
pub(crate) fn each_query_tile<S: TaskStream>(
    s: &mut S,
    mode: ScopeMode,
    mut tile: impl FnMut(&mut S, &Tile<'_>) -> Result<(), S::Error>,
) -> Result<(), S::Error> {
    let entry = EntryTensors::of(s.tensors());
    let scale = match s.scalars() {
        &[scale] => Some(scale),
        _ => None,
    };
    let (Some(entry), Some(scale)) = (entry, scale) else {
        return Err(s.fatal(BAD_ENTRY));
    };
    let Some(geo) = entry.geometry() else {
        return Err(s.fatal(BAD_ENTRY));
    };
    for b in 0..geo.batch {
        let ctx = read_i32(s, &entry.context_lens, b as u64)?;
        let capacity = geo.max_blocks as u64 * geo.block_size as u64;
        if ctx <= 0 || ctx as u64 > capacity {
            return Err(s.fatal(BAD_CONTEXT_LEN));
        }
        let ctx = ctx as u32;
        for h0 in (0..geo.heads).step_by(Q_TILE as usize) {
            let h = Q_TILE.min(geo.heads - h0);
            let t = Tile {
                entry: &entry,
                geo,
                scale,
                b,
                ctx,
                h0,
                h,
            };
            s.scope(mode, |s| tile(s, &t))?;
        }
    }
    Ok(())
}

/// One query tile's work: heads `h0..h0 + h` of sequence `b`, of `ctx` tokens.
pub(crate) struct Tile<'e> {
    entry: &'e EntryTensors,
    geo: Geometry,
    /// `QK`'s scalar, the entry's `scale` as passed.
    pub(crate) scale: u64,
    b: u32,
    ctx: u32,
    h0: u32,
    h: u32,
}

/// One KV block of a tile: its key and value views and what `SF` and `UP` are told of it.
pub(crate) struct KvBlock {
    /// The key block's view.
    pub(crate) kj: TaskTensor,
    /// The value block's view.
    pub(crate) vj: TaskTensor,
    /// `SF`'s scalar: the block's valid tokens.
    pub(crate) valid: u32,
    /// Whether it is the tile's first block.
    pub(crate) is_first: bool,
    /// Whether it is the tile's last block (its `UP` writes the tile's rows of `out`).
    pub(crate) is_last: bool,
}

impl KvBlock {
    /// `UP`'s scalars, `is_first` and `is_last`.
    pub(crate) fn up_scalars(&self) -> [u64; 2] {
        [self.is_first as u64, self.is_last as u64]
    }

    /// How many of [`TileTensors::up`]'s arguments `UP` takes: the rows of `out` only on the
    /// last block.
    pub(crate) fn up_len(&self) -> usize {
        if self.is_last {
            7
        } else {
            6
        }
    }
}

impl Tile<'_> {
    /// The tile's KV blocks, `ceil(ctx / block_size)`.
    pub(crate) fn blocks(&self) -> u32 {
        self.ctx.div_ceil(self.geo.block_size)
    }

    /// The tile's query and output views and its intermediates' descriptions.
    pub(crate) fn tensors<S: TaskStream>(&self, s: &mut S) -> Result<TileTensors, S::Error> {
        let (b, h0, h, d, bs) = (
            self.b,
            self.h0,
            self.h,
            self.geo.head_dim,
            self.geo.block_size,
        );
        Ok(TileTensors {
            qi: view(s, &self.entry.query, &[1, h, d], &[b, h0, 0])?,
            out_rows: view(s, &self.entry.out, &[1, h, d], &[b, h0, 0])?,
            tile_f32: info(s, &[h, d], DataType::Float32)?,
            scores: info(s, &[h, bs], DataType::Float32)?,
            probs: info(s, &[h, bs], DataType::Bfloat16)?,
            row_f32: info(s, &[h], DataType::Float32)?,
        })
    }

    /// KV block `j`: its physical block read off the block table (the run's end with
    /// [`BAD_BLOCK`] past the cache), and its views.
    pub(crate) fn block<S: TaskStream>(&self, s: &mut S, j: u32) -> Result<KvBlock, S::Error> {
        let (geo, bs) = (&self.geo, self.geo.block_size);
        let index = self.b as u64 * geo.max_blocks as u64 + j as u64;
        let block = read_i32(s, &self.entry.block_table, index)?;
        if block < 0 || block as u32 >= geo.total_blocks {
            return Err(s.fatal(BAD_BLOCK));
        }
        let block = block as u32;
        let shapes = [1, bs, 1, geo.head_dim];
        let kj = view(s, &self.entry.key_cache, &shapes, &[block, 0, 0, 0])?;
        let vj = view(s, &self.entry.value_cache, &shapes, &[block, 0, 0, 0])?;
        Ok(KvBlock {
            kj,
            vj,
            valid: (self.ctx - j * bs).min(bs),
            is_first: j == 0,
            is_last: j + 1 == self.blocks(),
        })
    }
}

/// A tile's tensors, and the argument list of each of its tasks (the module docs give them).
pub(crate) struct TileTensors {
    qi: TaskTensor,
    out_rows: TaskTensor,
    tile_f32: TaskTensor,
    scores: TaskTensor,
    probs: TaskTensor,
    row_f32: TaskTensor,
}

impl TileTensors {
    /// The alloc task's outputs: `oi`, `li`, `mi`.
    pub(crate) fn alloc(&self) -> [TaskArg; 3] {
        use TensorArgType::Output;
        [
            arg(self.tile_f32, Output),
            arg(self.row_f32, Output),
            arg(self.row_f32, Output),
        ]
    }

    /// `QK`'s: the query tile and key block in, `sij` out.
    pub(crate) fn qk(&self, kj: TaskTensor) -> [TaskArg; 3] {
        use TensorArgType::{Input, Output};
        [
            arg(self.qi, Input),
            arg(kj, Input),
            arg(self.scores, Output),
        ]
    }

    /// `SF`'s: `sij` in; `pij`, `mij`, `lij` out.
    pub(crate) fn sf(&self, sij: TaskTensor) -> [TaskArg; 4] {
        use TensorArgType::{Input, Output};
        [
            arg(sij, Input),
            arg(self.probs, Output),
            arg(self.row_f32, Output),
            arg(self.row_f32, Output),
        ]
    }

    /// `PV`'s: `pij` and the value block in, `oi_tmp` out.
    pub(crate) fn pv(&self, pij: TaskTensor, vj: TaskTensor) -> [TaskArg; 3] {
        use TensorArgType::{Input, Output};
        [arg(pij, Input), arg(vj, Input), arg(self.tile_f32, Output)]
    }

    /// `UP`'s: `SF`'s `mij` and `lij` (`sf`, as submitted) and `oi_tmp` in; the accumulators
    /// `[oi, li, mi]` (as [`Self::alloc`] orders them) INOUT as `mi`, `li`, `oi`; then the
    /// tile's rows of `out`, OUTPUT_EXISTING, which only the last block passes
    /// ([`KvBlock::up_len`]).
    pub(crate) fn up(
        &self,
        sf: &[TaskArg; 4],
        oi_tmp: TaskTensor,
        [oi, li, mi]: [TaskTensor; 3],
    ) -> [TaskArg; 7] {
        use TensorArgType::{InOut, Input, OutputExisting};
        [
            arg(sf[2].tensor, Input),
            arg(sf[3].tensor, Input),
            arg(oi_tmp, Input),
            arg(mi, InOut),
            arg(li, InOut),
            arg(oi, InOut),
            arg(self.out_rows, OutputExisting),
        ]
    }
}

/// Submits the alloc task and the four tasks per KV block of one tile, in the tile's AUTO
/// scope: every edge is inferred from the tensors.
fn query_tile<S: TaskStream>(s: &mut S, tile: &Tile<'_>) -> Result<(), S::Error> {
    let t = tile.tensors(s)?;
    let mut acc = t.alloc();
    s.alloc_tensors(&mut acc)?;
    let acc = acc.map(|a| a.tensor);
    for j in 0..tile.blocks() {
        let kv = tile.block(s, j)?;
        let mut qk = t.qk(kv.kj);
        s.submit_aic(PA_QK, &mut qk, &[tile.scale])?;
        let mut sf = t.sf(qk[2].tensor);
        s.submit_aiv(PA_SOFTMAX, &mut sf, &[kv.valid as u64])?;
        let mut pv = t.pv(sf[1].tensor, kv.vj);
        s.submit_aic(PA_PV, &mut pv, &[])?;
        let mut up = t.up(&sf, pv[2].tensor, acc);
        s.submit_aiv(PA_UPDATE, &mut up[..kv.up_len()], &kv.up_scalars())?;
    }
    Ok(())
}

/// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// 2014): the deterministic source of the inputs and the block table.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// A value in `[-1, 1)`, rounded to bf16.
    fn bf16(&mut self) -> Bf16 {
        let unit = (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
        Bf16::from_f32(2.0 * unit - 1.0)
    }

    /// A value in `0..n` (`n > 0`; the modulo bias is below 2^-32 for the sizes here).
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A case's seeded inputs, drawn in a fixed order (query, key cache, value cache, then the
/// block table's permutation), so `prepare` and [`stream_entry`] see the same block table.
struct Drawn {
    query: Vec<Bf16>,
    key_cache: Vec<Bf16>,
    value_cache: Vec<Bf16>,
    /// Physical block of each (sequence, logical block), row-major `[batch, max_blocks]`.
    block_table: Vec<u32>,
}

impl Drawn {
    fn of(c: &Case) -> Self {
        let total_blocks = c.total_blocks();
        let mut rng = SplitMix(0x5EED_0000_0000_00A7);
        let mut bf16s = |n: u32| -> Vec<Bf16> { (0..n).map(|_| rng.bf16()).collect() };
        let query = bf16s(c.q_shape().iter().product());
        let key_cache = bf16s(c.kv_shape().iter().product());
        let value_cache = bf16s(c.kv_shape().iter().product());
        // Fisher-Yates over the physical blocks; row b of the table is the b-th run of
        // `max_blocks` of them (Full), or of `used_blocks` of them followed by draws (Used).
        let mut blocks: Vec<u32> = (0..total_blocks).collect();
        for i in (1..blocks.len()).rev() {
            blocks.swap(i, rng.below(i + 1));
        }
        let block_table = match c.pool {
            KvPool::Full => blocks,
            KvPool::Used => {
                let used = c.used_blocks() as usize;
                let mut table = Vec::with_capacity((c.batch() * c.max_blocks) as usize);
                for row in blocks.chunks_exact(used.max(1)) {
                    table.extend_from_slice(row);
                    for _ in used..c.max_blocks as usize {
                        table.push(rng.below(total_blocks as usize) as u32);
                    }
                }
                table
            }
        };
        Self {
            query,
            key_cache,
            value_cache,
            block_table,
        }
    }
}

/// A bf16 host tensor.
fn bf16_tensor(values: &[Bf16], shapes: &[u32]) -> HostTensor {
    HostTensor {
        data: values.iter().flat_map(|v| v.0.to_le_bytes()).collect(),
        shapes: shapes.to_vec(),
        dtype: DataType::Bfloat16,
        dir: ArgDirection::In,
    }
}

/// An int32 host input.
fn i32_tensor(values: &[u32], shapes: &[u32]) -> HostTensor {
    HostTensor {
        data: values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        shapes: shapes.to_vec(),
        dtype: DataType::Int32,
        dir: ArgDirection::In,
    }
}

/// The host-side inputs of one case, as f64 for the golden.
struct Inputs<'a> {
    heads: usize,
    head_dim: usize,
    block_size: usize,
    query: &'a [f64],
    key_cache: &'a [f64],
    value_cache: &'a [f64],
    block_table: &'a [u32],
    context_lens: &'a [u32],
    max_blocks: usize,
    scale: f64,
}

/// Plain softmax attention in f64: `out[b, h] = Σ_t softmax_t(scale · q·k_t) v_t` over the
/// sequence's valid tokens `t`, token `t` being row `t % block_size` of physical block
/// `block_table[b, t / block_size]`.
fn golden(x: &Inputs<'_>) -> Vec<f64> {
    let (h, d, bs) = (x.heads, x.head_dim, x.block_size);
    let mut out = Vec::with_capacity(x.context_lens.len() * h * d);
    for (b, &ctx) in x.context_lens.iter().enumerate() {
        let token = |t: usize| {
            let block = x.block_table[b * x.max_blocks + t / bs] as usize;
            (block * bs + t % bs) * d
        };
        for q in x.query[b * h * d..(b + 1) * h * d].chunks_exact(d) {
            let scores: Vec<f64> = (0..ctx as usize)
                .map(|t| {
                    let k = &x.key_cache[token(t)..token(t) + d];
                    x.scale * q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>()
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut row = vec![0.0f64; d];
            for (t, w) in weights.iter().enumerate() {
                let v = &x.value_cache[token(t)..token(t) + d];
                for (o, &v) in row.iter_mut().zip(v) {
                    *o += w * v;
                }
            }
            out.extend(row.iter().map(|o| o / total));
        }
    }
    out
}

impl Scene for PagedAttention {
    fn name(&self) -> &'static str {
        "paged_attention"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let c = Case::named(case)?;
        Some(prepare_case(&c, Arc::new(orchestrate), c.edges()))
    }
}

/// Case `c` ready to run with orchestration `orch`, whose graph has `edges` edges: the seeded
/// entry, the golden, the kernel table and signature; both of the scene's orchestrations run
/// on it.
pub(crate) fn prepare_case(c: &Case, orch: OrchFn, edges: u64) -> Prepared {
    prepare_entry(c, orch, tile_kernels(), (c.tasks(), edges), 1e-3)
}

/// The per-tile kernel table: `pa_qk`, `pa_softmax`, `pa_pv`, `pa_update` at [`PA_QK`]..
pub(crate) fn tile_kernels() -> Vec<simpler_aicore::KernelFn> {
    vec![
        kernels::pa_qk,
        kernels::pa_softmax,
        kernels::pa_pv,
        kernels::pa_update,
    ]
}

/// Case `c`'s seeded entry and f64 golden, for orchestration `orch` over `kernels`, whose graph
/// has `counts` = (tasks, edges); the check passes within `tol` absolute plus `tol` relative.
pub(crate) fn prepare_entry(
    c: &Case,
    orch: OrchFn,
    kernels: Vec<simpler_aicore::KernelFn>,
    (tasks, edges): (u64, u64),
    tol: f64,
) -> Prepared {
    let x = Drawn::of(c);
    let scale = 1.0f32;
    let wide = |v: &[Bf16]| -> Vec<f64> { v.iter().map(|x| x.to_f32() as f64).collect() };
    let golden = golden(&Inputs {
        heads: c.heads as usize,
        head_dim: c.head_dim as usize,
        block_size: c.block_size as usize,
        query: &wide(&x.query),
        key_cache: &wide(&x.key_cache),
        value_cache: &wide(&x.value_cache),
        block_table: &x.block_table,
        context_lens: c.context_lens,
        max_blocks: c.max_blocks as usize,
        scale: scale as f64,
    });
    let out = vec![0.0f32; golden.len()];
    Prepared::new(
        Callable::raw(
            orch,
            kernels,
            vec![
                ArgDirection::In,
                ArgDirection::In,
                ArgDirection::In,
                ArgDirection::In,
                ArgDirection::In,
                ArgDirection::Out,
            ],
        ),
        vec![
            bf16_tensor(&x.query, &c.q_shape()),
            bf16_tensor(&x.key_cache, &c.kv_shape()),
            bf16_tensor(&x.value_cache, &c.kv_shape()),
            c.block_table_tensor(&x.block_table),
            c.context_lens_tensor(),
            HostTensor::f32(&out, &c.q_shape(), ArgDirection::Out),
        ],
        golden_check(
            5,
            golden,
            Tolerance {
                atol: tol,
                rtol: tol,
            },
        ),
    )
    .with_scalars(vec![scale.to_bits() as u64])
    .with_counts(tasks, edges)
}

/// `case`'s entry as [`stream`] sees it: the bytes of the block table and the context lengths
/// (the tensors it reads), the shapes of the rest; `None` for an unknown case.
pub fn stream_entry(case: &str) -> Option<StreamEntry> {
    let c = Case::named(case)?;
    let block_table = Drawn::of(&c).block_table;
    Some(StreamEntry {
        tensors: vec![
            StreamTensor::opaque(&c.q_shape(), DataType::Bfloat16),
            StreamTensor::opaque(&c.kv_shape(), DataType::Bfloat16),
            StreamTensor::opaque(&c.kv_shape(), DataType::Bfloat16),
            StreamTensor::readable(c.block_table_tensor(&block_table)),
            StreamTensor::readable(c.context_lens_tensor()),
            StreamTensor::opaque(&c.q_shape(), DataType::Float32),
        ],
        scalars: vec![1.0f32.to_bits() as u64],
        tasks: c.tasks(),
        edges: c.edges(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_the_reference_task_counts() {
        let counts: Vec<(u64, u64)> = CASE_NAMES
            .iter()
            .map(|name| {
                let c = Case::named(name).unwrap();
                (c.tasks(), c.edges())
            })
            .collect();
        assert_eq!(
            counts,
            [(13, 17), (33, 47), (22, 28), (68, 92), (16_704, 24_896)]
        );
    }

    #[test]
    fn the_golden_weights_tokens_by_softmax_over_the_valid_ones() {
        // One head of one sequence, head_dim 16: token 0 scores 0 and token 1 scores ln 3, so
        // the weights are 1/4 and 3/4; the block's other 14 tokens are past the context.
        let (h, d, bs) = (HEADS as usize, HEAD_DIM as usize, BLOCK_SIZE as usize);
        let mut query = vec![0.0; h * d];
        query[0] = 3f64.ln();
        let mut key_cache = vec![0.0; bs * d];
        key_cache[d] = 1.0;
        let mut value_cache = vec![100.0; bs * d];
        value_cache[..d].fill(4.0);
        value_cache[d..2 * d].fill(8.0);
        let out = golden(&Inputs {
            heads: h,
            head_dim: d,
            block_size: bs,
            query: &query,
            key_cache: &key_cache,
            value_cache: &value_cache,
            block_table: &[0],
            context_lens: &[2],
            max_blocks: 1,
            scale: 1.0,
        });
        assert!((out[0] - 7.0).abs() < 1e-12, "{}", out[0]);
        // Heads with a zero query weight both tokens equally.
        assert!((out[d] - 6.0).abs() < 1e-12, "{}", out[d]);
    }

    #[test]
    fn the_stream_entry_is_the_prepared_entry_without_the_unread_data() {
        for name in ["CaseSmall1", "CaseVarSeq4"] {
            let p = PagedAttention.prepare(name).unwrap();
            let e = stream_entry(name).unwrap();
            assert_eq!(
                (Some(e.tasks), Some(e.edges), &e.scalars),
                (p.tasks, p.edges, &p.scalars)
            );
            assert_eq!(e.tensors.len(), p.tensors.len());
            for (i, (s, h)) in e.tensors.iter().zip(&p.tensors).enumerate() {
                assert_eq!(
                    (&s.shapes, s.dtype),
                    (&h.shapes, h.dtype),
                    "{name} tensor {i}"
                );
                // The block table and the context lengths are what the stream reads.
                let read = matches!(i, 3 | 4);
                assert_eq!(
                    s.data.as_ref(),
                    read.then_some(&h.data),
                    "{name} tensor {i}"
                );
            }
        }
    }

    #[test]
    fn the_benchmark_block_table_is_a_deterministic_permutation() {
        let table = |e: StreamEntry| e.tensors[3].data.clone().unwrap();
        let bytes = table(stream_entry("Bench16704").unwrap());
        assert_eq!(bytes, table(stream_entry("Bench16704").unwrap()));
        let mut blocks: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect();
        blocks.sort_unstable();
        assert_eq!(blocks, (0..64 * 65).collect::<Vec<u32>>());
    }
}
