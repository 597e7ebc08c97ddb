//! `multi_round_paged_attention`: [`paged_attention`](super::paged_attention) run for several
//! rounds on one chip (the reference's `tests/st/.../multi_round_paged_attention`, its four sim
//! cases).
//!
//! The reference's test is paged attention's example orchestration and kernels unchanged,
//! under its own case names and a looser tolerance; its rounds come from the runner's
//! `--rounds` (its docs suggest 10 for benchmarking): the same callable, registered once, runs
//! round after round on one chip with the same inputs, each round's outputs reset to their
//! initial values before it runs and compared with the golden after it. So here too: the
//! orchestration, kernels, inputs and golden are paged attention's, and `simpler run
//! multi_round_paged_attention --rounds N` (or a test's loop over one worker) gives the rounds,
//! each from a fresh copy of the prepared tensors, each checked.
//!
//! | case | context lengths | tasks | edges |
//! |---|---|---|---|
//! | Case1 | 33 | 13 | 17 |
//! | Case2 | 128 | 33 | 47 |
//! | CaseVarSeq2 | 33, 17 | 22 | 28 |
//! | CaseVarSeq4 | 33, 64, 128, 15 | 68 | 92 |
//!
//! Every case has 16 heads, head dimension 16, blocks of 16 tokens and `max_model_len` 256.
//! Tolerance 1e-2 absolute plus 1e-2 relative, the reference test's.

use super::paged_attention::{orchestrate, prepare_entry, tile_kernels, Case};
use super::{Prepared, Scene};
use std::sync::Arc;

/// The scene.
pub struct MultiRoundPagedAttention;

const CASE_NAMES: &[&str] = &["Case1", "Case2", "CaseVarSeq2", "CaseVarSeq4"];

/// The rounds the reference's docs run it for.
pub const ROUNDS: usize = 10;

/// The case called `name`: paged attention's case of the same context lengths.
fn case(name: &str) -> Option<Case> {
    let lens: &'static [u32] = match name {
        "Case1" => &[33],
        "Case2" => &[128],
        "CaseVarSeq2" => &[33, 17],
        "CaseVarSeq4" => &[33, 64, 128, 15],
        _ => return None,
    };
    Some(Case::small(lens, 256))
}

impl Scene for MultiRoundPagedAttention {
    fn name(&self) -> &'static str {
        "multi_round_paged_attention"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, name: &str) -> Option<Prepared> {
        let c = case(name)?;
        let counts = (c.tasks(), c.edges());
        Some(prepare_entry(
            &c,
            Arc::new(orchestrate),
            tile_kernels(),
            counts,
            1e-2,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenes::paged_attention::PagedAttention;

    #[test]
    fn each_case_is_the_paged_attention_case_of_its_context_lengths() {
        for (name, pa) in [
            ("Case1", "CaseSmall1"),
            ("Case2", "CaseSmall2"),
            ("CaseVarSeq2", "CaseVarSeq2"),
            ("CaseVarSeq4", "CaseVarSeq4"),
        ] {
            let m = MultiRoundPagedAttention.prepare(name).unwrap();
            let p = PagedAttention.prepare(pa).unwrap();
            assert_eq!((m.tasks, m.edges), (p.tasks, p.edges), "{name}");
            assert_eq!(m.tensors, p.tensors, "{name}: the same entry");
            assert_eq!(m.scalars, p.scalars, "{name}");
        }
    }
}
