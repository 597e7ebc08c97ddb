//! Graph recording for the hbg runtime: a body recorded once into a Graph Definition.
//!
//! A [`Recording`] is one recorder thread's retained storage. It records a body (an ordinary
//! orchestration function whose boundary arrives as its entry arguments) by running it through
//! a private copy of the runtime — an orchestrator, its TensorMap (the recording's hazard map)
//! and a task ring whose heap lives in the virtual range at `1 << 63` — so the dependencies a
//! Definition holds are computed by exactly the code that computes them for per-task
//! submission. A submit hook turns every submitted task into a node: its kernels, its tensors
//! (copied whole into the packed tensor region, each element written from a fresh value, so no
//! field of a wider earlier tensor survives), each tensor's source (boundary exact, boundary
//! view, an earlier node's output, the node's own output), its scalars and its producers. The
//! Definition image is then built by `simpler_core::graph` into a retained buffer.
//!
//! Storage is stood up once (the runtime regions, the packed region sized at the node cap times
//! the per-node tensor cap, every flat array at its cap) and reused: a recording resets
//! `node_count` and the cursors, never the node slots, and every traversal is bounded by
//! `node_count`. `storage_ready` is set only when every stand-up allocation succeeded. A
//! recording past the node cap keeps running (the body finishes) but is unsupported, and gives
//! back any array that grew past its cap at the next reset.
//!
//! Boundary scalars are captured by value at recording: arithmetic on them, and in this
//! version every scalar, becomes static Definition data — a replay with different boundary
//! scalar values would reuse the recorded ones (the reference's documented trap, here for all
//! scalars until scalar provenance is tracked).

use crate::os::PrivateMapping;
use simpler_aicpu::payloads::{PayloadsLayout, TaskPayloads, NO_KERNEL};
use simpler_aicpu::{GraphRef, GraphSink, Rt, RtError, SubmitHook, SubmittedTask};
use simpler_core::deps::DepFlags;
use simpler_core::gm::{Gm, GmFault};
use simpler_core::graph::{
    build_definition, definition_size, DefinitionBoundary, DefinitionError, DefinitionInput,
    ExecutionStorageShape, RecordedNode, RecordedPredicate, RecordedScalarSource,
    RecordedTensorSource, TensorSourceKind, GRAPH_MAX_NODES, GRAPH_MAX_SCALAR_ARGS,
    GRAPH_MAX_TENSOR_ARGS, TASK_ATTR_PREDICATE,
};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::TaskArg;
use simpler_core::orchestrator::{
    Blocked, GaveUp, Orchestrator, OrchestratorConfig, OrchestratorLayout, Waiter,
};
use simpler_core::ring::{RingConfig, MAX_RINGS};
use simpler_core::sched::{SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::{BufferHandle, OrchArgs, TaskId, TaskTensor, TensorArgType};
use std::fmt;
use std::sync::atomic::AtomicU32;

pub use simpler_aicpu::GraphBody;

/// Where recorded outputs live: a virtual range no device heap reaches.
pub const GRAPH_RECORD_VIRTUAL_BASE: u64 = 1 << 63;

/// Task slots of the private ring: room past the node cap, so an overshooting body finishes.
const RECORD_WINDOW: u32 = 2048;
/// Dependency cells of the private ring.
const RECORD_EDGES: u32 = 16_384;
/// Virtual heap per ring.
const RECORD_HEAP: u64 = 1 << 31;
/// Bytes of Definition buffer a recorder stands up with (the largest dsv4-shaped Definition
/// is well under it; a larger one grows the buffer once).
const DEFINITION_PREWARM: usize = 4 << 20;

/// The deep copy of one invocation's boundary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphBoundary {
    /// Boundary tensors.
    pub tensors: Vec<TaskTensor>,
    /// Their tags.
    pub tags: Vec<TensorArgType>,
    /// Boundary scalars.
    pub scalars: Vec<u64>,
}

/// Why a boundary cannot be recorded (the body then runs inline, on the ordinary path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uncacheable {
    /// No boundary tensor, or more than 128.
    TensorCount(usize),
    /// More than 64 boundary scalars.
    ScalarCount(usize),
    /// A boundary tensor is tagged OUTPUT (runtime-allocated).
    OutputTag(usize),
    /// Tags and tensors differ in number.
    Mismatch,
}

impl GraphBoundary {
    /// Makes this a copy of `tensors` (with their tags) and `scalars`, keeping its storage (no
    /// allocation once it has held as many).
    pub fn assign(
        &mut self,
        tensors: impl Iterator<Item = (TaskTensor, TensorArgType)>,
        scalars: &[u64],
    ) {
        self.tensors.clear();
        self.tags.clear();
        for (t, tag) in tensors {
            self.tensors.push(t);
            self.tags.push(tag);
        }
        self.scalars.clear();
        self.scalars.extend_from_slice(scalars);
    }

    /// The cacheability gate: 1 to 128 tensors, at most 64 scalars, no OUTPUT tag.
    pub fn cacheable(&self) -> Result<(), Uncacheable> {
        let n = self.tensors.len();
        if n == 0 || n > GRAPH_MAX_TENSOR_ARGS {
            return Err(Uncacheable::TensorCount(n));
        }
        if self.scalars.len() > GRAPH_MAX_SCALAR_ARGS {
            return Err(Uncacheable::ScalarCount(self.scalars.len()));
        }
        if self.tags.len() != n {
            return Err(Uncacheable::Mismatch);
        }
        if let Some(i) = self.tags.iter().position(|&t| t == TensorArgType::Output) {
            return Err(Uncacheable::OutputTag(i));
        }
        Ok(())
    }

    /// Whether `other` may replay a Definition recorded from `self`: equal counts (scalar
    /// values may differ: they are per invocation) and, per tensor, equal buffer size, rank, dtype, tag, shapes, strides,
    /// alias partition and offset from its alias representative (addresses and the
    /// representatives' offsets may differ: a replay rebinds them).
    pub fn matches(&self, other: &GraphBoundary) -> bool {
        let mut ra = [0u16; GRAPH_MAX_TENSOR_ARGS];
        alias_reps(&self.tensors, &mut ra);
        self.matches_with(&ra, other)
    }

    /// [`Self::matches`] with this boundary's alias representatives (from [`alias_reps`])
    /// given, so a boundary compared many times has them worked out once.
    pub fn matches_with(&self, ra: &[u16; GRAPH_MAX_TENSOR_ARGS], other: &GraphBoundary) -> bool {
        other.tensors.len() == other.tags.len()
            && self.matches_parts(
                ra,
                other.tensors.len(),
                |i| (&other.tensors[i], other.tags[i]),
                other.scalars.len(),
            )
    }

    /// [`Self::matches_with`] against a submission's arguments as they are, without a copy.
    pub fn matches_args(
        &self,
        ra: &[u16; GRAPH_MAX_TENSOR_ARGS],
        args: &[TaskArg],
        scalars: usize,
    ) -> bool {
        self.matches_parts(ra, args.len(), |i| (&args[i].tensor, args[i].tag), scalars)
    }

