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

use super::{compare, Check, Prepared, Scene, XorShift};
use crate::chip_worker::HostTensor;
use bytemuck::Zeroable;
use simpler_aicore::kernels;
use simpler_aicpu::{GraphBody, Rt, RtError};
use simpler_core::graph::{graph_key, make_key, ConfigValue};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{ArgDirection, DataType, TaskTensor, TensorArgType};
use std::sync::Arc;

/// The scene.
pub struct Dsv4Shaped;

/// Tokens decoded in the step (the rows of every activation tile).
pub const TOKENS: u32 = 16;
/// Hidden size.
pub const HIDDEN: u32 = 64;
/// Attention head dimension.
pub const HEAD_DIM: u32 = 16;
/// Attention heads.
pub const HEADS: u32 = 4;
/// Compressed KV entries an attention reads.
pub const KV_LEN: u32 = 16;
/// Expert width.
pub const FFN: u32 = 32;
/// Transformer layers.
pub const LAYERS: u32 = 31;
/// Layers whose MoE uses hash routing (`csa_moe` with `Bool(true)`), from layer 0.
pub const HASH_LAYERS: u32 = 3;
/// Routed experts of a layer's MoE (besides its shared expert).
pub const ROUTED: u32 = 4;
/// Vocabulary chunks of the embedding.
pub const EMB_CHUNKS: u32 = 23;
/// Width of a vocabulary chunk.
pub const VOCAB_CHUNK: u32 = 64;
/// Vocabulary groups of the LM head (one boundary tensor each).
pub const VOCAB_GROUPS: u32 = 20;
/// Vocabulary chunks per group.
pub const CHUNKS_PER_GROUP: u32 = 6;
/// Expert groups of the MTP block (one boundary tensor each).
pub const MTP_GROUPS: u32 = 8;
/// Experts per MTP group.
pub const MTP_EXPERTS: u32 = 16;
/// Tensors one allocation task of the MTP block allocates (the per-task cap).
pub const MTP_ALLOC: u32 = 32;

/// The key of the `csa_moe` variant: `hashed` for the hash-routed one.
pub fn csa_moe_key(hashed: bool) -> u64 {
    make_key(graph_key(b"csa_moe"), &[ConfigValue::Bool(hashed)])
}

// Kernel ids (the order of `Prepared::kernels`).
const ADD: u32 = 0;
const MUL: u32 = 1;
const ADD_SCALAR: u32 = 2;
const MATMUL: u32 = 3;
const ACCUMULATE: u32 = 4;

// Fatal codes.
const BAD_ENTRY: u32 = 1;
const BAD_VIEW: u32 = 2;
const BAD_BOUNDARY: u32 = 3;
const BAD_SHAPE: u32 = 4;

// The per-Definition scalar constants (static Definition data, the same every invocation).
const EMB_BIAS: [f32; 1] = [0.125];
const CSA_BIAS: [f32; 4] = [0.0625, -0.03125, 0.09375, -0.0625];
const HCA_BIAS: [f32; 1] = [-0.046875];
const ROUTER_BIAS: [f32; 1] = [0.25];
const HEAD_BIAS: [f32; 12] = [
    0.5, -0.25, 0.125, -0.0625, 0.375, -0.5, 0.25, 0.0, -0.125, 0.0625, -0.375, 0.1875,
];

// ------------------------------------------------------------------------------------------
// Entry tensors: every one is rank 4, [n0, n1, rows, cols], f32.
// ------------------------------------------------------------------------------------------

const T: u32 = TOKENS;
const D: u32 = HIDDEN;
const E: u32 = HEAD_DIM;
const S: u32 = KV_LEN;
const F: u32 = FFN;
const L: u32 = LAYERS;
const H: u32 = HEADS;
const VC: u32 = VOCAB_CHUNK;

/// How an input is filled.
#[derive(Clone, Copy)]
enum Init {
    /// Uniform in `[lo, hi)`.
    Uniform(f32, f32),
    /// 0 or 1, evenly.
    Mask,
    /// One 1 per token row across the chunks (a token id in the vocabulary).
    OneHot,
    /// Zero (an output).
    Zero,
}

struct Entry {
    shape: [u32; 4],
    dir: ArgDirection,
    init: Init,
}

const fn input(shape: [u32; 4], init: Init) -> Entry {
    Entry {
        shape,
        dir: ArgDirection::In,
        init,
    }
}

const fn output(shape: [u32; 4]) -> Entry {
    Entry {
        shape,
        dir: ArgDirection::Out,
        init: Init::Zero,
    }
}

const W: Init = Init::Uniform(-0.1, 0.1);
const KV: Init = Init::Uniform(-0.25, 0.25);
const GAIN: Init = Init::Uniform(0.5, 1.5);
const UNIT: Init = Init::Uniform(0.0, 1.0);

const ONEHOT: usize = 0;
const EMB: usize = 1;
const POS: usize = 2;
const G_ATTN: usize = 3;
const WQ: usize = 4;
const WK: usize = 5;
const KC: usize = 6;
const MSK: usize = 7;
const VCACHE: usize = 8;
const WO: usize = 9;
const KW: usize = 10;
const VW: usize = 11;
const GT: usize = 12;
const G_FFN: usize = 13;
const WR: usize = 14;
const WU: usize = 15;
const WG: usize = 16;
const WD: usize = 17;
const RT: usize = 18;
const G_FIN: usize = 19;
const ONEHOT_NEXT: usize = 20;
const EMB_NEXT: usize = 21;
const G_MTP: usize = 22;
const MWU: usize = 23;
const MWG: usize = 24;
const MWD: usize = 25;
const MRT: usize = 26;
const WV: usize = 27;
const HS: usize = 28;
const MID: usize = 29;
const A_OUT: usize = 30;
const M_OUT: usize = 31;
const KV_OUT: usize = 32;
const EO: usize = 33;
const H_FIN: usize = 34;
const MO: usize = 35;
const MTP_OUT: usize = 36;
const LG: usize = 37;
const ZS: usize = 38;
const AGREE: usize = 39;

const NX: u32 = ROUTED + 1;
const MG: u32 = MTP_GROUPS;
const MP: u32 = MTP_EXPERTS;
const NG: u32 = VOCAB_GROUPS;
const K: u32 = CHUNKS_PER_GROUP;

