//! `batch_paged_attention`: paged attention with the batch split into chunks of up to 16
//! sequences, each chunk's tasks covering all of its sequences at once (the reference's
//! `tests/st/.../batch_paged_attention`, its five sim cases).
//!
//! The entry is [`paged_attention`](super::paged_attention)'s: `query` `[batch, heads,
//! head_dim]` bf16, `key_cache` and `value_cache` `[total_blocks, block_size, 1, head_dim]`
//! bf16, `block_table` `[batch, max_blocks]` int32, `context_lens` `[batch]` int32 (all IN),
//! `out` `[batch, heads, head_dim]` f32 OUT, and scalar 0 `scale` (f32 bits, 1.0). The caches
//! hold the reference generator's `batch · ceil(max context / block_size)` blocks
//! (the paged attention cases hold `batch · max_blocks`).
//!
//! The orchestration reads every context length to find `max_bn`, the longest sequence's KV
//! blocks. Then per query tile of at most 128 heads (one here) and per chunk of `count ≤ 16`
//! sequences starting at `start`, in an AUTO scope: one `alloc_tensors` task for `oi`
//! `[count · H, D]`, `li`, `mi` `[count · H]` (f32), then for each `bn < max_bn`, in an inner
//! AUTO scope, four tasks that are handed the whole entry tensors and find their sequences'
//! rows from scalars (the kernels are `simpler_aicore::kernels::pa_*_batch`):
//! - `QK` (AIC, slot 0): INPUT `query`, `key_cache`, `block_table`; OUTPUT `sij` `[count · H,
//!   block_size]` f32; scalars `count, bn, q_offset, max_blocks, heads, start`;
//! - `SF` (AIV, slot 1): INPUT `sij`, `context_lens`; OUTPUT `pij` (bf16, `sij`'s shape),
//!   `mij`, `lij` `[count · H]` f32; scalars `scale, count, bn, start`;
//! - `PV` (AIC, slot 2): INPUT `pij`, `value_cache`, `block_table`; OUTPUT `oi_new` `[count ·
//!   H, D]` f32; scalars `count, bn, max_blocks, start`;
//! - `UP` (AIV, slot 3): INPUT `mij`, `lij`, `oi_new`; INOUT `mi`, `li`, `oi` and the whole
//!   `out`, marked `manual_dep` as the reference's orchestration makes it (each chunk writes
//!   only its own sequences' rows, so the TensorMap neither looks `out` up nor records its
//!   writers); scalars `is_first, is_last, count, q_offset, heads, start`.
//!
//! A sequence shorter than `max_bn` blocks still gets every block's tasks: its blocks past the
//! context are masked out by `SF` (`m = -1e30`, `l = 0`, `p = 0`), so its `UP` keeps the running
//! triple.
//!
//! Tasks: `chunks · (1 + 4 · max_bn)`. Edges per chunk (the graph's; a run on tmr may record up
//! to `max_bn - 1` fewer, see `prepare`), as in paged attention's tile: `QK → SF`,
//! `SF → PV`, `SF → UP`, `PV → UP`, alloc → `UP` (creator edges) per block and `UP → UP`
//! between blocks: `6 · max_bn - 1`. Chunks share nothing the TensorMap tracks (`out` is
//! `manual_dep`), so no edge joins two chunks.
//!
//! | case | context lengths | max_bn | tasks | edges |
//! |---|---|---|---|---|
//! | CaseSmall1 | 33 | 3 | 13 | 17 |
//! | CaseSmall2 | 31 | 2 | 9 | 11 |
//! | CaseSmall3 | 128 | 8 | 33 | 47 |
//! | CaseVarSeq2 | 33, 17 | 3 | 13 | 17 |
//! | CaseVarSeq4 | 33, 64, 128, 15 | 8 | 33 | 47 |
//!
//! Every case has 16 heads, head dimension 16, blocks of 16 tokens and `max_model_len` 256.
//! The reference's onboard cases (batch 64 to 256, context 8192) are not ported. The golden is
//! paged attention's: plain softmax attention in f64 over each sequence's valid tokens, from the
//! bf16 inputs as stored; tolerance 1e-3 absolute plus 1e-3 relative.
//!
//! [`paged_attention_ringbuffer`](super::paged_attention_ringbuffer) runs this orchestration
//! on deliberately small rings.

