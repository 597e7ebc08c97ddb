//! [`SchedState`], the state the orchestrator and every scheduler thread share, and the slot
//! transitions on it; `simpler_aicpu::scheduler` is one scheduler thread's pass, which calls them.
//!
//! Per ring: the flow-control words ([`RingFlow`]), the task slots ([`SlotState`]) and the
//! dependency pool ([`EdgeCell`]). Plus one ready queue per resource shape (AIC, AIV, MIX) and
//! one for DUMMY tasks, each at least as large as every ring's window together, so a push
//! never finds a queue full (a task is in at most one queue, at most once).
//!
//! The transitions of the slot state machine ([`crate::slot`]) live here; the orchestrator's
//! side (claiming, wiring, publishing) is in [`crate::orchestrator`]. The unit tests are in
//! `sched/tests.rs`.

use crate::cores::ResourceShape;
use crate::deps::{DepFlags, NIL};
use crate::edge::{EdgeCell, EdgeRef};
use crate::layout::{Carver, Layout, LayoutError, Line, Span};
use crate::ready_queue::{ReadyQueue, ReadyQueueLayout};
use crate::ring::{RingConfig, RingFlow, MAX_RINGS};
use crate::slot::{SlotRef, SlotState, SlotStatus, FANIN_READY, SCOPE_BIT, SELF_REF};
use crate::sync::{fence, Ordering};
use crate::task_tensor::TaskId;

/// Number of ready queues: AIC, AIV, MIX, DUMMY (indexed by [`ResourceShape`]).
pub const READY_QUEUES: usize = 4;

/// Ready tasks a scheduler keeps for its own cores instead of queueing them: up to
/// [`KEEP_PER_SHAPE`] of each single-core shape ([`ResourceShape::Aic`],
/// [`ResourceShape::Aiv`]) that its completions made ready
/// ([`SchedState::complete_subtask_keeping`]).
///
/// A completion's consumer usually reads what the completed task wrote, so running it on the
/// same thread finds that data, and the consumer's slot, in this CPU's cache; and the task
/// skips a push and a pop on queues every scheduler contends for. A kept task is READY, its
/// readiness decided by the same fanin count as a queued one's; it is only not yet visible to
/// the other schedulers. Its keeper takes it ([`Kept::take`]) or queues it
/// ([`SchedState::queue_kept`]) before its pass ends.
///
/// One pass polls the completions of every core its thread stepped since the last, so it
/// can ready a consumer for each of them: room for one of a shape sent all but the first
/// through the shared queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// Per kept shape (in the order of [`Kept::SHAPES`]), its tasks; `None` is a free entry.
    tasks: [[Option<TaskId>; KEEP_PER_SHAPE]; 2],
    /// Since [`Kept::take_queued`] last looked, a completion made through this keeper queued
    /// a task it had no room for, or [`SchedState::queue_kept`] queued one.
    queued: bool,
}

/// Tasks of one shape a [`Kept`] holds: as many vector cores as one scheduler owns at the
/// most clusters a2a3 has (24 over its three schedulers: 8 clusters, 16 vector cores), so a
/// pass's completions on all its cores can keep their consumers (in the default eight
/// clusters a scheduler owns at most three, six vector cores). Past its cores, a pass holds
/// more than it can place; what it does not place it queues at its end anyway.
pub const KEEP_PER_SHAPE: usize = 16;

impl Kept {
    /// The shapes kept, in the order of `tasks`.
    const SHAPES: [ResourceShape; 2] = [ResourceShape::Aic, ResourceShape::Aiv];

    /// The entries of `shape`, if it is a kept shape.
    fn entries(&mut self, shape: ResourceShape) -> Option<&mut [Option<TaskId>; KEEP_PER_SHAPE]> {
        let i = Self::SHAPES.iter().position(|&s| s == shape)?;
        self.tasks.get_mut(i)
    }

    /// A free entry for `shape`, if it is kept and has room.
    fn room(&mut self, shape: ResourceShape) -> Option<&mut Option<TaskId>> {
        self.entries(shape)?.iter_mut().find(|t| t.is_none())
    }

    /// Takes a kept task of `shape`, if any.
    pub fn take(&mut self, shape: ResourceShape) -> Option<TaskId> {
        self.entries(shape)?.iter_mut().find_map(Option::take)
    }