// Each body's boundary: tensors and scalars.
const EMBED_TENSORS: usize = 2 * EMB_CHUNKS as usize + 2;
const CSA_TENSORS: usize = 3 + 7 * H as usize;
const HCA_TENSORS: usize = 7 + 5 * H as usize;
const MOE_TENSORS: usize = 4 + 4 * NX as usize + ROUTED as usize;
const MTP_TENSORS: usize = 5 + 5 * MG as usize;
const HEAD_TENSORS: usize = 2 + 2 * NG as usize;

/// The largest of `xs` (a `const` context has no `Iterator::max`).
const fn max_of(xs: &[usize]) -> usize {
    let mut m = 0;
    let mut i = 0;
    while i < xs.len() {
        if xs[i] > m {
            m = xs[i];
        }
        i += 1;
    }
    m
}

// The capacities of the fixed arrays the runtime side works in, so that a warm bind
// allocates nothing on the host heap: every boundary, scalar list, sum and allocation task
// of the scene fits them by construction, and one that would not is a fatal error, not a
// growth.

/// The widest boundary (`embed`'s 48 tensors).
const MAX_BOUNDARY: usize = max_of(&[
    EMBED_TENSORS,
    CSA_TENSORS,
    HCA_TENSORS,
    MOE_TENSORS,
    MTP_TENSORS,
    HEAD_TENSORS,
]);
/// The most scalars of a body (`lm_head`'s 12).
const MAX_SCALARS: usize = max_of(&[
    EMB_BIAS.len(),
    CSA_BIAS.len(),
    HCA_BIAS.len(),
    ROUTER_BIAS.len(),
    HEAD_BIAS.len(),
]);
/// The widest sum tree (`lm_head`'s and `draft_agree`'s 120 chunks).
const MAX_SUM: usize = max_of(&[
    H as usize,
    NX as usize,
    MP as usize,
    MG as usize,
    (NG * K) as usize,
]);
/// The most tensors of one allocation task (the per-task cap the MTP block uses).
const MAX_ALLOC: usize = MTP_ALLOC as usize;

/// The entry tensors, in signature order (the index constants above).
const ENTRIES: [Entry; 40] = [
    // ONEHOT: the step's tokens, one-hot over the embedding's vocabulary chunks
    input([1, EMB_CHUNKS, T, VC], Init::OneHot),
    // EMB: the embedding rows of each chunk
    input([1, EMB_CHUNKS, VC, D], Init::Uniform(-1.0, 1.0)),
    // POS: the positions' embedding
    input([1, 1, T, D], Init::Uniform(-0.5, 0.5)),
    // G_ATTN: the attention norm's gain per layer
    input([L, 1, T, D], GAIN),
    // WQ, WK: per layer and head (HCA layers use head 0's WK only)
    input([L, H, D, E], W),
    input([L, H, D, E], W),
    // KC: compressed keys, transposed (HCA: head 0's, shared)
    input([L, H, E, S], KV),
    // MSK: the sparse selection of the CSA layers
    input([L, H, T, S], Init::Mask),
    // VCACHE: compressed values (HCA: head 0's, shared)
    input([L, H, S, E], KV),
    // WO
    input([L, H, E, D], KV),
    // KW, VW: the HCA layers' window keys (transposed) and values
    input([L, H, E, S], KV),
    input([L, H, S, E], KV),
    // GT: the HCA layers' output gates
    input([L, H, T, E], UNIT),
    // G_FFN: the MoE norm's gain per layer
    input([L, 1, T, D], GAIN),
    // WR: the router
    input([L, 1, D, F], W),
    // WU, WG, WD: per layer the shared expert (0) and the routed ones
    input([L, NX, D, F], W),
    input([L, NX, D, F], W),
    input([L, NX, F, D], W),
    // RT: per layer the routed experts' routing weights
    input([L, ROUTED, T, F], UNIT),
    // G_FIN: the final norm's gain
    input([1, 1, T, D], GAIN),
    // ONEHOT_NEXT, EMB_NEXT: the MTP block's next token and its embedding
    input([1, 1, T, VC], Init::OneHot),
    input([1, 1, VC, D], Init::Uniform(-1.0, 1.0)),
    // G_MTP
    input([1, 1, T, D], GAIN),
    // MWU, MWG, MWD, MRT: the MTP experts, by group
    input([MG, MP, D, F], W),
    input([MG, MP, D, F], W),
    input([MG, MP, F, D], W),
    input([MG, MP, T, F], UNIT),
    // WV: the LM head, by vocabulary group and chunk
    input([NG, K, D, VC], W),
    // HS: the hidden state entering each layer, and the last layer's output
    output([L + 1, 1, T, D]),
    // MID: after each layer's attention
    output([L, 1, T, D]),
    // A_OUT, M_OUT: each layer's attention and MoE outputs
    output([L, 1, T, D]),
    output([L, 1, T, D]),
    // KV_OUT: the new keys (HCA layers write head 0 only)
    output([L, H, T, E]),
    // EO: the MoE combine buffers, one per expert
    output([L, NX, T, D]),
    // H_FIN: after the final norm
    output([1, 1, T, D]),
    // MO: the MTP expert groups' outputs
    output([MG, 1, T, D]),
    // MTP_OUT
    output([1, 1, T, D]),
    // LG: the logits
    output([NG, K, T, VC]),
    // ZS: the sum of the logits' chunks (before bias)
    output([1, 1, T, VC]),
    // AGREE: the draft/main agreement
    output([1, 1, T, VC]),
];

// ------------------------------------------------------------------------------------------
// The op vocabulary.
// ------------------------------------------------------------------------------------------

type R<V> = Result<V, RtError>;

/// A body's arithmetic over its boundary tensors and scalars.
type Math<O> = fn(&mut O, &[<O as Ops>::T], &[f32]) -> R<()>;

