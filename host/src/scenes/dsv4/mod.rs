//! `dsv4_shaped`: a synthetic decode step shaped like the reference's DeepSeek-V4 one — eight
//! Graph Definitions of 1679 nodes in all, 129 host submissions per bind.
//!
//! Nothing here is DeepSeek-V4's arithmetic: the layers are small elementwise ops and matmuls
//! over f32 tiles (`T` = 16 tokens, hidden 64, head dim 16, 4 heads, compressed KV length 16,
//! expert width 32), arranged in the shape of a decode step — an embedding, 31 layers of
//! attention (compressed sparse on even layers, heavily compressed on odd ones) and MoE, a
//! multi-token-prediction block, a vocab-parallel LM head and a draft/main agreement score.
//! Every intermediate inside a body is an OUTPUT (runtime-allocated) tensor or a tensor of an
//! allocation task (the MTP block's four allocation tasks carry 32 tensors each, the per-task
//! cap); every boundary tensor is a view of an entry tensor; every kernel node's result
//! reaches an OUT entry tensor the golden checks.
//!
//! # The Definitions (per bind)
//!
//! | # | body | key | nodes | boundary (writers) | scalars | invocations |
//! |---|---|---|---|---|---|---|
//! | 1 | `embed` | 0 | 47 | 48 (1) | 1 | 1 |
//! | 2 | `attn_csa` | 0 | 32 | 31 (5) | 4 | 16 (even layers) |
//! | 3 | `attn_hca` | 0 | 41 | 27 (2) | 1 | 15 (odd layers) |
//! | 4 | `csa_moe_hashed` | `make_key(graph_key(b"csa_moe"), [Bool(true)])` | 32 | 28 (6) | 1 | 3 (layers 0-2) |
//! | 5 | `csa_moe_learned` | `make_key(graph_key(b"csa_moe"), [Bool(false)])` | 35 | 28 (6) | 1 | 28 |
//! | 6 | `mtp` | 0 | 774 | 45 (9) | 0 | 1 |
//! | 7 | `lm_head` | 0 | 359 | 42 (21) | 12 | 1 |
//! | 8 | `draft_agree` | 0 | 359 | 42 (1) | 0 | 1 |
//! | | | | **1679** | | | **66** |
//!
//! `csa_moe_hashed` and `csa_moe_learned` are one body, `csa_moe`, with its routing variant
//! a `const` parameter: a variant that changes the body's structure must be a different
//! Definition under a different key, because a Definition is the recorded structure.
//!
//! **Scalars are static Definition data.** A body's scalars (boundary scalars included) are
//! captured by value when the body is recorded, and every replay reuses the recorded values:
//! a replay with other boundary scalar values would silently compute with the first
//! invocation's. So every invocation of a Definition here passes the same scalar values (the
//! per-body constants below), and nothing that varies per layer is a scalar — per-layer data
//! is in the boundary's tensors, views of the entry tensors at the layer's row.
//!
//! # Per bind
//!
//! `embed`; per layer `l` in 0..31: the attention Graph (reads `HS[l]`, writes `A_OUT[l]`),
//! an ordinary `add` `MID[l] = HS[l] + A_OUT[l]`, the MoE Graph (reads `MID[l]`, writes
//! `M_OUT[l]`), an ordinary `add` `HS[l+1] = MID[l] + M_OUT[l]`; an ordinary `mul`
//! `H_FIN = HS[31] · G_FIN`; then `mtp`, `lm_head`, `draft_agree`. Host submissions: 66
//! `submit_graph` calls plus 63 ordinary submits at the outer level = **129**. On hbg a
//! Graph submission is one outer task, plus one kernel-less prelude task for each of the
//! four boundaries wider than a task (`embed`, `mtp`, `lm_head`, `draft_agree`); preludes
//! are not host submissions. Every bind records the eight Definitions once and replays the
//! other 58 submissions: `graphs == [8, 58, 0]`, 66 + 4 + 63 = 133 ring tasks.
//!
//! On tmr every body runs inline: 3805 tasks (the 1679 of the Definitions, 2063 more from
//! the repeated layer bodies, 63 ordinary) and 5235 edges, all held by the run's outer scope
//! (none retire while the orchestration runs, so the edge count is exact).
//!
//! # The golden
//!
//! The orchestration (`step`) is written once over an op vocabulary (`Ops`): on the
//! device each op is a task and each Graph a `submit_graph`; for the golden, a plain f64
//! evaluator runs the same op sequence over the host inputs (no kernel, no runtime), body
//! by body. Tolerance 2e-4 absolute plus 2e-4 relative, over every OUT entry tensor.
//!
//! # Files
//!
//! - [`shapes`]: the dimensions' short names, kernel ids, fatal codes, scalar constants,
//!   boundary widths and array capacities;
//! - [`inputs`]: the entry tensors' table and their deterministic fill;
//! - [`ops`]: the op vocabulary and its device side;
//! - [`bodies`]: the eight Graph bodies;
//! - [`step`]: the decode step, the scene's orchestration;
//! - [`golden`]: the vocabulary in f64 on the host, and the golden of every output.