    /// The tasks kept.
    pub fn tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.iter().flatten().flatten().copied()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.tasks.iter().flatten().all(Option::is_none)
    }

    /// Whether a task was queued for every scheduler through this keeper since the last call
    /// (a task its completions made ready and it had no room for, or one [`SchedState::queue_kept`]
    /// queued): what another scheduler, idle, would need waking for.
    pub fn take_queued(&mut self) -> bool {
        core::mem::take(&mut self.queued)
    }
}

/// Sizes of the shared state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedConfig {
    /// Each ring's sizes.
    pub rings: [RingConfig; MAX_RINGS],
}

impl SchedConfig {
    /// Four rings at the reference's defaults.
    pub const DEFAULT: Self = Self {
        rings: [RingConfig::DEFAULT; MAX_RINGS],
    };

    /// Every ring at `ring`.
    pub const fn uniform(ring: RingConfig) -> Self {
        Self {
            rings: [ring; MAX_RINGS],
        }
    }

    fn validate(&self) -> Result<(), LayoutError> {
        for r in &self.rings {
            if r.window < 4 || !r.window.is_power_of_two() || r.window >= 1 << SlotRef::INDEX_BITS {
                return Err(LayoutError::Config {
                    field: "ring.window",
                    value: r.window as u64,
                });
            }
            if r.edges < 4 || !r.edges.is_power_of_two() || r.edges >= 1 << 30 {
                return Err(LayoutError::Config {
                    field: "ring.edges",
                    value: r.edges as u64,
                });
            }
            if r.heap_bytes < 1024 || r.heap_bytes > u32::MAX as u64 {
                return Err(LayoutError::Config {
                    field: "ring.heap_bytes",
                    value: r.heap_bytes,
                });
            }
        }
        Ok(())
    }

    fn queue_capacity(&self) -> usize {
        let live: usize = self.rings.iter().map(|r| r.window as usize).sum();
        live.next_power_of_two()
    }
}

/// Where each part of a [`SchedState`] lives in its region.
#[derive(Clone, Copy, Debug)]
pub struct SchedStateLayout {
    config: SchedConfig,
    layout: Layout,
    flows: Span<RingFlow>,
    slots: [Span<SlotState>; MAX_RINGS],
    edges: [Span<EdgeCell>; MAX_RINGS],
    queue: ReadyQueueLayout,
    queues: [Span<Line>; READY_QUEUES],
}

impl SchedStateLayout {
    /// Lays out the shared state of `config`.
    pub fn new(config: SchedConfig) -> Result<Self, LayoutError> {
        config.validate()?;
        let mut layout = Layout::new();
        let flows = layout.array::<RingFlow>(MAX_RINGS)?;
        let mut slots = [Span::empty(); MAX_RINGS];
        for (r, s) in slots.iter_mut().enumerate() {
            *s = layout.array::<SlotState>(config.rings[r].window as usize)?;
        }
        let mut edges = [Span::empty(); MAX_RINGS];
        for (r, e) in edges.iter_mut().enumerate() {
            *e = layout.array::<EdgeCell>(config.rings[r].edges as usize)?;
        }
        let queue = ReadyQueue::layout(config.queue_capacity())?;
        let mut queues = [layout.region(queue.size())?; READY_QUEUES];
        for q in queues.iter_mut().skip(1) {
            *q = layout.region(queue.size())?;
        }
        Ok(Self {
            config,
            layout,
            flows,
            slots,
            edges,
            queue,
            queues,
        })
    }

    /// Bytes the shared state needs.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// The ring sizes this layout was computed from.
    pub fn config(&self) -> SchedConfig {
        self.config
    }
}

