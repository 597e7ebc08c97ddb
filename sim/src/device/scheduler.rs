//! A scheduler thread: for each AICPU scheduler it runs (`SchedThread`), the scheduler pass
//! over the cores that scheduler owns and the `aicore` loop of each of those cores, stepped in
//! turn on the same thread (`scheduler_main`).
//!
//! Its own file because this is the dispatch path, the loop a run's speed depends on. It never
//! sleeps on a timer: a thread with nothing to do blocks on the run's
//! [`Wakeup`](crate::wake::Wakeup) (its 5 ms timeout only a backstop) and is woken by whoever
//! makes work (a submit, a completion, an abort). The loop's steps are `#[inline(always)]`
//! methods of `SchedThread`, so naming them adds no call to the loop.

use super::config::DeviceConfig;
use super::regs::{CoreBlock, SimCores};
use super::state::{RunState, ABORT_SCHED};
use super::trace::{TraceBuf, TraceSink};
use crate::gm::{GmArena, PREFETCH_MAX};
use crate::pages::{Pages, ZeroPages};
use crate::tile_ops::{ahead, blocked};
use crate::wake::RoomNotice;
use simpler_aicore::core_loop::{CoreLoop, Step};
use simpler_aicore::KernelFn;
use simpler_aicpu::scheduler::CoreSlot;
use simpler_aicpu::{EventKind, OwnedCore, Reach, SchedError, Scheduler, TaskPayloads, TraceEvent};
use simpler_core::gm::Gm;
use simpler_core::handshake::AICPU_IDLE;
use simpler_core::ring::MAX_RINGS;
use simpler_core::sched::SchedState;
use simpler_core::{TaskId, TaskTensor};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The body of host thread `worker` of `workers`: sets up the schedulers it runs (scheduler
/// `i` for every `i % workers == worker`) and their cores once, then serves one run after
/// another until the device shuts down.
#[allow(clippy::too_many_arguments)]
pub(super) fn scheduler_main(
    worker: usize,
    workers: usize,
    config: &DeviceConfig,
    state: &RunState,
    shared: &SchedState<'_>,
    payloads: &TaskPayloads<'_>,
    gm: &GmArena<'_>,
) {
    let nsched = config.topology.schedulers();
    let mut threads: Vec<SchedThread> = (worker..nsched)
        .step_by(workers.max(1))
        .map(|i| SchedThread::new(i, nsched, config))
        .collect();
    let mut runs = Vec::with_capacity(threads.len());
    let mut seen_generation = 0;
    while let Some(kernels) = wait_for_run(state, &mut seen_generation) {
        runs.clear();
        runs.extend(threads.iter_mut().map(|t| t.begin_run(state)));
        dispatch_loop(&mut threads, &runs, state, shared, payloads, gm, &kernels);
        // Prefetches a kernel queued and did not reach are of no use to the next run.
        ahead::clear();
        for (t, run) in threads.iter_mut().zip(&runs) {
            t.end_run(state, run);
        }
    }
}

/// The dispatch loop of one host thread: a round of each of its schedulers (a pass, then one
/// step of every owned core), until the run is aborted or drained; waits on the wakeup when a
/// whole round did nothing.
#[inline(always)]
fn dispatch_loop(
    threads: &mut [SchedThread],
    runs: &[RunStart],
    state: &RunState,
    shared: &SchedState<'_>,
    payloads: &TaskPayloads<'_>,
    gm: &GmArena<'_>,
    kernels: &[KernelFn],
) {
    let epoch = runs.first().and_then(|r| r.epoch);
    // When this thread tells a waiting orchestrator that room was freed (`RoomNotice`).
    let mut room = RoomNotice::new(watermarks(shared));
    loop {
        if state.abort.load(Ordering::Acquire) != 0 {
            break;
        }
        let seen = state.wake.generation();
        let (mut progress, mut completed, mut queued) = (false, false, false);
        for (t, run) in threads.iter_mut().zip(runs) {
            match t.round(shared, payloads, gm, kernels, run) {
                Ok((p, c)) => {
                    progress |= p;
                    completed |= c;
                    queued |= t.sched.take_queued();
                }
                Err(e) => {
                    fail(state, e);
                    return;
                }
            }
        }
        if progress {
            state.progress.fetch_add(1, Ordering::Relaxed);
            // An idle peer needs waking only for work it can take: a task this thread
            // queued (what it ran itself, kept, it never saw), or the run's end.
            if queued || (completed && shared.drained()) {
                state.wake.notify();
            }
            if completed {
                state.completion.notify();
                // Retiring tasks (the watermark moving) is what frees the room a blocked
                // orchestrator waits for; the watermark's store comes before this bump.
                if room.after_progress(watermarks(shared), claimed(shared)) {
                    state.room.notify();
                }
            }
            continue;
        }
        if state.orch_done.load(Ordering::Acquire)
            && shared.drained()
            && !threads.iter().any(|t| t.sched.busy())
        {
            break;
        }
        // Room freed since this thread's last notice must not wait for it to wake.
        if room.before_idle(watermarks(shared)) {
            state.room.notify();
        }
        let t0 = now(epoch);
        state.wake.wait(seen, Duration::from_millis(5));
        if epoch.is_some() {
            let t1 = now(epoch);
            for (t, run) in threads.iter_mut().zip(runs) {
                t.trace.span(run.track, EventKind::Idle, t0, t1);
            }
        }
    }
}

/// Blocks until the device thread starts the next run (it bumps the generation), and returns
/// that run's kernel table; `None` when the bump was the shutdown.
fn wait_for_run(state: &RunState, seen_generation: &mut u64) -> Option<Arc<[KernelFn]>> {
    let kernels = {
        let mut g = state.generation.lock().unwrap_or_else(|e| e.into_inner());
        while g.0 == *seen_generation {
            g = state.start.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        *seen_generation = g.0;
        g.1.clone()
    };
    if state.shutdown.load(Ordering::SeqCst) {
        return None;
    }
    Some(kernels.unwrap_or_else(|| Arc::from(Vec::new())))
}

/// Bytes of a long tensor [`SchedThread::queue_next_cube`] queues: a 128x128 f32 slice, what
/// a product reads of an operand first.
const QUEUED_HEAD: usize = 64 << 10;

/// Heads [`SchedThread::queue_next_cube`] queues: as many as one product of 128x128x128
/// drains (a line per `MACS_PER_LINE` multiply-adds), two.
const QUEUED_HEADS: usize = (128 * 128 * 128 / blocked::MACS_PER_LINE) * ahead::LINE / QUEUED_HEAD;
const _: () = assert!(QUEUED_HEADS == 2);

/// Whether a tensor is longer than a hint covers (`PREFETCH_MAX`).
#[inline(always)]
fn long(t: &TaskTensor) -> bool {
    t.extent_bytes() as usize > PREFETCH_MAX
}

/// What one scheduler thread owns and keeps from run to run: its cores (registers, loop
/// state, local buffers), its scheduler and its trace buffer.
struct SchedThread {
    /// The thread's position among the schedulers; its trace track is
    /// `SCHEDULER_TRACK + index`.
    index: usize,
    /// The cores it owns, whole clusters of (AIC, AIV0, AIV1).
    owned: Vec<OwnedCore>,
    /// Their registers, as the scheduler's `Platform`.
    platform: SimCores,
    /// Each owned core's `aicore` loop state.
    loops: Vec<CoreLoop>,
    /// Each owned core's local buffer ([`LocalBuffer`]).
    locals: Vec<LocalBuffer>,
    /// The AICPU scheduler over `owned`.
    sched: Scheduler,
    /// The thread's trace buffer.
    trace: TraceBuf,
}

/// A core's local buffer, starting on a cache line as GM's tiles do (every device allocation
/// is a multiple of 64 bytes from GM's first word, which starts a line). A tile copied in bulk
/// between the two is then aligned alike on both sides; glibc's copy of a few KiB or more
/// (`rep movsb`) ran at a third of its speed on this project's AMD machine when the two sides
/// sat a few bytes apart, not a multiple of 32, modulo 4 KiB (`bench gm`'s module docs).
///
/// Its lines are fresh zero pages ([`ZeroPages`]), committed as the core's kernels first write
/// them: a run of small tiles touches a few KiB of each core's buffer.
pub struct LocalBuffer {
    lines: ZeroPages<LocalLine>,
    words: usize,
}

/// One cache line of a [`LocalBuffer`].
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LocalLine([f32; 16]);

impl LocalBuffer {
    /// `words` f32 words, zeroed.
    pub fn new(words: usize) -> Self {
        Self {
            lines: ZeroPages::new(words.div_ceil(16), Pages::Base),
            words,
        }
    }

    /// The buffer's `words` words, as the core's kernels see them.
    pub fn words(&mut self) -> &mut [f32] {
        let all: &mut [f32] = bytemuck::cast_slice_mut(&mut self.lines);
        &mut all[..self.words]
    }
}

/// One run as a scheduler thread sees it: where its trace goes and the scheduler's counters
/// when it began.
struct RunStart {
    /// The run's trace sink and start, when traced.
    tracing: Option<(TraceSink, Instant)>,
    /// The run's start when traced: event times count from it; `None` records nothing.
    epoch: Option<Instant>,
    /// The thread's trace track.
    track: u32,
    /// `sched.dispatched` at the start.
    dispatched: u64,
    /// `sched.loops`, `sched.pops` and `sched.pop_hits` at the start.
    counters: (u64, u64, u64),
}

/// Nanoseconds since `epoch`, or 0 when the run is not traced.
#[inline(always)]
fn now(epoch: Option<Instant>) -> u64 {
    epoch.map_or(0, |e| e.elapsed().as_nanos() as u64)
}

impl SchedThread {
    /// Thread `index` of `nsched` with its cores idle.
    fn new(index: usize, nsched: usize, config: &DeviceConfig) -> Self {
        // Whole clusters, round robin: cluster c belongs to thread c % nsched. Cores of a
        // cluster are contiguous (AIC, AIV0, AIV1), which the scheduler's MIX placement
        // relies on.
        let mut owned = Vec::new();
        let mut blocks = Vec::new();
        for cluster in (index..config.clusters as usize).step_by(nsched) {
            for slot in [CoreSlot::Aic, CoreSlot::Aiv0, CoreSlot::Aiv1] {
                owned.push(OwnedCore::new(blocks.len(), cluster, slot));
                blocks.push(CoreBlock::idle());
            }
        }
        let loops = vec![CoreLoop::new(); blocks.len()];
        let locals: Vec<LocalBuffer> = (0..blocks.len())
            .map(|_| LocalBuffer::new(config.local_words))
            .collect();
        let platform = SimCores {
            blocks,
            epoch: Instant::now(),
        };
        let sched = Scheduler::new(&owned);
        Self {
            index,
            owned,
            platform,
            loops,
            locals,
            sched,
            trace: TraceBuf::new(),
        }
    }

    /// Readies the thread for a run: the scheduler and every core loop reset, every task
    /// register idle, the trace buffer armed when the run is traced.
    fn begin_run(&mut self, state: &RunState) -> RunStart {
        self.sched.reset();
        for (b, l) in self.platform.blocks.iter().zip(self.loops.iter_mut()) {
            b.task.store(AICPU_IDLE, Ordering::Release);
            l.reset();
        }
        let dispatched = self.sched.dispatched;
        let counters = (self.sched.loops, self.sched.pops, self.sched.pop_hits);
        let tracing = if cfg!(feature = "trace") {
            state
                .trace
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        } else {
            None
        };
        if tracing.is_some() {
            self.trace.arm();
        }
        let epoch = tracing.as_ref().map(|t| t.1);
        // Timed passes read the platform clock, which counts from the run's start.
        self.sched.set_timed(epoch.is_some());
        if let Some(e) = epoch {
            self.platform.epoch = e;
        }
        RunStart {
            tracing,
            epoch,
            track: simpler_aicpu::trace::SCHEDULER_TRACK + self.index as u32,
            dispatched,
            counters,
        }
    }

    /// One round: a scheduler pass, then one step of every owned core, with a pass after each
    /// long task's kernel ([`Self::step_cores`]). Whether it did anything, and whether it
    /// completed a task (which may have freed what others wait for).
    #[inline(always)]
    fn round(
        &mut self,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &GmArena<'_>,
        kernels: &[KernelFn],
        run: &RunStart,
    ) -> Result<(bool, bool), SchedError> {
        let completed0 = self.sched.completed;
        let stepped = self.sched.step(&mut self.platform, shared, payloads, gm);
        if run.epoch.is_some() && matches!(stepped, Ok(true)) {
            self.trace_pass(run.track);
        }
        let mut progress = stepped?;
        if self.step_cores(shared, payloads, gm, kernels, run)? {
            progress = true;
        }
        Ok((progress, self.sched.completed != completed0))
    }

    /// Records the last scheduler pass as its completion and dispatch phases.
    #[inline(always)]
    fn trace_pass(&mut self, track: u32) {
        let pass = self.sched.last_pass();
        for (kind, start_ns, end_ns) in [
            (EventKind::Completion, pass.start, pass.completed),
            (EventKind::Dispatch, pass.completed, pass.end),
        ] {
            self.trace.span(track, kind, start_ns, end_ns);
        }
    }

    /// Steps every owned core's loop once (each runs a task it was given, if any); `true` when
    /// some core did something. When traced, records each task run as an `Exec` span.
    ///
    /// After a kernel of a long task (a tensor over `PREFETCH_MAX`), the scheduler passes
    /// over the completion at once ([`Reach::AfterKernel`]) and places what it made ready
    /// on the next idle cores in step order, so a consumer runs next, while its producer's
    /// output is still in this CPU's cache (a 256 KiB product read from the cache, not from
    /// memory or the other CPU). Left to the round's pass, it would run after every other
    /// task the round holds, with a few MiB moved in between. Short tasks wait for the round's
    /// pass: their data is a few lines, and a pass per kernel would cost more than it saves.
    ///
    /// Before the round's last long cube task, [`Reach::Cube`] gives the cube cores that ran
    /// earlier in the round their next tasks, so its kernel queues the first one's operands
    /// ([`Self::queue_next_cube`]).
    #[inline(always)]
    fn step_cores(
        &mut self,
        shared: &SchedState<'_>,
        payloads: &TaskPayloads<'_>,
        gm: &GmArena<'_>,
        kernels: &[KernelFn],
        run: &RunStart,
    ) -> Result<bool, SchedError> {
        let epoch = run.epoch;
        let mut progress = false;
        // Each core's task tensors are hinted into the cache two cores ahead, while the cores
        // before it run: a small tile's misses then overlap the kernels instead of stalling
        // its own.
        self.prefetch_task(gm, 0);
        self.prefetch_task(gm, 1);
        for i in 0..self.loops.len() {
            self.prefetch_task(gm, i + 2);
            let long_task = self.waiting_tensors(i).is_some_and(|t| t.iter().any(long));
            if self.last_long_cube(i) {
                // The cube cores that ran earlier in the round get their next tasks now, so
                // that this task's last product queues the first one's operands.
                if self
                    .sched
                    .pass(Reach::Cube, &mut self.platform, shared, payloads, gm)?
                {
                    progress = true;
                }
            }
            self.queue_next_cube(gm, i);
            let t0 = now(epoch);
            let l = &mut self.loops[i];
            let step = l.step(
                &self.platform.blocks[i],
                gm,
                kernels,
                self.locals[i].words(),
            );
            if step != Step::Idle {
                progress = true;
                if let (Some(_), Step::Ran(token)) = (epoch, step) {
                    let c = &self.owned[i];
                    self.trace.push(TraceEvent {
                        track: (c.cluster * 3 + c.slot as usize) as u32,
                        kind: EventKind::Exec,
                        task: self.sched.running(i).unwrap_or(TaskId::INVALID),
                        kernel: self.platform.blocks[i].payloads[(token & 1) as usize].kernel_id,
                        start_ns: t0,
                        end_ns: now(epoch),
                        value: 0,
                    });
                }
                if long_task && matches!(step, Step::Ran(_)) {
                    let reach = Reach::AfterKernel(i);
                    let passed = self
                        .sched
                        .pass(reach, &mut self.platform, shared, payloads, gm);
                    if epoch.is_some() && matches!(passed, Ok(true)) {
                        self.trace_pass(run.track);
                    }
                    passed?;
                }
            }
        }
        Ok(progress)
    }

    /// When owned core `i` is a cube core about to run a task with a tensor too long for
    /// [`Self::prefetch_task`]'s hints, queues the heads of the next such cube task's long
    /// tensors (the next in step order, round to the cores before `i`: for the round's last
    /// one, the first of the next round, which [`Self::step_cores`] placed before it ran) on
    /// this thread's prefetch queue, beneath what `i`'s own kernel will queue (a
    /// product queues its next slice's operands): only the cube's products drain the queue,
    /// so the heads drain while `i`'s last product runs, just before the next task reads
    /// them. Without them that task's first product starts on cold operands, where its
    /// others start on what the product before them queued.
    ///
    /// The heads are the first [`QUEUED_HEAD`] bytes of each long tensor, first tensor first,
    /// up to what one product of [`QUEUED_HEAD`]-byte operands drains (a line per
    /// `MACS_PER_LINE` multiply-adds): more would wait beneath for nothing to drain them.
    #[inline(always)]
    fn queue_next_cube(&self, gm: &GmArena<'_>, i: usize) {
        if self.long_cube(i).is_none() {
            return;
        }
        let mut after = (i + 1..self.loops.len()).chain(0..i);
        let Some(next) = after.find_map(|j| self.long_cube(j)) else {
            return;
        };
        let mut heads = [(0u64, 0usize); QUEUED_HEADS];
        let mut count = 0;
        for t in next.iter().filter(|t| long(t)).take(QUEUED_HEADS) {
            heads[count] = (t.data_addr(), (t.extent_bytes() as usize).min(QUEUED_HEAD));
            count += 1;
        }
        // The queue drains its newest range first: the first head goes on last.
        for &(addr, len) in heads[..count].iter().rev() {
            gm.prefetch(addr, len);
        }
    }

    /// Whether owned core `i` runs the round's last long cube task: it is a cube core about to
    /// run one, and none waits on the cores after it.
    fn last_long_cube(&self, i: usize) -> bool {
        self.long_cube(i).is_some()
            && !(i + 1..self.loops.len()).any(|j| self.long_cube(j).is_some())
    }

    /// The tensors of the task waiting on owned core `j`, if `j` is a cube core and the task
    /// has a long tensor.
    #[inline(always)]
    fn long_cube(&self, j: usize) -> Option<&[TaskTensor]> {
        if self.owned.get(j)?.slot != CoreSlot::Aic {
            return None;
        }
        let tensors = self.waiting_tensors(j)?;
        tensors.iter().any(long).then_some(tensors)
    }

    /// Hints the tensors of the task waiting on owned core `i` (if any) into the cache
    /// ([`GmArena::prefetch_now`]): each view's range from its first addressed byte.
    #[inline(always)]
    fn prefetch_task(&self, gm: &GmArena<'_>, i: usize) {
        for t in self.waiting_tensors(i).unwrap_or(&[]) {
            gm.prefetch_now(t.data_addr(), t.extent_bytes() as usize);
        }
    }

    /// The tensors of the task waiting on owned core `i`, if one waits.
    #[inline(always)]
    fn waiting_tensors(&self, i: usize) -> Option<&[TaskTensor]> {
        let block = self.platform.blocks.get(i)?;
        let token = self.loops.get(i)?.pending(block)?;
        Some(block.payloads[(token & 1) as usize].args.tensors())
    }

    /// Leaves the run: records the thread's loop and pop counters and flushes its trace (when
    /// traced), adds its dispatches to the run's, and tells the device thread it is done.
    fn end_run(&mut self, state: &RunState, run: &RunStart) {
        if let Some((sink, _)) = &run.tracing {
            use simpler_aicpu::trace::{COUNTER_LOOPS, COUNTER_POPS, COUNTER_POP_HITS};
            let end_ns = now(run.epoch);
            let (loops0, pops0, hits0) = run.counters;
            for (counter, value) in [
                (COUNTER_LOOPS, self.sched.loops - loops0),
                (COUNTER_POPS, self.sched.pops - pops0),
                (COUNTER_POP_HITS, self.sched.pop_hits - hits0),
            ] {
                self.trace.push(TraceEvent {
                    track: run.track,
                    kind: EventKind::Counter,
                    task: TaskId::INVALID,
                    kernel: counter,
                    start_ns: end_ns,
                    end_ns,
                    value,
                });
            }
            self.trace.flush(state, sink);
        }
        state
            .dispatched
            .fetch_add(self.sched.dispatched - run.dispatched, Ordering::SeqCst);
        let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
        *active -= 1;
        state.done.notify_all();
    }
}

/// Ends the run for a scheduler error: keeps the run's first error, aborts with
/// [`ABORT_SCHED`] (unless another abort came first) and wakes every sleeper.
#[cold]
fn fail(state: &RunState, e: SchedError) {
    let mut slot = state.sched_error.lock().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert(e);
    let _ = state
        .abort
        .compare_exchange(0, ABORT_SCHED, Ordering::SeqCst, Ordering::SeqCst);
    state.wake_all();
}

/// Every ring's watermark (`last_task_alive`), to tell whether a round moved one.
#[inline(always)]
fn watermarks(shared: &SchedState<'_>) -> [u32; MAX_RINGS] {
    core::array::from_fn(|r| shared.flow(r).last_task_alive.load(Ordering::Relaxed))
}

/// Every ring's claimed tasks (`current_task_index`, the next task's local id).
fn claimed(shared: &SchedState<'_>) -> [u32; MAX_RINGS] {
    core::array::from_fn(|r| shared.flow(r).current_task_index.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::{LocalBuffer, SchedThread, QUEUED_HEAD};
    use crate::device::config::{DeviceConfig, Topology};
    use crate::gm::GmWords;
    use crate::tile_ops::ahead::{self, LINE};
    use simpler_core::buffer::AddressSpace;
    use simpler_core::chip::BufferHandle;
    use simpler_core::geometry::row_major_strides;
    use simpler_core::limits::MAX_TENSOR_DIMS;
    use simpler_core::{DataType, TaskTensor};
    use std::sync::atomic::Ordering;

    const BASE: u64 = 0x1_0000_0000;

    /// A dense f32 tensor of `shape` at GM address `BASE + at`.
    fn tensor(at: u64, shape: &[u32]) -> TaskTensor {
        let mut full = [0u32; MAX_TENSOR_DIMS];
        full[..shape.len()].copy_from_slice(shape);
        let strides = row_major_strides(shape.len() as u32, &full);
        let size = shape.iter().map(|&d| d as u64).product::<u64>() * 4;
        let buffer = BufferHandle {
            addr: BASE + at,
            size,
        };
        TaskTensor::new(
            buffer,
            0,
            shape,
            &strides[..shape.len()],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap()
    }

    /// Gives owned core `i` of `t` a task with `tensors`, waiting to run (token 1).
    fn give(t: &mut SchedThread, i: usize, tensors: &[TaskTensor]) {
        let block = &mut t.platform.blocks[i];
        let args = &mut block.payloads[1].args;
        args.clear();
        for &x in tensors {
            args.push_tensor(x).unwrap();
        }
        block.task.store(1, Ordering::Release);
    }

    #[test]
    fn a_cube_task_queues_the_heads_of_the_next_cube_tasks_long_operands_wrapping_round() {
        const SLICES: u64 = 4 * 128 * 128 * 4;
        let config = DeviceConfig::new(Topology::A2a3);
        let mut t = SchedThread::new(0, 1, &config);
        // Owned cores are whole clusters: AIC, AIV0, AIV1, AIC, ...
        let (aic0, aiv, aic1, aic2) = (0, 1, 3, 6);
        // Eight tensors of `SLICES` bytes, in words of 8.
        let words = GmWords::zeroed((8 * SLICES / 8) as usize);
        let gm = words.arena_at(BASE, 0);
        let long = |n: u64| tensor(n * SLICES, &[4, 128, 128]);
        let small = tensor(7 * SLICES, &[16, 16]);
        let queued = |t: &SchedThread, i: usize| {
            ahead::clear();
            t.queue_next_cube(&gm, i);
            let q = ahead::take();
            (q.lines(), q.next_line())
        };
        give(&mut t, aic0, &[long(0), long(1), long(2)]);
        // No cube task waits after it: nothing is queued.
        assert_eq!(queued(&t, aic0), (0, None));
        // A vector task with long tensors is not a cube task.
        give(&mut t, aiv, &[long(3), long(4)]);
        assert_eq!(queued(&t, aic0), (0, None));
        // A cube task with only small tensors is not the next one either.
        give(&mut t, aic1, &[small]);
        assert_eq!(queued(&t, aic0), (0, None));
        // The next long cube task's first two long tensors, a head each, the first on top;
        // its small tensor is left to the hints.
        give(&mut t, aic2, &[small, long(4), long(5), long(6)]);
        let first = gm.host_ptr(BASE + 4 * SLICES);
        assert_eq!(queued(&t, aic0), (2 * QUEUED_HEAD / LINE, first));
        // The last long cube task in step order queues the first one's heads (the next
        // round's, placed before it runs), and only it is the round's last.
        assert_eq!(
            queued(&t, aic2),
            (2 * QUEUED_HEAD / LINE, gm.host_ptr(BASE))
        );
        assert!(t.last_long_cube(aic2));
        assert!(!t.last_long_cube(aic0) && !t.last_long_cube(aiv) && !t.last_long_cube(aic1));
        // Only a core about to run a long cube task queues: not one idle, not a vector core,
        // not one whose task is all small tensors.
        assert_eq!(queued(&t, aiv), (0, None));
        assert_eq!(queued(&t, aic1), (0, None));
        t.platform.blocks[aic0]
            .task
            .store(simpler_core::handshake::AICPU_IDLE, Ordering::Release);
        assert_eq!(queued(&t, aic0), (0, None));
        // With the first one idle, the last has none to queue for.
        assert_eq!(queued(&t, aic2), (0, None));
        ahead::clear();
    }

    #[test]
    fn a_local_buffer_has_its_words_and_starts_on_a_cache_line() {
        for words in [1, 15, 16, 17, 1000, 64 * 1024] {
            let mut local = LocalBuffer::new(words);
            let w = local.words();
            assert_eq!(w.len(), words);
            assert_eq!(w.as_ptr() as usize % 64, 0, "{words} words");
            assert!(w.iter().all(|&v| v == 0.0));
        }
    }
}