pub mod bodies;
pub mod golden;
pub mod inputs;
pub mod ops;
pub mod shapes;
pub mod step;

use super::{golden_checks, Prepared, Scene, Tolerance, XorShift};
use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use inputs::{fill, ENTRIES};
use simpler_aicore::kernels;
use simpler_core::graph::{graph_key, make_key, ConfigValue};
use std::sync::Arc;

/// The `dsv4_shaped` scene, as [`scenes::all`](super::all) lists it: one case, `default`,
/// whose golden checks every OUT entry tensor.
pub struct Dsv4Shaped;

/// Tokens decoded in the step (the rows of every activation tile).
pub const TOKENS: u32 = 16;
/// Hidden size: the columns of every activation tile (`HS`, `MID`, the attention and MoE
/// outputs).
pub const HIDDEN: u32 = 64;
/// Attention head dimension: the columns of a head's queries, keys and values.
pub const HEAD_DIM: u32 = 16;
/// Attention heads of a layer (the CSA layers use all of them; the HCA layers share head 0's
/// key weights and compressed cache).
pub const HEADS: u32 = 4;
/// Compressed KV entries an attention reads.
pub const KV_LEN: u32 = 16;
/// Expert width: the columns of an expert's up and gate projections (and the router's).
pub const FFN: u32 = 32;
/// Transformer layers: each is an attention Graph and a MoE Graph, CSA attention on even
/// layers, HCA on odd ones.
pub const LAYERS: u32 = 31;
/// Layers whose MoE uses hash routing (`csa_moe` with `Bool(true)`), from layer 0.
pub const HASH_LAYERS: u32 = 3;
/// Routed experts of a layer's MoE (besides its shared expert).
pub const ROUTED: u32 = 4;
/// Vocabulary chunks of the embedding: one one-hot tile and one embedding tile each, summed
/// by `embed`.
pub const EMB_CHUNKS: u32 = 23;
/// Width of a vocabulary chunk, in vocabulary entries (the columns of a logits tile).
pub const VOCAB_CHUNK: u32 = 64;
/// Vocabulary groups of the LM head (one boundary tensor each).
pub const VOCAB_GROUPS: u32 = 20;
/// Vocabulary chunks per LM-head group (120 chunks in all).
pub const CHUNKS_PER_GROUP: u32 = 6;
/// Expert groups of the MTP block (one boundary tensor each).
pub const MTP_GROUPS: u32 = 8;
/// Routed experts per MTP group (128 in all, summed group by group).
pub const MTP_EXPERTS: u32 = 16;
/// Tensors one allocation task of the MTP block allocates (the per-task cap).
pub const MTP_ALLOC: u32 = 32;

/// The key of the `csa_moe` variant: `hashed` for the hash-routed one.
pub fn csa_moe_key(hashed: bool) -> u64 {
    make_key(graph_key(b"csa_moe"), &[ConfigValue::Bool(hashed)])
}

/// Absolute tolerance of the golden comparison.
const ATOL: f64 = 2e-4;
/// Relative tolerance of the golden comparison (of the golden's magnitude).
const RTOL: f64 = 2e-4;

impl Scene for Dsv4Shaped {
    fn name(&self) -> &'static str {
        "dsv4_shaped"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["default"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        if case != "default" {
            return None;
        }
        Some(Self::prepare_seeded(DEFAULT_SEED))
    }
}

/// The seed of the `default` case's entry data.
pub const DEFAULT_SEED: u64 = 0xD5F4_0DEC_0DE5_7E9D;

impl Dsv4Shaped {
    /// The `default` case with its entry data filled from `seed` (the golden computed for
    /// it): the same callable, shapes and Graph structure, other values.
    pub fn prepare_seeded(seed: u64) -> Prepared {
        let mut rng = XorShift(seed.max(1));
        let data: Vec<Vec<f32>> = ENTRIES.iter().map(|spec| fill(&mut rng, spec)).collect();
        let golden = golden::evaluate(&data);
        let tensors = ENTRIES
            .iter()
            .zip(&data)
            .map(|(spec, d)| HostTensor::f32(d, &spec.shape, spec.dir))
            .collect();
        {
            Prepared::new(
                Callable::raw(
                    Arc::new(step::orchestrate),
                    vec![
                        kernels::add,
                        kernels::mul,
                        kernels::add_scalar,
                        kernels::matmul,
                        kernels::accumulate,
                    ],
                    ENTRIES.iter().map(|spec| spec.dir).collect(),
                ),
                tensors,
                golden_checks(
                    golden,
                    Tolerance {
                        atol: ATOL,
                        rtol: RTOL,
                    },
                ),
            )
            .with_counts(3805, 5235)
        }
    }
}
