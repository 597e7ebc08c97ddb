//! `SchedState`: the state the orchestrator and every scheduler thread share.
//!
//! Per ring: the flow-control words ([`RingFlow`]), the task slots ([`SlotState`]) and the
//! dependency pool ([`EdgeCell`]). Plus one ready queue per resource shape (AIC, AIV, MIX) and
//! one for DUMMY tasks, each at least as large as every ring's window together, so a push
//! never finds a queue full (a task is in at most one queue, at most once).
//!
//! The transitions of the slot state machine ([`crate::slot`]) live here; the orchestrator's
//! side (claiming, wiring, publishing) is in [`crate::orchestrator`].

use crate::cores::ResourceShape;
use crate::deps::{DepFlags, NIL};
use crate::edge::{EdgeCell, EdgeRef};
use crate::layout::{Carver, Layout, LayoutError, Line, Span};
use crate::ready_queue::{ReadyQueue, ReadyQueueLayout};
use crate::ring::{RingConfig, RingFlow, MAX_RINGS};
use crate::slot::{SlotRef, SlotState, SlotStatus, FANIN_READY, SCOPE_BIT, SELF_REF};
use crate::sync::Ordering;
use crate::task_tensor::TaskId;

/// Number of ready queues: AIC, AIV, MIX, DUMMY (indexed by [`ResourceShape`]).
pub const READY_QUEUES: usize = 4;

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

    /// The configuration.
    pub fn config(&self) -> SchedConfig {
        self.config
    }
}