/// What the orchestration and the bodies are written in: tasks on the device, f64 for the
/// golden. Tensors are matrices (`[.., rows, cols]` with every leading extent 1) except the
/// row views of [`Ops::view`] with `j = None`, which only [`Ops::slice`] reads.
trait Ops: Sized {
    /// A tensor handle.
    type T: Copy;
    /// Ends the run with `code`.
    fn fatal(&mut self, code: u32) -> RtError;
    /// The `[1, 1, rows, cols]` view `(i, j)` of a rank-4 entry, or with `j = None` its
    /// `[1, n1, rows, cols]` row `i`.
    fn view(&mut self, t: Self::T, i: u32, j: Option<u32>) -> R<Self::T>;
    /// Slice `k` (`[1, 1, rows, cols]`) of a row view.
    fn slice(&mut self, t: Self::T, k: u32) -> R<Self::T>;
    /// `a · b` into a new tensor.
    fn mm(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a · b` into an existing tensor.
    fn mm_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a + b` (elementwise) into a new tensor.
    fn add(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a + b` into an existing tensor.
    fn add_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a * b` (elementwise) into a new tensor.
    fn mul(&mut self, a: Self::T, b: Self::T) -> R<Self::T>;
    /// `c = a * b` into an existing tensor.
    fn mul_to(&mut self, a: Self::T, b: Self::T, c: Self::T) -> R<()>;
    /// `a + s` into a new tensor.
    fn adds(&mut self, a: Self::T, s: f32) -> R<Self::T>;
    /// `c = a + s` into an existing tensor.
    fn adds_to(&mut self, a: Self::T, s: f32, c: Self::T) -> R<()>;
    /// `c += p` (`c` INOUT).
    fn acc(&mut self, p: Self::T, c: Self::T) -> R<()>;
    /// `out.len()` new `[rows, cols]` tensors from one allocation task, into `out` (a
    /// caller's array: the device side must not allocate on the host heap).
    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [Self::T]) -> R<()>;
    /// A Graph: `body` (whose arithmetic is `math`) over `boundary` and `scalars`.
    fn graph(
        &mut self,
        key: u64,
        body: GraphBody,
        math: Math<Self>,
        boundary: &[(Self::T, TensorArgType)],
        scalars: &[f32],
    ) -> R<()>;
}

/// The device: every op is a task of the runtime `rt`.
struct Dev<'x, 'r, 'a> {
    rt: &'x mut Rt<'r, 'a>,
}

fn arg(tensor: TaskTensor, tag: TensorArgType) -> TaskArg {
    TaskArg { tensor, tag }
}

/// The last two extents.
fn matrix(t: &TaskTensor) -> (u32, u32) {
    match *t.shapes() {
        [.., r, c] => (r, c),
        [c] => (1, c),
        [] => (0, 0),
    }
}

impl Dev<'_, '_, '_> {
    fn new_tensor(&mut self, rows: u32, cols: u32) -> R<TaskTensor> {
        TaskTensor::create_info(&[rows, cols], DataType::Float32)
            .map_err(|_| self.rt.report_fatal(BAD_SHAPE))
    }

    fn vector(&mut self, kernel: u32, args: &mut [TaskArg], scalars: &[u64]) -> R<()> {
        self.rt.submit_aiv(kernel, args, scalars).map(|_| ())
    }

    /// An elementwise op of `inputs` into a new tensor shaped like the first.
    fn fresh(&mut self, kernel: u32, inputs: &[TaskTensor], s: &[u64]) -> R<TaskTensor> {
        let (r, c) = matrix(&inputs[0]);
        let out = self.new_tensor(r, c)?;
        let mut args = [arg(out, TensorArgType::Output); 3];
        for (a, &t) in args.iter_mut().zip(inputs) {
            *a = arg(t, TensorArgType::Input);
        }
        let n = inputs.len() + 1;
        args[n - 1] = arg(out, TensorArgType::Output);
        self.vector(kernel, &mut args[..n], s)?;
        Ok(args[n - 1].tensor)
    }
}

fn bits(s: f32) -> u64 {
    s.to_bits() as u64
}

impl Ops for Dev<'_, '_, '_> {
    type T = TaskTensor;

    fn fatal(&mut self, code: u32) -> RtError {
        self.rt.report_fatal(code)
    }

    fn view(&mut self, t: TaskTensor, i: u32, j: Option<u32>) -> R<TaskTensor> {
        let &[_, n1, r, c] = t.shapes() else {
            return Err(self.fatal(BAD_VIEW));
        };
        let v = match j {
            Some(j) => t.view(&[1, 1, r, c], &[i, j, 0, 0]),
            None => t.view(&[1, n1, r, c], &[i, 0, 0, 0]),
        };
        v.map_err(|_| self.fatal(BAD_VIEW))
    }

    fn slice(&mut self, t: TaskTensor, k: u32) -> R<TaskTensor> {
        let &[1, _, r, c] = t.shapes() else {
            return Err(self.fatal(BAD_VIEW));
        };
        t.view(&[1, 1, r, c], &[0, k, 0, 0])
            .map_err(|_| self.fatal(BAD_VIEW))
    }

    fn mm(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        let (m, _) = matrix(&a);
        let (_, n) = matrix(&b);
        let out = self.new_tensor(m, n)?;
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(out, TensorArgType::Output),
        ];
        self.rt.submit_aic(MATMUL, &mut args, &[])?;
        Ok(args[2].tensor)
    }

    fn mm_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.rt.submit_aic(MATMUL, &mut args, &[]).map(|_| ())
    }

    fn add(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        self.fresh(ADD, &[a, b], &[])
    }

    fn add_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(ADD, &mut args, &[])
    }

    fn mul(&mut self, a: TaskTensor, b: TaskTensor) -> R<TaskTensor> {
        self.fresh(MUL, &[a, b], &[])
    }

    fn mul_to(&mut self, a: TaskTensor, b: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(b, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(MUL, &mut args, &[])
    }

    fn adds(&mut self, a: TaskTensor, s: f32) -> R<TaskTensor> {
        self.fresh(ADD_SCALAR, &[a], &[bits(s)])
    }

    fn adds_to(&mut self, a: TaskTensor, s: f32, c: TaskTensor) -> R<()> {
        let mut args = [
            arg(a, TensorArgType::Input),
            arg(c, TensorArgType::OutputExisting),
        ];
        self.vector(ADD_SCALAR, &mut args, &[bits(s)])
    }

    fn acc(&mut self, p: TaskTensor, c: TaskTensor) -> R<()> {
        let mut args = [arg(p, TensorArgType::Input), arg(c, TensorArgType::InOut)];
        self.vector(ACCUMULATE, &mut args, &[])
    }

    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [TaskTensor]) -> R<()> {
        let t = self.new_tensor(rows, cols)?;
        let mut args = [arg(t, TensorArgType::Output); MAX_ALLOC];
        let Some(args) = args.get_mut(..out.len()) else {
            return Err(self.fatal(BAD_SHAPE));
        };
        self.rt.alloc_tensors(args)?;
        for (o, a) in out.iter_mut().zip(args.iter()) {
            *o = a.tensor;
        }
        Ok(())
    }

    fn graph(
        &mut self,
        key: u64,
        body: GraphBody,
        _math: Math<Self>,
        boundary: &[(TaskTensor, TensorArgType)],
        scalars: &[f32],
    ) -> R<()> {
        let (n, m) = (boundary.len(), scalars.len());
        if n > MAX_BOUNDARY || m > MAX_SCALARS {
            return Err(self.fatal(BAD_BOUNDARY));
        }
        let mut args = [arg(Zeroable::zeroed(), TensorArgType::Input); MAX_BOUNDARY];
        for (a, &(t, tag)) in args.iter_mut().zip(boundary) {
            *a = arg(t, tag);
        }
        let mut words = [0; MAX_SCALARS];
        for (w, &s) in words.iter_mut().zip(scalars) {
            *w = bits(s);
        }
        self.rt
            .submit_graph(key, body, &mut args[..n], &words[..m])
            .map(|_| ())
    }
}

