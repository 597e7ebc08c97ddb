//! The orchestrator's submit path: claim a slot and heap, find producers, register writers,
//! wire and publish.
//!
//! One thread owns an [`Orchestrator`]; it shares only the [`SchedState`] with the schedulers.
//! A submit:
//!
//! 1. validates the task (argument caps, an open scope, the scope fitting its ring);
//! 2. claims the next task slot and the heap bytes for its OUTPUT tensors on the ring of its
//!    scope depth, waiting (through the caller's [`Waiter`]) while the ring is full, and
//!    reporting a deadlock when the ring's oldest task is held by a scope that cannot close;
//! 3. gives every OUTPUT tensor its buffer (outputs packed, each aligned to 1024 bytes), in
//!    the same pass over the arguments as step 4's creator edges;
//! 4. collects producers: retaining explicit dependencies and every tensor's creator first,
//!    then WAIT-only explicit dependencies and, in AUTO scopes for tensors not marked
//!    `manual_dep`, the TensorMap's overlapping writers ([`crate::deps`] has the table); each
//!    producer is recorded once, with its edge kinds merged;
//! 5. registers INOUT and OUTPUT_EXISTING tensors as writers;
//! 6. publishes the task, which becomes READY at once if every producer it waits for had
//!    completed.
//!
//! Each edge is attached to its producer as it is recorded, under the producer's lock (see
//! [`crate::slot`], "Edges"): RETAIN pins the producer, WAIT links into its fanout list or
//! counts it as completed.
//!
//! An error after step 2 leaves a half-built task behind; the orchestrator latches it and
//! every later submit fails with [`SubmitError::Fatal`], as the reference's fatal latch does:
//! the run must end.
//!
//! Two parts live in files of their own, re-exported here: `wait` (what a submit waits for,
//! [`Blocked`], and the caller's policy, [`Waiter`] / [`NoWait`]) and `error` (why a submit
//! failed, [`SubmitError`]).

use crate::arg::TensorArgType;
use crate::cores::ActiveMask;
use crate::deps::{self, DepFlags, ExplicitDep};
use crate::edge::{EdgeCursor, EdgeRef};
use crate::layout::{Carver, Layout, LayoutError, Span};
use crate::limits::CORE_MAX_TENSOR_ARGS;
use crate::predicate::Predicate;
use crate::ring::{HeapClaim, HeapRing, MAX_RINGS, PACKED_OUTPUT_ALIGN};
use crate::sched::{SchedState, SchedStateLayout};
use crate::scope::{ScopeError, ScopeMode, ScopeStack};
use crate::slot::SlotRef;
use crate::sync::Ordering;
use crate::task_tensor::{TaskId, TaskTensor};
use crate::tensor_map::{EntryKind, TensorMap, TensorMapConfig, TensorMapLayout, Visit};

mod error;
mod wait;

pub use error::SubmitError;
pub use wait::{Blocked, GaveUp, NoWait, Waiter};

/// Explicit dependencies one submit may carry.
pub const MAX_EXPLICIT_DEPS: usize = 64;

/// A tensor argument of a task and how the task uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskArg {
    /// The tensor. For an OUTPUT argument, a description made by
    /// [`TaskTensor::create_info`]; the submit replaces it with the allocated tensor.
    pub tensor: TaskTensor,
    /// How the task uses it.
    pub tag: TensorArgType,
}

/// One task to submit.
#[derive(Debug)]
pub struct Task<'t> {
    /// The kernel slots it occupies on one cluster; empty for a dummy (dependency-only) task.
    pub mask: ActiveMask,
    /// SPMD blocks (at least 1).
    pub block_num: u16,
    /// Its tensors (at most 32), OUTPUT descriptions rewritten in place.
    pub args: &'t mut [TaskArg],
    /// Dependencies beyond what its tensors imply.
    pub deps: &'t [ExplicitDep],
    /// Its dispatch predicate, if any: the operand's producers become its producers (as an
    /// INPUT's would), and the scheduler decides at dispatch whether it runs.
    pub predicate: Option<&'t Predicate>,
}

/// Sizes of an orchestrator and the shared state it feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrchestratorConfig {
    /// The shared state (ring sizes).
    pub sched: crate::sched::SchedConfig,
    /// TensorMap buckets (a power of two).
    pub map_buckets: u32,
    /// Entries of the TensorMap's pool: the live writers (and, with write-after-read
    /// tracking, readers) it can hold at once.
    pub map_entries: u32,
    /// Device address of each ring's heap.
    pub heap_base: [u64; MAX_RINGS],
}