/// The shared state, a view over its region. `Sync`: every field is atomic.
pub struct SchedState<'a> {
    config: SchedConfig,
    flows: &'a [RingFlow],
    slots: [&'a [SlotState]; MAX_RINGS],
    edges: [&'a [EdgeCell]; MAX_RINGS],
    queues: [ReadyQueue<'a>; READY_QUEUES],
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
        let flows = c.atomic_with(layout.flows, format)?;
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
        Ok(Self {
            config: layout.config,
            flows,
            slots,
            edges,
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

    /// The configuration.
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
        &self.slots[r.ring()][r.index()]
    }

    /// The slot state of `task`, if that task still occupies its slot.
    pub fn task_slot(&self, task: TaskId) -> Option<&SlotState> {
        let s = self.slot(self.slot_ref(task)?);
        (s.task_id() == task).then_some(s)
    }

    pub(crate) fn edge(&self, r: EdgeRef) -> &EdgeCell {
        &self.edges[r.ring()][r.index()]
    }

    pub(crate) fn edge_cells(&self, ring: usize) -> &'a [EdgeCell] {
        self.edges[ring]
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

    /// Transition 3, PENDING → READY, when this release is the last fanin `consumer` waits for.
    pub(crate) fn release_fanin(&self, consumer: SlotRef) {
        let slot = self.slot(consumer);
        // The increment alone decides. Unless it is the one that completes the count, the
        // task may become ready, run, retire and its slot be claimed again before this
        // thread's next instruction, so nothing else of the slot may be read. (Reading the
        // target after the increment did that: a release that was not the last could find a
        // later occupant's count equal to its own stale sum and make that task ready early.)
        if slot.fanin_refcount.fetch_add(1, Ordering::AcqRel) + 1 == FANIN_READY {
            self.make_ready(slot);
        }
    }

    /// Moves a wired, satisfied task into its ready queue.
    ///
    /// Exactly one caller reaches this per task: the one increment of `fanin_refcount` that
    /// completes the count (see [`crate::slot`], "Readiness"), which comes after the publish
    /// stored PENDING. So a plain store does the transition, without a compare-and-swap.
    pub(crate) fn make_ready(&self, slot: &SlotState) {
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
        let queue = &self.queues[slot.active_mask().shape() as usize];
        let task = slot.task_id().0;
        // Queues hold every live task of every ring; a push cannot find one full.
        while queue.push(task).is_err() {
            crate::sync::spin_loop();
        }
    }

    /// Takes a ready task of `shape`, if any.
    pub fn pop_ready(&self, shape: ResourceShape) -> Option<TaskId> {
        self.queues[shape as usize].pop().map(TaskId)
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
        let Some(slot) = self.task_slot(task) else {
            return false;
        };
        let total = (slot.shape.load(Ordering::Relaxed) >> 8).max(1);
        if slot.completed_subtasks.fetch_add(1, Ordering::AcqRel) + 1 == total {
            self.complete(task);
            true
        } else {
            false
        }
    }

    /// Transitions 5 and 6, → COMPLETED: notifies every waiting consumer, releases the
    /// producers this task retained, and consumes the task if nothing else holds it.
    pub fn complete(&self, task: TaskId) {
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
            self.release_fanin(consumer);
            cursor = next;
        }
        let ring = r.ring();
        let cells = self.edges[ring];
        let start = slot.edge_start.load(Ordering::Relaxed);
        let count = slot.edge_count.load(Ordering::Relaxed);
        for i in 0..count {
            let cell = &cells[start.wrapping_add(i) as usize & (cells.len() - 1)];
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
            self.advance(r.ring());
        }
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
    /// Whoever consumes a task asks for a pass by adding one to `advance_requests`; the caller
    /// that finds none outstanding makes the passes, for everyone, until a pass ends with no
    /// request newer than the ones it read. Every request is a read-modify-write of the one
    /// word, so the passer's reads of it acquire every requester's CONSUMED store, and a
    /// request made during a pass makes the passer's final compare-and-swap fail and pass once
    /// more. (A lock word beside a "pending" flag needed store-load ordering across the two,
    /// and lost a pass when the holder's clearing store overwrote a raise it had not read:
    /// the loom models found both.)
    pub(crate) fn advance(&self, ring: usize) {
        let ring = ring.min(MAX_RINGS - 1);
        let flow = self.flow(ring);
        if flow.advance_requests.fetch_add(1, Ordering::AcqRel) != 0 {
            // A pass is under way; it will see this request before it lets go.
            return;
        }
        let slots = self.slots[ring];
        let mask = slots.len() as u32 - 1;
        let mut seen = flow.advance_requests.load(Ordering::Acquire);
        loop {
            let current = flow.current_task_index.load(Ordering::Acquire);
            let mut alive = flow.last_task_alive.load(Ordering::Relaxed);
            while alive != current {
                let slot = &slots[(alive & mask) as usize];
                if slot.status.load(Ordering::Acquire) != SlotStatus::Consumed as u32 {
                    break;
                }
                slot.status
                    .store(SlotStatus::Free as u32, Ordering::Relaxed);
                alive = alive.wrapping_add(1);
            }
            flow.last_task_alive.store(alive, Ordering::Release);
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

    /// Transition 2 (and 3 if nothing is outstanding): publishes a wired task.
    pub(crate) fn publish(&self, r: SlotRef, wait_edges: u32, already_completed: u32) {
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
        if before == linked {
            self.make_ready(slot);
        }
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
        let slots = self.slots[ring];
        let slot = &slots[(alive & (slots.len() as u32 - 1)) as usize];
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
mod tests {
    //! The slot machine's transitions one step at a time, on one thread (so Miri checks them):
    //! readiness, fan-in counting, lifetimes and in-order reclamation, driven through the
    //! orchestrator's submit and the schedulers' calls.
    use super::*;
    use crate::arg::TensorArgType;
    use crate::cores::ActiveMask;
    use crate::deps::ExplicitDep;
    use crate::layout::Line;
    use crate::orchestrator::{
        NoWait, Orchestrator, OrchestratorConfig, OrchestratorLayout, Task, TaskArg,
    };
    use crate::ring::RingConfig;
    use crate::scope::ScopeMode;
    use crate::{AddressSpace, BufferHandle, DataType, TaskTensor};
    use std::vec;
    use std::vec::Vec;

    fn with_state(f: impl FnOnce(&mut Orchestrator<'_>, &SchedState<'_>)) {
        let config = OrchestratorConfig {
            sched: SchedConfig::uniform(RingConfig {
                window: 8,
                heap_bytes: 1 << 14,
                edges: 16,
            }),
            map_buckets: 8,
            map_entries: 16,
            heap_base: [0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000],
        };
        let layout = OrchestratorLayout::new(config).unwrap();
        let mut shared_mem = vec![Line([0; 64]); layout.sched().size() / 64];
        let mut orch_mem = vec![Line([0; 64]); layout.size().div_ceil(64)];
        let shared =
            SchedState::init(bytemuck::cast_slice_mut(&mut shared_mem), layout.sched()).unwrap();
        let mut orch =
            Orchestrator::init(bytemuck::cast_slice_mut(&mut orch_mem), &layout, &shared).unwrap();
        f(&mut orch, &shared);
    }

    fn output() -> TaskArg {
        TaskArg {
            tensor: TaskTensor::create_info(&[16], DataType::Float32).unwrap(),
            tag: TensorArgType::Output,
        }
    }

    fn input(tensor: TaskTensor) -> TaskArg {
        TaskArg {
            tensor,
            tag: TensorArgType::Input,
        }
    }

    fn external() -> TaskTensor {
        TaskTensor::new(
            BufferHandle {
                addr: 0x9000,
                size: 64,
            },
            0,
            &[16],
            &[1],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap()
    }

    fn submit(
        orch: &mut Orchestrator<'_>,
        mask: ActiveMask,
        args: &mut [TaskArg],
        deps: &[ExplicitDep],
    ) -> TaskId {
        orch.submit(
            Task {
                mask,
                block_num: 1,
                args,
                deps,
                predicate: None,
            },
            &mut NoWait,
        )
        .unwrap()
    }

    fn status(shared: &SchedState<'_>, t: TaskId) -> SlotStatus {
        shared.slot(shared.slot_ref(t).unwrap()).status()
    }

    /// Runs a READY task to completion as a scheduler would.
    fn run(shared: &SchedState<'_>, t: TaskId) {
        assert_eq!(status(shared, t), SlotStatus::Ready, "{t:?}");
        assert!(shared.mark_running(t));
        assert_eq!(status(shared, t), SlotStatus::Running);
        assert!(shared.complete_subtask(t));
    }

    fn pop_all(shared: &SchedState<'_>, shape: ResourceShape) -> Vec<TaskId> {
        core::iter::from_fn(|| shared.pop_ready(shape)).collect()
    }

    #[test]
    fn a_consumer_becomes_ready_only_with_its_last_producer() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut p1 = [output()];
            let a = submit(orch, ActiveMask::AIV0, &mut p1, &[]);
            let mut p2 = [output()];
            let b = submit(orch, ActiveMask::AIV0, &mut p2, &[]);
            let mut c_args = [input(p1[0].tensor), input(p2[0].tensor)];
            let c = submit(orch, ActiveMask::AIC, &mut c_args, &[]);
            assert_eq!(status(shared, c), SlotStatus::Pending);
            let slot = shared.slot(shared.slot_ref(c).unwrap());
            // Two linked edges, then the publish's share: two releases short of the target.
            assert_eq!(slot.fanin_refcount.load(Ordering::Relaxed), FANIN_READY - 2);
            assert_eq!(slot.fanin_count.load(Ordering::Relaxed), 3);
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [a, b]);
            run(shared, a);
            assert_eq!(
                status(shared, c),
                SlotStatus::Pending,
                "one producer is still running"
            );
            assert_eq!(shared.pop_ready(ResourceShape::Aic), None);
            run(shared, b);
            assert_eq!(status(shared, c), SlotStatus::Ready);
            assert_eq!(slot.fanin_refcount.load(Ordering::Relaxed), FANIN_READY);
            assert_eq!(
                pop_all(shared, ResourceShape::Aic),
                [c],
                "ready exactly once"
            );
        });
    }

    #[test]
    fn a_producer_completed_before_the_submit_counts_at_once() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut p = [output()];
            let a = submit(orch, ActiveMask::AIV0, &mut p, &[]);
            assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(a));
            run(shared, a);
            assert_eq!(
                status(shared, a),
                SlotStatus::Completed,
                "its scope still holds it"
            );
            let mut c_args = [input(p[0].tensor)];
            let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
            assert_eq!(status(shared, c), SlotStatus::Ready, "ready at publish");
            let flags: Vec<_> = shared.fanin(c).collect();
            assert_eq!(flags, [(a, DepFlags::WAIT | DepFlags::RETAIN)]);
        });
    }

    #[test]
    fn a_dummy_task_completes_from_ready_and_releases_its_consumers() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let gate = submit(orch, ActiveMask::empty(), &mut [], &[]);
            let deps = [ExplicitDep::wait(gate)];
            let c = submit(orch, ActiveMask::AIV0, &mut [], &deps);
            assert_eq!(status(shared, c), SlotStatus::Pending);
            assert_eq!(pop_all(shared, ResourceShape::Dummy), [gate]);
            shared.complete(gate);
            assert_eq!(status(shared, gate), SlotStatus::Completed);
            assert_eq!(status(shared, c), SlotStatus::Ready);
        });
    }

    #[test]
    fn an_allocation_task_is_complete_at_once_and_retires_with_its_scope() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut out = [output()];
            let a = orch.alloc_tensors(&mut out, &mut NoWait).unwrap();
            assert_eq!(status(shared, a), SlotStatus::Completed);
            let mut c_args = [input(out[0].tensor)];
            let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
            assert_eq!(
                status(shared, c),
                SlotStatus::Ready,
                "its only producer is complete"
            );
            orch.scope_end().unwrap();
            // The consumer's creator edge pins the allocation task past its scope.
            assert_eq!(status(shared, a), SlotStatus::Completed);
            assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(c));
            run(shared, c);
            assert!(shared.drained(), "both retired, in order");
            assert_eq!(shared.flow(a.ring() as usize).last_alive(), 2);
        });
    }

    #[test]
    fn a_retained_producer_outlives_its_scope_until_its_consumer_completes() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut p = [output()];
            let a = submit(orch, ActiveMask::AIV0, &mut p, &[]);
            let mut c_args = [input(p[0].tensor)];
            let c = submit(orch, ActiveMask::AIV0, &mut c_args, &[]);
            orch.scope_end().unwrap();
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [a]);
            run(shared, a);
            assert_eq!(status(shared, a), SlotStatus::Completed, "pinned by c");
            assert_eq!(shared.flow(0).last_alive(), 0);
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [c]);
            run(shared, c);
            assert_eq!(status(shared, a), SlotStatus::Free);
            assert_eq!(status(shared, c), SlotStatus::Free);
            assert_eq!(shared.flow(0).last_alive(), 2);
        });
    }

    #[test]
    fn the_watermark_passes_tasks_in_order_only() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let first = submit(orch, ActiveMask::AIV0, &mut [input(external())], &[]);
            let second = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            orch.scope_end().unwrap();
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [first, second]);
            run(shared, second);
            assert_eq!(
                status(shared, second),
                SlotStatus::Consumed,
                "behind a live task"
            );
            assert_eq!(shared.flow(0).last_alive(), 0);
            run(shared, first);
            assert_eq!(shared.flow(0).last_alive(), 2);
            assert_eq!(status(shared, second), SlotStatus::Free);
        });
    }

    #[test]
    fn a_completion_of_a_task_no_longer_in_its_slot_is_ignored() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let a = submit(orch, ActiveMask::empty(), &mut [], &[]);
            orch.scope_end().unwrap();
            assert_eq!(pop_all(shared, ResourceShape::Dummy), [a]);
            shared.complete(a);
            assert_eq!(shared.flow(0).last_alive(), 1);
            // The slot keeps the retired id; a late completion or scope release changes nothing.
            shared.complete(TaskId::new(0, a.local() + 8));
            shared.release_scope(a);
            assert_eq!(status(shared, a), SlotStatus::Free);
            assert!(!shared.mark_running(a));
            assert!(!shared.complete_subtask(TaskId::new(0, a.local() + 8)));
        });
    }

    #[test]
    fn a_configuration_out_of_range_is_refused_by_field() {
        let ring = |window, edges, heap_bytes| {
            SchedStateLayout::new(SchedConfig::uniform(RingConfig {
                window,
                edges,
                heap_bytes,
            }))
            .map(|_| ())
        };
        let refused = |field: &'static str, value: u64| Err(LayoutError::Config { field, value });
        assert_eq!(ring(4, 4, 1024), Ok(()), "the smallest valid ring");
        assert_eq!(ring(4, 4, u32::MAX as u64), Ok(()));
        for w in [2, 3, 6, 1 << 30] {
            assert_eq!(ring(w, 4, 1024), refused("ring.window", w as u64));
        }
        for e in [2, 6, 1 << 30] {
            assert_eq!(ring(4, e, 1024), refused("ring.edges", e as u64));
        }
        for h in [1023, u32::MAX as u64 + 1] {
            assert_eq!(ring(4, 4, h), refused("ring.heap_bytes", h));
        }
    }

    #[test]
    fn drained_and_reset_return_to_the_formatted_state() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let a = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            assert!(!shared.drained(), "a live task");
            assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(a));
            run(shared, a);
            assert!(!shared.drained(), "its scope still holds it");
            orch.scope_end().unwrap();
            assert!(shared.drained());
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let b = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            shared.reset();
            for ring in 0..MAX_RINGS {
                let flow = shared.flow(ring);
                assert_eq!(flow.current_task_index.load(Ordering::Relaxed), 0);
                assert_eq!(flow.last_alive(), 0);
                assert_eq!(flow.advance_requests.load(Ordering::Relaxed), 0);
            }
            for t in [a, b] {
                let slot = shared.slot(shared.slot_ref(t).unwrap());
                assert_eq!(slot.status(), SlotStatus::Free);
                assert_eq!(slot.task_id(), TaskId(u64::MAX));
            }
            assert_eq!(
                shared.pop_ready(ResourceShape::Aiv),
                None,
                "b's queue entry is gone"
            );
        });
    }

    #[test]
    fn reset_prefix_returns_what_a_build_used_to_the_formatted_state() {
        with_state(|orch, shared| {
            // Built with no scheduler running, as the host builds an image.
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let a = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            let b = submit(orch, ActiveMask::empty(), &mut [], &[ExplicitDep::wait(a)]);
            let usage = shared.usage(orch.edges_used()).unwrap();
            shared.reset_prefix(&usage);
            for t in [a, b] {
                let slot = shared.slot(shared.slot_ref(t).unwrap());
                assert_eq!(slot.status(), SlotStatus::Free);
                assert_eq!(slot.task_id(), TaskId(u64::MAX));
            }
            assert_eq!(shared.flow(0).current_task_index.load(Ordering::Relaxed), 0);
            assert_eq!(
                shared.pop_ready(ResourceShape::Aiv),
                None,
                "a's queue entry is gone"
            );
            assert!(shared.drained());
        });
    }

    #[test]
    fn fanin_lists_every_producer_of_a_task_whose_edges_start_inside_the_pool() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            // Each consumer's edge list starts where the previous one's ended (cells 0, 3, 6,
            // 9 of a 16-cell pool), so a wrong cell mask reads another task's edges.
            let mut outs: Vec<TaskArg> = Vec::new();
            let mut producers = Vec::new();
            for _ in 0..3 {
                let mut o = [output()];
                producers.push(submit(orch, ActiveMask::AIV0, &mut o, &[]));
                outs.push(o[0]);
            }
            for _ in 0..4 {
                let mut args: Vec<TaskArg> = outs.iter().map(|o| input(o.tensor)).collect();
                let c = submit(orch, ActiveMask::AIV0, &mut args, &[]);
                let mut got: Vec<_> = shared.fanin(c).collect();
                got.sort_by_key(|e| e.0);
                let want: Vec<_> = producers
                    .iter()
                    .map(|&p| (p, DepFlags::WAIT | DepFlags::RETAIN))
                    .collect();
                assert_eq!(got, want, "fanin of {c:?}");
            }
        });
    }

    #[test]
    fn a_completion_releases_exactly_the_producers_it_retained() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let waited = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            let pinned = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            // Two edges of another task first: the consumer's list starts at cell 2, where a
            // wrong cell mask reads another task's edges.
            let filler = submit(
                orch,
                ActiveMask::AIV0,
                &mut [],
                &[ExplicitDep::wait(waited), ExplicitDep::wait(pinned)],
            );
            let deps = [
                ExplicitDep::wait(waited),
                ExplicitDep {
                    task: pinned,
                    flags: DepFlags::RETAIN,
                },
            ];
            let c = submit(orch, ActiveMask::AIV0, &mut [], &deps);
            let refs = |t: TaskId| {
                shared
                    .slot(shared.slot_ref(t).unwrap())
                    .fanout_refcount
                    .load(Ordering::Relaxed)
            };
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [waited, pinned]);
            run(shared, waited);
            run(shared, pinned);
            let mut ready = pop_all(shared, ResourceShape::Aiv);
            ready.sort();
            assert_eq!(ready, [filler, c]);
            run(shared, filler);
            let (w0, p0) = (refs(waited), refs(pinned));
            run(shared, c);
            assert_eq!(refs(waited), w0, "a WAIT-only edge holds no reference");
            assert_eq!(refs(pinned), p0 + 1, "the RETAIN edge is released once");
            orch.scope_end().unwrap();
            assert!(shared.drained());
        });
    }

    #[test]
    fn an_spmd_task_completes_with_its_last_subtask_only() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            // Three blocks on a MIX of AIC and AIV0: six subtasks.
            let t = orch
                .submit(
                    Task {
                        mask: ActiveMask::AIC | ActiveMask::AIV0,
                        block_num: 3,
                        args: &mut [],
                        deps: &[],
                        predicate: None,
                    },
                    &mut NoWait,
                )
                .unwrap();
            let shape = ActiveMask::AIC.union(ActiveMask::AIV0).normalized().shape();
            assert_eq!(shared.pop_ready(shape), Some(t));
            assert!(shared.mark_running(t));
            for k in 1..6 {
                assert!(
                    !shared.complete_subtask(t),
                    "completed after {k} of 6 subtasks"
                );
                assert_eq!(status(shared, t), SlotStatus::Running);
            }
            assert!(shared.complete_subtask(t));
            assert_eq!(status(shared, t), SlotStatus::Completed);
            assert_eq!(
                shared.slot(shared.slot_ref(t).unwrap()).active_mask(),
                ActiveMask::AIC | ActiveMask::AIV0
            );
        });
    }

    #[test]
    fn a_consumed_producer_behind_the_watermark_gets_no_edge() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let old = submit(orch, ActiveMask::AIV0, &mut [], &[]);
            let q = submit(orch, ActiveMask::empty(), &mut [], &[]);
            assert_eq!(pop_all(shared, ResourceShape::Dummy), [q]);
            shared.complete(q);
            orch.scope_end().unwrap();
            // Completed, released by its scope, retained by nothing: consumed, but not retired
            // while `old`, ahead of it on the ring, is live.
            assert_eq!(status(shared, q), SlotStatus::Consumed);
            assert_eq!(shared.flow(0).last_alive(), 0);
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let c = submit(orch, ActiveMask::AIV0, &mut [], &[ExplicitDep::wait(q)]);
            assert_eq!(shared.fanin(c).count(), 0, "no edge to a consumed task");
            let _ = old;
        });
    }

    #[test]
    fn a_wait_added_to_a_retaining_edge_counts_its_producer_once() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut done_out = [output()];
            let done = submit(orch, ActiveMask::AIV0, &mut done_out, &[]);
            let mut live_out = [output()];
            let live = submit(orch, ActiveMask::AIV0, &mut live_out, &[]);
            assert_eq!(pop_all(shared, ResourceShape::Aiv), [done, live]);
            run(shared, done);
            // A RETAIN-only dependency first, then the creator edge adds WAIT to that edge.
            let pin = |t| ExplicitDep {
                task: t,
                flags: DepFlags::RETAIN,
            };
            let c1 = submit(
                orch,
                ActiveMask::AIV0,
                &mut [input(done_out[0].tensor)],
                &[pin(done)],
            );
            assert_eq!(
                status(shared, c1),
                SlotStatus::Ready,
                "its producer had completed"
            );
            let c2 = submit(
                orch,
                ActiveMask::AIV0,
                &mut [input(live_out[0].tensor)],
                &[pin(live)],
            );
            assert_eq!(
                status(shared, c2),
                SlotStatus::Pending,
                "its producer is running"
            );
            run(shared, live);
            assert_eq!(status(shared, c2), SlotStatus::Ready);
        });
    }

    #[test]
    fn a_ring_full_of_tasks_its_open_scope_holds_names_the_head() {
        with_state(|orch, shared| {
            assert_eq!(shared.head_pinned_by_scope(0, 0), None, "an empty ring");
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let tasks: Vec<TaskId> = (0..4)
                .map(|_| submit(orch, ActiveMask::AIV0, &mut [], &[]))
                .collect();
            let ring = tasks[0].ring() as usize;
            assert_eq!(shared.head_pinned_by_scope(ring, 0), Some(tasks[0]));
            // The head asked about is the one at the caller's watermark, in its own slot.
            assert_eq!(shared.head_pinned_by_scope(ring, 2), Some(tasks[2]));
            // A watermark a whole window later maps to the same slot, which holds another task.
            assert_eq!(shared.head_pinned_by_scope(ring, 2 + 8), None);
            assert_eq!(shared.head_pinned_by_scope(ring + 1, 0), None, "another ring");
            orch.scope_end().unwrap();
            // Released by its scope, the head retires once it runs: not a deadlock.
            assert_eq!(shared.head_pinned_by_scope(ring, 0), None);
            for t in pop_all(shared, ResourceShape::Aiv) {
                run(shared, t);
            }
            assert!(shared.drained());
            assert_eq!(shared.head_pinned_by_scope(ring, 4), None, "drained");
        });
    }

    #[test]
    fn a_wrapped_submit_epoch_forgets_the_edges_marked_before_it() {
        with_state(|orch, shared| {
            orch.scope_begin(ScopeMode::Auto).unwrap();
            let mut p = [output()];
            let producer = submit(orch, ActiveMask::AIV0, &mut p, &[]);
            let first = submit(orch, ActiveMask::AIV0, &mut [input(p[0].tensor)], &[]);
            assert_eq!(orch.edges_recorded(), 1);
            // `first` was the run's second submit: its edge mark on the producer carries
            // epoch 2. Wrap the epoch so the second submit after the wrap has epoch 2 again.
            orch.set_epoch(u32::MAX);
            submit(orch, ActiveMask::AIV0, &mut [], &[]);
            let second = submit(orch, ActiveMask::AIV0, &mut [input(p[0].tensor)], &[]);
            assert_eq!(orch.edges_recorded(), 2, "an edge of its own");
            assert_eq!(status(shared, first), SlotStatus::Pending);
            assert_eq!(
                status(shared, second),
                SlotStatus::Pending,
                "it waits for the producer"
            );
            assert_eq!(shared.pop_ready(ResourceShape::Aiv), Some(producer));
            run(shared, producer);
            assert_eq!(status(shared, second), SlotStatus::Ready);
        });
    }

    #[test]
    fn slot_names_round_trip() {
        for raw in 0..8u32 {
            let s = SlotStatus::from_raw(raw);
            assert_eq!(s as u32, if raw <= 6 { raw } else { 0 });
        }
        let r = SlotRef::new(3, 12345);
        assert_eq!((r.ring(), r.index()), (3, 12345));
    }
}