/// A golden tensor: a dense `[n1, rows, cols]` window of one buffer (`n1` = 1 except for row
/// views).
#[derive(Clone, Copy, Debug)]
struct Gv {
    buf: usize,
    off: usize,
    n0: usize,
    n1: usize,
    rows: usize,
    cols: usize,
}

impl Gv {
    fn len(&self) -> usize {
        self.rows * self.cols
    }
}

/// The golden: every op evaluated in f64 on the host. Buffers `0..keep` are the entry
/// tensors; a body's intermediates are dropped when it ends.
struct Gold {
    bufs: Vec<Vec<f64>>,
    keep: usize,
}

impl Gold {
    fn matrix(&mut self, t: Gv) -> R<&[f64]> {
        if t.n0 != 1 || t.n1 != 1 {
            return Err(self.fatal(BAD_SHAPE));
        }
        Ok(&self.bufs[t.buf][t.off..t.off + t.len()])
    }

    fn fresh(&mut self, rows: usize, cols: usize, data: Vec<f64>) -> Gv {
        self.bufs.push(data);
        Gv {
            buf: self.bufs.len() - 1,
            off: 0,
            n0: 1,
            n1: 1,
            rows,
            cols,
        }
    }

    fn store(&mut self, c: Gv, data: &[f64]) -> R<()> {
        if c.n0 != 1 || c.n1 != 1 || c.len() != data.len() {
            return Err(self.fatal(BAD_SHAPE));
        }
        self.bufs[c.buf][c.off..c.off + c.len()].copy_from_slice(data);
        Ok(())
    }

    fn product(&mut self, a: Gv, b: Gv) -> R<Vec<f64>> {
        if a.cols != b.rows {
            return Err(self.fatal(BAD_SHAPE));
        }
        let (m, k, n) = (a.rows, a.cols, b.cols);
        let x = self.matrix(a)?.to_vec();
        let y = self.matrix(b)?;
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for p in 0..k {
                let v = x[i * k + p];
                for j in 0..n {
                    c[i * n + j] += v * y[p * n + j];
                }
            }
        }
        Ok(c)
    }

    fn zip(&mut self, a: Gv, b: Gv, f: impl Fn(f64, f64) -> f64) -> R<Vec<f64>> {
        if a.len() != b.len() {
            return Err(self.fatal(BAD_SHAPE));
        }
        let x = self.matrix(a)?.to_vec();
        let y = self.matrix(b)?;
        Ok(x.iter().zip(y).map(|(&u, &v)| f(u, v)).collect())
    }

    fn shift(&mut self, a: Gv, s: f32) -> R<Vec<f64>> {
        Ok(self.matrix(a)?.iter().map(|&u| u + s as f64).collect())
    }
}

impl Ops for Gold {
    type T = Gv;

    fn fatal(&mut self, code: u32) -> RtError {
        RtError::Fatal(code)
    }

    fn view(&mut self, t: Gv, i: u32, j: Option<u32>) -> R<Gv> {
        let (i, n1) = (i as usize, t.n1);
        if i >= t.n0 || j.is_some_and(|j| j as usize >= n1) {
            return Err(self.fatal(BAD_VIEW));
        }
        let row = t.off + i * n1 * t.len();
        Ok(match j {
            Some(j) => Gv {
                off: row + j as usize * t.len(),
                n0: 1,
                n1: 1,
                ..t
            },
            None => Gv {
                off: row,
                n0: 1,
                ..t
            },
        })
    }

    fn slice(&mut self, t: Gv, k: u32) -> R<Gv> {
        if t.n0 != 1 || k as usize >= t.n1 {
            return Err(self.fatal(BAD_VIEW));
        }
        Ok(Gv {
            off: t.off + k as usize * t.len(),
            n1: 1,
            ..t
        })
    }

    fn mm(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let c = self.product(a, b)?;
        Ok(self.fresh(a.rows, b.cols, c))
    }

