//! Scenes: the [`Scene`] a program defines, and the example scenes the `simpler` command
//! runs and the scene tests check.
//!
//! A scene prepares, for one of its cases, a callable (orchestration function, kernel table,
//! entry signature), the entry tensors and scalars, and a check that compares the outputs
//! with a golden computed by independent reference code (never by the kernels). The check is
//! usually [`golden_check`]: a golden and a [`Tolerance`], compared by [`compare`]. A program
//! runs its own scenes through [`crate::app`], which gives them the `simpler` command and a
//! test helper.
//!
//! The project's scenes:
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
//! - [`dummy_task`]: `dummy_task`, dependency-only tasks between a cube producer and consumer;
//! - [`spmd_multiblock`]: `spmd_multiblock_aiv` and `spmd_multiblock_mix`, SPMD tasks of more
//!   blocks than the device has cores, each block writing its index;
//! - [`mixed_example`]: `mixed_example`, a task of every resource shape per scoped iteration;
//! - [`scalar_data`]: `scalar_data`, element reads and writes by the orchestration between tasks;
//! - [`stream`]: [`stream::TaskStream`], the runtime calls a scene's orchestration makes, so
//!   the `submit` benchmark drives the scenes' own task streams on a bare orchestrator.

use crate::callable::Callable;
use crate::chip_worker::HostTensor;
use crate::transport::Runtime;
use simpler_core::ring::RingConfig;

pub mod batch_paged_attention;
pub mod bgemm;
pub mod dsv4;
pub mod dummy_task;
pub mod graph;
pub mod l3;
#[cfg(feature = "mpi")]
pub mod l4;
pub mod mixed_example;
pub mod multi_round_paged_attention;
pub mod paged_attention;
pub mod paged_attention_manual_scope;
pub mod paged_attention_ringbuffer;
pub mod scalar_data;
pub mod spmd_multiblock;
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

/// One case, ready to run: build it with [`Prepared::new`] and the `with_` methods, or with a
/// struct expression (every field is public).
pub struct Prepared {
    /// The orchestration, its kernels and its signature; register it with
    /// [`crate::ChipWorker::register`] (it is cheap to clone).
    pub callable: Callable,
    /// Fresh entry tensors (outputs zeroed); clone per round.
    pub tensors: Vec<HostTensor>,
    /// Entry scalars.
    pub scalars: Vec<u64>,
    /// Compares a round's tensors with the golden.
    pub check: CheckFn,
    /// Tasks a run of the case reports (including allocation tasks), when the scene states
    /// them: [`crate::app::check_case`] compares every round's count with it; `None` checks
    /// nothing. The project's scenes give the reference's counts.
    pub tasks: Option<u64>,
    /// Producer-consumer edges a run of the case reports, when the scene states them; checked
    /// as [`Prepared::tasks`] is.
    pub edges: Option<u64>,
    /// The task and edge counts of an hbg run, when they differ from [`Prepared::tasks`] and
    /// [`Prepared::edges`]: a host-built run counts each Graph invocation as one outer task,
    /// whose nodes the device expands.
    pub hbg_counts: Option<(u64, u64)>,
    /// Edges a run may report below [`Prepared::edges`]: a WAIT-only edge found through the
    /// TensorMap is not recorded when its producer has already retired, which small rings
    /// (whose submits wait for slots) make a matter of timing. 0 unless set.
    pub edge_slack: u64,
    /// The ring sizes the case runs on (every ring gets them, as the reference's `runtime_env`
    /// sets them), on tmr; `None` keeps the device's defaults. An hbg run keeps its own sizes.
    pub ring: Option<RingConfig>,
}

impl Prepared {
    /// A case of `callable` on entry `tensors`, checked by `check` (usually
    /// [`golden_check`]); no scalars and no expected counts.
    pub fn new(callable: Callable, tensors: Vec<HostTensor>, check: CheckFn) -> Self {
        Prepared {
            callable,
            tensors,
            scalars: Vec::new(),
            check,
            tasks: None,
            edges: None,
            hbg_counts: None,
            edge_slack: 0,
            ring: None,
        }
    }

    /// The case with entry scalars `scalars`.
    pub fn with_scalars(mut self, scalars: Vec<u64>) -> Self {
        self.scalars = scalars;
        self
    }

    /// The case with the task and edge counts every run of it must report.
    pub fn with_counts(mut self, tasks: u64, edges: u64) -> Self {
        self.tasks = Some(tasks);
        self.edges = Some(edges);
        self
    }

