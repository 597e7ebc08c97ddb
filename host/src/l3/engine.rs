//! The L3 host engine: the slot ring, the TensorMap keyed by buffer identity and byte range,
//! failure propagation, and the scheduler thread that dispatches ready tasks to children.
//!
//! The orchestrator (the thread running the user's orchestration function) and the scheduler
//! share one [`Engine`] under a mutex; a submit wires the task's producers and pushes it ready
//! if it has none, then rings the scheduler's doorbell. The scheduler, alone, drives every
//! endpoint: it collects finished frames, releases consumers, and posts ready tasks to idle
//! children (directed chip FIFOs, a head-of-line group FIFO that reserves its targets, a
//! shared SUB FIFO). A failed task poisons its consumers, which fail without running. A child
//! that dies fails its task with an endpoint error; later tasks for it fail the same way while
//! the other children keep serving.

use super::buffer::Buffer;
use super::mailbox::{Bells, Mailbox, SCHEDULER_BELL, TASK_FRAME};
use super::worker::LiveBuffers;
use super::L3Error;
use crate::os::ChildExit;
use simpler_core::mailbox::{CallConfig, MailboxState, PipelineSlotLease};
use simpler_core::{CanonicalIdentity, TensorArgType, ValidTensor};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often the scheduler checks that its busy children are alive while it waits.
const LIVENESS_PERIOD: Duration = Duration::from_millis(20);
/// How long a submit waits for a free slot before it reports the ring stuck.
const SLOT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a child endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneKind {
    /// Chip child `i`.
    Chip(usize),
    /// SUB child `i`.
    Sub(usize),
}

impl std::fmt::Display for LaneKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Chip(i) => write!(f, "chip {i}"),
            Self::Sub(i) => write!(f, "sub-worker {i}"),
        }
    }
}

/// One child endpoint: its mailbox and process.
pub(super) struct Lane {
    pub(super) kind: LaneKind,
    pub(super) mailbox: Mailbox,
    pub(super) pid: AtomicI32,
    exit: Mutex<Option<ChildExit>>,
    /// Serializes control requests on this child.
    pub(super) control: Mutex<()>,
}

impl Lane {
    pub(super) fn new(kind: LaneKind) -> Result<Self, L3Error> {
        Ok(Self {
            kind,
            mailbox: Mailbox::new().map_err(|e| L3Error::Os(format!("mailbox: {e}")))?,
            pid: AtomicI32::new(0),
            exit: Mutex::new(None),
            control: Mutex::new(()),
        })
    }

    /// How the child ended, reaping it if it just did; `None` while it runs.
    pub(super) fn exit(&self) -> Option<ChildExit> {
        let mut exit = self.exit.lock().unwrap_or_else(|e| e.into_inner());
        if exit.is_none() {
            let pid = self.pid.load(Ordering::Acquire);
            if pid > 0 {
                match crate::os::try_reap(pid) {
                    Ok(Some(e)) => *exit = Some(e),
                    Ok(None) => {}
                    // ECHILD: reaped elsewhere or never ours; treat as gone.
                    Err(_) => *exit = Some(ChildExit::Code(-1)),
                }
            }
        }
        *exit
    }
}

/// Where one member of a task goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MemberTarget {
    Chip(usize),
    AnySub,
}

struct Member {
    target: MemberTarget,
    blob: Vec<u8>,
    done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskState {
    Pending,
    Ready,
    Running,
    Completed,
    Failed,
}

struct TaskNode {
    id: u64,
    state: TaskState,
    digest: [u8; 32],
    config: Box<CallConfig>,
    members: Vec<Member>,
    remaining: usize,
    fanin: usize,
    fanout: Vec<u64>,
    poison: Option<u64>,
    error: Option<L3Error>,
}

impl TaskNode {
    fn terminal(&self) -> bool {
        matches!(self.state, TaskState::Completed | TaskState::Failed)
    }
    fn is_group(&self) -> bool {
        self.members.len() > 1
    }
}

pub(super) use super::tensormap::may_overlap;
use super::tensormap::TensorMap;

/// What a finished run reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// The run's id on this Worker.
    pub run_id: u64,
    /// Tasks submitted.
    pub tasks: usize,
    /// From the first submit to the last completion.
    pub elapsed: Duration,
}