    fn mm_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.product(a, b)?;
        self.store(c, &v)
    }

    fn add(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let v = self.zip(a, b, |x, y| x + y)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn add_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.zip(a, b, |x, y| x + y)?;
        self.store(c, &v)
    }

    fn mul(&mut self, a: Gv, b: Gv) -> R<Gv> {
        let v = self.zip(a, b, |x, y| x * y)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn mul_to(&mut self, a: Gv, b: Gv, c: Gv) -> R<()> {
        let v = self.zip(a, b, |x, y| x * y)?;
        self.store(c, &v)
    }

    fn adds(&mut self, a: Gv, s: f32) -> R<Gv> {
        let v = self.shift(a, s)?;
        Ok(self.fresh(a.rows, a.cols, v))
    }

    fn adds_to(&mut self, a: Gv, s: f32, c: Gv) -> R<()> {
        let v = self.shift(a, s)?;
        self.store(c, &v)
    }

    fn acc(&mut self, p: Gv, c: Gv) -> R<()> {
        let v = self.zip(p, c, |x, y| x + y)?;
        self.store(c, &v)
    }

    fn alloc(&mut self, rows: u32, cols: u32, out: &mut [Gv]) -> R<()> {
        let (r, c) = (rows as usize, cols as usize);
        for t in out {
            *t = self.fresh(r, c, vec![0.0; r * c]);
        }
        Ok(())
    }

    fn graph(
        &mut self,
        _key: u64,
        _body: GraphBody,
        math: Math<Self>,
        boundary: &[(Gv, TensorArgType)],
        scalars: &[f32],
    ) -> R<()> {
        let b: Vec<Gv> = boundary.iter().map(|&(t, _)| t).collect();
        let r = math(self, &b, scalars);
        self.bufs.truncate(self.keep);
        r
    }
}

// ------------------------------------------------------------------------------------------
// The bodies.
// ------------------------------------------------------------------------------------------

