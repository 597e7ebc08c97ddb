//! One recorder thread's retained storage and the recording itself: [`Recording`] stands up
//! the private runtime (its regions, the packed tensor region, the flat arrays), runs a body
//! through it with the node sink installed, and builds the Definition image. Its own file:
//! this is the storage lifecycle (stand up, reset, give back); what a node holds is the node
//! sink's business.

use super::boundary::GraphBoundary;
use super::node_sink::NodeSink;
use super::{RecordError, RefusingWaiter, StandUpPart, GRAPH_RECORD_VIRTUAL_BASE};
use crate::os::{PrivateMapping, ZeroedArray};
use simpler_aicpu::payloads::{PayloadsLayout, TaskPayloads};
use simpler_aicpu::{GraphBody, GraphRef, GraphSink, Rt};
use simpler_core::gm::NoGm;
use simpler_core::graph::{
    build_definition, definition_size, DefinitionBoundary, DefinitionInput, ExecutionStorageShape,
    RecordedNode, RecordedPredicate, RecordedScalarSource, RecordedTensorSource, GRAPH_MAX_NODES,
};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::{
    Blocked, Orchestrator, OrchestratorConfig, OrchestratorLayout, TaskArg,
};
use simpler_core::ring::{RingConfig, MAX_RINGS};
use simpler_core::sched::{SchedConfig, SchedState};
use simpler_core::scope::ScopeMode;
use simpler_core::{OrchArgs, TaskId, TaskTensor};
use std::sync::atomic::AtomicU32;

/// Task slots of the private ring: room past the node cap, so an overshooting body finishes.
pub(super) const RECORD_WINDOW: u32 = 2048;
/// Dependency cells of the private ring.
const RECORD_EDGES: u32 = 16_384;
/// Bytes of virtual heap per ring: addresses only, which nothing reads or writes (the private
/// runtime's GM refuses every access).
const RECORD_HEAP: u64 = 1 << 31;
/// Bytes of Definition buffer a recorder stands up with (the largest dsv4-shaped Definition
/// is well under it; a larger one grows the buffer once).
const DEFINITION_PREWARM: usize = 4 << 20;

/// The private runtime's memory: page-aligned mappings of zero pages, touched only where a
/// recording writes (an aligned heap allocation would be zeroed eagerly, tens of milliseconds
/// for these 40 MB).
struct Regions {
    sched: PrivateMapping,
    orch: PrivateMapping,
    payloads: PrivateMapping,
}

/// The flat arrays a recording fills (the node sink writes them, the Definition builder reads
/// them); every traversal is bounded by `node_count`.
#[derive(Default)]
pub(super) struct Arrays {
    /// Nodes recorded so far in this recording: the bound of every traversal.
    pub(super) node_count: usize,
    /// Node slots, kept across recordings (only the first `node_count` are this one's).
    pub(super) nodes: Vec<RecordedNode>,
    /// The packed tensor region: `GRAPH_MAX_NODES * CORE_MAX_TENSOR_ARGS` tensors, allocated
    /// once, never grown (addresses into it stay valid through a recording).
    pub(super) tensors: ZeroedArray<TaskTensor>,
    /// The next free slot of `tensors`.
    pub(super) tensor_cursor: usize,
    /// Per recorded tensor, where it comes from (parallel to `tensors[..tensor_cursor]`).
    pub(super) sources: Vec<RecordedTensorSource>,
    /// Every node's scalars, in node order (a boundary scalar stored as 0).
    pub(super) scalars: Vec<u64>,
    /// Per scalar, static or boundary scalar `i` (parallel to `scalars`).
    pub(super) scalar_sources: Vec<RecordedScalarSource>,
    /// Every node's producers, as earlier node indices, in node order.
    pub(super) fanins: Vec<usize>,
    /// Predicates, at most one per node.
    pub(super) predicates: Vec<RecordedPredicate>,
    /// Output windows `[start, end)` per node, in record order (sorted, disjoint).
    pub(super) outputs: Vec<(u64, u64)>,
    /// Node index of each private task slot, per ring (how a producer's task id becomes a
    /// node index).
    pub(super) ids: [Vec<u32>; MAX_RINGS],
    /// Why this recording cannot become a Definition, once something made it so.
    pub(super) unsupported: Option<&'static str>,
}

/// One recorder thread's retained storage, and the recording run on it ([`Self::record`]).
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
        // Zero pages from the kernel: a page is touched only when a body writes it.
        let Ok(tensors) = ZeroedArray::new(cap) else {
            drop(regions);
            self.drop_storage();
            return Err(RecordError::StandUp(StandUpPart::PackedRegion));
        };
        let a = &mut self.arrays;
        a.tensors = tensors;
        a.nodes = Vec::with_capacity(GRAPH_MAX_NODES);
        a.sources = Vec::with_capacity(cap);
        a.scalars = Vec::with_capacity(GRAPH_MAX_NODES * CORE_MAX_SCALAR_ARGS);
        a.scalar_sources = Vec::with_capacity(GRAPH_MAX_NODES * CORE_MAX_SCALAR_ARGS);
        a.fanins = Vec::with_capacity(GRAPH_MAX_NODES * 4);
        a.predicates = Vec::with_capacity(GRAPH_MAX_NODES);
        a.outputs = Vec::with_capacity(GRAPH_MAX_NODES);
        a.ids = core::array::from_fn(|_| vec![u32::MAX; RECORD_WINDOW as usize]);
        // The Definition buffer reserved at a size most bodies never exceed, so recordings do
        // not move it; its bytes are zeroed (and its pages touched) only as far as an image
        // reaches.
        if self.definition.capacity() < DEFINITION_PREWARM {
            self.definition = Vec::with_capacity(DEFINITION_PREWARM);
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
        let mut waiter = RefusingWaiter::default();
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
            return Err(match waiter.blocked {
                Some(Blocked::Producer { .. } | Blocked::Consumers { .. }) => {
                    RecordError::Unsupported(
                        "the body reads or writes an element of a tensor its own tasks produce",
                    )
                }
                Some(_) => RecordError::Unsupported("the body does not fit the recording ring"),
                None => RecordError::Body(e),
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
