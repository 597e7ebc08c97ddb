//! `paged_attention_manual_scope`: [`paged_attention`](super::paged_attention) with each query
//! tile in a MANUAL scope and its ordering stated as explicit dependencies (the reference's
//! `paged_attention_manual_scope`, its four sim cases).
//!
//! Everything but the orchestration is paged attention's: the entry tensors and scalar, the
//! kernels (`pa_qk`, `pa_softmax`, `pa_pv`, `pa_update`), each case's seeded inputs and block
//! table, and the f64 golden (tolerance 1e-3 absolute plus 1e-3 relative). The tasks are the
//! same too, with the same tensors and tags: per sequence and query tile, one `alloc_tensors`
//! task for `oi`, `li`, `mi`, then `QK`, `SF`, `PV` and `UP` per KV block (`1 + 4n` tasks for
//! `n` blocks). What changes is who states the ordering. Each tile's scope is
//! [`ScopeMode::Manual`], so no TensorMap lookup or insert runs, and the tasks declare (as the
//! reference's tasks do, each a `WAIT | RETAIN` [`ExplicitDep`]):
//! - `SF` on its block's `QK`;
//! - `PV` on its block's `SF`;
//! - `UP` on its block's `PV`, on the previous block's `UP` (the chain the AUTO scene infers
//!   through the INOUT accumulators), and on the last block on the alloc task as well, to keep
//!   the accumulators alive until their last reader. `UP`'s read of `SF`'s `mij` and `lij` is
//!   left undeclared: `SF → PV → UP` orders it.
//!
//! That is `4n` declared edges per tile, and in the reference the whole graph: its MANUAL
//! scope skips creator edges too (its `compute_task_fanin` returns before the creator step).
//! Here a MANUAL scope keeps creator edges (see [`simpler_core::scope`] and
//! [`simpler_core::deps`]): every tensor still depends on the task that allocated it. So this
//! scene's graph also has the `2n - 1` creator edges no task declares, `SF → UP` (through
//! `mij` and `lij`) and alloc → `UP` for every block but the last (through the accumulators),
//! and the declared edges it shares with creator edges (`QK → SF`, `SF → PV`, `PV → UP`,
//! alloc → the last `UP`) are recorded once. `4n + 2n - 1 = 6n - 1` edges per tile: the same
//! producer-consumer pairs as the AUTO scene's graph. The one difference is the `UP → UP`
//! edge's kind: declared, it retains as well as waits; inferred from the TensorMap, it only
//! waits.
//!
//! | case | context lengths | tasks | edges | the reference's edges |
//! |---|---|---|---|---|
//! | CaseSmall1 | 33 | 13 | 17 | 12 |
//! | CaseSmall2 | 128 | 33 | 47 | 32 |
//! | CaseVarSeq2 | 33, 17 | 22 | 28 | 20 |
//! | CaseVarSeq4 | 33, 64, 128, 15 | 68 | 92 | 64 |
//!
//! Every case has 16 heads, head dimension 16, blocks of 16 tokens and `max_model_len` 256, as
//! in the AUTO scene. The reference's onboard-only cases (batch up to 256, context 8192) are
//! not ported, nor its `ring_task_window` override, which only those need.

use super::paged_attention::{
    each_query_tile, prepare_case, Case, Tile, PA_PV, PA_QK, PA_SOFTMAX, PA_UPDATE,
};
use super::stream::TaskStream;
use super::{Prepared, Scene};
use simpler_aicpu::{Rt, RtError};
use simpler_core::deps::ExplicitDep;
use simpler_core::scope::ScopeMode;
use simpler_core::TaskId;
use std::sync::Arc;

/// The scene.
pub struct PagedAttentionManualScope;

const CASE_NAMES: &[&str] = &["CaseSmall1", "CaseSmall2", "CaseVarSeq2", "CaseVarSeq4"];

/// Edges a tile of `n` KV blocks declares (the reference's whole graph for the tile): `QK → SF`
/// and `SF → PV` per block, `PV → UP` per block, `UP → UP` between blocks, alloc → the last
/// `UP`.
fn declared_edges(n: u64) -> u64 {
    n + n + n + (n - 1) + 1
}

/// Creator edges of a tile of `n` KV blocks that no task declares: `SF → UP` per block and
/// alloc → `UP` for every block but the last.
fn undeclared_creator_edges(n: u64) -> u64 {
    n + (n - 1)
}