/// Checks a body's boundary widths.
fn widths<O: Ops>(o: &mut O, b: &[O::T], s: &[f32], tensors: usize, scalars: usize) -> R<()> {
    if b.len() != tensors || s.len() != scalars {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    Ok(())
}

/// `out = Σ xs` by a pairwise tree, level by level (an odd one out moves up a level): one
/// add per input but one, the last one into `out`.
fn sum_tree<O: Ops>(o: &mut O, xs: &[O::T], out: O::T) -> R<()> {
    let mut n = xs.len();
    if !(2..=MAX_SUM).contains(&n) {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    // One fixed array, each level written over the front of the one before: entry `i` of
    // the next level reads entries `2i` and `2i + 1`, never one already overwritten.
    let mut level = [xs[0]; MAX_SUM];
    level[..n].copy_from_slice(xs);
    while n > 2 {
        let mut next = 0;
        for i in (0..n).step_by(2) {
            level[next] = if i + 1 < n {
                o.add(level[i], level[i + 1])?
            } else {
                level[i]
            };
            next += 1;
        }
        n = next;
    }
    o.add_to(level[0], level[1], out)
}

/// A body's boundary and scalars, copied out of its entry arguments into fixed arrays: the
/// body needs the runtime mutably while it reads them, and a copy into a `Vec` would
/// allocate on every run of the body.
struct BodyArgs {
    tensors: [TaskTensor; MAX_BOUNDARY],
    scalars: [f32; MAX_SCALARS],
    n: usize,
    m: usize,
}

impl BodyArgs {
    fn tensors(&self) -> &[TaskTensor] {
        &self.tensors[..self.n]
    }

    fn scalars(&self) -> &[f32] {
        &self.scalars[..self.m]
    }
}

/// The boundary and scalars of a body's run, as its entry arguments; wider than any body's
/// is fatal (no body would accept it).
fn entry(rt: &mut Rt<'_, '_>) -> R<BodyArgs> {
    let (n, m) = (rt.args().tensors().len(), rt.args().scalars().len());
    if n > MAX_BOUNDARY || m > MAX_SCALARS {
        return Err(rt.report_fatal(BAD_BOUNDARY));
    }
    let mut a = BodyArgs {
        tensors: [Zeroable::zeroed(); MAX_BOUNDARY],
        scalars: [0.0; MAX_SCALARS],
        n,
        m,
    };
    let args = rt.args();
    a.tensors[..n].copy_from_slice(args.tensors());
    for (s, &v) in a.scalars.iter_mut().zip(args.scalars()) {
        *s = f32::from_bits(v as u32);
    }
    Ok(a)
}

/// `embed` (48 tensors: the token one-hots and embedding rows of 23 vocabulary chunks, the
/// positions; writes `HS[0]`): `HS[0] = Σ_c onehot_c · emb_c + pos + bias`, the chunk
/// products summed by an `accumulate` chain. 47 nodes.
fn embed<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let c = EMB_CHUNKS as usize;
    widths(o, b, s, EMBED_TENSORS, EMB_BIAS.len())?;
    let mut parts = [b[0]; EMB_CHUNKS as usize];
    for (i, p) in parts.iter_mut().enumerate() {
        *p = o.mm(b[i], b[c + i])?;
    }
    let acc = o.add(parts[0], parts[1])?;
    for &p in &parts[2..] {
        o.acc(p, acc)?;
    }
    let x = o.add(acc, b[2 * c])?;
    o.adds_to(x, s[0], b[2 * c + 1])
}

fn embed_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    embed(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `attn_csa` (31 tensors: `x = HS[l]`, its gain, per head `Wq`, `Wk`, the compressed keys
/// (transposed), the sparse selection mask, the compressed values, `Wo`; writes the new key
/// per head and `A_OUT[l]`): per head `y_h = (((xn·Wq)·Kc + bias_h) ⊙ mask)·Vc·Wo` and
/// `key_h = xn·Wk`, `A_OUT = Σ_h y_h`. 32 nodes.
fn attn_csa<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let h = HEADS as usize;
    widths(o, b, s, CSA_TENSORS, CSA_BIAS.len())?;
    let xn = o.mul(b[0], b[1])?;
    let mut ys = [xn; HEADS as usize];
    for (i, y) in ys.iter_mut().enumerate() {
        let q = o.mm(xn, b[2 + i])?;
        o.mm_to(xn, b[2 + h + i], b[2 + 6 * h + i])?;
        let sc = o.mm(q, b[2 + 2 * h + i])?;
        let sc = o.adds(sc, s[i])?;
        let p = o.mul(sc, b[2 + 3 * h + i])?;
        let a = o.mm(p, b[2 + 4 * h + i])?;
        *y = o.mm(a, b[2 + 5 * h + i])?;
    }
    sum_tree(o, &ys, b[2 + 7 * h])
}

fn attn_csa_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    attn_csa(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `attn_hca` (27 tensors: `x = HS[l]`, its gain, per head `Wq`, one shared `Wk`, shared
/// compressed keys and values, per head window keys and values, an output gate and `Wo`;
/// writes the shared new key and `A_OUT[l]`): per head
/// `y_h = ((q·Kc)·Vc + ((q·Kw) + bias)·Vw) ⊙ gate_h · Wo_h`, `A_OUT = Σ_h y_h`. 41 nodes.
fn attn_hca<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let h = HEADS as usize;
    widths(o, b, s, HCA_TENSORS, HCA_BIAS.len())?;
    let (wk, kc, vc) = (b[2 + h], b[3 + h], b[4 + h]);
    let xn = o.mul(b[0], b[1])?;
    o.mm_to(xn, wk, b[5 + 5 * h])?;
    let mut ys = [xn; HEADS as usize];
    for (i, y) in ys.iter_mut().enumerate() {
        let q = o.mm(xn, b[2 + i])?;
        let sc = o.mm(q, kc)?;
        let sw = o.mm(q, b[5 + h + i])?;
        let sw = o.adds(sw, s[0])?;
        let oc = o.mm(sc, vc)?;
        let ow = o.mm(sw, b[5 + 2 * h + i])?;
        let a = o.add(oc, ow)?;
        let a = o.mul(a, b[5 + 3 * h + i])?;
        *y = o.mm(a, b[5 + 4 * h + i])?;
    }
    sum_tree(o, &ys, b[6 + 5 * h])
}

fn attn_hca_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    attn_hca(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// One expert: `out = ((xn·Wu) ⊙ (xn·Wg) [⊙ route]) · Wd`. 4 nodes, 5 with a route.
fn expert<O: Ops>(o: &mut O, xn: O::T, w: [O::T; 3], route: Option<O::T>, out: O::T) -> R<()> {
    let u = o.mm(xn, w[0])?;
    let v = o.mm(xn, w[1])?;
    let mut h = o.mul(u, v)?;
    if let Some(r) = route {
        h = o.mul(h, r)?;
    }
    o.mm_to(h, w[2], out)
}

/// `csa_moe` (28 tensors: `x = MID[l]`, its gain, the router, per expert (shared + 4 routed)
/// `Wu`, `Wg`, `Wd`, per routed expert its routing weights; writes every expert's output into
/// its combine buffer `EO[l, e]` and `M_OUT[l]`): `M_OUT = Σ_e EO[l, e]`.
///
/// `HASHED`: the routed experts take the hash routing's fixed weights as they are, and the
/// learned gate `xn·Wr + bias` scales the shared expert (32 nodes). Otherwise each routed
/// expert's weights are the learned gate masked by its routing weights, and the shared expert
/// is ungated (35 nodes).
fn csa_moe<O: Ops, const HASHED: bool>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let (nx, r) = (NX as usize, ROUTED as usize);
    widths(o, b, s, MOE_TENSORS, ROUTER_BIAS.len())?;
    let xn = o.mul(b[0], b[1])?;
    let gate = o.mm(xn, b[2])?;
    let gate = o.adds(gate, s[0])?;
    let w = |e: usize| [b[3 + e], b[3 + nx + e], b[3 + 2 * nx + e]];
    let eo = |e: usize| b[3 + 3 * nx + r + e];
    let shared_route = HASHED.then_some(gate);
    expert(o, xn, w(0), shared_route, eo(0))?;
    for e in 1..nx {
        let weights = b[3 + 3 * nx + e - 1];
        let route = if HASHED {
            weights
        } else {
            o.mul(gate, weights)?
        };
        expert(o, xn, w(e), Some(route), eo(e))?;
    }
    let outs: [O::T; NX as usize] = std::array::from_fn(eo);
    sum_tree(o, &outs, b[3 + 4 * nx + r])
}

fn csa_moe_hashed_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    csa_moe::<_, true>(&mut Dev { rt }, a.tensors(), a.scalars())
}

fn csa_moe_learned_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    csa_moe::<_, false>(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `mtp` (45 tensors: `H_FIN`, the next token's one-hot and embedding, a gain, per expert
/// group its `Wu`, `Wg`, `Wd` and routing weights as `[1, 16, ..]` rows; writes the group
/// outputs `MO[g]` and `MTP_OUT`): `xn = (H_FIN + onehot·emb) ⊙ gain`; 128 routed experts
/// whose outputs land in four allocation tasks of 32 tensors; `MO[g] = Σ` of the group's 16,
/// `MTP_OUT = Σ_g MO[g]`. 774 nodes.
fn mtp<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let (g, p) = (MTP_GROUPS as usize, MTP_EXPERTS as usize);
    widths(o, b, s, MTP_TENSORS, 0)?;
    let en = o.mm(b[1], b[2])?;
    let x = o.add(b[0], en)?;
    let xn = o.mul(x, b[3])?;
    let mut ds = [xn; (MG * MP) as usize];
    for chunk in ds.chunks_mut(MAX_ALLOC) {
        o.alloc(TOKENS, HIDDEN, chunk)?;
    }
    for gi in 0..g {
        for pi in 0..p {
            let k = pi as u32;
            let w = [
                o.slice(b[4 + gi], k)?,
                o.slice(b[4 + g + gi], k)?,
                o.slice(b[4 + 2 * g + gi], k)?,
            ];
            let route = o.slice(b[4 + 3 * g + gi], k)?;
            expert(o, xn, w, Some(route), ds[gi * p + pi])?;
        }
        sum_tree(o, &ds[gi * p..(gi + 1) * p], b[4 + 4 * g + gi])?;
    }
    let groups: [O::T; MG as usize] = std::array::from_fn(|gi| b[4 + 4 * g + gi]);
    sum_tree(o, &groups, b[4 + 5 * g])
}

fn mtp_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    mtp(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `lm_head` (42 tensors: `H_FIN`, per vocabulary group its `[1, 6, 64, 64]` weight row;
/// writes per group its `[1, 6, 16, 64]` logits row and `ZS`): per chunk `z = H_FIN · W`,
/// `logits = z + bias` (twelve biases, round robin), `ZS = Σ z`. 359 nodes.
fn lm_head<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let g = VOCAB_GROUPS as usize;
    widths(o, b, s, HEAD_TENSORS, HEAD_BIAS.len())?;
    // Chunk `n` is chunk `n % K` of group `n / K`, group by group.
    let mut zs = [b[0]; (NG * K) as usize];
    for (n, z) in zs.iter_mut().enumerate() {
        let (gi, k) = (n / K as usize, (n % K as usize) as u32);
        let w = o.slice(b[1 + gi], k)?;
        *z = o.mm(b[0], w)?;
        let logits = o.slice(b[1 + g + gi], k)?;
        o.adds_to(*z, s[n % s.len()], logits)?;
    }
    sum_tree(o, &zs, b[1 + 2 * g])
}

fn lm_head_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    lm_head(&mut Dev { rt }, a.tensors(), a.scalars())
}

/// `draft_agree` (42 tensors: `MTP_OUT`, the LM head's weight rows and the logits it wrote;
/// writes `AGREE`): per chunk the draft logits `MTP_OUT · W` times the main logits,
/// `AGREE = Σ` over the chunks. 359 nodes.
fn draft_agree<O: Ops>(o: &mut O, b: &[O::T], s: &[f32]) -> R<()> {
    let g = VOCAB_GROUPS as usize;
    widths(o, b, s, HEAD_TENSORS, 0)?;
    // Chunk `n` is chunk `n % K` of group `n / K`, group by group, as in `lm_head`.
    let mut ps = [b[0]; (NG * K) as usize];
    for (n, p) in ps.iter_mut().enumerate() {
        let (gi, k) = (n / K as usize, (n % K as usize) as u32);
        let w = o.slice(b[1 + gi], k)?;
        let draft = o.mm(b[0], w)?;
        let main = o.slice(b[1 + g + gi], k)?;
        *p = o.mul(draft, main)?;
    }
    sum_tree(o, &ps, b[1 + 2 * g])
}

fn draft_agree_body(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let a = entry(rt)?;
    draft_agree(&mut Dev { rt }, a.tensors(), a.scalars())
}

// ------------------------------------------------------------------------------------------
// The decode step.
// ------------------------------------------------------------------------------------------

/// A boundary being built: a fixed array (no host heap on the device side), reused from one
/// Graph submission to the next. A push past the capacity is remembered, and the submission
/// refused, rather than dropped or grown.
struct Boundary<T> {
    items: [(T, TensorArgType); MAX_BOUNDARY],
    len: usize,
    overflow: bool,
}

impl<T: Copy> Boundary<T> {
    /// An empty boundary; `fill` only initialises the unused slots.
    fn new(fill: T) -> Self {
        Self {
            items: [(fill, TensorArgType::Input); MAX_BOUNDARY],
            len: 0,
            overflow: false,
        }
    }

    fn clear(&mut self) {
        self.len = 0;
        self.overflow = false;
    }

    fn push(&mut self, item: (T, TensorArgType)) {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                *slot = item;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }
}

/// [`Ops::graph`] over a built boundary.
fn submit<O: Ops>(
    o: &mut O,
    key: u64,
    body: GraphBody,
    math: Math<O>,
    b: &Boundary<O::T>,
    scalars: &[f32],
) -> R<()> {
    if b.overflow {
        return Err(o.fatal(BAD_BOUNDARY));
    }
    o.graph(key, body, math, &b.items[..b.len], scalars)
}

/// The decode step over the entry tensors `e` (see the module documentation).
fn step<O: Ops>(o: &mut O, e: &[O::T]) -> R<()> {
    use TensorArgType::{Input as I, OutputExisting as X};
    let mut b = Boundary::new(e[ONEHOT]);
    // embed
    for c in 0..EMB_CHUNKS {
        b.push((o.view(e[ONEHOT], 0, Some(c))?, I));
    }
    for c in 0..EMB_CHUNKS {
        b.push((o.view(e[EMB], 0, Some(c))?, I));
    }
    b.push((o.view(e[POS], 0, Some(0))?, I));
    b.push((o.view(e[HS], 0, Some(0))?, X));
    submit(o, 0, embed_body, embed::<O>, &b, &EMB_BIAS)?;

    for l in 0..LAYERS {
        let hs = o.view(e[HS], l, Some(0))?;
        let a_out = o.view(e[A_OUT], l, Some(0))?;
        b.clear();
        b.push((hs, I));
        b.push((o.view(e[G_ATTN], l, Some(0))?, I));
        if l % 2 == 0 {
            for t in [WQ, WK, KC, MSK, VCACHE, WO] {
                for h in 0..HEADS {
                    b.push((o.view(e[t], l, Some(h))?, I));
                }
            }
            for h in 0..HEADS {
                b.push((o.view(e[KV_OUT], l, Some(h))?, X));
            }
            b.push((a_out, X));
            submit(o, 0, attn_csa_body, attn_csa::<O>, &b, &CSA_BIAS)?;
        } else {
            for h in 0..HEADS {
                b.push((o.view(e[WQ], l, Some(h))?, I));
            }
            for t in [WK, KC, VCACHE] {
                b.push((o.view(e[t], l, Some(0))?, I));
            }
            for t in [KW, VW, GT, WO] {
                for h in 0..HEADS {
                    b.push((o.view(e[t], l, Some(h))?, I));
                }
            }
            b.push((o.view(e[KV_OUT], l, Some(0))?, X));
            b.push((a_out, X));
            submit(o, 0, attn_hca_body, attn_hca::<O>, &b, &HCA_BIAS)?;
        }
        let mid = o.view(e[MID], l, Some(0))?;
        o.add_to(hs, a_out, mid)?;

        let m_out = o.view(e[M_OUT], l, Some(0))?;
        b.clear();
        b.push((mid, I));
        b.push((o.view(e[G_FFN], l, Some(0))?, I));
        b.push((o.view(e[WR], l, Some(0))?, I));
        for t in [WU, WG, WD] {
            for x in 0..NX {
                b.push((o.view(e[t], l, Some(x))?, I));
            }
        }
        for r in 0..ROUTED {
            b.push((o.view(e[RT], l, Some(r))?, I));
        }
        for x in 0..NX {
            b.push((o.view(e[EO], l, Some(x))?, X));
        }
        b.push((m_out, X));
        let hashed = l < HASH_LAYERS;
        if hashed {
            let math = csa_moe::<O, true>;
            submit(
                o,
                csa_moe_key(true),
                csa_moe_hashed_body,
                math,
                &b,
                &ROUTER_BIAS,
            )?;
        } else {
            let math = csa_moe::<O, false>;
            submit(
                o,
                csa_moe_key(false),
                csa_moe_learned_body,
                math,
                &b,
                &ROUTER_BIAS,
            )?;
        }
        let next = o.view(e[HS], l + 1, Some(0))?;
        o.add_to(mid, m_out, next)?;
    }
    let h_fin = o.view(e[H_FIN], 0, Some(0))?;
    let last = o.view(e[HS], LAYERS, Some(0))?;
    let gain = o.view(e[G_FIN], 0, Some(0))?;
    o.mul_to(last, gain, h_fin)?;

    // mtp
    b.clear();
    b.push((h_fin, I));
    for t in [ONEHOT_NEXT, EMB_NEXT, G_MTP] {
        b.push((o.view(e[t], 0, Some(0))?, I));
    }
    for t in [MWU, MWG, MWD, MRT] {
        for g in 0..MTP_GROUPS {
            b.push((o.view(e[t], g, None)?, I));
        }
    }
    for g in 0..MTP_GROUPS {
        b.push((o.view(e[MO], g, Some(0))?, X));
    }
    let mtp_out = o.view(e[MTP_OUT], 0, Some(0))?;
    b.push((mtp_out, X));
    submit(o, 0, mtp_body, mtp::<O>, &b, &[])?;

    // lm_head
    b.clear();
    b.push((h_fin, I));
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[WV], g, None)?, I));
    }
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[LG], g, None)?, X));
    }
    b.push((o.view(e[ZS], 0, Some(0))?, X));
    submit(o, 0, lm_head_body, lm_head::<O>, &b, &HEAD_BIAS)?;

    // draft_agree
    b.clear();
    b.push((mtp_out, I));
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[WV], g, None)?, I));
    }
    for g in 0..VOCAB_GROUPS {
        b.push((o.view(e[LG], g, None)?, I));
    }
    b.push((o.view(e[AGREE], 0, Some(0))?, X));
    submit(o, 0, draft_agree_body, draft_agree::<O>, &b, &[])
}

