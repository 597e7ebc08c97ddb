//! The example scenes: what `simpler run` runs and the scene tests check.
//!
//! A scene prepares, for one of its cases, a callable (orchestration function, kernel table,
//! entry signature), the entry tensors and scalars, and a check that compares the outputs
//! with a golden computed by independent reference code (never by the kernels).
//!
//! - [`vector`]: `vector_example`, five elementwise tasks over 16,384 fp32 elements;
//! - [`bgemm`]: the tiled batched matmul benchmark (`Case0`..`Case4`, `Bgemm64`);
//! - [`paged_attention`]: decode-style paged attention with online softmax;
//! - [`paged_attention_manual_scope`]: the same, each query tile in a MANUAL scope with
//!   explicit dependencies;
//! - [`batch_paged_attention`]: the same attention over chunks of up to 16 sequences, each
//!   chunk's tasks covering all of its sequences;
//! - [`multi_round_paged_attention`]: paged attention under the reference's multi-round case
//!   names, for several rounds on one chip;
//! - [`paged_attention_ringbuffer`]: `ringbuffer_stress`, batch paged attention on rings far
//!   too small for it ([`paged_attention_ringbuffer::ring`]);
//! - [`graph`]: `graph_vector`, one body submitted as a Graph eight times;
//! - [`dsv4`]: `dsv4_shaped`, a synthetic decode step shaped like the reference's DeepSeek-V4;
//! - [`l3`]: `l3_vector`, vector_example on two chips in child processes and a SUB worker;
//! - [`stream`]: [`stream::TaskStream`], the runtime calls a scene's orchestration makes, so
//!   the `submit` benchmark drives the scenes' own task streams on a bare orchestrator.

use crate::chip_worker::HostTensor;
use crate::transport::OrchFn;
use simpler_aicore::KernelFn;
use simpler_core::ArgDirection;

pub mod batch_paged_attention;
pub mod bgemm;
pub mod dsv4;
pub mod graph;
pub mod l3;
pub mod multi_round_paged_attention;
pub mod paged_attention;
pub mod paged_attention_manual_scope;
pub mod paged_attention_ringbuffer;
pub mod stream;
pub mod vector;

/// What a golden comparison found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Largest absolute difference from the golden, scaled by the tolerance's form.
    pub max_diff: f64,
    /// Whether every element is within tolerance.
    pub pass: bool,
}

/// A golden comparison over a round's tensors.
pub type CheckFn = Box<dyn Fn(&[HostTensor]) -> Check + Send + Sync>;

/// One case, ready to run.
pub struct Prepared {
    /// The orchestration function.
    pub orch: OrchFn,
    /// The kernel table.
    pub kernels: Vec<KernelFn>,
    /// The entry tensors' directions.
    pub signature: Vec<ArgDirection>,
    /// Fresh entry tensors (outputs zeroed); clone per round.
    pub tensors: Vec<HostTensor>,
    /// Entry scalars.
    pub scalars: Vec<u64>,
    /// Compares a round's tensors with the golden.
    pub check: CheckFn,
    /// Tasks the reference's graph has (including allocation tasks).
    pub tasks: u64,
    /// Producer-consumer edges the reference's graph has.
    pub edges: u64,
}

/// A scene and its cases.
pub trait Scene: Sync {
    /// The scene's name.
    fn name(&self) -> &'static str;
    /// Its case names; the first is the default.
    fn cases(&self) -> &'static [&'static str];
    /// Prepares `case`, or `None` for an unknown case.
    fn prepare(&self, case: &str) -> Option<Prepared>;
}

/// Every scene.
pub fn all() -> &'static [&'static dyn Scene] {
    &[
        &vector::VectorExample,
        &paged_attention::PagedAttention,
        &paged_attention_manual_scope::PagedAttentionManualScope,
        &bgemm::Bgemm,
        &graph::GraphVector,
        &dsv4::Dsv4Shaped,
        &batch_paged_attention::BatchPagedAttention,
        &multi_round_paged_attention::MultiRoundPagedAttention,
        &paged_attention_ringbuffer::PagedAttentionRingbuffer,
    ]
}

/// The scene called `name`.
pub fn find(name: &str) -> Option<&'static dyn Scene> {
    all().iter().copied().find(|s| s.name() == name)
}

/// A scene's orchestration function as a Graph body (its entry arguments are the boundary).
pub fn body(name: &str) -> Option<crate::record::GraphBody> {
    match name {
        "vector_example" => Some(vector::orchestrate),
        "bgemm" => Some(bgemm::orchestrate),
        _ => None,
    }
}

/// Compares `got` with `golden` element-wise: |got - golden| <= atol + rtol * |golden|.
pub fn compare(got: &[f32], golden: &[f64], atol: f64, rtol: f64) -> Check {
    let mut max_diff = 0.0f64;
    let mut pass = got.len() == golden.len();
    for (&g, &e) in got.iter().zip(golden) {
        let d = (g as f64 - e).abs();
        max_diff = max_diff.max(d);
        pass &= d <= atol + rtol * e.abs();
    }
    Check { max_diff, pass }
}

/// xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators,
/// scrambled", 2016): the deterministic source of the inputs.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `[0, 1)` with 24 random bits, exact in f32.
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32
    }
}