impl OrchestratorConfig {
    /// The reference's defaults, with heaps at `heap_base`.
    pub const fn with_heaps(heap_base: [u64; MAX_RINGS]) -> Self {
        Self {
            sched: crate::sched::SchedConfig::DEFAULT,
            map_buckets: TensorMapConfig::DEFAULT.buckets,
            map_entries: TensorMapConfig::DEFAULT.entries,
            heap_base,
        }
    }

    fn map_config(&self) -> TensorMapConfig {
        TensorMapConfig {
            buckets: self.map_buckets,
            entries: self.map_entries,
            windows: self.sched.rings.map(|r| r.window),
        }
    }
}

/// Where the orchestrator's private arrays live.
#[derive(Clone, Copy, Debug)]
pub struct OrchestratorLayout {
    config: OrchestratorConfig,
    layout: Layout,
    map: TensorMapLayout,
    map_region: Span<crate::layout::Line>,
    scope_tasks: Span<u64>,
    sched: SchedStateLayout,
}

impl OrchestratorLayout {
    /// Lays out the orchestrator-private memory of `config`.
    pub fn new(config: OrchestratorConfig) -> Result<Self, LayoutError> {
        let sched = SchedStateLayout::new(config.sched)?;
        let map = TensorMapLayout::new(config.map_config())?;
        let mut layout = Layout::new();
        let map_region = layout.region(map.size())?;
        let total = config.sched.rings.iter().map(|r| r.window as usize).sum();
        let scope_tasks = layout.array::<u64>(total)?;
        Ok(Self {
            config,
            layout,
            map,
            map_region,
            scope_tasks,
            sched,
        })
    }

    /// Bytes of orchestrator-private memory.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// The layout of the shared state this orchestrator needs.
    pub fn sched(&self) -> &SchedStateLayout {
        &self.sched
    }
}

/// Why one try at a claim took nothing.
enum NotClaimed {
    /// The ring's window or heap is full: wait and try again.
    Full(Blocked),
    /// The claim can never succeed.
    Failed(SubmitError),
}

/// One ring's allocation cursors, private to the orchestrator.
#[derive(Clone, Copy, Debug)]
struct RingCursor {
    next_local: u32,
    window: u32,
    heap: HeapRing,
    /// First task claimed after the heap last restarted at 0.
    heap_anchor: u32,
    edges: EdgeCursor,
    last_alive: u32,
}

/// Orchestrator-private per-ring arrays and cursors: everything the edge recording needs,
/// kept apart from the TensorMap so a lookup's visitor can record edges.
struct Wiring<'a> {
    shared: &'a SchedState<'a>,
    rings: [RingCursor; MAX_RINGS],
    epoch: u32,
    /// Edges recorded this run (one per producer-consumer pair).
    edges: u64,
    /// WAIT edges of the task being submitted.
    waits: u32,
    /// Of those, edges whose producer had already completed.
    completed: u32,
}

/// The orchestrator: submit path and scopes over caller-provided memory.
pub struct Orchestrator<'a> {
    map: TensorMap<'a>,
    wiring: Wiring<'a>,
    scopes: ScopeStack<'a>,
    heap_base: [u64; MAX_RINGS],
    fatal: bool,
    track_war: bool,
}

impl<'a> Orchestrator<'a> {
    /// Formats `region` for an orchestrator feeding `shared`, which must have been laid out by
    /// `layout.sched()`.
    pub fn init(
        region: &'a mut [u8],
        layout: &OrchestratorLayout,
        shared: &'a SchedState<'a>,
    ) -> Result<Self, LayoutError> {
        let orch = Self::carve(region, layout, shared, TensorMap::init)?;
        shared.clear_seen_marks();
        Ok(orch)
    }

    /// Starts a new run on a region [`Self::init`] formatted with the same layout: the
    /// TensorMap is emptied in O(1) instead of re-formatted, and the slots' edge marks are not
    /// rewritten, so `shared` must have been returned to its formatted state since its last
    /// run ([`SchedState::reset`] or [`SchedState::reset_prefix`], which clear them). Cost
    /// independent of the configured sizes.
    pub fn attach(
        region: &'a mut [u8],
        layout: &OrchestratorLayout,
        shared: &'a SchedState<'a>,
    ) -> Result<Self, LayoutError> {
        Self::carve(region, layout, shared, TensorMap::attach)
    }