/// The terminal result of one run, waited on through a [`super::RunHandle`].
#[derive(Default)]
pub(super) struct RunShared {
    /// How long `wait` spins on `finished` before it blocks.
    spin: Duration,
    finished: AtomicBool,
    result: Mutex<Option<Result<RunSummary, L3Error>>>,
    cv: Condvar,
}

impl RunShared {
    pub(super) fn wait(&self, timeout: Option<Duration>) -> Result<RunSummary, L3Error> {
        let start = Instant::now();
        let spin = timeout.map_or(self.spin, |t| t.min(self.spin));
        loop {
            if self.finished.load(Ordering::Acquire) {
                break;
            }
            let spent = start.elapsed();
            if spent >= spin {
                break;
            }
            if spent >= super::mailbox::PURE_SPIN {
                std::thread::yield_now();
            } else {
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            }
        }
        let deadline = timeout.map(|t| start + t);
        let mut result = self.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = result.as_ref() {
                return r.clone();
            }
            match deadline {
                None => result = self.cv.wait(result).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(L3Error::WaitTimeout);
                    }
                    result = self
                        .cv
                        .wait_timeout(result, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    pub(super) fn done(&self) -> bool {
        self.result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn finish(&self, r: Result<RunSummary, L3Error>) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        self.finished.store(true, Ordering::Release);
        self.cv.notify_all();
    }
}

struct RunProgress {
    id: u64,
    outstanding: usize,
    orch_done: bool,
    tasks: usize,
    first_error: Option<L3Error>,
    identities: HashSet<CanonicalIdentity>,
    handle: Arc<RunShared>,
    start: Instant,
}

/// The state the orchestrator and the scheduler share.
pub(super) struct Engine {
    base: u64,
    tasks: VecDeque<TaskNode>,
    /// The dependency map: per buffer identity, the accesses of tasks that may still order a
    /// later one (a failed task's stay, to poison its consumers).
    map: TensorMap,
    failed: HashSet<u64>,
    ready_chip: Vec<VecDeque<u64>>,
    ready_sub: VecDeque<u64>,
    ready_group: VecDeque<u64>,
    busy: Vec<Option<(u64, usize)>>,
    dead: Vec<Option<String>>,
    run: Option<RunProgress>,
    /// Per-lane scratch of the dispatch pass (kept to avoid an allocation per pass).
    reserved: Vec<bool>,
    /// Scope intermediates waiting for the scope's last task to retire.
    deferred: Vec<(u64, Vec<Buffer>)>,
    next_run: u64,
    dispatches: u64,
}

/// Everything the Worker's threads share after `init()`.
pub(super) struct Shared {
    pub(super) bells: Bells,
    pub(super) lanes: Vec<Lane>,
    pub(super) chips: usize,
    pub(super) ring_slots: usize,
    run_spin: Mutex<Duration>,
    live: LiveBuffers,
    engine: Mutex<Engine>,
    cv: Condvar,
    stop: AtomicBool,
}

/// One member of a submit, validated by the caller.
pub(super) struct NewMember<'a> {
    pub(super) target: MemberTarget,
    pub(super) blob: Vec<u8>,
    pub(super) tensors: &'a [ValidTensor],
    pub(super) tags: &'a [TensorArgType],
}

impl Shared {
    pub(super) fn new(
        bells: Bells,
        lanes: Vec<Lane>,
        chips: usize,
        ring_slots: usize,
        run_spin: Duration,
        live: LiveBuffers,
    ) -> Self {
        let n = lanes.len();
        Self {
            run_spin: Mutex::new(run_spin),
            live,
            bells,
            lanes,
            chips,
            ring_slots: ring_slots.max(1),
            engine: Mutex::new(Engine {
                base: 0,
                tasks: VecDeque::with_capacity(ring_slots),
                map: TensorMap::default(),
                failed: HashSet::new(),
                ready_chip: (0..chips).map(|_| VecDeque::new()).collect(),
                ready_sub: VecDeque::new(),
                ready_group: VecDeque::new(),
                busy: vec![None; n],
                dead: vec![None; n],
                run: None,
                reserved: Vec::with_capacity(n),
                deferred: Vec::new(),
                next_run: 1,
                dispatches: 0,
            }),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a new run (waiting for the previous one to drain) and returns its id and result.
    pub(super) fn begin_run(&self) -> (u64, Arc<RunShared>) {
        let mut eng = self.lock();
        while eng.run.is_some() {
            eng = self.cv.wait(eng).unwrap_or_else(|e| e.into_inner());
        }
        let id = eng.next_run;
        eng.next_run += 1;
        let handle = Arc::new(RunShared {
            spin: *self.run_spin.lock().unwrap_or_else(|e| e.into_inner()),
            ..RunShared::default()
        });
        eng.run = Some(RunProgress {
            id,
            outstanding: 0,
            orch_done: false,
            tasks: 0,
            first_error: None,
            identities: HashSet::new(),
            handle: handle.clone(),
            start: Instant::now(),
        });
        (id, handle)
    }

    /// Closes the run's submissions; `error` is the orchestration function's own failure.
    pub(super) fn end_orchestration(&self, error: Option<L3Error>) {
        let mut eng = self.lock();
        if let Some(run) = eng.run.as_mut() {
            run.orch_done = true;
            if run.first_error.is_none() {
                run.first_error = error;
            }
        }
        self.maybe_finish(&mut eng);
        drop(eng);
        self.bells.ring(SCHEDULER_BELL);
    }

    /// Whether the run in flight (if any) names `identity`.
    pub(super) fn in_flight_names(&self, identity: &CanonicalIdentity) -> bool {
        self.lock()
            .run
            .as_ref()
            .is_some_and(|r| r.identities.contains(identity))
    }

    /// Waits until no run is in flight, for at most `budget`; false on timeout.
    pub(super) fn drain(&self, budget: Duration) -> bool {
        let deadline = Instant::now() + budget;
        let mut eng = self.lock();
        while eng.run.is_some() {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            eng = self
                .cv
                .wait_timeout(eng, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Submits one task (one member, or a group) to the current run.
    pub(super) fn submit(
        &self,
        digest: [u8; 32],
        config: &CallConfig,
        members: Vec<NewMember<'_>>,
    ) -> Result<u64, L3Error> {
        let mut eng = self.lock();
        let deadline = Instant::now() + SLOT_TIMEOUT;
        while eng.tasks.len() >= self.ring_slots {
            let now = Instant::now();
            if now >= deadline {
                return Err(L3Error::SlotTimeout {
                    slots: self.ring_slots,
                });
            }
            eng = self
                .cv
                .wait_timeout(eng, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if eng.run.is_none() {
            return Err(L3Error::NoRun);
        }
        let id = eng.base + eng.tasks.len() as u64;
        let mut producers: Vec<u64> = Vec::new();
        let mut poison = None;
        for m in &members {
            for (t, &tag) in m.tensors.iter().zip(m.tags) {
                eng.track(id, t, tag, &mut producers, &mut poison);
            }
        }
        let mut fanin = 0;
        for &p in &producers {
            if let Some(task) = eng.task_mut(p) {
                if !task.terminal() {
                    task.fanout.push(id);
                    fanin += 1;
                }
            }
        }
        let run = eng.run.as_mut().expect("checked above");
        run.outstanding += 1;
        run.tasks += 1;
        for m in &members {
            for t in m.tensors {
                run.identities.insert(t.buffer.identity);
            }
        }
        let remaining = members.len();
        eng.tasks.push_back(TaskNode {
            id,
            state: TaskState::Pending,
            digest,
            config: Box::new(*config),
            members: members
                .into_iter()
                .map(|m| Member {
                    target: m.target,
                    blob: m.blob,
                    done: false,
                })
                .collect(),
            remaining,
            fanin,
            fanout: Vec::new(),
            poison,
            error: None,
        });
        if fanin == 0 {
            self.resolve_ready(&mut eng, id);
        }
        drop(eng);
        self.bells.ring(SCHEDULER_BELL);
        Ok(id)
    }

    /// A task whose producers all finished: fail it if one of them failed, else queue it.
    fn resolve_ready(&self, eng: &mut Engine, id: u64) {
        let Some(task) = eng.task_mut(id) else {
            return;
        };
        if let Some(producer) = task.poison {
            let err = L3Error::Upstream { task: id, producer };
            self.finish_task(eng, id, Some(err));
            return;
        }
        task.state = TaskState::Ready;
        let group = task.is_group();
        let target = task.members[0].target;
        match (group, target) {
            (true, _) => eng.ready_group.push_back(id),
            (false, MemberTarget::Chip(c)) => eng.ready_chip[c].push_back(id),
            (false, MemberTarget::AnySub) => eng.ready_sub.push_back(id),
        }
    }

    /// Marks task `id` terminal and releases (or poisons) its consumers.
    fn finish_task(&self, eng: &mut Engine, id: u64, error: Option<L3Error>) {
        let mut work = vec![(id, error)];
        while let Some((id, error)) = work.pop() {
            let Some(task) = eng.task_mut(id) else {
                continue;
            };
            if task.terminal() {
                continue;
            }
            let failed = error.is_some() || task.error.is_some();
            let error = error.or_else(|| task.error.take());
            task.state = if failed {
                TaskState::Failed
            } else {
                TaskState::Completed
            };
            let fanout = std::mem::take(&mut task.fanout);
            if failed {
                eng.failed.insert(id);
            }
            if let Some(run) = eng.run.as_mut() {
                run.outstanding -= 1;
                if run.first_error.is_none() {
                    run.first_error = error;
                }
            }
            for c in fanout {
                let Some(consumer) = eng.task_mut(c) else {
                    continue;
                };
                if failed && consumer.poison.is_none() {
                    consumer.poison = Some(id);
                }
                consumer.fanin -= 1;
                if consumer.fanin == 0 {
                    if let Some(producer) = consumer.poison {
                        work.push((c, Some(L3Error::Upstream { task: c, producer })));
                    } else {
                        self.resolve_ready(eng, c);
                    }
                }
            }
        }
        let mut freed = false;
        while eng.tasks.front().is_some_and(TaskNode::terminal) {
            eng.tasks.pop_front();
            eng.base += 1;
            freed = true;
        }
        if freed {
            let base = eng.base;
            for (_, buffers) in eng.deferred.extract_if_retired(base) {
                release_intermediates(&self.live, buffers);
            }
            self.cv.notify_all();
        }
        self.maybe_finish(eng);
    }

    fn maybe_finish(&self, eng: &mut Engine) {
        let done = eng
            .run
            .as_ref()
            .is_some_and(|r| r.orch_done && r.outstanding == 0);
        if !done {
            return;
        }
        let run = eng.run.take().expect("checked above");
        for (_, buffers) in std::mem::take(&mut eng.deferred) {
            release_intermediates(&self.live, buffers);
        }
        eng.map.clear();
        eng.failed.clear();
        let result = match run.first_error {
            Some(e) => Err(e),
            None => Ok(RunSummary {
                run_id: run.id,
                tasks: run.tasks,
                elapsed: run.start.elapsed(),
            }),
        };
        run.handle.finish(result);
        self.cv.notify_all();
    }

    /// Sets how long `RunHandle::wait` spins, for runs admitted from now on.
    pub(super) fn set_run_spin(&self, spin: Duration) {
        *self.run_spin.lock().unwrap_or_else(|e| e.into_inner()) = spin;
    }

    /// The id the next submitted task will get.
    pub(super) fn next_task_id(&self) -> u64 {
        let eng = self.lock();
        eng.base + eng.tasks.len() as u64
    }

    /// Releases `buffers` (a scope's intermediates) once every task up to `last` retired, or
    /// now if they all did (`last` is `None` when the scope submitted nothing).
    pub(super) fn defer_release(&self, last: Option<u64>, buffers: Vec<Buffer>) {
        let mut eng = self.lock();
        match last {
            Some(last) if last >= eng.base => eng.deferred.push((last, buffers)),
            _ => {
                drop(eng);
                release_intermediates(&self.live, buffers);
            }
        }
    }

    /// Waits until some scope's intermediates are released; false if none are pending or none
    /// got released within the slot timeout (the caller then reports the arena full).
    pub(super) fn wait_for_release(&self) -> bool {
        let deadline = Instant::now() + SLOT_TIMEOUT;
        let mut eng = self.lock();
        let pending = eng.deferred.len();
        if pending == 0 {
            return false;
        }
        while eng.deferred.len() >= pending {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            eng = self
                .cv
                .wait_timeout(eng, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Asks the scheduler thread to exit once no run is in flight.
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.bells.ring(SCHEDULER_BELL);
    }

    /// The scheduler thread's body.
    pub(super) fn schedule(&self) {
        let mut last_check = Instant::now();
        loop {
            let seen = self.bells.seen(SCHEDULER_BELL);
            let mut eng = self.lock();
            let mut progress = self.collect(&mut eng);
            if last_check.elapsed() >= LIVENESS_PERIOD {
                last_check = Instant::now();
                progress |= self.check_children(&mut eng);
            }
            progress |= self.dispatch(&mut eng);
            let idle = eng.run.is_none() && eng.busy.iter().all(Option::is_none);
            drop(eng);
            if idle && self.stop.load(Ordering::Acquire) {
                return;
            }
            if !progress {
                self.bells.wait(SCHEDULER_BELL, seen, LIVENESS_PERIOD);
            }
        }
    }

    fn collect(&self, eng: &mut Engine) -> bool {
        let mut progress = false;
        for lane in 0..self.lanes.len() {
            let Some((id, member)) = eng.busy[lane] else {
                continue;
            };
            let mb = &self.lanes[lane].mailbox;
            if mb.state(TASK_FRAME) != MailboxState::TaskDone as u32 {
                continue;
            }
            let (code, message) = mb.error(TASK_FRAME);
            mb.set_state(TASK_FRAME, MailboxState::Idle);
            eng.busy[lane] = None;
            progress = true;
            let error = (code != 0).then(|| L3Error::TaskFailed {
                task: id,
                endpoint: self.lanes[lane].kind.to_string(),
                message,
            });
            self.member_done(eng, id, member, error);
        }
        progress
    }

    fn member_done(&self, eng: &mut Engine, id: u64, member: usize, error: Option<L3Error>) {
        let Some(task) = eng.task_mut(id) else {
            return;
        };
        if task.members[member].done {
            return;
        }
        task.members[member].done = true;
        task.remaining -= 1;
        if task.error.is_none() {
            task.error = error;
        }
        if task.remaining == 0 {
            self.finish_task(eng, id, None);
        }
    }

    fn check_children(&self, eng: &mut Engine) -> bool {
        let mut progress = false;
        for lane in 0..self.lanes.len() {
            if eng.dead[lane].is_some() {
                continue;
            }
            let Some(exit) = self.lanes[lane].exit() else {
                continue;
            };
            let reason = format!(
                "{} (pid {}) {exit}",
                self.lanes[lane].kind,
                self.lanes[lane].pid.load(Ordering::Relaxed)
            );
            log::warn!("L3 endpoint lost: {reason}");
            eng.dead[lane] = Some(reason.clone());
            if let Some((id, member)) = eng.busy[lane].take() {
                let err = L3Error::Endpoint {
                    task: id,
                    endpoint: self.lanes[lane].kind.to_string(),
                    message: reason,
                };
                self.member_done(eng, id, member, Some(err));
            }
            progress = true;
        }
        progress
    }

    /// Marks `lane` dead now (a control request found its child gone).
    pub(super) fn mark_dead(&self, lane: usize, reason: String) {
        let mut eng = self.lock();
        if eng.dead[lane].is_none() {
            eng.dead[lane] = Some(reason);
        }
        drop(eng);
        self.bells.ring(SCHEDULER_BELL);
    }

    /// Whether `lane`'s child is known dead.
    pub(super) fn is_dead(&self, lane: usize) -> Option<String> {
        self.lock().dead[lane].clone()
    }

    fn endpoint_error(&self, eng: &Engine, id: u64, lane: usize) -> L3Error {
        L3Error::Endpoint {
            task: id,
            endpoint: self.lanes[lane].kind.to_string(),
            message: eng.dead[lane].clone().unwrap_or_default(),
        }
    }

    fn dispatch(&self, eng: &mut Engine) -> bool {
        let mut progress = false;
        let lanes = self.lanes.len();
        let mut reserved = std::mem::take(&mut eng.reserved);
        reserved.clear();
        reserved.resize(lanes, false);
        let subs = self.chips..lanes;
        // Groups: head of line, all members at once, reserving their targets while waiting.
        while let Some(&id) = eng.ready_group.front() {
            let task = eng.task(id).expect("queued tasks are live");
            let targets: Vec<MemberTarget> = task.members.iter().map(|m| m.target).collect();
            let mut chosen = Vec::with_capacity(targets.len());
            let mut blocked = false;
            let mut dead_lane = None;
            let mut free_subs = subs
                .clone()
                .filter(|&l| eng.busy[l].is_none() && eng.dead[l].is_none());
            for t in &targets {
                match *t {
                    MemberTarget::Chip(c) => {
                        if eng.dead[c].is_some() {
                            dead_lane = Some(c);
                        } else if eng.busy[c].is_some() {
                            blocked = true;
                            reserved[c] = true;
                        }
                        chosen.push(c);
                    }
                    MemberTarget::AnySub => match free_subs.next() {
                        Some(l) => chosen.push(l),
                        None => blocked = true,
                    },
                }
            }
            // A SUB group needs as many live SUB children as it has members; with fewer it can
            // never launch, so it fails instead of holding every SUB lane reserved.
            let wanted = targets
                .iter()
                .filter(|&&t| t == MemberTarget::AnySub)
                .count();
            let alive = subs.clone().filter(|&l| eng.dead[l].is_none()).count();
            if wanted > alive {
                dead_lane = subs.clone().find(|&l| eng.dead[l].is_some());
            }
            if let Some(l) = dead_lane {
                eng.ready_group.pop_front();
                let err = self.endpoint_error(eng, id, l);
                self.finish_task(eng, id, Some(err));
                progress = true;
                continue;
            }
            if blocked {
                if targets.contains(&MemberTarget::AnySub) {
                    for l in subs.clone() {
                        reserved[l] = true;
                    }
                }
                break;
            }
            eng.ready_group.pop_front();
            for (member, &lane) in chosen.iter().enumerate() {
                self.launch(eng, lane, id, member);
            }
            progress = true;
        }
        #[allow(clippy::needless_range_loop)] // indexes three per-lane tables
        for chip in 0..self.chips {
            if eng.dead[chip].is_some() {
                while let Some(id) = eng.ready_chip[chip].pop_front() {
                    let err = self.endpoint_error(eng, id, chip);
                    self.finish_task(eng, id, Some(err));
                    progress = true;
                }
                continue;
            }
            if eng.busy[chip].is_some() || reserved[chip] {
                continue;
            }
            if let Some(id) = eng.ready_chip[chip].pop_front() {
                self.launch(eng, chip, id, 0);
                progress = true;
            }
        }
        if !subs.is_empty() && subs.clone().all(|l| eng.dead[l].is_some()) {
            while let Some(id) = eng.ready_sub.pop_front() {
                let err = self.endpoint_error(eng, id, subs.start);
                self.finish_task(eng, id, Some(err));
                progress = true;
            }
        }
        for lane in subs.clone() {
            if eng.ready_sub.is_empty() {
                break;
            }
            if eng.busy[lane].is_some() || eng.dead[lane].is_some() || reserved[lane] {
                continue;
            }
            let id = eng.ready_sub.pop_front().expect("checked non-empty");
            self.launch(eng, lane, id, 0);
            progress = true;
        }
        eng.reserved = reserved;
        progress
    }

    fn launch(&self, eng: &mut Engine, lane: usize, id: u64, member: usize) {
        eng.dispatches += 1;
        let dispatch_id = eng.dispatches;
        let run_id = eng.run.as_ref().map_or(0, |r| r.id);
        let task = eng.task_mut(id).expect("launched tasks are live");
        task.state = TaskState::Running;
        let lease = PipelineSlotLease {
            slot_id: 0,
            reserved: 0,
            generation: run_id,
        };
        let mb = &self.lanes[lane].mailbox;
        let posted = mb.post_task(
            &task.digest,
            &task.config,
            lease,
            run_id,
            dispatch_id,
            &task.members[member].blob,
        );
        debug_assert!(posted, "blob sizes are checked at submit");
        mb.set_state(TASK_FRAME, MailboxState::TaskReady);
        eng.busy[lane] = Some((id, member));
        self.bells.ring(Bells::child(lane));
    }
}

fn release_intermediates(live: &LiveBuffers, buffers: Vec<Buffer>) {
    let mut live = live.lock().unwrap_or_else(|e| e.into_inner());
    for b in buffers {
        live.remove(&b.identity());
        // Arena buffers have no name to unlink: closing cannot fail.
        let _ = b.close();
    }
}

trait Retire {
    fn extract_if_retired(&mut self, base: u64) -> Vec<(u64, Vec<Buffer>)>;
}

impl Retire for Vec<(u64, Vec<Buffer>)> {
    /// Removes and returns the entries whose last task is below `base` (retired).
    fn extract_if_retired(&mut self, base: u64) -> Vec<(u64, Vec<Buffer>)> {
        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(self)
            .into_iter()
            .partition(|(last, _)| *last < base);
        *self = keep;
        done
    }
}

impl Engine {
    fn task(&self, id: u64) -> Option<&TaskNode> {
        let i = id.checked_sub(self.base)?;
        self.tasks.get(i as usize).filter(|t| t.id == id)
    }

    fn task_mut(&mut self, id: u64) -> Option<&mut TaskNode> {
        let i = id.checked_sub(self.base)?;
        self.tasks.get_mut(i as usize).filter(|t| t.id == id)
    }

    /// Looks up the producers `tensor` depends on under `tag` and records the access (the
    /// shared [`TensorMap`]; a task is live while it is in the ring and not terminal).
    fn track(
        &mut self,
        id: u64,
        t: &ValidTensor,
        tag: TensorArgType,
        producers: &mut Vec<u64>,
        poison: &mut Option<u64>,
    ) {
        let base = self.base;
        let tasks = &self.tasks;
        let live = |task: u64| {
            task.checked_sub(base)
                .and_then(|i| tasks.get(i as usize))
                .is_some_and(|x| x.id == task && !x.terminal())
        };
        self.map
            .track(id, t, tag, &live, &self.failed, producers, poison);
    }
}
