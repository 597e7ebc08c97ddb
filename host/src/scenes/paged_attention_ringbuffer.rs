//! `paged_attention_ringbuffer`: [`batch_paged_attention`](super::batch_paged_attention)'s
//! orchestration and kernels on rings far too small for it (the reference's
//! `examples/.../paged_attention_ringbuffer`, its one case `ringbuffer_stress`). What is under
//! test is the rings: the attention only has to come out right.
//!
//! `ringbuffer_stress`: 32 sequences of 4096 tokens, 16 heads, head dimension 128, blocks of 128
//! tokens, `max_model_len` 32768 (a 256-wide block table over the 1024 blocks the sequences
//! use), so two chunks of 16 sequences and `max_bn` 32. Tasks `2 · (1 + 4 · 32) = 258`, edges
//! `2 · (6 · 32 - 1) = 382` (batch paged attention's docs count them; no edge joins the chunks).
//!
//! Its rings ([`ring`]) are the reference's `runtime_env` for the case: a task window of 64
//! (`ring_task_window`), 4 MiB of heap (`ring_heap`) and 256 dependency-pool edges
//! (`ring_dep_pool`) per ring. Scope depth picks the ring, so the alloc tasks go to one ring
//! and the four tasks per block, each block in its own scope, to the next: that ring takes 256
//! tasks through 64 slots, and each block's scope holds about 320 KiB of intermediates, so its
//! 4 MiB heap wraps every dozen blocks. The device must be built with these sizes
//! (`DeviceConfig::ring`); on the default rings the case still runs, without the stress.
//!
//! On these rings the orchestrator waits for slots, so a block's `UP` can complete and retire
//! before the next block's `UP` is submitted. That edge is the only one found through the
//! TensorMap (WAIT only; every other edge is a creator edge, whose producer its scope keeps
//! alive), and a submit records no edge to a retired producer, so a run's edge count is 382 less
//! however many of those 62 `UP → UP` edges it found retired.
//!
//! Tolerance 1e-3 absolute plus 1e-3 relative against paged attention's f64 golden.

use super::batch_paged_attention::{prepare_batched, scopes};
use super::paged_attention::{Case, KvPool};
use super::{Prepared, Scene};
use simpler_core::ring::RingConfig;

/// The scene.
pub struct PagedAttentionRingbuffer;

const CASE_NAMES: &[&str] = &["ringbuffer_stress"];

/// `ringbuffer_stress`'s context lengths.
static STRESS_LENS: [u32; 32] = [4096; 32];

/// The case called `name`.
fn case(name: &str) -> Option<Case> {
    match name {
        "ringbuffer_stress" => Some(Case {
            context_lens: &STRESS_LENS,
            max_blocks: 32768 / 128,
            heads: 16,
            head_dim: 128,
            block_size: 128,
            pool: KvPool::Used,
        }),
        _ => None,
    }
}

/// The ring sizes case `name` must run on (every ring gets them), as the reference's
/// `runtime_env` sets them; `None` for an unknown case.
pub fn ring(name: &str) -> Option<RingConfig> {
    match name {
        "ringbuffer_stress" => Some(RingConfig {
            window: 64,
            heap_bytes: 4 << 20,
            edges: 256,
        }),
        _ => None,
    }
}

impl Scene for PagedAttentionRingbuffer {
    fn name(&self) -> &'static str {
        "paged_attention_ringbuffer"
    }

    fn cases(&self) -> &'static [&'static str] {
        CASE_NAMES
    }

    fn prepare(&self, name: &str) -> Option<Prepared> {
        let c = case(name)?;
        // On these rings the orchestrator waits for slots, so a block's `UP` can complete and
        // retire before the next block's `UP` is submitted; that WAIT-only TensorMap edge is
        // then not recorded (every other edge is a creator edge, whose producer its scope
        // keeps alive): up to one per block after the first, per chunk.
        let slack = scopes(&c) * (c.used_blocks() as u64 - 1);
        Some(
            prepare_batched(&c, 1e-3)
                .with_ring(ring(name)?)
                .with_edge_slack(slack),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenes::batch_paged_attention::counts;

    #[test]
    fn the_stress_case_has_two_chunks_of_32_blocks_on_small_rings() {
        let c = case("ringbuffer_stress").unwrap();
        assert_eq!(counts(&c), (258, 382));
        let r = ring("ringbuffer_stress").unwrap();
        assert_eq!((r.window, r.heap_bytes, r.edges), (64, 4 << 20, 256));
        assert!(ring("default").is_none());
    }
}