    fn matches_parts<'o>(
        &self,
        ra: &[u16; GRAPH_MAX_TENSOR_ARGS],
        n: usize,
        other: impl Fn(usize) -> (&'o TaskTensor, TensorArgType),
        scalars: usize,
    ) -> bool {
        // Boundary scalars are per-invocation values (a replay supplies its own), so only
        // their count has to agree; a value the body computed from one is static Definition
        // data, which a replay reuses whatever its scalars (the documented trap).
        if n != self.tensors.len()
            || n > GRAPH_MAX_TENSOR_ARGS
            || self.tags.len() != n
            || self.scalars.len() != scalars
            || (0..n).any(|i| other(i).1 != self.tags[i])
        {
            return false;
        }
        let mut rb = [0u16; GRAPH_MAX_TENSOR_ARGS];
        alias_reps_of(n, |i| other(i).0.buffer(), &mut rb);
        self.tensors.iter().enumerate().all(|(i, a)| {
            let b = other(i).0;
            let (pa, pb) = (ra[i] as usize, rb[i] as usize);
            // Views of one buffer keep their distance: a recorded sub-view of the first
            // is rebased on it.
            a.same_layout(b)
                && pa == pb
                && a.start_offset()
                    .wrapping_sub(self.tensors[pa].start_offset())
                    == b.start_offset().wrapping_sub(other(pb).0.start_offset())
        })
    }
}

/// For each tensor, the index of the first tensor over the same buffer (itself if none
/// earlier): one pass with a small open-addressing table on the stack.
pub fn alias_reps(tensors: &[TaskTensor], out: &mut [u16; GRAPH_MAX_TENSOR_ARGS]) {
    alias_reps_of(tensors.len(), |i| tensors[i].buffer(), out);
}

/// [`alias_reps`] over the `n` buffers `buffer(i)` names.
fn alias_reps_of(
    n: usize,
    buffer: impl Fn(usize) -> BufferHandle,
    out: &mut [u16; GRAPH_MAX_TENSOR_ARGS],
) {
    const SLOTS: usize = 2 * GRAPH_MAX_TENSOR_ARGS;
    let mut table = [u16::MAX; SLOTS];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        let b = buffer(i);
        let mut h = (b.addr ^ b.size.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize;
        loop {
            h %= SLOTS;
            match table[h] {
                u16::MAX => {
                    table[h] = i as u16;
                    *o = i as u16;
                    break;
                }
                j if buffer(j as usize) == b => {
                    *o = j;
                    break;
                }
                _ => h += 1,
            }
        }
    }
}

/// Which stand-up allocation to fail (tests of the `storage_ready` rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandUpPart {
    /// The hazard map (the private orchestrator's region).
    HazardMap,
    /// The packed tensor region.
    PackedRegion,
}