    fn carve(
        region: &'a mut [u8],
        layout: &OrchestratorLayout,
        shared: &'a SchedState<'a>,
        map: fn(&'a mut [u8], &TensorMapLayout) -> Result<TensorMap<'a>, LayoutError>,
    ) -> Result<Self, LayoutError> {
        if shared.config() != &layout.config.sched {
            return Err(LayoutError::Config {
                field: "orchestrator.sched",
                value: 0,
            });
        }
        let mut c = Carver::new(region, &layout.layout)?;
        let map = map(c.region(layout.map_region)?, &layout.map)?;
        let scope_tasks = c.pod(layout.scope_tasks)?;
        let rings = layout.config.sched.rings.map(|r| RingCursor {
            next_local: 0,
            window: r.window,
            heap: HeapRing::new(r.heap_bytes),
            heap_anchor: 0,
            edges: EdgeCursor::new(r.edges),
            last_alive: 0,
        });
        let wiring = Wiring {
            shared,
            rings,
            epoch: 0,
            edges: 0,
            waits: 0,
            completed: 0,
        };
        Ok(Self {
            map,
            wiring,
            scopes: ScopeStack::new(scope_tasks),
            heap_base: layout.config.heap_base,
            fatal: false,
            track_war: false,
        })
    }

    /// Starts a new run on the memory in place: an empty TensorMap, rings at task 0, no scope,
    /// no latched failure. The shared state must be reset alongside (`SchedState::reset`).
    pub fn reset(&mut self) {
        self.map.reset();
        self.scopes.reset();
        for cur in self.wiring.rings.iter_mut() {
            cur.next_local = 0;
            cur.heap = HeapRing::new(cur.heap.size());
            cur.heap_anchor = 0;
            cur.edges = EdgeCursor::new(cur.edges.capacity());
            cur.last_alive = 0;
        }
        self.fatal = false;
        self.wiring.edges = 0;
    }

    /// Producer-consumer edges recorded since the last reset (one per pair).
    pub fn edges_recorded(&self) -> u64 {
        self.wiring.edges
    }

    /// The shared state this orchestrator feeds.
    pub fn shared(&self) -> &'a SchedState<'a> {
        self.wiring.shared
    }

    /// The TensorMap (for inspection).
    pub fn tensor_map(&self) -> &TensorMap<'a> {
        &self.map
    }

    /// Calls `visit` with the task of every TensorMap writer entry (an INOUT or
    /// OUTPUT_EXISTING registration) overlapping `tensor`, as a submit's lookup would find
    /// them, whatever the current scope's mode; the map is left as it was. An entry may name a
    /// task that has retired since; telling that is the caller's. `Rt::read_element` and
    /// `Rt::write_element` wait for these tasks, as the reference's `get_tensor_data` does.
    pub fn writers_of(&mut self, tensor: &TaskTensor, mut visit: impl FnMut(TaskId)) {
        self.map.lookup(tensor, EntryKind::Writer, |task, _| {
            visit(task);
            Visit::Keep
        });
    }

    /// Moves the submit epoch, so a test can reach its wrap without 2^32 submits.
    #[cfg(test)]
    pub(crate) fn set_epoch(&mut self, epoch: u32) {
        self.wiring.epoch = epoch;
    }

    /// Turns write-after-read tracking on or off (off by default, as in the reference).
    ///
    /// When on, INPUT arguments are recorded as readers, and a writer (INOUT or
    /// OUTPUT_EXISTING) waits for every earlier live reader of an overlapping region; a writer
    /// that covers a reader's region supersedes its entry. The cost is a TensorMap insert per
    /// INPUT and longer bucket chains for every lookup; the `submit` benchmark measures it.
    pub fn set_track_war(&mut self, on: bool) {
        self.track_war = on;
    }

    /// Opens a scope.
    pub fn scope_begin(&mut self, mode: ScopeMode) -> Result<(), ScopeError> {
        self.scopes.begin(mode)
    }

    /// Closes the innermost scope, releasing its reference on every task it holds.
    pub fn scope_end(&mut self) -> Result<(), ScopeError> {
        let shared = self.wiring.shared;
        for &task in self.scopes.end()? {
            shared.release_scope(TaskId(task));
        }
        Ok(())
    }

    /// Scopes open now; the innermost one's depth selects the ring a submit goes to.
    pub fn scope_depth(&self) -> usize {
        self.scopes.depth()
    }

    /// Tasks claimed on `ring` so far.
    pub fn submitted(&self, ring: usize) -> u32 {
        self.wiring.rings[ring.min(MAX_RINGS - 1)].next_local
    }

    /// Dependency cells taken from each ring's pool since the last reset (its cursor's top;
    /// with nothing retired, the used prefix of the pool).
    pub fn edges_used(&self) -> [u32; MAX_RINGS] {
        core::array::from_fn(|r| self.wiring.rings[r].edges.top())
    }

    /// Submits `task`; see the module docs for the steps.
    pub fn submit(
        &mut self,
        task: Task<'_>,
        waiter: &mut impl Waiter,
    ) -> Result<TaskId, SubmitError> {
        self.submit_with(task, waiter, |_, _| {})
    }