use super::paged_attention::{
    arg, info, prepare_entry, read_i32, Case, EntryTensors, Geometry, KvPool, BAD_CONTEXT_LEN,
    BAD_ENTRY, PA_PV, PA_QK, PA_SOFTMAX, PA_UPDATE, Q_TILE,
};
use super::stream::TaskStream;
use super::{Prepared, Scene};
use simpler_aicore::kernels;
use simpler_aicpu::{Rt, RtError};
use simpler_core::orchestrator::TaskArg;
use simpler_core::scope::ScopeMode;
use simpler_core::{DataType, TensorArgType};
use std::sync::Arc;

/// The scene.
pub struct BatchPagedAttention;

/// Most sequences one chunk's tasks cover (the reference's `IN_CORE_BATCH`).
pub(crate) const IN_CORE_BATCH: u32 = 16;

const CASE_NAMES: &[&str] = &[
    "CaseSmall1",
    "CaseSmall2",
    "CaseSmall3",
    "CaseVarSeq2",
    "CaseVarSeq4",
];

/// The case called `name`.
fn case(name: &str) -> Option<Case> {
    let context_lens: &'static [u32] = match name {
        "CaseSmall1" => &[33],
        "CaseSmall2" => &[31],
        "CaseSmall3" => &[128],
        "CaseVarSeq2" => &[33, 17],
        "CaseVarSeq4" => &[33, 64, 128, 15],
        _ => return None,
    };
    Some(Case {
        pool: KvPool::Used,
        ..Case::small(context_lens, 256)
    })
}

/// Chunks (times query tiles) case `c` runs.
pub(crate) fn scopes(c: &Case) -> u64 {
    c.tiles_per_sequence() * c.batch().div_ceil(IN_CORE_BATCH) as u64
}

/// (tasks, edges) of case `c`'s graph (the module docs count them).
pub(crate) fn counts(c: &Case) -> (u64, u64) {
    let max_bn = c.used_blocks() as u64;
    let scopes = scopes(c);
    (scopes * (1 + 4 * max_bn), scopes * (6 * max_bn - 1))
}

/// Case `c` ready to run on the batched kernels, checked within `tol`.
pub(crate) fn prepare_batched(c: &Case, tol: f64) -> Prepared {
    let kernels = vec![
        kernels::pa_qk_batch,
        kernels::pa_softmax_batch,
        kernels::pa_pv_batch,
        kernels::pa_update_batch,
    ];
    prepare_entry(c, Arc::new(orchestrate), kernels, counts(c), tol)
}

/// The scene's orchestration on the device.
fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    stream(rt)
}

/// One chunk's share of the work: `count` sequences from `start`, heads `q_offset..` of a
/// query tile of `q_tile`.
struct Chunk<'e> {
    entry: &'e EntryTensors,
    geo: Geometry,
    scale: u64,
    max_bn: u32,
    q_offset: u32,
    q_tile: u32,
    count: u32,
    start: u32,
}

/// The scene's task stream (the module docs list it), on any [`TaskStream`].
pub fn stream<S: TaskStream>(s: &mut S) -> Result<(), S::Error> {
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
    let mut max_bn = 0;
    for b in 0..geo.batch {
        let ctx = read_i32(s, &entry.context_lens, b as u64)?;
        let capacity = geo.max_blocks as u64 * geo.block_size as u64;
        if ctx <= 0 || ctx as u64 > capacity {
            return Err(s.fatal(BAD_CONTEXT_LEN));
        }
        max_bn = max_bn.max((ctx as u32).div_ceil(geo.block_size));
    }
    let q_tile = geo.heads.min(Q_TILE);
    for q_offset in (0..geo.heads).step_by(q_tile as usize) {
        for start in (0..geo.batch).step_by(IN_CORE_BATCH as usize) {
            let chunk = Chunk {
                entry: &entry,
                geo,
                scale,
                max_bn,
                q_offset,
                q_tile,
                count: IN_CORE_BATCH.min(geo.batch - start),
                start,
            };
            s.scope(ScopeMode::Auto, |s| chunk_tasks(s, &chunk))?;
        }
    }
    Ok(())
}