    /// The case with other counts for an hbg run ([`Prepared::hbg_counts`]).
    pub fn with_hbg_counts(mut self, tasks: u64, edges: u64) -> Self {
        self.hbg_counts = Some((tasks, edges));
        self
    }

    /// The case with up to `slack` edges fewer allowed ([`Prepared::edge_slack`]).
    pub fn with_edge_slack(mut self, slack: u64) -> Self {
        self.edge_slack = slack;
        self
    }

    /// The case on rings of these sizes ([`Prepared::ring`]).
    pub fn with_ring(mut self, ring: RingConfig) -> Self {
        self.ring = Some(ring);
        self
    }

    /// The tasks and edges a run on `runtime` must report, as far as the case states them.
    pub fn counts(&self, runtime: Runtime) -> (Option<u64>, Option<u64>) {
        match (runtime, self.hbg_counts) {
            (Runtime::Hbg, Some((tasks, edges))) => (Some(tasks), Some(edges)),
            _ => (self.tasks, self.edges),
        }
    }
}

/// How far an output element may be from its golden: `|got - golden| <= atol + rtol * |golden|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// The absolute part.
    pub atol: f64,
    /// The part relative to the golden's magnitude.
    pub rtol: f64,
}

/// A check comparing entry tensor `output` (read as f32) with `golden` within `tolerance`
/// ([`compare`]). A round with fewer tensors fails with an infinite `max_diff`.
pub fn golden_check(output: usize, golden: Vec<f64>, tolerance: Tolerance) -> CheckFn {
    golden_checks(vec![(output, golden)], tolerance)
}

/// A check comparing each `(entry tensor index, golden)` pair as [`golden_check`] does: it
/// passes when every output does, and its `max_diff` is the largest over them.
pub fn golden_checks(goldens: Vec<(usize, Vec<f64>)>, tolerance: Tolerance) -> CheckFn {
    let Tolerance { atol, rtol } = tolerance;
    Box::new(move |tensors| {
        let mut all = Check {
            max_diff: 0.0,
            pass: true,
        };
        for (index, golden) in &goldens {
            let Some(got) = tensors.get(*index) else {
                return Check {
                    max_diff: f64::INFINITY,
                    pass: false,
                };
            };
            let c = compare_bytes(&got.data, golden, atol, rtol);
            all.max_diff = all.max_diff.max(c.max_diff);
            all.pass &= c.pass;
        }
        all
    })
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

/// Every scene of the project (`l3_vector`, which needs child processes, is run by `simpler l3`).
pub fn all() -> &'static [&'static dyn Scene] {
    &[
        &vector::VectorExample,
        &paged_attention::PagedAttention,
        &paged_attention_manual_scope::PagedAttentionManualScope,
        &bgemm::Bgemm,
        &graph::GraphVector,
        &dsv4::Dsv4Shaped,
        &dummy_task::DummyTask,
        &spmd_multiblock::SpmdMultiblockAiv,
        &spmd_multiblock::SpmdMultiblockMix,
        &mixed_example::MixedExample,
        &scalar_data::ScalarData,
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

/// [`compare`] of little-endian f32 bytes (a tensor's data, read in place: no copy of it).
/// A length that is not `4 * golden.len()` fails.
pub fn compare_bytes<G: Copy + Into<f64>>(got: &[u8], golden: &[G], atol: f64, rtol: f64) -> Check {
    let mut max_diff = 0.0f64;
    let mut pass = got.len() == 4 * golden.len();
    for (b, &e) in got.chunks_exact(4).zip(golden) {
        let (g, e) = (
            f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            e.into(),
        );
        let d = (g - e).abs();
        max_diff = max_diff.max(d);
        pass &= d <= atol + rtol * e.abs();
    }
    Check { max_diff, pass }
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

/// [`compare`] of each `(tensor index, golden)` pair: the largest difference over all of
/// them, and a pass only if every one passes (a missing tensor fails).
pub(crate) fn compare_each(
    got: &[HostTensor],
    golden: &[(usize, Vec<f64>)],
    atol: f64,
    rtol: f64,
) -> Check {
    let all = Check {
        max_diff: 0.0,
        pass: true,
    };
    golden.iter().fold(all, |all, (i, g)| {
        let c = got.get(*i).map_or(
            Check {
                max_diff: f64::INFINITY,
                pass: false,
            },
            |t| compare_bytes(&t.data, g, atol, rtol),
        );
        Check {
            max_diff: all.max_diff.max(c.max_diff),
            pass: all.pass && c.pass,
        }
    })
}