/// The shared state, a view over its region. `Sync`: every field is atomic.
pub struct SchedState<'a> {
    config: SchedConfig,
    flows: &'a [RingFlow; MAX_RINGS],
    slots: [&'a [SlotState]; MAX_RINGS],
    edges: [&'a [EdgeCell]; MAX_RINGS],
    /// Each ring's first slot and first cell: what a masked index falls back to if it is out
    /// of range, which it never is (every array is a non-empty power of two), so that an
    /// access is proven in range without a panic path.
    first_slot: [&'a SlotState; MAX_RINGS],
    first_edge: [&'a EdgeCell; MAX_RINGS],
    queues: [ReadyQueue<'a>; READY_QUEUES],
}

/// The first element of a carved ring array, refused when the array is empty (a layout from a
/// configuration below the minimum sizes).
fn first_of<'a, T>(items: &'a [T], field: &'static str) -> Result<&'a T, LayoutError> {
    items.first().ok_or(LayoutError::Config { field, value: 0 })
}

/// Element `i` of a power-of-two array, masked into range; `first` (the array's first
/// element) is the fallback the mask makes unreachable.
#[inline(always)]
fn masked<'a, T>(items: &'a [T], first: &'a T, i: usize) -> &'a T {
    items.get(i & items.len().wrapping_sub(1)).unwrap_or(first)
}

impl<'a> SchedState<'a> {
    /// Formats `region` (every slot FREE, every queue empty, watermarks at 0).
    pub fn init(region: &'a mut [u8], layout: &SchedStateLayout) -> Result<Self, LayoutError> {
        Self::carve(region, layout, true)
    }

    /// Carves the shared state out of `region` keeping its bytes: a region an earlier `init`
    /// formatted with the same layout. The caller returns what it used to the formatted state
    /// with [`Self::reset_prefix`] before use.
    pub fn attach_region(
        region: &'a mut [u8],
        layout: &SchedStateLayout,
    ) -> Result<Self, LayoutError> {
        Self::carve(region, layout, false)
    }

    /// Carves the state's arrays out of `region`, formatting them when `format`.
    fn carve(
        region: &'a mut [u8],
        layout: &SchedStateLayout,
        format: bool,
    ) -> Result<Self, LayoutError> {
        let mut c = Carver::new(region, &layout.layout)?;
        let flows: &[RingFlow; MAX_RINGS] = c
            .atomic_with(layout.flows, format)?
            .try_into()
            .map_err(|_| LayoutError::SpanOutOfOrder {
                offset: layout.flows.offset(),
            })?;
        let [s0, s1, s2, s3] = layout.slots;
        let slots = [
            c.atomic_with(s0, format)?,
            c.atomic_with(s1, format)?,
            c.atomic_with(s2, format)?,
            c.atomic_with(s3, format)?,
        ];
        let [e0, e1, e2, e3] = layout.edges;
        let edges = [
            c.atomic_with(e0, format)?,
            c.atomic_with(e1, format)?,
            c.atomic_with(e2, format)?,
            c.atomic_with(e3, format)?,
        ];
        let queue = |region| {
            if format {
                ReadyQueue::init(region, &layout.queue)
            } else {
                ReadyQueue::attach(region, &layout.queue)
            }
        };
        let [q0, q1, q2, q3] = layout.queues;
        let queues = [
            queue(c.region(q0)?)?,
            queue(c.region(q1)?)?,
            queue(c.region(q2)?)?,
            queue(c.region(q3)?)?,
        ];
        let [f0, f1, f2, f3] = slots.map(|s| first_of(s, "ring.window"));
        let first_slot = [f0?, f1?, f2?, f3?];
        let [f0, f1, f2, f3] = edges.map(|e| first_of(e, "ring.edges"));
        let first_edge = [f0?, f1?, f2?, f3?];
        Ok(Self {
            config: layout.config,
            flows,
            slots,
            edges,
            first_slot,
            first_edge,
            queues,
        })
    }

    /// Returns the parts a state built with no scheduler running used (`usage`, from
    /// [`Self::usage`]) to their formatted state: the watermarks, the claimed slots (as
    /// [`Self::reset`] does them) and the queued cells. Cost proportional to what was used.
    pub fn reset_prefix(&self, usage: &crate::image::Usage) {
        for flow in self.flows {
            flow.current_task_index.store(0, Ordering::Relaxed);
            flow.last_task_alive.store(0, Ordering::Relaxed);
            flow.advance_requests.store(0, Ordering::Relaxed);
        }
        for (r, slots) in self.slots.iter().enumerate() {
            let n = (usage.tasks[r] as usize).min(slots.len());
            for slot in &slots[..n] {
                slot.status
                    .store(SlotStatus::Free as u32, Ordering::Relaxed);
                slot.fanout_lock.store(0, Ordering::Relaxed);
                slot.task_id.store(u64::MAX, Ordering::Relaxed);
                slot.seen_epoch.store(0, Ordering::Relaxed);
            }
        }
        for (q, queue) in self.queues.iter().enumerate() {
            queue.reset_prefix(usage.queued[q]);
        }
    }

    /// Returns every slot, watermark and queue to its initial state, as after `init`. Only
    /// while no other thread uses the state (between runs). After a run that ended cleanly
    /// only the watermarks move; after an aborted one every slot is cleared.
    pub fn reset(&self) {
        for flow in self.flows {
            flow.current_task_index.store(0, Ordering::Relaxed);
            flow.last_task_alive.store(0, Ordering::Relaxed);
            flow.advance_requests.store(0, Ordering::Relaxed);
        }
        for slots in self.slots {
            for slot in slots {
                slot.status
                    .store(SlotStatus::Free as u32, Ordering::Relaxed);
                slot.fanout_lock.store(0, Ordering::Relaxed);
                slot.task_id.store(u64::MAX, Ordering::Relaxed);
                slot.seen_epoch.store(0, Ordering::Relaxed);
            }
        }
        for queue in &self.queues {
            queue.reset();
        }
    }

    /// Whether every ring has retired every task it was given: a finished run.
    pub fn drained(&self) -> bool {
        self.flows.iter().all(|f| {
            f.last_task_alive.load(Ordering::Acquire)
                == f.current_task_index.load(Ordering::Acquire)
        })
    }

    /// The ring sizes the shared state was laid out with.
    pub fn config(&self) -> &SchedConfig {
        &self.config
    }

    /// Ring `ring`'s task slots.
    pub(crate) fn slots_of(&self, ring: usize) -> &[SlotState] {
        self.slots[ring.min(MAX_RINGS - 1)]
    }

    /// Ring `ring`'s dependency cells.
    pub(crate) fn edges_of(&self, ring: usize) -> &[EdgeCell] {
        self.edges[ring.min(MAX_RINGS - 1)]
    }

    /// Ready queue `q` (indexed by [`ResourceShape`]).
    pub(crate) fn queue(&self, q: usize) -> &ReadyQueue<'a> {
        &self.queues[q.min(READY_QUEUES - 1)]
    }

    /// Ring `ring`'s flow-control words.
    pub fn flow(&self, ring: usize) -> &RingFlow {
        &self.flows[ring.min(MAX_RINGS - 1)]
    }

    /// The slot a task id maps to (whether or not that task still occupies it).
    pub fn slot_ref(&self, task: TaskId) -> Option<SlotRef> {
        let ring = task.ring() as usize;
        let slots = self.slots.get(ring)?;
        Some(SlotRef::new(ring, task.local() & (slots.len() as u32 - 1)))
    }

    /// The slot state behind `r`.
    pub fn slot(&self, r: SlotRef) -> &SlotState {
        self.slot_at(r.ring(), r.index())
    }

    /// Slot `index` of ring `ring`, the index masked by the ring's window (a `SlotRef`'s index
    /// is already below it).
    #[inline(always)]
    pub(crate) fn slot_at(&self, ring: usize, index: usize) -> &'a SlotState {
        let ring = ring.min(MAX_RINGS - 1);
        masked(self.slots[ring], self.first_slot[ring], index)
    }

    /// Cell `index` of ring `ring`'s dependency pool, masked by the pool's size.
    #[inline(always)]
    pub(crate) fn edge_at(&self, ring: usize, index: usize) -> &'a EdgeCell {
        let ring = ring.min(MAX_RINGS - 1);
        masked(self.edges[ring], self.first_edge[ring], index)
    }

    /// The slot state of `task`, if that task still occupies its slot.
    pub fn task_slot(&self, task: TaskId) -> Option<&SlotState> {
        let s = self.slot(self.slot_ref(task)?);
        (s.task_id() == task).then_some(s)
    }

    pub(crate) fn edge(&self, r: EdgeRef) -> &EdgeCell {
        self.edge_at(r.ring(), r.index())
    }

    /// The producers a task's submit wired it to, with the edge kinds, while the task is live.
    pub fn fanin(&self, task: TaskId) -> impl Iterator<Item = (TaskId, DepFlags)> + '_ {
        let slot = self.task_slot(task);
        let ring = task.ring() as usize;
        let (start, count) = slot.map_or((0, 0), |s| {
            (
                s.edge_start.load(Ordering::Acquire),
                s.edge_count.load(Ordering::Acquire),
            )
        });
        let cells = self.edges.get(ring).copied().unwrap_or(&[]);
        (0..count).filter_map(move |i| {
            let cell = cells.get(start.wrapping_add(i) as usize & (cells.len().max(1) - 1))?;
            let producer = self.slot(SlotRef(cell.producer.load(Ordering::Relaxed)));
            Some((
                producer.task_id(),
                DepFlags::from_bits_truncate(cell.flags.load(Ordering::Relaxed)),
            ))
        })
    }

    /// Whether every fanout reference of `task` other than its scope's is released: its own
    /// completion's ([`SELF_REF`], released last, so `true` implies the task completed) and
    /// each retaining consumer's (released when that consumer completes). The counts compared
    /// are the reference's (`fanout_refcount` reaching `fanout_count`, [`SCOPE_BIT`] masked);
    /// here they count RETAIN edges only, not WAIT-only ones.
    ///
    /// Read under the slot's lock, which every release takes and drops with Release, so a
    /// `true` acquires everything each releasing thread did before its release (a consumer's
    /// completion, after its kernel's last access). The orchestrator, the only thread that
    /// claims references, calls this between submits, so the count cannot grow meanwhile. A
    /// slot that no longer holds `task` reads `true`; whether that means retired or not yet
    /// claimed is for the caller to tell by the ring's watermark.
    pub fn fanout_released(&self, task: TaskId) -> bool {
        let Some(r) = self.slot_ref(task) else {
            return true;
        };
        let slot = self.slot(r);
        let _guard = slot.lock();
        if slot.task_id() != task {
            return true;
        }
        let refs = slot.fanout_refcount.load(Ordering::Relaxed) & !SCOPE_BIT;
        let count = slot.fanout_count.load(Ordering::Relaxed) & !SCOPE_BIT;
        refs >= count
    }

    /// Transition 3, PENDING → READY, when this release is the last fanin `consumer` waits for;
    /// the task goes into `kept` if that has room for its shape, else into its ready queue.
    fn release_fanin_keeping(&self, consumer: SlotRef, kept: Option<&mut Kept>) {
        let slot = self.slot(consumer);
        // The increment alone decides. Unless it is the one that completes the count, the
        // task may become ready, run, retire and its slot be claimed again before this
        // thread's next instruction, so nothing else of the slot may be read. (Reading the
        // target after the increment did that: a release that was not the last could find a
        // later occupant's count equal to its own stale sum and make that task ready early.)
        if slot.fanin_refcount.fetch_add(1, Ordering::AcqRel) + 1 == FANIN_READY {
            self.make_ready_keeping(slot, kept);
        }
    }

    /// Moves a wired, satisfied task into its ready queue.
    ///
    /// Exactly one caller reaches this per task: the one increment of `fanin_refcount` that
    /// completes the count (see [`crate::slot`], "Readiness"), which comes after the publish
    /// stored PENDING. So a plain store does the transition, without a compare-and-swap.
    pub(crate) fn make_ready(&self, slot: &SlotState) {
        self.make_ready_keeping(slot, None);
    }

    /// [`Self::make_ready`], into `kept` instead of the queue where it has room for the
    /// task's shape. A kept task is READY as a queued one is; only its keeper can reach it.
    fn make_ready_keeping(&self, slot: &SlotState, kept: Option<&mut Kept>) {
        debug_assert_eq!(
            slot.status.load(Ordering::Relaxed),
            SlotStatus::Pending as u32,
            "a task made ready twice, or before its publish: {:?} (fanin {} of {})",
            slot.task_id(),
            slot.fanin_refcount.load(Ordering::Relaxed),
            slot.fanin_count.load(Ordering::Relaxed),
        );
        slot.status
            .store(SlotStatus::Ready as u32, Ordering::Release);
        let shape = slot.active_mask().shape();
        let task = slot.task_id();
        if let Some(kept) = kept {
            if let Some(room) = kept.room(shape) {
                *room = Some(task);
                return;
            }
            kept.queued = true;
        }
        self.push_ready(shape, task);
    }

    /// Queues a READY task of `shape`.
    fn push_ready(&self, shape: ResourceShape, task: TaskId) {
        let queue = &self.queues[shape as usize];
        // Queues hold every live task of every ring; a push cannot find one full.
        while queue.push(task.0).is_err() {
            crate::sync::spin_loop();
        }
    }

    /// Takes a ready task of `shape`, if any.
    pub fn pop_ready(&self, shape: ResourceShape) -> Option<TaskId> {
        self.queues[shape as usize].pop().map(TaskId)
    }

    /// Queues every task `kept` still holds, for any scheduler to take; `true` if there was
    /// one. A keeper calls this before its pass ends, so no ready task waits unseen.
    pub fn queue_kept(&self, kept: &mut Kept) -> bool {
        let mut any = false;
        for (shape, entries) in Kept::SHAPES.into_iter().zip(&mut kept.tasks) {
            for task in entries.iter_mut().filter_map(Option::take) {
                self.push_ready(shape, task);
                any = true;
            }
        }
        kept.queued |= any;
        any
    }

    /// Transition 4, READY → RUNNING: the scheduler that popped `task` dispatches it.
    pub fn mark_running(&self, task: TaskId) -> bool {
        self.task_slot(task).is_some_and(|s| {
            s.status
                .compare_exchange(
                    SlotStatus::Ready as u32,
                    SlotStatus::Running as u32,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        })
    }

    /// Records one finished subtask of `task`; completes the task (transition 5) when it was
    /// the last. Returns whether the task completed.
    pub fn complete_subtask(&self, task: TaskId) -> bool {
        self.complete_subtask_keeping(task, None)
    }

    /// [`Self::complete_subtask`], keeping in `kept` (where it has room) a task the completion
    /// made ready instead of queueing it: for the caller to dispatch on its own cores.
    pub fn complete_subtask_keeping(&self, task: TaskId, kept: Option<&mut Kept>) -> bool {
        let Some(slot) = self.task_slot(task) else {
            return false;
        };
        let total = (slot.shape.load(Ordering::Relaxed) >> 8).max(1);
        if slot.completed_subtasks.fetch_add(1, Ordering::AcqRel) + 1 == total {
            self.complete_keeping(task, kept);
            true
        } else {
            false
        }
    }

    /// Transitions 5 and 6, → COMPLETED: notifies every waiting consumer, releases the
    /// producers this task retained, and consumes the task if nothing else holds it.
    pub fn complete(&self, task: TaskId) {
        self.complete_keeping(task, None);
    }

    /// [`Self::complete`], keeping in `kept` (where it has room) the consumers it makes ready.
    pub fn complete_keeping(&self, task: TaskId, mut kept: Option<&mut Kept>) {
        let Some(r) = self.slot_ref(task) else {
            return;
        };
        let slot = self.slot(r);
        let head = {
            let _guard = slot.lock();
            if slot.task_id() != task {
                return;
            }
            slot.status
                .store(SlotStatus::Completed as u32, Ordering::Release);
            slot.fanout_head.load(Ordering::Relaxed)
        };
        let mut cursor = head;
        while cursor != NIL {
            let cell = self.edge(EdgeRef(cursor));
            // Read the link before releasing: the consumer may complete and retire, and its
            // cells be reused, as soon as it is released.
            let next = cell.next.load(Ordering::Relaxed);
            let consumer = SlotRef(cell.consumer.load(Ordering::Relaxed));
            self.release_fanin_keeping(consumer, kept.as_deref_mut());
            cursor = next;
        }
        let ring = r.ring();
        let start = slot.edge_start.load(Ordering::Relaxed);
        let count = slot.edge_count.load(Ordering::Relaxed);
        for i in 0..count {
            let cell = self.edge_at(ring, start.wrapping_add(i) as usize);
            if cell.flags.load(Ordering::Relaxed) & DepFlags::RETAIN.bits() != 0 {
                self.release_fanout(SlotRef(cell.producer.load(Ordering::Relaxed)), 1);
            }
        }
        // Last: until this release the slot cannot be consumed, so it still holds `task` (and
        // its edge list) for the loops above.
        self.release_fanout(r, SELF_REF);
    }

    /// Transition 8: adds `amount` released references to a task's fanout; consumes it when it
    /// has completed and every reference is released, then advances its ring's watermark.
    pub(crate) fn release_fanout(&self, r: SlotRef, amount: u32) {
        self.release_fanout_of(self.slot(r), r, amount)
    }

    /// [`Self::release_fanout`] on `slot`, the slot behind `r`.
    #[inline]
    fn release_fanout_of(&self, slot: &SlotState, r: SlotRef, amount: u32) {
        let consumed = {
            let _guard = slot.lock();
            let refs = slot
                .fanout_refcount
                .load(Ordering::Relaxed)
                .wrapping_add(amount);
            slot.fanout_refcount.store(refs, Ordering::Relaxed);
            let count = slot.fanout_count.load(Ordering::Relaxed);
            debug_assert!(
                refs & SCOPE_BIT <= count & SCOPE_BIT && refs & !SCOPE_BIT <= count & !SCOPE_BIT,
                "slot {r:?}: {refs:#x} fanout references released of {count:#x} claimed"
            );
            let done = refs == slot.fanout_count.load(Ordering::Relaxed)
                && slot.status.load(Ordering::Relaxed) == SlotStatus::Completed as u32;
            if done {
                slot.status
                    .store(SlotStatus::Consumed as u32, Ordering::Release);
            }
            done
        };
        if consumed {
            self.advance_from(r);
        }
    }

    /// After `r`'s task was consumed: asks for a watermark pass ([`Self::advance`]) if the
    /// watermark stands at `r`, the only consumption a pass can be waiting for. A task behind
    /// an older live one is passed over by whoever consumes the oldest, so most consumptions
    /// touch neither the pass's request word nor the orchestrator's task index, which every
    /// consumption used to.
    ///
    /// The CONSUMED store before this call and the watermark load are a store-buffering pair
    /// with a pass's watermark store and its look at the slot where it stopped (in
    /// [`Self::advance`]), each side fenced: either this load sees the watermark at `r` and
    /// asks for a pass, or the pass sees `r` CONSUMED and goes on over it.
    #[inline]
    fn advance_from(&self, r: SlotRef) {
        let ring = r.ring().min(MAX_RINGS - 1);
        fence(Ordering::SeqCst);
        let alive = self.flow(ring).last_task_alive.load(Ordering::Relaxed);
        // Equal slots: the watermark's task is this one (a live task's slot holds no other
        // live task), or the watermark has since gone a whole window on, and the pass asked
        // for finds nothing to do.
        if self.slot_index(ring, alive) == r.index() {
            self.advance(ring);
        }
    }

    /// The slot index of `ring`'s task `local`.
    #[inline(always)]
    fn slot_index(&self, ring: usize, local: u32) -> usize {
        let window = self.config.rings[ring.min(MAX_RINGS - 1)].window;
        (local & window.wrapping_sub(1)) as usize
    }

    /// Releases the scope reference of `task` (at the end of its scope).
    pub fn release_scope(&self, task: TaskId) {
        if let Some(r) = self.slot_ref(task) {
            let slot = self.slot(r);
            if slot.task_id() == task {
                self.release_fanout_of(slot, r, SCOPE_BIT);
            }
        }
    }

    /// Transition 9: moves `ring`'s watermark over every CONSUMED task at its head, resetting
    /// their slots to FREE before publishing the new watermark.
    ///
    /// Whoever consumes the task the watermark stands at asks for a pass
    /// ([`Self::advance_from`]) by adding one to `advance_requests`; the caller that finds none
    /// outstanding makes the passes, for everyone, until a pass ends with no request newer than
    /// the ones it read and no CONSUMED task where it stopped (whose consumer may have read the
    /// watermark before this pass moved it there, and asked for nothing). Every request is a
    /// read-modify-write of the one word, so the passer's reads of it acquire every
    /// requester's CONSUMED store, and a request made during a pass makes the passer's final
    /// compare-and-swap fail and pass once more; the CONSUMED stores of consumers that did not
    /// ask are acquired by the pass's loads of their slots. (A lock word beside a "pending" flag needed store-load ordering across the two,
    /// and lost a pass when the holder's clearing store overwrote a raise it had not read:
    /// the loom models found both.)
    pub(crate) fn advance(&self, ring: usize) {
        let ring = ring.min(MAX_RINGS - 1);
        let flow = self.flow(ring);
        if flow.advance_requests.fetch_add(1, Ordering::AcqRel) != 0 {
            // A pass is under way; it will see this request before it lets go.
            return;
        }
        let mut seen = flow.advance_requests.load(Ordering::Acquire);
        loop {
            let current = flow.current_task_index.load(Ordering::Acquire);
            let mut alive = flow.last_task_alive.load(Ordering::Relaxed);
            while alive != current {
                let slot = self.slot_at(ring, alive as usize);
                if slot.status.load(Ordering::Acquire) != SlotStatus::Consumed as u32 {
                    break;
                }
                slot.status
                    .store(SlotStatus::Free as u32, Ordering::Relaxed);
                alive = alive.wrapping_add(1);
            }
            flow.last_task_alive.store(alive, Ordering::Release);
            // The other half of `advance_from`'s pair: the consumer of the task at `alive`
            // either sees this store and asks, or is seen here.
            fence(Ordering::SeqCst);
            if self
                .slot_at(ring, alive as usize)
                .status
                .load(Ordering::Acquire)
                == SlotStatus::Consumed as u32
            {
                continue;
            }
            match flow.advance_requests.compare_exchange(
                seen,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    // ---- the orchestrator's side of wiring -------------------------------------------------

    /// Attaches a recorded edge (cell `edge`, already written) to `producer`, whose slot is
    /// `slot`, if that task still occupies it and is not consumed: a RETAIN edge pins the
    /// producer, a WAIT edge is linked into its fanout list unless it has completed. Returns
    /// whether a WAIT edge found it completed (so counts as released), or `None` if the
    /// producer is gone. The check and the attachment are atomic with respect to the producer's
    /// completion and consumption.
    pub(crate) fn attach(
        &self,
        slot: &SlotState,
        producer: TaskId,
        edge: EdgeRef,
        flags: DepFlags,
    ) -> Option<bool> {
        let _guard = slot.lock();
        let status = slot.status.load(Ordering::Relaxed);
        if slot.task_id.load(Ordering::Relaxed) != producer.0
            || status == SlotStatus::Free as u32
            || status == SlotStatus::Consumed as u32
        {
            return None;
        }
        Some(self.attach_locked(slot, edge, flags))
    }

    /// Adds `flags` to an edge already attached to `producer` (which the edge keeps alive).
    /// Returns whether a newly added WAIT found the producer completed.
    pub(crate) fn extend(&self, producer: SlotRef, edge: EdgeRef, flags: DepFlags) -> bool {
        let slot = self.slot(producer);
        let _guard = slot.lock();
        self.attach_locked(slot, edge, flags)
    }

    fn attach_locked(&self, slot: &SlotState, edge: EdgeRef, flags: DepFlags) -> bool {
        if flags.contains(DepFlags::RETAIN) {
            let count = slot.fanout_count.load(Ordering::Relaxed);
            slot.fanout_count.store(count + 1, Ordering::Relaxed);
        }
        if !flags.contains(DepFlags::WAIT) {
            return false;
        }
        if slot.status.load(Ordering::Relaxed) >= SlotStatus::Completed as u32 {
            return true;
        }
        let head = slot.fanout_head.load(Ordering::Relaxed);
        self.edge(edge).next.store(head, Ordering::Relaxed);
        slot.fanout_head.store(edge.0, Ordering::Relaxed);
        false
    }

    /// Transition 2 (and 3 if nothing is outstanding): publishes a wired task; `true` when the
    /// publish itself made it ready (every producer had completed).
    pub(crate) fn publish(&self, r: SlotRef, wait_edges: u32, already_completed: u32) -> bool {
        let slot = self.slot(r);
        slot.fanin_count.store(wait_edges + 1, Ordering::Relaxed);
        slot.status
            .store(SlotStatus::Pending as u32, Ordering::Release);
        // Each linked edge's producer adds one when it completes; this adds the rest, so the
        // count reaches FANIN_READY exactly once, after the last of them.
        let linked = wait_edges - already_completed;
        let before = slot
            .fanin_refcount
            .fetch_add(FANIN_READY - linked, Ordering::AcqRel);
        let ready = before == linked;
        if ready {
            self.make_ready(slot);
        }
        ready
    }

    /// Transition 7: an allocation task has no work; it is complete as soon as it exists.
    pub(crate) fn publish_completed(&self, r: SlotRef) {
        let slot = self.slot(r);
        // Nothing else can reference the task before this publish, so no lock: it never runs,
        // so its completion's reference is released at once.
        slot.fanout_refcount.store(SELF_REF, Ordering::Relaxed);
        slot.status
            .store(SlotStatus::Completed as u32, Ordering::Release);
    }

    /// The task at the head of `ring` when its watermark is `alive`, if that task's owning scope
    /// still holds it: such a head cannot retire until the orchestrator closes that scope.
    /// Callers pass the watermark their "ring is full" decision was made at, and must retry
    /// instead if the watermark has moved since, or a ring that just drained onto a pinned
    /// head would be reported as deadlocked while it has room.
    pub(crate) fn head_pinned_by_scope(&self, ring: usize, alive: u32) -> Option<TaskId> {
        let flow = self.flow(ring);
        if alive == flow.current_task_index.load(Ordering::Acquire) {
            return None;
        }
        let slot = self.slot_at(ring, alive as usize);
        let _guard = slot.lock();
        let released = slot.fanout_refcount.load(Ordering::Relaxed) & SCOPE_BIT != 0;
        let head = TaskId::new(ring as u32, alive);
        (!released && slot.task_id.load(Ordering::Relaxed) == head.0).then_some(head)
    }

    /// Forgets every slot's orchestrator-private edge mark (when the submit epoch wraps).
    pub(crate) fn clear_seen_marks(&self) {
        for slots in self.slots {
            for slot in slots {
                slot.seen_epoch.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