fn orchestrate(rt: &mut Rt<'_, '_>) -> Result<(), RtError> {
    let given = rt.args().tensors();
    let ok = given.len() == ENTRIES.len()
        && given
            .iter()
            .zip(&ENTRIES)
            .all(|(t, spec)| t.shapes() == spec.shape && t.dtype() == DataType::Float32);
    if !ok {
        return Err(rt.report_fatal(BAD_ENTRY));
    }
    // A copy (the ops need `rt` mutably), into an array rather than a `Vec`.
    let mut e = [Zeroable::zeroed(); ENTRIES.len()];
    e.copy_from_slice(rt.args().tensors());
    step(&mut Dev { rt }, &e)
}

// ------------------------------------------------------------------------------------------
// Inputs and the golden.
// ------------------------------------------------------------------------------------------

fn fill(rng: &mut XorShift, spec: &Entry) -> Vec<f32> {
    let [n0, n1, r, c] = spec.shape.map(|x| x as usize);
    let n = n0 * n1 * r * c;
    match spec.init {
        Init::Uniform(lo, hi) => (0..n).map(|_| lo + (hi - lo) * rng.unit()).collect(),
        Init::Mask => (0..n).map(|_| (rng.next_u64() >> 63) as f32).collect(),
        Init::Zero => vec![0.0; n],
        Init::OneHot => {
            // [1, chunks, tokens, chunk width]: token t's id picks one chunk and one column.
            let mut v = vec![0.0; n];
            for t in 0..r {
                let id = (rng.next_u64() % (n1 * c) as u64) as usize;
                v[((id / c) * r + t) * c + id % c] = 1.0;
            }
            v
        }
    }
}