/// Why a recording failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The boundary is absent.
    NoBoundary,
    /// The boundary cannot be recorded.
    Uncacheable(Uncacheable),
    /// The storage could not be stood up (nothing was kept; the next recording retries).
    StandUp(StandUpPart),
    /// The body failed.
    Body(RtError),
    /// The recording is unsupported (it ran to the end but cannot become a Definition).
    Unsupported(&'static str),
    /// The Definition image was refused.
    Definition(DefinitionError),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoBoundary => f.write_str("the recording has no boundary"),
            Self::Uncacheable(u) => write!(f, "boundary not cacheable: {u:?}"),
            Self::StandUp(p) => write!(f, "recording storage could not be stood up ({p:?})"),
            Self::Body(e) => write!(f, "the body failed: {e:?}"),
            Self::Unsupported(why) => write!(f, "recording unsupported: {why}"),
            Self::Definition(e) => write!(f, "definition refused: {e:?}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// The private runtime's memory: page-aligned mappings of zero pages, touched only where a
/// recording writes (an aligned heap allocation would be zeroed eagerly, 20 ms for these 40 MB).
struct Regions {
    sched: PrivateMapping,
    orch: PrivateMapping,
    payloads: PrivateMapping,
}

/// The flat arrays a recording fills; every traversal is bounded by `node_count`.
#[derive(Default)]
struct Arrays {
    node_count: usize,
    nodes: Vec<RecordedNode>,
    /// The packed tensor region: `GRAPH_MAX_NODES * CORE_MAX_TENSOR_ARGS` tensors, allocated
    /// once, never grown (addresses into it stay valid through a recording).
    tensors: Vec<TaskTensor>,
    tensor_cursor: usize,
    sources: Vec<RecordedTensorSource>,
    scalars: Vec<u64>,
    scalar_sources: Vec<RecordedScalarSource>,
    fanins: Vec<usize>,
    /// Predicates, at most one per node.
    predicates: Vec<RecordedPredicate>,
    /// Output windows `[start, end)` per node, in record order (sorted, disjoint).
    outputs: Vec<(u64, u64)>,
    /// Node index of each private task slot, per ring.
    ids: [Vec<u32>; MAX_RINGS],
    unsupported: Option<&'static str>,
}

/// One recorder's retained storage.
pub struct Recording {
    layout: OrchestratorLayout,
    payloads_layout: PayloadsLayout,
    regions: Option<Box<Regions>>,
    arrays: Arrays,
    args: Box<OrchArgs>,
    definition: Vec<u8>,
    storage_ready: bool,
    fail: Option<StandUpPart>,
    recordings: u64,
    /// What the last recording used of the private state (reset before the next one).
    last_usage: Option<simpler_core::image::Usage>,
    /// The last recording's time running the body (recording its nodes) and building the
    /// Definition.
    last_times: (std::time::Duration, std::time::Duration),
    last_len: usize,
}

impl Default for Recording {
    fn default() -> Self {
        Self::new()
    }
}

fn record_config() -> OrchestratorConfig {
    let ring = RingConfig {
        window: RECORD_WINDOW,
        heap_bytes: RECORD_HEAP,
        edges: RECORD_EDGES,
    };
    OrchestratorConfig {
        sched: SchedConfig::uniform(ring),
        map_buckets: 4096,
        map_entries: 16_384,
        heap_base: core::array::from_fn(|r| GRAPH_RECORD_VIRTUAL_BASE + r as u64 * RECORD_HEAP),
    }
}

impl Recording {
    /// Empty storage; nothing is allocated until the first recording.
    pub fn new() -> Self {
        let layout = OrchestratorLayout::new(record_config()).expect("a valid fixed layout");
        let payloads_layout =
            PayloadsLayout::new([RECORD_WINDOW; MAX_RINGS]).expect("a valid fixed layout");
        Self {
            layout,
            payloads_layout,
            regions: None,
            arrays: Arrays::default(),
            args: Box::default(),
            definition: Vec::new(),
            storage_ready: false,
            fail: None,
            recordings: 0,
            last_usage: None,
            last_times: Default::default(),
            last_len: 0,
        }
    }

    /// Makes the next stand-up fail at `part` (once).
    pub fn inject_stand_up_failure(&mut self, part: StandUpPart) {
        self.fail = Some(part);
    }

    /// Whether every stand-up allocation succeeded.
    pub fn storage_ready(&self) -> bool {
        self.storage_ready
    }

    /// Stands the storage up now unless it is up (a recording does it when it finds it not
    /// ready); the error names the allocation that failed, and nothing stays allocated.
    pub fn stand_up_storage(&mut self) -> Result<(), RecordError> {
        if self.storage_ready {
            return Ok(());
        }
        self.stand_up()
    }

    /// Drops the storage: the next recording stands it up again.
    pub fn discard_storage(&mut self) {
        self.drop_storage();
    }

    /// Nodes of the last recording.
    pub fn node_count(&self) -> usize {
        self.arrays.node_count
    }

    /// Node slots kept from every recording so far (never cleared).
    pub fn node_slots(&self) -> usize {
        self.arrays.nodes.len()
    }

    /// Recordings made with this storage.
    pub fn recordings(&self) -> u64 {
        self.recordings
    }

    /// The packed tensor region's address and length (stable for the storage's life).
    pub fn packed_region(&self) -> (usize, usize) {
        (
            self.arrays.tensors.as_ptr() as usize,
            self.arrays.tensors.len(),
        )
    }

    /// The tensors of node `i` of the last recording, from the packed region.
    pub fn node_tensors(&self, i: usize) -> &[TaskTensor] {
        if i >= self.arrays.node_count {
            return &[];
        }
        let n = &self.arrays.nodes[i];
        let at = n.tensor_offset as usize;
        &self.arrays.tensors[at..at + n.tensor_count as usize]
    }

    fn stand_up(&mut self) -> Result<(), RecordError> {
        let fail = self.fail.take();
        // Both allocations, or neither: a failure drops everything stood up so far.
        let region = |bytes: usize| PrivateMapping::new(bytes.max(1));
        let hazard = match (fail, region(self.layout.size())) {
            (Some(StandUpPart::HazardMap), _) | (_, Err(_)) => {
                self.drop_storage();
                return Err(RecordError::StandUp(StandUpPart::HazardMap));
            }
            (_, Ok(m)) => m,
        };
        let (Ok(sched), Ok(payloads)) = (
            region(self.layout.sched().size()),
            region(self.payloads_layout.size()),
        ) else {
            self.drop_storage();
            return Err(RecordError::StandUp(StandUpPart::PackedRegion));
        };
        let regions = Box::new(Regions {
            sched,
            orch: hazard,
            payloads,
        });
        if fail == Some(StandUpPart::PackedRegion) {
            drop(regions);
            self.drop_storage();
            return Err(RecordError::StandUp(StandUpPart::PackedRegion));
        }
        let cap = GRAPH_MAX_NODES * CORE_MAX_TENSOR_ARGS;
        let a = &mut self.arrays;
        // Zeroed pages from the allocator: a page is touched only when a body writes it.
        a.tensors = bytemuck::zeroed_vec(cap);
        a.nodes = Vec::with_capacity(GRAPH_MAX_NODES);
        a.sources = Vec::with_capacity(cap);
        a.scalars = Vec::with_capacity(GRAPH_MAX_NODES * CORE_MAX_SCALAR_ARGS);
        a.scalar_sources = Vec::with_capacity(GRAPH_MAX_NODES * CORE_MAX_SCALAR_ARGS);
        a.fanins = Vec::with_capacity(GRAPH_MAX_NODES * 4);
        a.predicates = Vec::with_capacity(GRAPH_MAX_NODES);
        a.outputs = Vec::with_capacity(GRAPH_MAX_NODES);
        a.ids = core::array::from_fn(|_| vec![u32::MAX; RECORD_WINDOW as usize]);
        // The Definition buffer at a size most bodies never exceed, from zeroed pages (touched
        // only where an image is written), so recordings do not grow it.
        if self.definition.len() < DEFINITION_PREWARM {
            self.definition = bytemuck::zeroed_vec(DEFINITION_PREWARM);
        }
        self.regions = Some(regions);
        self.storage_ready = true;
        Ok(())
    }

    /// Drops the storage (the Definition buffer too).
    fn drop_storage(&mut self) {
        self.definition = Vec::new();
        self.last_usage = None;
        self.regions = None;
        self.arrays = Arrays::default();
        self.storage_ready = false;
    }

    /// Empties the storage for a new recording; an array grown past its cap-bound (by an
    /// overshooting body) is given back.
    fn reset(&mut self) {
        let a = &mut self.arrays;
        a.node_count = 0;
        a.tensor_cursor = 0;
        a.unsupported = None;
        fn give_back<T>(v: &mut Vec<T>, cap: usize) {
            v.clear();
            if v.capacity() > cap {
                v.shrink_to(cap);
            }
        }
        let cap = GRAPH_MAX_NODES * CORE_MAX_TENSOR_ARGS;
        let scalars = GRAPH_MAX_NODES * CORE_MAX_SCALAR_ARGS;
        give_back(&mut a.sources, cap);
        give_back(&mut a.scalars, scalars);
        give_back(&mut a.scalar_sources, scalars);
        give_back(&mut a.outputs, GRAPH_MAX_NODES);
        give_back(&mut a.predicates, GRAPH_MAX_NODES);
        // Node slots are never cleared (only `node_count` bounds them); the fanin array keeps
        // its high-water mark by design.
        a.fanins.clear();
        if a.nodes.len() > GRAPH_MAX_NODES {
            a.nodes.truncate(GRAPH_MAX_NODES);
            a.nodes.shrink_to(GRAPH_MAX_NODES);
        }
    }

    /// Records `body` over `boundary` under `full_key` and returns the Definition image.
    pub fn record(
        &mut self,
        full_key: u64,
        body: GraphBody,
        boundary: Option<&GraphBoundary>,
    ) -> Result<&[u8], RecordError> {
        // Absence is checked before anything reads the boundary.
        let boundary = boundary.ok_or(RecordError::NoBoundary)?;
        boundary.cacheable().map_err(RecordError::Uncacheable)?;
        if !self.storage_ready {
            self.stand_up()?;
        }
        self.reset();
        self.recordings += 1;
        self.args.clear();
        for t in &boundary.tensors {
            self.args
                .push_tensor(*t)
                .map_err(|_| RecordError::Unsupported("boundary wider than an entry"))?;
        }
        for &s in &boundary.scalars {
            self.args
                .push_scalar(s)
                .map_err(|_| RecordError::Unsupported("too many boundary scalars"))?;
        }
        let regions = self.regions.as_mut().expect("ready storage has regions");
        // The first recording formats the private state; later ones attach to it and return
        // only what the previous one used to the formatted state.
        let sched = regions.sched.bytes_mut();
        let attach = self.last_usage.is_some();
        let shared = match self.last_usage.take() {
            Some(used) => SchedState::attach_region(sched, self.layout.sched())
                .inspect(|s| s.reset_prefix(&used)),
            None => SchedState::init(sched, self.layout.sched()),
        }
        .map_err(|_| RecordError::Unsupported("recording state layout"))?;
        let payloads = TaskPayloads::attach(regions.payloads.bytes_mut(), &self.payloads_layout)
            .map_err(|_| RecordError::Unsupported("recording payload layout"))?;
        let orch_region = regions.orch.bytes_mut();
        let mut orch = if attach {
            Orchestrator::attach(orch_region, &self.layout, &shared)
        } else {
            Orchestrator::init(orch_region, &self.layout, &shared)
        }
        .map_err(|_| RecordError::Unsupported("recording orchestrator layout"))?;
        let mut waiter = NoWait(false);
        let mut nested = Nested(false);
        let abort = AtomicU32::new(0);
        let mut sink = NodeSink {
            arrays: &mut self.arrays,
            payloads: &payloads,
            boundary,
            boundary_scalars: self.args.scalars().as_ptr_range(),
        };
        let body_start = std::time::Instant::now();
        self.last_times = Default::default();
        let result = {
            let mut rt = Rt::new(&mut orch, &payloads, &mut waiter, &NoGm, &self.args, &abort)
                .with_hook(&mut sink)
                .with_graphs(&mut nested);
            let r = rt.scope(ScopeMode::Auto, |rt| body(rt));
            r.and_then(|()| rt.error().map_or(Ok(()), Err))
        };
        self.last_times.0 = body_start.elapsed();
        // Unmeasurable (never, with no scheduler running) means a full format next time.
        self.last_usage = shared.usage(orch.edges_used()).ok();
        if nested.0 {
            // The nested body ran inline into this recording; it cannot be replayed as one.
            return Err(RecordError::Unsupported("a Graph nested inside the body"));
        }
        if let Some(why) = self.arrays.unsupported {
            return Err(RecordError::Unsupported(why));
        }
        if let Err(e) = result {
            return Err(if waiter.0 {
                RecordError::Unsupported("the body does not fit the recording ring")
            } else {
                RecordError::Body(e)
            });
        }
        let a = &self.arrays;
        let input = DefinitionInput {
            full_key,
            unsupported: false,
            node_count: a.node_count,
            nodes: &a.nodes,
            tensors: &a.tensors,
            tensor_sources: &a.sources,
            scalars: &a.scalars,
            scalar_sources: &a.scalar_sources,
            fanins: &a.fanins,
            predicates: &a.predicates,
            boundary: Some(DefinitionBoundary {
                tensors: &boundary.tensors,
                tags: &boundary.tags,
                scalar_count: boundary.scalars.len(),
            }),
            storage: ExecutionStorageShape {
                header_bytes: 64,
                node_bytes: 256,
            },
        };
        let build_start = std::time::Instant::now();
        let size = definition_size(&input).map_err(RecordError::Definition)?;
        if self.definition.len() < size {
            self.definition.resize(size, 0);
        }
        let n = build_definition(&input, &mut self.definition[..size])
            .map_err(RecordError::Definition)?;
        self.last_times.1 = build_start.elapsed();
        self.last_len = n;
        Ok(&self.definition[..n])
    }

    /// The Definition image the last successful recording built.
    pub fn last_definition(&self) -> &[u8] {
        &self.definition[..self.last_len]
    }

    /// The last recording's time running the body (`record_node`: every node captured) and
    /// building its Definition (`build_definition`).
    pub fn last_times(&self) -> (std::time::Duration, std::time::Duration) {
        self.last_times
    }
}

/// The Graph sink of a body being recorded: a nested Graph marks the recording unsupported
/// (and runs inline, so the body still finishes).
struct Nested(bool);

impl GraphSink for Nested {
    fn definition(&mut self, _: u64, _: GraphBody, _: &[TaskArg], _: &[u64]) -> Option<GraphRef> {
        self.0 = true;
        None
    }
    fn submitted(&mut self, _: TaskId) {}
}

struct NoWait(bool);

impl Waiter for NoWait {
    fn wait(&mut self, _on: Blocked) -> Result<(), GaveUp> {
        self.0 = true;
        Err(GaveUp)
    }
}

struct NoGm;

impl Gm for NoGm {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: dst.len() as u64,
        })
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: src.len() as u64,
        })
    }
}