    /// [`Self::submit`], calling `before_publish` with the task's id and its arguments (OUTPUT
    /// tensors bound) once it is wired and before any scheduler can see it: the place to write
    /// what the cores will need, such as its dispatch payload.
    pub fn submit_with(
        &mut self,
        task: Task<'_>,
        waiter: &mut impl Waiter,
        before_publish: impl FnOnce(TaskId, &[TaskArg]),
    ) -> Result<TaskId, SubmitError> {
        if self.fatal {
            return Err(SubmitError::Fatal);
        }
        if task.args.len() > CORE_MAX_TENSOR_ARGS {
            return Err(SubmitError::TooManyTensors {
                count: task.args.len(),
                limit: CORE_MAX_TENSOR_ARGS,
            });
        }
        if task.deps.len() > MAX_EXPLICIT_DEPS {
            return Err(SubmitError::TooManyDeps {
                count: task.deps.len(),
                limit: MAX_EXPLICIT_DEPS,
            });
        }
        if task.block_num == 0 {
            return Err(SubmitError::ZeroBlocks);
        }
        let mask = task.mask.normalized();
        let subtasks = (task.block_num as u32) * mask.bits().count_ones().max(1);
        let bytes = output_bytes(task.args);
        let result = self.submit_inner(
            mask,
            subtasks,
            bytes,
            task.args,
            task.predicate.map(Predicate::operand),
            task.deps,
            false,
            waiter,
            before_publish,
        );
        self.latch(result)
    }

    /// Submits an allocation task: it only gives `outputs` (descriptions made by
    /// [`TaskTensor::create_info`]) their buffers, and is complete at once.
    pub fn alloc_tensors(
        &mut self,
        outputs: &mut [TaskArg],
        waiter: &mut impl Waiter,
    ) -> Result<TaskId, SubmitError> {
        if self.fatal {
            return Err(SubmitError::Fatal);
        }
        if outputs.len() > CORE_MAX_TENSOR_ARGS {
            return Err(SubmitError::TooManyTensors {
                count: outputs.len(),
                limit: CORE_MAX_TENSOR_ARGS,
            });
        }
        for o in outputs.iter_mut() {
            o.tag = TensorArgType::Output;
        }
        let bytes = output_bytes(outputs);
        let result = self.submit_inner(
            ActiveMask::empty(),
            1,
            bytes,
            outputs,
            None,
            &[],
            true,
            waiter,
            |_, _| {},
        );
        self.latch(result)
    }