/// Absolute tolerance.
const ATOL: f64 = 2e-4;
/// Relative tolerance.
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
        let mut rng = XorShift(0xD5F4_0DEC_0DE5_7E9D);
        let data: Vec<Vec<f32>> = ENTRIES.iter().map(|spec| fill(&mut rng, spec)).collect();
        let mut gold = Gold {
            bufs: data
                .iter()
                .map(|d| d.iter().map(|&x| x as f64).collect())
                .collect(),
            keep: ENTRIES.len(),
        };
        let views: Vec<Gv> = ENTRIES
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let [n0, n1, rows, cols] = spec.shape.map(|x| x as usize);
                Gv {
                    buf: i,
                    off: 0,
                    n0,
                    n1,
                    rows,
                    cols,
                }
            })
            .collect();
        step(&mut gold, &views).expect("the golden evaluates");
        let outputs: Vec<usize> = (0..ENTRIES.len())
            .filter(|&i| ENTRIES[i].dir == ArgDirection::Out)
            .collect();
        let golden: Vec<(usize, Vec<f64>)> = outputs
            .iter()
            .map(|&i| (i, std::mem::take(&mut gold.bufs[i])))
            .collect();
        let tensors = ENTRIES
            .iter()
            .zip(&data)
            .map(|(spec, d)| HostTensor::f32(d, &spec.shape, spec.dir))
            .collect();
        Some(Prepared {
            orch: Arc::new(orchestrate),
            kernels: vec![
                kernels::add,
                kernels::mul,
                kernels::add_scalar,
                kernels::matmul,
                kernels::accumulate,
            ],
            signature: ENTRIES.iter().map(|spec| spec.dir).collect(),
            tensors,
            scalars: Vec::new(),
            check: Box::new(move |t| {
                let mut all = Check {
                    max_diff: 0.0,
                    pass: t.len() == ENTRIES.len(),
                };
                for (i, g) in &golden {
                    let Some(got) = t.get(*i) else {
                        return Check {
                            max_diff: f64::INFINITY,
                            pass: false,
                        };
                    };
                    let c = compare(&got.to_f32(), g, ATOL, RTOL);
                    all.max_diff = all.max_diff.max(c.max_diff);
                    all.pass &= c.pass;
                }
                all
            }),
            tasks: 3805,
            edges: 5235,
        })
    }
}