/// Turns each submitted task of the body into a node.
struct NodeSink<'s, 'p> {
    arrays: &'s mut Arrays,
    payloads: &'s TaskPayloads<'p>,
    boundary: &'s GraphBoundary,
    /// Where the body's boundary scalars live (`rt.args().scalars()`): a node scalar read
    /// from there is forwarded, one held anywhere else is a plain value. Compared as
    /// addresses only, never dereferenced.
    boundary_scalars: core::ops::Range<*const u64>,
}

impl NodeSink<'_, '_> {
    /// Where node scalar `s` comes from: boundary scalar `i` when it is that scalar's own
    /// storage (the body passed it on unchanged), else a static value.
    fn scalar_source(&self, s: &u64) -> RecordedScalarSource {
        let (at, base) = (
            s as *const u64 as usize,
            self.boundary_scalars.start as usize,
        );
        if self.boundary_scalars.contains(&(s as *const u64)) {
            RecordedScalarSource::Boundary((at - base) / core::mem::size_of::<u64>())
        } else {
            RecordedScalarSource::Static
        }
    }
}

fn kernel_id(k: u32) -> i32 {
    if k == NO_KERNEL {
        -1
    } else {
        k as i32
    }
}

impl NodeSink<'_, '_> {
    fn classify(
        &self,
        node: usize,
        own: (u64, u64),
        t: &TaskTensor,
    ) -> Option<RecordedTensorSource> {
        // One pass over the boundary, comparing the 16-byte buffer handle first: exact if a
        // tensor of the same buffer equals it, else a view of the first one it starts after.
        let b = &self.boundary.tensors;
        let mut view = None;
        for (i, u) in b.iter().enumerate() {
            if u.buffer() != t.buffer() {
                continue;
            }
            if u == t {
                return Some(RecordedTensorSource {
                    kind: TensorSourceKind::BoundaryExact,
                    index: i,
                    packed_offset: 0,
                });
            }
            if view.is_none() && t.start_offset() >= u.start_offset() {
                view = Some(i);
            }
        }
        if let Some(i) = view {
            return Some(RecordedTensorSource {
                kind: TensorSourceKind::BoundaryView,
                index: i,
                packed_offset: t.start_offset() - b[i].start_offset(),
            });
        }
        let addr = t.buffer().addr;
        if addr >= own.0 && addr < own.1 {
            return Some(RecordedTensorSource {
                kind: TensorSourceKind::OwnOutput,
                index: node,
                packed_offset: addr - own.0,
            });
        }
        let outs = &self.arrays.outputs[..node.min(self.arrays.outputs.len())];
        let at = outs.partition_point(|&(start, _)| start <= addr);
        let (start, end) = *outs.get(at.checked_sub(1)?)?;
        (addr < end).then_some(RecordedTensorSource {
            kind: TensorSourceKind::Internal,
            index: at - 1,
            packed_offset: addr - start,
        })
    }
}