/// One chunk's alloc task, then its four tasks per block index, each block in its own scope.
fn chunk_tasks<S: TaskStream>(s: &mut S, c: &Chunk<'_>) -> Result<(), S::Error> {
    use TensorArgType::{InOut, Input, Output};
    let e = c.entry;
    let (rows, d, bs) = (c.count * c.q_tile, c.geo.head_dim, c.geo.block_size);
    let oi_info = info(s, &[rows, d], DataType::Float32)?;
    let row_info = info(s, &[rows], DataType::Float32)?;
    let mut acc = [
        arg(oi_info, Output),
        arg(row_info, Output),
        arg(row_info, Output),
    ];
    s.alloc_tensors(&mut acc)?;
    let [oi, li, mi] = acc.map(|a| a.tensor);
    let sij_info = info(s, &[rows, bs], DataType::Float32)?;
    let pij_info = info(s, &[rows, bs], e.query.dtype())?;
    let (count, start, q_offset) = (c.count as u64, c.start as u64, c.q_offset as u64);
    let (heads, max_blocks) = (c.geo.heads as u64, c.geo.max_blocks as u64);
    for bn in 0..c.max_bn {
        let blk = bn as u64;
        s.scope(ScopeMode::Auto, |s| {
            let mut qk = [
                arg(e.query, Input),
                arg(e.key_cache, Input),
                arg(e.block_table, Input),
                arg(sij_info, Output),
            ];
            let qk_scalars = [count, blk, q_offset, max_blocks, heads, start];
            s.submit_aic(PA_QK, &mut qk, &qk_scalars)?;
            let mut sf = [
                arg(qk[3].tensor, Input),
                arg(e.context_lens, Input),
                arg(pij_info, Output),
                arg(row_info, Output),
                arg(row_info, Output),
            ];
            s.submit_aiv(PA_SOFTMAX, &mut sf, &[c.scale, count, blk, start])?;
            let mut pv = [
                arg(sf[2].tensor, Input),
                arg(e.value_cache, Input),
                arg(e.block_table, Input),
                arg(oi_info, Output),
            ];
            s.submit_aic(PA_PV, &mut pv, &[count, blk, max_blocks, start])?;
            let mut up: [TaskArg; 7] = [
                arg(sf[3].tensor, Input),
                arg(sf[4].tensor, Input),
                arg(pv[3].tensor, Input),
                arg(mi, InOut),
                arg(li, InOut),
                arg(oi, InOut),
                arg(e.out.with_manual_dep(true), InOut),
            ];
            let flags = [(bn == 0) as u64, (bn + 1 == c.max_bn) as u64];
            let up_scalars = [flags[0], flags[1], count, q_offset, heads, start];
            s.submit_aiv(PA_UPDATE, &mut up, &up_scalars)?;
            Ok(())
        })?;
    }
    Ok(())
}

impl Scene for BatchPagedAttention {
    fn name(&self) -> &'static str {
        "batch_paged_attention"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, name: &str) -> Option<Prepared> {
        let c = case(name)?;
        // Each block's four tasks close their own inner scope, so on tmr a block's `UP` may
        // complete and retire before the next block's `UP` is submitted; that WAIT-only
        // TensorMap edge is then not recorded (every other edge's producer is kept alive by
        // a scope still open): up to one per block after the first, per chunk. A host-built
        // graph retires nothing and has every edge.
        let slack = scopes(&c) * (c.used_blocks() as u64).saturating_sub(1);
        Some(prepare_batched(&c, 1e-3).with_edge_slack(slack))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_the_reference_task_counts() {
        let got: Vec<(u64, u64)> = CASE_NAMES
            .iter()
            .map(|name| counts(&case(name).unwrap()))
            .collect();
        assert_eq!(got, [(13, 17), (9, 11), (33, 47), (13, 17), (33, 47)]);
    }

    #[test]
    fn the_caches_hold_the_used_blocks_only() {
        let p = BatchPagedAttention.prepare("CaseVarSeq4").unwrap();
        // 4 sequences of up to 8 blocks: 32 blocks of 16 tokens of 16 bf16.
        assert_eq!(p.tensors[1].shapes, [32, 16, 1, 16]);
        assert_eq!(p.tensors[3].shapes, [4, 16]);
    }
}