    fn latch(
        &mut self,
        result: Result<TaskId, (SubmitError, bool)>,
    ) -> Result<TaskId, SubmitError> {
        result.map_err(|(e, claimed)| {
            self.fatal |= claimed;
            e
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn submit_inner(
        &mut self,
        mask: ActiveMask,
        subtasks: u32,
        bytes: u64,
        args: &mut [TaskArg],
        reads: Option<&TaskTensor>,
        explicit: &[ExplicitDep],
        alloc_only: bool,
        waiter: &mut impl Waiter,
        before_publish: impl FnOnce(TaskId, &[TaskArg]),
    ) -> Result<TaskId, (SubmitError, bool)> {
        let early = |e: SubmitError| (e, false);
        let late = |e: SubmitError| (e, true);
        let ring = self.scopes.ring().map_err(|e| early(e.into()))?;
        self.check_fits_ring(ring, bytes).map_err(early)?;
        let (id, me, heap_offset) = self
            .claim(ring, mask, subtasks, bytes, waiter)
            .map_err(early)?;
        // Outputs: packed in the task's heap claim, each aligned to 1024 bytes.
        let mut offset = self.heap_base[ring] + heap_offset;
        if alloc_only {
            for a in args.iter_mut() {
                a.tensor.bind_output(offset, id);
                offset += align_output(a.tensor.extent_bytes());
            }
            before_publish(id, args);
            self.wiring.finish_edges(ring, me);
            self.wiring.shared.publish_completed(me);
            self.scopes.push(id).map_err(|e| late(e.into()))?;
            return Ok(id);
        }

        self.wiring.next_epoch();
        // Edges that retain come first, so that a producer reached again later (a lookup, a
        // WAIT-only dependency) only ever adds WAIT to an edge that already keeps it alive.
        self.explicit_edges(me, explicit, true, waiter)
            .map_err(late)?;
        // One pass: every OUTPUT gets its buffer, every other tensor its creator edge.
        for a in args.iter_mut() {
            if a.tag == TensorArgType::Output {
                a.tensor.bind_output(offset, id);
                offset += align_output(a.tensor.extent_bytes());
            } else {
                self.wiring
                    .creator_edge(me, &a.tensor, waiter)
                    .map_err(late)?;
            }
        }
        // `reads`: a tensor the task reads without passing it to its kernels (a predicate's
        // operand), tracked as an INPUT, off the loops every task runs.
        if let Some(r) = reads {
            self.wiring.creator_edge(me, r, waiter).map_err(late)?;
        }
        self.explicit_edges(me, explicit, false, waiter)
            .map_err(late)?;
        let manual_scope = self.scopes.is_manual();
        let war = self.track_war;
        let mut inserts = 0u32;
        // Arguments whose entry a lookup handed over to this task (bit per argument): already
        // registered, not inserted.
        let mut handed_over = 0u32;
        for (i, a) in args.iter().enumerate() {
            if !deps::follows_creator(a.tag) || manual_scope || a.tensor.manual_dep() {
                continue;
            }
            let writes = deps::registers_writer(a.tag);
            inserts += (writes || war && a.tag == TensorArgType::Input) as u32;
            // Readers of earlier writers (RAW, and WAW for INOUT); with WAR tracking, every
            // writer also waits for earlier readers and writers. An OUTPUT_EXISTING writer must
            // then look up writers too: a covering writer removes the readers it supersedes,
            // and a later writer reaches them only through it.
            let after_writers = deps::looks_up_writers(a.tag) || war && writes;
            let after_readers = war && writes;
            if !after_writers && !after_readers {
                continue;
            }
            // A writer that covers an entry supersedes it: later accesses reach the old one
            // through this task. INOUT supersedes writers (an entry of exactly its region is
            // handed over rather than removed and inserted again); any writer supersedes
            // readers.
            if after_writers {
                let evict = a.tag == TensorArgType::InOut;
                let mut failure = None;
                let wiring = &mut self.wiring;
                let registered =
                    self.map
                        .lookup(&a.tensor, EntryKind::Writer, |producer, overlap| {
                            if failure.is_none() {
                                if let Err(e) =
                                    wiring.add_edge(me, producer, DepFlags::WAIT, waiter)
                                {
                                    failure = Some(e);
                                }
                            }
                            if evict && overlap == crate::overlap::Overlap::Covered {
                                Visit::Replace(id)
                            } else {
                                Visit::Keep
                            }
                        });
                if let Some(e) = failure {
                    return Err(late(e));
                }
                if registered {
                    handed_over |= 1 << i;
                    inserts -= 1;
                }
            }
            if after_readers {
                self.wait_for_entries(&a.tensor, EntryKind::Reader, true, me, waiter)
                    .map_err(late)?;
            }
        }
        let tracked_read = reads.filter(|r| !manual_scope && !r.manual_dep());
        if let Some(r) = tracked_read {
            self.wait_for_entries(r, EntryKind::Writer, false, me, waiter)
                .map_err(late)?;
            inserts += war as u32;
        }
        if inserts > 0 {
            self.reserve_map(inserts, waiter).map_err(late)?;
            self.insert_entries(id, args, tracked_read, handed_over, manual_scope, war);
        }
        before_publish(id, args);
        if self.wiring.wire_and_publish(ring, me) {
            waiter.made_ready();
        }
        self.scopes.push(id).map_err(|e| late(e.into()))?;
        Ok(id)
    }

    /// Step 1's ring checks: the innermost scope leaves room in its ring's window for one more
    /// task, and the task's outputs fit the ring's heap at all.
    #[inline(always)]
    fn check_fits_ring(&self, ring: usize, bytes: u64) -> Result<(), SubmitError> {
        let window = self.wiring.rings[ring].window;
        let held = self.scopes.innermost_len();
        if held + 1 >= window as usize {
            return Err(SubmitError::ScopeDeadlock {
                ring,
                tasks: held,
                window,
            });
        }
        let heap_size = self.wiring.rings[ring].heap.size();
        if bytes > heap_size {
            return Err(SubmitError::OutputsTooLarge {
                ring,
                bytes,
                heap: heap_size,
            });
        }
        Ok(())
    }

    /// An edge from every explicit dependency that retains (`retain`) or only waits
    /// (`!retain`), skipping producers that already retired.
    #[inline(always)]
    fn explicit_edges(
        &mut self,
        me: SlotRef,
        explicit: &[ExplicitDep],
        retain: bool,
        waiter: &mut impl Waiter,
    ) -> Result<(), SubmitError> {
        for dep in explicit
            .iter()
            .filter(|d| d.flags.contains(DepFlags::RETAIN) == retain)
        {
            if !self.wiring.is_retired(dep.task) {
                self.wiring.add_edge(me, dep.task, dep.flags, waiter)?;
            }
        }
        Ok(())
    }

    /// Step 5: the task's TensorMap entries, in the room `reserve_map` made for them. Writers
    /// (and, with write-after-read tracking, readers and the tracked read) are inserted, except
    /// the arguments whose entry a lookup handed over to the task (`handed_over`, a bit per
    /// argument) and everything in a manual scope or marked `manual_dep`.
    #[inline(always)]
    fn insert_entries(
        &mut self,
        id: TaskId,
        args: &[TaskArg],
        tracked_read: Option<&TaskTensor>,
        handed_over: u32,
        manual_scope: bool,
        war: bool,
    ) {
        if war {
            if let Some(r) = tracked_read {
                let _ = self.map.insert(r, id, EntryKind::Reader);
            }
        }
        for (i, a) in args.iter().enumerate() {
            if manual_scope || a.tensor.manual_dep() || handed_over & 1 << i != 0 {
                continue;
            }
            let kind = if deps::registers_writer(a.tag) {
                EntryKind::Writer
            } else if war && a.tag == TensorArgType::Input {
                EntryKind::Reader
            } else {
                continue;
            };
            // Reserved by the caller; the insert cannot fail.
            let _ = self.map.insert(&a.tensor, id, kind);
        }
    }

    /// Off the default path: a WAIT edge from the task of every live entry of `kind` that
    /// `tensor` may overlap, superseding (removing) the entries it covers when `evict`. Used for
    /// write-after-read (a writer after the readers of its region, `Reader`, evicting) and for
    /// a read outside the kernel's arguments (a predicate's operand: `Writer`, evicting nothing,
    /// as an INPUT's lookup). The default path's writer lookup is written out in
    /// `submit_inner` so that it stays inlined there.
    #[inline(never)]
    fn wait_for_entries(
        &mut self,
        tensor: &TaskTensor,
        kind: EntryKind,
        evict: bool,
        me: SlotRef,
        waiter: &mut impl Waiter,
    ) -> Result<(), SubmitError> {
        let mut failure = None;
        let wiring = &mut self.wiring;
        self.map.lookup(tensor, kind, |producer, overlap| {
            if failure.is_none() {
                if let Err(e) = wiring.add_edge(me, producer, DepFlags::WAIT, waiter) {
                    failure = Some(e);
                }
            }
            if evict && overlap == crate::overlap::Overlap::Covered {
                Visit::Remove
            } else {
                Visit::Keep
            }
        });
        failure.map_or(Ok(()), Err)
    }

    /// Claims the next task slot of `ring` and `bytes` of its heap, waiting through `waiter`
    /// while either is full. The first try is inlined into the submit; waiting is not.
    #[inline]
    fn claim(
        &mut self,
        ring: usize,
        mask: ActiveMask,
        subtasks: u32,
        bytes: u64,
        waiter: &mut impl Waiter,
    ) -> Result<(TaskId, SlotRef, u64), SubmitError> {
        self.sync_ring(ring);
        match self.try_claim(ring, mask, subtasks, bytes) {
            Ok(claimed) => Ok(claimed),
            Err(NotClaimed::Failed(e)) => Err(e),
            Err(NotClaimed::Full(blocked)) => {
                self.claim_blocked(ring, mask, subtasks, bytes, blocked, waiter)
            }
        }
    }

    /// [`Self::claim`] once the first try found the ring full (`blocked`): judges a deadlock,
    /// waits, and tries again.
    #[inline(never)]
    fn claim_blocked(
        &mut self,
        ring: usize,
        mask: ActiveMask,
        subtasks: u32,
        bytes: u64,
        mut blocked: Blocked,
        waiter: &mut impl Waiter,
    ) -> Result<(TaskId, SlotRef, u64), SubmitError> {
        let shared = self.wiring.shared;
        loop {
            let deadlock = |head| match blocked {
                Blocked::Heap { .. } => SubmitError::HeapRingDeadlock { ring, head },
                _ => SubmitError::FlowControlDeadlock { ring, head },
            };
            // Judge a deadlock at the watermark the claim failed at; if tasks retired since,
            // simply try again.
            let alive = self.wiring.rings[ring].last_alive;
            if shared.flow(ring).last_alive() == alive {
                if let Some(head) = shared.head_pinned_by_scope(ring, alive) {
                    return Err(deadlock(Some(head)));
                }
                waiter.wait(blocked).map_err(|_| deadlock(None))?;
            }
            self.sync_ring(ring);
            match self.try_claim(ring, mask, subtasks, bytes) {
                Ok(claimed) => return Ok(claimed),
                Err(NotClaimed::Failed(e)) => return Err(e),
                Err(NotClaimed::Full(b)) => blocked = b,
            }
        }
    }

    /// One try at a claim on the watermark last read.
    #[inline(always)]
    fn try_claim(
        &mut self,
        ring: usize,
        mask: ActiveMask,
        subtasks: u32,
        bytes: u64,
    ) -> Result<(TaskId, SlotRef, u64), NotClaimed> {
        let shared = self.wiring.shared;
        let cur = &mut self.wiring.rings[ring];
        let live = cur.next_local.wrapping_sub(cur.last_alive);
        if live + 1 >= cur.window {
            return Err(NotClaimed::Full(Blocked::TaskRing { ring }));
        }
        match cur.heap.claim(bytes) {
            Ok((at, restarted)) => {
                let local = cur.next_local;
                cur.next_local += 1;
                if restarted {
                    cur.heap_anchor = local;
                }
                let id = TaskId::new(ring as u32, local);
                let slot = (local & (cur.window - 1)) as usize;
                let me = SlotRef::new(ring, slot as u32);
                // Heaps are below 4 GiB (checked at layout), so the end fits.
                let heap_end = (at + bytes) as u32;
                shared
                    .slot(me)
                    .claim(id, mask, subtasks, cur.edges.top(), heap_end);
                shared
                    .flow(ring)
                    .current_task_index
                    .store(cur.next_local, Ordering::Release);
                Ok((id, me, at))
            }
            Err(HeapClaim::TooLarge) => Err(NotClaimed::Failed(SubmitError::OutputsTooLarge {
                ring,
                bytes,
                heap: cur.heap.size(),
            })),
            Err(HeapClaim::WouldBlock) => Err(NotClaimed::Full(Blocked::Heap { ring, bytes })),
        }
    }

    /// Reads `ring`'s watermark and frees what the retired tasks held.
    #[inline]
    fn sync_ring(&mut self, ring: usize) {
        if let Some(last_alive) = self.wiring.sync_ring(ring) {
            self.map.sync_watermark(ring, last_alive);
        }
    }

    fn reserve_map(&mut self, needed: u32, waiter: &mut impl Waiter) -> Result<(), SubmitError> {
        loop {
            for ring in 0..MAX_RINGS {
                self.sync_ring(ring);
            }
            match self.map.ensure_capacity(needed) {
                Ok(()) => return Ok(()),
                Err(full) => {
                    waiter.wait(Blocked::TensorMap { needed }).map_err(|_| {
                        SubmitError::TensorMapOverflow {
                            needed: full.needed,
                            free: full.free,
                        }
                    })?;
                }
            }
        }
    }
}

impl<'a> Wiring<'a> {
    fn next_epoch(&mut self) {
        self.waits = 0;
        self.completed = 0;
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.shared.clear_seen_marks();
            self.epoch = 1;
        }
    }

    /// Whether `task` retired as of the watermarks this orchestrator last read. A task that
    /// retired since is caught when its edge is attached (its slot is free or reused).
    fn is_retired(&self, task: TaskId) -> bool {
        match self.rings.get(task.ring() as usize) {
            Some(r) => task.local() < r.last_alive,
            None => true,
        }
    }

    /// Reads `ring`'s watermark; if it moved, frees the heap and edge cells retired tasks held
    /// and returns it.
    #[inline]
    fn sync_ring(&mut self, ring: usize) -> Option<u32> {
        let last_alive = self.shared.flow(ring).last_alive();
        if last_alive == self.rings[ring].last_alive {
            return None;
        }
        self.reclaim(ring, last_alive);
        Some(last_alive)
    }

    /// [`Self::sync_ring`] once the watermark moved to `last_alive`.
    #[inline(never)]
    fn reclaim(&mut self, ring: usize, last_alive: u32) {
        let cur = &mut self.rings[ring];
        cur.last_alive = last_alive;
        // The newest retired task's slot is not reused before the orchestrator claims it again,
        // so its recorded ends are still there.
        let newest = last_alive.wrapping_sub(1);
        let slot = self
            .shared
            .slot(SlotRef::new(ring, newest & (cur.window - 1)));
        let tail = if newest < cur.heap_anchor {
            0
        } else {
            slot.heap_end.load(Ordering::Relaxed) as u64
        };
        cur.heap.set_tail(tail);
        let edge_start = slot.edge_start.load(Ordering::Relaxed);
        cur.edges
            .set_tail(edge_start.wrapping_add(slot.edge_count.load(Ordering::Relaxed)));
    }

    /// Records an edge from `producer` to the task in slot `me` and attaches it to the
    /// producer, once per producer per submit (a later request adds its kinds to the first).
    fn add_edge(
        &mut self,
        me: SlotRef,
        producer: TaskId,
        flags: DepFlags,
        waiter: &mut impl Waiter,
    ) -> Result<(), SubmitError> {
        let Some(pr) = self.shared.slot_ref(producer) else {
            return Ok(());
        };
        // An entry an earlier argument's lookup handed over to this task: no edge to itself
        // (another task of this slot has retired, or the slot would not be ours).
        if pr == me {
            return Ok(());
        }
        let ring = me.ring();
        let pslot = self.shared.slot(pr);
        if pslot.seen_epoch.load(Ordering::Relaxed) == self.epoch && pslot.task_id() == producer {
            let edge = pslot.seen_edge.load(Ordering::Relaxed);
            let cell = self.shared.edge_at(ring, edge as usize);
            let had = DepFlags::from_bits_truncate(cell.flags.load(Ordering::Relaxed));
            let new = flags.difference(had);
            if !new.is_empty() {
                // Retaining edges are recorded first, so `new` is WAIT on a retained (alive)
                // producer.
                cell.flags.fetch_or(new.bits(), Ordering::Relaxed);
                let done = self.shared.extend(pr, EdgeRef::new(ring, edge), new);
                self.count_wait(new, done);
            }
            return Ok(());
        }
        let linear = loop {
            if let Some(linear) = self.rings[ring].edges.claim() {
                break linear;
            }
            self.sync_ring(ring);
            if let Some(linear) = self.rings[ring].edges.claim() {
                break linear;
            }
            let mine = self.rings[ring]
                .edges
                .top()
                .wrapping_sub(self.shared.slot(me).edge_start.load(Ordering::Relaxed));
            if mine >= self.rings[ring].edges.capacity() {
                return Err(SubmitError::DepPoolOverflow { ring });
            }
            let alive = self.rings[ring].last_alive;
            if self.shared.flow(ring).last_alive() != alive {
                continue;
            }
            if self.shared.head_pinned_by_scope(ring, alive).is_some() {
                return Err(SubmitError::DepPoolOverflow { ring });
            }
            waiter
                .wait(Blocked::EdgePool { ring })
                .map_err(|_| SubmitError::DepPoolOverflow { ring })?;
        };
        let index = self.rings[ring].edges.cell(linear);
        // The cell is complete before the producer can see it in its fanout list.
        self.shared
            .edge_at(ring, index as usize)
            .set(me.0, pr.0, flags.bits());
        let Some(done) = self
            .shared
            .attach(pslot, producer, EdgeRef::new(ring, index), flags)
        else {
            // The producer retired or was consumed meanwhile: no edge; give the cell back.
            self.rings[ring].edges.unclaim();
            return Ok(());
        };
        self.count_wait(flags, done);
        self.edges += 1;
        pslot.seen_epoch.store(self.epoch, Ordering::Relaxed);
        pslot.seen_edge.store(index, Ordering::Relaxed);
        Ok(())
    }

    /// The creator edge (WAIT | RETAIN) of a tensor a task reads or writes, if its owner is
    /// still live.
    #[inline(always)]
    fn creator_edge(
        &mut self,
        me: SlotRef,
        tensor: &TaskTensor,
        waiter: &mut impl Waiter,
    ) -> Result<(), SubmitError> {
        let owner = tensor.owner_task_id();
        if owner.is_valid() && !self.is_retired(owner) {
            self.add_edge(me, owner, DepFlags::WAIT | DepFlags::RETAIN, waiter)?;
        }
        Ok(())
    }

    fn count_wait(&mut self, flags: DepFlags, done: bool) {
        if flags.contains(DepFlags::WAIT) {
            self.waits += 1;
            self.completed += done as u32;
        }
    }

    /// Records where this task's edges end (for reclaiming the pool in task order).
    fn finish_edges(&mut self, ring: usize, me: SlotRef) -> (u32, u32) {
        let cur = &self.rings[ring.min(MAX_RINGS - 1)];
        let slot = self.shared.slot(me);
        let start = slot.edge_start.load(Ordering::Relaxed);
        let count = cur.edges.top().wrapping_sub(start);
        slot.edge_count.store(count, Ordering::Relaxed);
        (start, count)
    }

    /// Step 6: records the task's edge range and publishes it; `true` when that made it ready.
    fn wire_and_publish(&mut self, ring: usize, me: SlotRef) -> bool {
        self.finish_edges(ring, me);
        self.shared.publish(me, self.waits, self.completed)
    }
}

fn align_output(bytes: u64) -> u64 {
    bytes.div_ceil(PACKED_OUTPUT_ALIGN) * PACKED_OUTPUT_ALIGN
}

#[inline]
fn output_bytes(args: &[TaskArg]) -> u64 {
    args.iter()
        .filter(|a| a.tag == TensorArgType::Output)
        .map(|a| align_output(a.tensor.extent_bytes()))
        .fold(0u64, u64::saturating_add)
}