impl SubmitHook for NodeSink<'_, '_> {
    fn submitted(
        &mut self,
        task: &SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (TaskId, DepFlags)>,
    ) {
        let node = self.arrays.node_count;
        if node >= GRAPH_MAX_NODES {
            // Keep running so the body finishes; the recording cannot become a Definition.
            self.arrays.unsupported = Some("more than 1024 nodes");
            return;
        }
        let ring = task.id.ring() as usize;
        let local = task.id.local() as usize & (RECORD_WINDOW as usize - 1);
        self.arrays.ids[ring][local] = node as u32;
        // The node's own output window: the buffers its OUTPUT arguments were given.
        let own = task
            .args
            .iter()
            .filter(|a| a.tag == TensorArgType::Output)
            .map(|a| {
                (
                    a.tensor.buffer().addr,
                    a.tensor.buffer().addr + a.tensor.buffer().size,
                )
            })
            .fold((u64::MAX, 0), |(s, e), (a, b)| (s.min(a), e.max(b)));
        let own = if own.0 == u64::MAX { (0, 0) } else { own };
        let tensor_offset = self.arrays.tensor_cursor;
        let source_offset = self.arrays.sources.len();
        for arg in task.args {
            let Some(source) = self.classify(node, own, &arg.tensor) else {
                self.arrays.unsupported = Some("a tensor is neither boundary nor internal");
                continue;
            };
            // Written from a fresh value: nothing of an earlier, wider tensor survives.
            let slot = &mut self.arrays.tensors[self.arrays.tensor_cursor];
            *slot = bytemuck::Zeroable::zeroed();
            *slot = arg.tensor;
            self.arrays.tensor_cursor += 1;
            self.arrays.sources.push(source);
        }
        // An allocation task writes no payload record: it has no scalars (reading its slot
        // would pick up an earlier recording's).
        let mut scalars = [0u64; CORE_MAX_SCALAR_ARGS];
        let ns = if task.alloc {
            0
        } else {
            self.payloads.scalars(task.id, &mut scalars)
        };
        let scalar_offset = self.arrays.scalars.len();
        for (k, &s) in scalars[..ns].iter().enumerate() {
            // The payload holds the values; where the body took them from says which are the
            // boundary's (a boundary scalar is stored as 0: each replay supplies its own).
            let source = task
                .scalars
                .get(k)
                .map_or(RecordedScalarSource::Static, |p| self.scalar_source(p));
            let value = match source {
                RecordedScalarSource::Boundary(_) => 0,
                _ => s,
            };
            self.arrays.scalars.push(value);
            self.arrays.scalar_sources.push(source);
        }
        // A predicate's operand is classified like an argument; one a replay could not rebind
        // (or the node's own output, which it has not written when the predicate is read)
        // cannot be recorded. The runtime already dropped the predicate of a kernel-less task.
        let predicate_index = task.predicate.and_then(|p| {
            let source = match self.classify(node, own, p.operand()) {
                None => {
                    self.arrays.unsupported =
                        Some("a predicate's operand is neither boundary nor internal");
                    return None;
                }
                Some(s) if s.kind == TensorSourceKind::OwnOutput => {
                    self.arrays.unsupported = Some("a predicate reads its node's own output");
                    return None;
                }
                Some(s) => s,
            };
            self.arrays.predicates.push(RecordedPredicate {
                operand: *p.operand(),
                source,
                elem_offset: p.elem_offset(),
                target: p.target(),
                elem_size: p.elem_size(),
                op: p.op() as u8,
            });
            Some(self.arrays.predicates.len() as u32 - 1)
        });
        let fanin_offset = self.arrays.fanins.len();
        for (producer, _) in fanin {
            let p = self.arrays.ids[producer.ring() as usize]
                [producer.local() as usize & (RECORD_WINDOW as usize - 1)];
            if (p as usize) < node && !self.arrays.fanins[fanin_offset..].contains(&(p as usize)) {
                self.arrays.fanins.push(p as usize);
            }
        }
        let k = task.kernels;
        let mask = (k.aic != NO_KERNEL) as u8
            | ((k.aiv0 != NO_KERNEL) as u8) << 1
            | ((k.aiv1 != NO_KERNEL) as u8) << 2;
        let subtasks = task.block_num as u32 * mask.count_ones();
        if subtasks > i16::MAX as u32 {
            self.arrays.unsupported = Some("subtasks do not fit i16");
        }
        let output_size = own.1.saturating_sub(own.0);
        self.arrays.outputs.push(if own.1 > own.0 {
            own
        } else {
            let at = self.arrays.outputs.last().map_or(0, |o| o.1);
            (at, at)
        });
        let rec = RecordedNode {
            kernel_ids: [kernel_id(k.aic), kernel_id(k.aiv0), kernel_id(k.aiv1)],
            active_mask: mask,
            task_attrs: if predicate_index.is_some() {
                TASK_ATTR_PREDICATE
            } else {
                0
            },
            logical_block_num: task.block_num as i16,
            total_required_subtasks: subtasks.min(i16::MAX as u32) as i16,
            total_output_size: output_size,
            tensor_offset: tensor_offset as u32,
            tensor_count: (self.arrays.tensor_cursor - tensor_offset) as u32,
            tensor_source_offset: source_offset as u32,
            scalar_offset: scalar_offset as u32,
            scalar_count: (self.arrays.scalars.len() - scalar_offset) as u32,
            fanin_offset: fanin_offset as u32,
            fanin_count: (self.arrays.fanins.len() - fanin_offset) as u32,
            predicate_index,
        };
        // Node slots persist: overwrite the slot if it exists, else add one.
        if node < self.arrays.nodes.len() {
            self.arrays.nodes[node] = rec;
        } else {
            self.arrays.nodes.push(rec);
        }
        self.arrays.node_count += 1;
    }
}

/// Where an in-flight recording is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InflightStatus {
    /// A recorder thread is on it (or will be).
    Recording = 0,
    /// The Definition is ready.
    Ready = 1,
    /// The recording failed.
    Failed = 2,
}

/// One key being recorded during a bind. The submitting thread creates it (with the deep copy
/// of the first invocation's boundary, which lives here and never in recorder storage) and
/// compares later same-key submissions against that boundary under the lock; the recorder
/// thread reads the boundary, fills the result and publishes the status. Entries are reused
/// across binds, so a steady-state bind allocates nothing for them.
pub struct Inflight {
    status: std::sync::atomic::AtomicU8,
    inner: std::sync::Mutex<InflightInner>,
    cv: std::sync::Condvar,
}

/// The entry's locked part.
pub struct InflightInner {
    /// The key.
    pub full_key: u64,
    /// The first invocation's boundary.
    pub boundary: Option<GraphBoundary>,
    /// Its alias representatives ([`alias_reps`]), for comparing later invocations.
    pub reps: [u16; GRAPH_MAX_TENSOR_ARGS],
    /// The Definition image, once ready.
    pub image: Vec<u8>,
    /// Why it failed.
    pub error: Option<RecordError>,
    /// Which recorder thread recorded it.
    pub recorder: usize,
    /// Time the recorder spent running the body (`record_node`) and building the
    /// Definition (`build_definition`).
    pub times: (std::time::Duration, std::time::Duration),
    /// Heap allocations the recorder thread made for it, from taking the job to publishing
    /// the result ([`crate::alloc_count`]).
    pub allocs: u64,
}