/// Edges case `c`'s graph has here.
fn edges(c: &Case) -> u64 {
    let per_sequence: u64 = c
        .blocks()
        .map(|n| declared_edges(n) + undeclared_creator_edges(n))
        .sum();
    c.tiles_per_sequence() * per_sequence
}

/// The scene's orchestration on the device.
fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    stream(rt)
}

/// The scene's task stream (the module docs list it), on any [`TaskStream`].
pub fn stream<S: TaskStream>(s: &mut S) -> Result<(), S::Error> {
    each_query_tile(s, ScopeMode::Manual, query_tile)
}

/// Submits one tile's alloc task and its four tasks per KV block, in the tile's MANUAL scope,
/// each with the dependencies the module docs list.
fn query_tile<S: TaskStream>(s: &mut S, tile: &Tile<'_>) -> Result<(), S::Error> {
    let t = tile.tensors(s)?;
    let mut acc = t.alloc();
    let alloc = s.alloc_tensors(&mut acc)?;
    let acc = acc.map(|a| a.tensor);
    let mut prev_up: Option<TaskId> = None;
    for j in 0..tile.blocks() {
        let kv = tile.block(s, j)?;
        let mut qk = t.qk(kv.kj);
        let qk_id = s.submit_aic(PA_QK, &mut qk, &[tile.scale])?;

        let mut sf = t.sf(qk[2].tensor);
        let sf_deps = [ExplicitDep::on(qk_id)];
        let sf_id = s.submit_aiv_with_deps(PA_SOFTMAX, &mut sf, &[kv.valid as u64], &sf_deps)?;

        let mut pv = t.pv(sf[1].tensor, kv.vj);
        let pv_deps = [ExplicitDep::on(sf_id)];
        let pv_id = s.submit_aic_with_deps(PA_PV, &mut pv, &[], &pv_deps)?;

        // Always the block's PV; the previous UP, if any; the alloc task on the last block.
        let mut up_deps = [ExplicitDep::on(pv_id); 3];
        let mut count = 1;
        for dep in [prev_up, kv.is_last.then_some(alloc)].into_iter().flatten() {
            up_deps[count] = ExplicitDep::on(dep);
            count += 1;
        }
        let mut up = t.up(&sf, pv[2].tensor, acc);
        let args = &mut up[..kv.up_len()];
        let up_id = s.submit_aiv_with_deps(PA_UPDATE, args, &kv.up_scalars(), &up_deps[..count])?;
        prev_up = Some(up_id);
    }
    Ok(())
}

impl Scene for PagedAttentionManualScope {
    fn name(&self) -> &'static str {
        "paged_attention_manual_scope"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if !CASE_NAMES.contains(&case) {
            return None;
        }
        let c = Case::named(case)?;
        Some(prepare_case(&c, Arc::new(orchestrate), edges(&c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenes::paged_attention::PagedAttention;

    /// Edges case `c`'s graph has in the reference, whose MANUAL scope takes no creator edges.
    fn reference_edges(c: &Case) -> u64 {
        c.tiles_per_sequence() * c.blocks().map(declared_edges).sum::<u64>()
    }

    #[test]
    fn every_case_has_the_auto_scenes_tasks_and_edges_and_the_reference_declares_fewer() {
        for name in CASE_NAMES {
            let manual = PagedAttentionManualScope.prepare(name).unwrap();
            let auto = PagedAttention.prepare(name).unwrap();
            assert_eq!(
                (manual.tasks, manual.edges),
                (auto.tasks, auto.edges),
                "{name}"
            );
            assert_eq!(manual.tensors, auto.tensors, "{name}: the same entry");
            assert_eq!(manual.scalars, auto.scalars, "{name}");
        }
        let counts: Vec<(u64, u64)> = CASE_NAMES
            .iter()
            .map(|name| {
                let c = Case::named(name).unwrap();
                (edges(&c), reference_edges(&c))
            })
            .collect();
        assert_eq!(counts, [(17, 12), (47, 32), (28, 20), (92, 64)]);
    }

    #[test]
    fn only_the_sim_cases_are_offered() {
        assert!(PagedAttentionManualScope.prepare("Bench16704").is_none());
        assert!(PagedAttentionManualScope.prepare("Case1").is_none());
    }
}