impl Default for InflightInner {
    fn default() -> Self {
        Self {
            full_key: 0,
            boundary: None,
            reps: [0; GRAPH_MAX_TENSOR_ARGS],
            image: Vec::new(),
            error: None,
            recorder: 0,
            times: Default::default(),
            allocs: 0,
        }
    }
}

impl Default for Inflight {
    fn default() -> Self {
        Self {
            status: std::sync::atomic::AtomicU8::new(InflightStatus::Ready as u8),
            inner: std::sync::Mutex::new(InflightInner::default()),
            cv: std::sync::Condvar::new(),
        }
    }
}

impl Inflight {
    /// The status, read without the lock.
    pub fn status(&self) -> InflightStatus {
        match self.status.load(std::sync::atomic::Ordering::Acquire) {
            0 => InflightStatus::Recording,
            1 => InflightStatus::Ready,
            _ => InflightStatus::Failed,
        }
    }

    /// The locked part.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, InflightInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prepares the entry for a new key: copies `boundary` into its retained storage.
    pub fn begin(&self, full_key: u64, boundary: &[TaskArg], scalars: &[u64]) {
        let mut inner = self.lock();
        inner.full_key = full_key;
        let b = inner.boundary.get_or_insert_with(GraphBoundary::default);
        b.assign(boundary.iter().map(|a| (a.tensor, a.tag)), scalars);
        let mut reps = [0u16; GRAPH_MAX_TENSOR_ARGS];
        alias_reps(&b.tensors, &mut reps);
        inner.reps = reps;
        inner.error = None;
        inner.image.clear();
        self.status.store(
            InflightStatus::Recording as u8,
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Waits until the recording is done.
    pub fn wait(&self) -> InflightStatus {
        let mut inner = self.lock();
        while self.status() == InflightStatus::Recording {
            inner = self.cv.wait(inner).unwrap_or_else(|e| e.into_inner());
        }
        drop(inner);
        self.status()
    }

    /// Publishes the recording's result; `allocs_before` is the recorder thread's allocation
    /// count when it took the job.
    fn finish(
        &self,
        recorder: usize,
        times: (std::time::Duration, std::time::Duration),
        allocs_before: u64,
        result: Result<&[u8], RecordError>,
    ) {
        let mut inner = self.lock();
        inner.recorder = recorder;
        inner.times = times;
        let status = match result {
            Ok(image) => {
                inner.image.clear();
                inner.image.extend_from_slice(image);
                InflightStatus::Ready
            }
            Err(e) => {
                inner.error = Some(e);
                InflightStatus::Failed
            }
        };
        inner.allocs = crate::alloc_count::now().saturating_sub(allocs_before);
        self.status
            .store(status as u8, std::sync::atomic::Ordering::Release);
        drop(inner);
        self.cv.notify_all();
    }
}

/// Recorder threads at start.
pub const RECORDERS_AT_START: usize = 8;
/// Recorder threads at most.
pub const RECORDERS_MAX: usize = 16;

struct Job {
    entry: std::sync::Arc<Inflight>,
    body: GraphBody,
    /// The thread whose turn it was at submit: the one that takes the job, unless that thread
    /// is busy recording when another comes free.
    worker: usize,
}

struct Worker {
    /// Jobs in the queue for which this thread is the preferred one.
    queued: usize,
    busy: bool,
    /// Waiting on its condition variable: only then does a wake-up need a notify (each one
    /// is a system call, and on this VM waking a thread costs the waker ~10 us).
    sleeping: bool,
    recorded: Vec<u64>,
}

struct PoolState {
    workers: Vec<Worker>,
    /// The one FIFO of jobs every thread takes from.
    queue: std::collections::VecDeque<Job>,
    stop: bool,
    next: usize,
    /// Recordings running now, and how many may run at once (while the orchestration builds,
    /// one per CPU it leaves: more threads only take turns on the CPUs it also needs, measured
    /// in the `bind` benchmark; at the commit, every job waiting).
    running: usize,
    limit: usize,
    /// Threads notified and not yet back under the lock. Each holds a permit until then: it
    /// takes a job, or hands the permit on, so a job queued meanwhile wakes nobody else (on
    /// this VM a woken thread can take longer to run than the orchestration takes to queue
    /// its next job, and each extra wake-up costs the waker several us).
    waking: usize,
    /// The CPUs this process may use.
    cpus: usize,
    /// Recordings that may run at once while the orchestration builds.
    while_building: usize,
    /// A stand-up failure to inject into the next recording any thread takes.
    inject: Option<StandUpPart>,
    /// Threads that have made their first attempt to stand their storage up.
    settled: usize,
    /// Parked threads the submitting (orchestration) thread woke, through `submit` and
    /// `orchestrating`: each a system call that costs the waker several us on a VM.
    orchestration_wakes: u64,
}

struct PoolShared {
    state: std::sync::Mutex<PoolState>,
    /// One per thread slot: a submit wakes only the thread it queued a job for.
    cvs: Vec<std::sync::Condvar>,
    /// Signalled as each thread settles ([`RecorderPool::wait_settled`]).
    settled_cv: std::sync::Condvar,
}

impl PoolShared {
    /// Wakes thread `w` if it is asleep (`st` is the locked state). A thread that is awake
    /// checks the queue under the lock before it sleeps again, so it needs no notify.
    /// Returns whether it woke it.
    fn wake(&self, st: &mut PoolState, w: usize) -> bool {
        let asleep = std::mem::replace(&mut st.workers[w].sleeping, false);
        if asleep {
            st.waking += 1;
            self.cvs[w].notify_one();
        }
        asleep
    }

    /// Wakes up to `permits` threads for jobs that may start now: each waiting job's preferred
    /// thread if it is free, else (its preferred thread busy) a sleeping free one to take it.
    /// Returns how many it woke.
    fn wake_for_queue(&self, st: &mut PoolState, mut permits: usize) -> u64 {
        let mut woke = 0;
        for k in 0..st.queue.len() {
            if permits == 0 {
                break;
            }
            let w = st.queue[k].worker;
            let taker = if st.workers[w].busy {
                st.workers.iter().position(|x| !x.busy && x.sleeping)
            } else {
                Some(w)
            };
            if let Some(t) = taker {
                woke += self.wake(st, t) as u64;
                permits -= 1;
            }
        }
        woke
    }
}

impl PoolState {
    /// Recordings that may start now: the limit less those running and those a thread was
    /// woken for.
    fn permits(&self) -> usize {
        self.limit.saturating_sub(self.running + self.waking)
    }

    /// The oldest job thread `index` may take: one that prefers it, or one whose preferred
    /// thread is busy recording (so no job waits behind a busy thread while another is free).
    fn take(&mut self, index: usize) -> Option<Job> {
        let at = self
            .queue
            .iter()
            .position(|j| j.worker == index || self.workers[j.worker].busy)?;
        let job = self.queue.remove(at)?;
        self.workers[job.worker].queued -= 1;
        Some(job)
    }
}

/// The recorder pool: 8 threads started with it, growing to 16, alive until it is dropped,
/// taking jobs from one FIFO. Each job names the thread whose turn it is, in a rotating order
/// that advances by one per bind ([`Self::rotate`]), so over two binds of the same bodies every
/// thread records a second, different body and its retained storage is reused by another body;
/// a job whose thread is busy goes to the first thread that comes free. Each thread owns its
/// [`Recording`].
pub struct RecorderPool {
    shared: std::sync::Arc<PoolShared>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl RecorderPool {
    /// Starts [`RECORDERS_AT_START`] threads.
    pub fn start() -> Self {
        let cpus = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .max(1);
        let shared = std::sync::Arc::new(PoolShared {
            state: std::sync::Mutex::new(PoolState {
                workers: Vec::with_capacity(RECORDERS_MAX),
                // A bind queues at most GRAPH_MAX_DEFINITIONS jobs; room for a few binds' worth
                // keeps the queue from growing (allocating) in a warm bind.
                queue: std::collections::VecDeque::with_capacity(4 * RECORDERS_MAX),
                stop: false,
                next: 0,
                running: 0,
                waking: 0,
                limit: cpus,
                cpus,
                while_building: (cpus - 1).max(1),
                inject: None,
                settled: 0,
                orchestration_wakes: 0,
            }),
            cvs: (0..RECORDERS_MAX)
                .map(|_| std::sync::Condvar::new())
                .collect(),
            settled_cv: std::sync::Condvar::new(),
        });
        let mut pool = Self {
            shared,
            threads: Vec::with_capacity(RECORDERS_MAX),
        };
        for _ in 0..RECORDERS_AT_START {
            pool.spawn();
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&mut self) -> bool {
        let index = {
            let mut st = self.lock();
            if st.workers.len() >= RECORDERS_MAX {
                return false;
            }
            st.workers.push(Worker {
                queued: 0,
                busy: false,
                sleeping: false,
                recorded: Vec::with_capacity(64),
            });
            st.workers.len() - 1
        };
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("simpler-recorder-{index}"))
            .spawn(move || recorder_main(index, &shared));
        match spawned {
            Ok(h) => {
                self.threads.push(h);
                true
            }
            Err(_) => {
                self.lock().workers.pop();
                false
            }
        }
    }

    /// Recorder threads running.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Queues the recording of `entry` (begun by the caller) with `body`, for the thread whose
    /// turn it is, or, when that one is occupied, the next idle one; only when every thread is
    /// occupied does the pool grow (up to 16 threads) rather than wait for one.
    pub fn submit(&mut self, entry: std::sync::Arc<Inflight>, body: GraphBody) {
        let chosen = {
            let mut st = self.lock();
            let n = st.workers.len();
            let start = st.next % n;
            st.next = st.next.wrapping_add(1);
            (0..n)
                .map(|k| (start + k) % n)
                .find(|&w| !st.workers[w].busy && st.workers[w].queued == 0)
                .ok_or(start)
        };
        let worker = match chosen {
            Ok(w) => w,
            Err(_) if self.spawn() => self.threads.len() - 1,
            Err(start) => start,
        };
        let mut st = self.lock();
        st.workers[worker].queued += 1;
        st.queue.push_back(Job {
            entry,
            body,
            worker,
        });
        // Wake the thread only if it may start now: while every permit is taken, the
        // recording that finishes first wakes a thread for a job waiting, so the submitting
        // (orchestration) thread does not pay a wake-up per job for threads that would go
        // straight back to sleep.
        if st.permits() > 0 {
            let woke = if st.workers[worker].busy {
                self.shared.wake_for_queue(&mut st, 1)
            } else {
                self.shared.wake(&mut st, worker) as u64
            };
            st.orchestration_wakes += woke;
        }
    }

    /// While the orchestration thread builds (`true`), at most [`Self::set_while_building`]
    /// recordings run at once (by default one fewer than there are CPUs, at least one, so
    /// recorders do not take turns on the orchestration's CPU); afterwards (`false`, when the
    /// commit waits for them) every job waiting may start at once, and each waiting job's
    /// thread is woken now. The threads then share the CPUs, which costs a few context
    /// switches; a chain in which each finishing recording wakes the next thread costs a
    /// wake-up delay per link, which measured more (dsv4-shaped graph_commit median ~920 ->
    /// ~750 us).
    pub fn orchestrating(&mut self, on: bool) {
        let mut st = self.lock();
        st.limit = if on {
            st.while_building
        } else {
            st.cpus.max(st.running + st.waking + st.queue.len())
        };
        let free = st.permits();
        let woke = self.shared.wake_for_queue(&mut st, free);
        st.orchestration_wakes += woke;
    }

    /// Sets how many recordings may run at once while the orchestration builds; 0 defers every
    /// recording to the commit (the orchestration thread then never wakes a recorder).
    pub fn set_while_building(&mut self, n: usize) {
        self.lock().while_building = n;
    }

    /// Advances the rotation by one (the next bind's first job goes to the next thread).
    pub fn rotate(&mut self, bind: u64) {
        let mut st = self.lock();
        let n = st.workers.len().max(1);
        st.next = (bind as usize) % n;
    }

    /// Makes the next recording any thread takes drop its thread's storage and fail to stand
    /// it up again at `part` (tests of the `storage_ready` rule: threads stand their storage
    /// up when they start, so a failure has to be made to happen on a later one).
    pub fn inject_stand_up_failure(&mut self, part: StandUpPart) {
        self.lock().inject = Some(part);
    }

    /// Blocks until every thread started so far has made its first attempt to stand its
    /// storage up (a start-up cost that runs beside whatever the process does meanwhile; a
    /// benchmark waits for it so that it measures the steady state).
    pub fn wait_settled(&self) {
        let mut st = self.lock();
        while st.settled < st.workers.len() {
            st = self
                .shared
                .settled_cv
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Parked recorder threads the submitting thread has woken so far (`submit` and
    /// `orchestrating`).
    pub fn orchestration_wakes(&self) -> u64 {
        self.lock().orchestration_wakes
    }

    /// The keys each thread has recorded, in order.
    pub fn recorded_by_thread(&self) -> Vec<Vec<u64>> {
        self.lock()
            .workers
            .iter()
            .map(|w| w.recorded.clone())
            .collect()
    }
}

impl Drop for RecorderPool {
    fn drop(&mut self) {
        self.lock().stop = true;
        for cv in &self.shared.cvs {
            cv.notify_all();
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn recorder_main(index: usize, shared: &PoolShared) {
    // Give way to the orchestration thread when both want one CPU: recordings then overlap
    // the orchestration only where a CPU is spare (at the commit the orchestration thread
    // waits, and the recorders have every CPU).
    crate::os::yield_to_busier_threads();
    // This thread's retained storage, reused by every body it records, and its copy of the
    // boundary it records against (retained too: a warm recording allocates nothing).
    let mut recording = Recording::new();
    let mut boundary = GraphBoundary::default();
    boundary.tensors.reserve(GRAPH_MAX_TENSOR_ARGS);
    boundary.tags.reserve(GRAPH_MAX_TENSOR_ARGS);
    boundary.scalars.reserve(GRAPH_MAX_SCALAR_ARGS);
    // Prewarmed: the storage stands up now, off any bind, so no bind's recording pays for it
    // (or allocates for it). A failure here is retried, and reported, by the first recording.
    let _ = recording.stand_up_storage();
    {
        let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        st.settled += 1;
        shared.settled_cv.notify_all();
    }
    loop {
        let job = {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let job = if st.running < st.limit {
                    st.take(index)
                } else {
                    None
                };
                if let Some(job) = job {
                    st.running += 1;
                    st.workers[index].busy = true;
                    if let Some(part) = st.inject.take() {
                        recording.discard_storage();
                        recording.inject_stand_up_failure(part);
                    }
                    break job;
                }
                if st.stop {
                    return;
                }
                // Woken for a job another thread took, or one this thread may not take: the
                // permit goes to a thread that can use it.
                let free = st.permits();
                if free > 0 && !st.queue.is_empty() {
                    let _ = shared.wake_for_queue(&mut st, free);
                }
                st.workers[index].sleeping = true;
                st = shared.cvs[index]
                    .wait(st)
                    .unwrap_or_else(|e| e.into_inner());
                if st.workers[index].sleeping {
                    // Not notified (spurious, or the pool stopping).
                    st.workers[index].sleeping = false;
                } else {
                    st.waking -= 1;
                }
            }
        };
        let allocs_before = crate::alloc_count::now();
        let (key, present) = {
            let inner = job.entry.lock();
            if let Some(b) = inner.boundary.as_ref() {
                boundary.assign(
                    b.tensors.iter().copied().zip(b.tags.iter().copied()),
                    &b.scalars,
                );
            }
            (inner.full_key, inner.boundary.is_some())
        };
        // Absence is checked before any use of the boundary.
        let outcome = if present {
            recording.record(key, job.body, Some(&boundary)).map(|_| ())
        } else {
            Err(RecordError::NoBoundary)
        };
        let times = recording.last_times();
        // The pool learns this thread is free before the entry publishes its result: a commit
        // that has seen every result done finds every recorder free, so the next bind's jobs
        // never find the pool falsely full (and grow it).
        {
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.running -= 1;
            st.workers[index].busy = false;
            // A permit is free. This thread loops back and takes a job of its own, or one
            // whose thread is busy, if there is one; otherwise wake a thread for the oldest
            // job waiting.
            let mine = st
                .queue
                .iter()
                .any(|j| j.worker == index || st.workers[j.worker].busy);
            if !mine {
                let free = st.permits().min(1);
                let _ = shared.wake_for_queue(&mut st, free);
            }
            let recorded = &mut st.workers[index].recorded;
            if recorded.len() == recorded.capacity() {
                recorded.remove(0);
            }
            recorded.push(key);
        }
        job.entry.finish(
            index,
            times,
            allocs_before,
            outcome.map(|()| recording.last_definition()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(_: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
        Ok(())
    }

    fn state(workers: usize) -> PoolState {
        PoolState {
            workers: (0..workers)
                .map(|_| Worker {
                    queued: 0,
                    busy: false,
                    sleeping: true,
                    recorded: Vec::new(),
                })
                .collect(),
            queue: std::collections::VecDeque::new(),
            stop: false,
            next: 0,
            running: 0,
            waking: 0,
            limit: 1,
            cpus: 1,
            while_building: 1,
            inject: None,
            settled: 0,
            orchestration_wakes: 0,
        }
    }

    /// Queues jobs for `workers` (their preferred threads), tagged by their position.
    fn queue(st: &mut PoolState, workers: &[usize]) {
        for (k, &worker) in workers.iter().enumerate() {
            let entry = std::sync::Arc::new(Inflight::default());
            entry.lock().full_key = k as u64;
            st.workers[worker].queued += 1;
            st.queue.push_back(Job {
                entry,
                body,
                worker,
            });
        }
    }

    fn taken(st: &mut PoolState, index: usize) -> Option<u64> {
        st.take(index).map(|j| j.entry.lock().full_key)
    }

    /// A thread woken for a job holds the permit until it runs: jobs queued meanwhile wake no
    /// other thread (each wake-up costs the orchestration thread a system call), and the
    /// permit comes back when the woken thread is under the lock again.
    #[test]
    fn a_woken_thread_holds_its_permit_until_it_runs() {
        let shared = PoolShared {
            state: std::sync::Mutex::new(state(3)),
            cvs: (0..3).map(|_| std::sync::Condvar::new()).collect(),
            settled_cv: std::sync::Condvar::new(),
        };
        let mut st = shared.state.lock().unwrap();
        queue(&mut st, &[1]);
        assert_eq!(st.permits(), 1);
        assert!(shared.wake(&mut st, 1), "thread 1 was asleep");
        assert_eq!((st.waking, st.permits()), (1, 0));
        queue(&mut st, &[2, 0]);
        let free = st.permits();
        assert_eq!(
            shared.wake_for_queue(&mut st, free),
            0,
            "no permit for the jobs queued while thread 1 wakes"
        );
        assert!(
            !shared.wake(&mut st, 1),
            "a notified thread is not notified again"
        );
        assert_eq!(st.waking, 1);
        // Thread 1 runs: back under the lock it gives the permit back, takes its job, and
        // holds the permit as a running recording.
        st.waking -= 1;
        assert_eq!(taken(&mut st, 1), Some(0));
        st.running += 1;
        assert_eq!(st.permits(), 0);
        // Done: the permit wakes the thread of the oldest job waiting (thread 2), once.
        st.running -= 1;
        let free = st.permits();
        assert_eq!(shared.wake_for_queue(&mut st, free), 1);
        assert!(!st.workers[2].sleeping && st.workers[0].sleeping);
        assert_eq!((st.waking, st.permits()), (1, 0));
    }

    /// The one FIFO: a thread takes the oldest job that names it; a job naming an idle thread
    /// waits for that thread; a job naming a busy thread goes to whichever thread asks first.
    #[test]
    fn a_thread_takes_its_own_oldest_job_or_one_whose_thread_is_busy() {
        let mut st = state(3);
        queue(&mut st, &[1, 0, 1, 2]);
        assert_eq!(taken(&mut st, 1), Some(0), "its oldest");
        assert_eq!(taken(&mut st, 1), Some(2), "then its next, past thread 0's");
        assert_eq!(
            taken(&mut st, 1),
            None,
            "thread 0 and 2 are idle: theirs wait for them"
        );
        st.workers[2].busy = true;
        assert_eq!(
            taken(&mut st, 1),
            Some(3),
            "thread 2 is busy: its job is free to take"
        );
        assert_eq!(taken(&mut st, 0), Some(1));
        assert!(st.queue.is_empty());
        assert!(st.workers.iter().all(|w| w.queued == 0));
    }
}
