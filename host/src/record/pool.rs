//! The recorder threads: [`RecorderPool`] starts them, queues each recording for the thread
//! whose turn it is, limits how many run while the orchestration builds, and wakes threads
//! only when a recording may start. Its own file because this is the threading policy
//! (permits, wake-ups, rotation), apart from what a recording does.
//!
//! The policy, and why:
//!
//! - **Threads.** Eight start at callable registration, each standing its retained storage up
//!   as it starts (so no bind pays for it), growing to sixteen, alive until the worker is
//!   finalized. Jobs wait in one FIFO, each naming the thread whose turn it is in a rotation that
//!   advances by one per bind, so every thread records different bodies over binds and reuses its
//!   storage for them; a job whose thread is busy goes to the first thread that comes free.
//! - **While the orchestration builds**, at most one recording fewer than there are CPUs runs at
//!   once, so recorders do not take turns on the orchestration's CPU; the commit lets them use
//!   every CPU, and starts every waiting job at once rather than in a chain where each finished
//!   recording wakes the next thread. `ChipWorker::set_recordings_while_building(0)` defers every
//!   recording to the commit.
//! - **Scheduling class.** Recorder threads run as batch threads at nice 10 (`SCHED_BATCH`, best
//!   effort), so one that wakes on the orchestration thread's CPU does not preempt it.
//! - **The commit helps.** The price of that class is that a woken recorder can wait a
//!   scheduler tick or more to run. So at the commit the committing thread records every job
//!   still queued itself, newest first, on storage of its own stood up with the pool
//!   ([`RecorderPool::help`]), while the recorders it woke take the others as they get a CPU:
//!   no recording waits longer to start than it takes to run.
//! - **Wake-ups.** A submit wakes a recorder only when one may start and only if it is asleep (a
//!   notify is a system call, and waking a thread costs the waker microseconds). A thread woken
//!   for a job holds its permit until it runs, so the jobs queued while it wakes wake nobody else.

use super::boundary::GraphBoundary;
use super::inflight::Inflight;
use super::recording::Recording;
use super::{RecordError, StandUpPart};
use simpler_aicpu::GraphBody;
use simpler_core::graph::{GRAPH_MAX_SCALAR_ARGS, GRAPH_MAX_TENSOR_ARGS};

/// Recorder threads [`RecorderPool::start`] starts (each stands its storage up as it starts).
pub const RECORDERS_AT_START: usize = 8;
/// The most recorder threads a pool grows to (it grows by one when a submit finds every
/// thread occupied).
pub const RECORDERS_MAX: usize = 16;

/// A recording waiting in the pool's queue: the entry the submitting thread began, the body to
/// run over its boundary, and the thread meant to take it.
struct QueuedRecording {
    entry: std::sync::Arc<Inflight>,
    body: GraphBody,
    /// The thread whose turn it was at submit: the one that takes the job, unless that thread
    /// is busy recording when another comes free.
    preferred: usize,
}

/// The pool's bookkeeping for one recorder thread (the thread itself owns its [`Recording`]).
struct RecorderThread {
    /// Jobs in the queue for which this thread is the preferred one.
    queued: usize,
    /// Running a recording now.
    busy: bool,
    /// Waiting on its condition variable: only then does a wake-up need a notify (each one
    /// is a system call, and waking a thread costs the waker microseconds).
    sleeping: bool,
    /// The keys it recorded, oldest first: the last 64 (its capacity), for
    /// [`RecorderPool::recorded_by_thread`].
    recorded: Vec<u64>,
}

/// Everything the pool's threads share, under one lock.
struct PoolState {
    /// One per thread started, by index.
    recorders: Vec<RecorderThread>,
    /// The one FIFO of jobs every thread takes from.
    queue: std::collections::VecDeque<QueuedRecording>,
    /// Set when the pool is dropped: each thread exits once it finds no job it may take.
    stop: bool,
    /// The thread whose turn it is for the next job (the rotation).
    next: usize,
    /// Recordings running now, and how many may run at once (while the orchestration builds,
    /// one per CPU it leaves: more threads only take turns on the CPUs it also needs; at the
    /// commit, every job waiting).
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

/// The lock and condition variables the pool's threads and its owner share.
struct PoolShared {
    /// The state, under its one lock.
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
        let asleep = std::mem::replace(&mut st.recorders[w].sleeping, false);
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
            let w = st.queue[k].preferred;
            let taker = if st.recorders[w].busy {
                st.recorders.iter().position(|x| !x.busy && x.sleeping)
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
    fn take(&mut self, index: usize) -> Option<QueuedRecording> {
        let at = self
            .queue
            .iter()
            .position(|j| j.preferred == index || self.recorders[j.preferred].busy)?;
        let job = self.queue.remove(at)?;
        self.recorders[job.preferred].queued -= 1;
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
    /// The committing thread's own recording storage and boundary copy ([`Self::help`]).
    helper: Box<(Recording, GraphBoundary)>,
    /// Whether the commit records jobs still queued itself ([`Self::set_commit_helps`]).
    helps: bool,
    /// Recordings the committing thread ran so far.
    helped: u64,
}

/// The `recorder` an entry reports when the committing thread recorded it ([`RecorderPool::help`]).
pub const COMMITTING_THREAD: usize = usize::MAX;

impl RecorderPool {
    /// Starts [`RECORDERS_AT_START`] threads.
    pub fn start() -> Self {
        let cpus = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .max(1);
        let shared = std::sync::Arc::new(PoolShared {
            state: std::sync::Mutex::new(PoolState {
                recorders: Vec::with_capacity(RECORDERS_MAX),
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
        // The committing thread's storage stands up here, at callable registration, off any
        // bind (a failure is retried, and reported, by its first recording).
        let mut helper = Box::new((Recording::new(), reserved_boundary()));
        let _ = helper.0.stand_up_storage();
        let mut pool = Self {
            shared,
            threads: Vec::with_capacity(RECORDERS_MAX),
            helper,
            helps: true,
            helped: 0,
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
            if st.recorders.len() >= RECORDERS_MAX {
                return false;
            }
            st.recorders.push(RecorderThread {
                queued: 0,
                busy: false,
                sleeping: false,
                recorded: Vec::with_capacity(64),
            });
            st.recorders.len() - 1
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
                self.lock().recorders.pop();
                false
            }
        }
    }

    /// Recorder threads started so far ([`RECORDERS_AT_START`] up to [`RECORDERS_MAX`]).
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Queues the recording of `entry` (begun by the caller) with `body`, for the thread whose
    /// turn it is, or, when that one is occupied, the next idle one; only when every thread is
    /// occupied does the pool grow (up to 16 threads) rather than wait for one.
    pub fn submit(&mut self, entry: std::sync::Arc<Inflight>, body: GraphBody) {
        let chosen = {
            let mut st = self.lock();
            let n = st.recorders.len();
            let start = st.next % n;
            st.next = st.next.wrapping_add(1);
            (0..n)
                .map(|k| (start + k) % n)
                .find(|&w| !st.recorders[w].busy && st.recorders[w].queued == 0)
                .ok_or(start)
        };
        let preferred = match chosen {
            Ok(w) => w,
            Err(_) if self.spawn() => self.threads.len() - 1,
            Err(start) => start,
        };
        let mut st = self.lock();
        st.recorders[preferred].queued += 1;
        st.queue.push_back(QueuedRecording {
            entry,
            body,
            preferred,
        });
        // Wake the thread only if it may start now: while every permit is taken, the
        // recording that finishes first wakes a thread for a job waiting, so the submitting
        // (orchestration) thread does not pay a wake-up per job for threads that would go
        // straight back to sleep.
        if st.permits() > 0 {
            let woke = if st.recorders[preferred].busy {
                self.shared.wake_for_queue(&mut st, 1)
            } else {
                self.shared.wake(&mut st, preferred) as u64
            };
            st.orchestration_wakes += woke;
        }
    }

    /// While the orchestration thread builds (`true`), at most [`Self::set_while_building`]
    /// recordings run at once (by default one fewer than there are CPUs, at least one, so
    /// recorders do not take turns on the orchestration's CPU); afterwards (`false`, when the
    /// commit waits for them) every job waiting may start at once, and each waiting job's
    /// thread is woken now. The threads then share the CPUs, which costs a few context
    /// switches; a chain in which each finishing recording wakes the next thread would put a
    /// wake-up delay on the commit's path for every link, which costs more.
    pub fn orchestrating(&mut self, on: bool) {
        let mut st = self.lock();
        st.limit = if on {
            st.while_building
        } else {
            st.cpus.max(st.running + st.waking + st.queue.len())
        };
        let mut free = st.permits();
        if !on && self.helps {
            // The committing thread records one job itself ([`Self::help`]): wake threads
            // for the others only, and no more than the other CPUs can run.
            free = free
                .min(st.queue.len().saturating_sub(1))
                .min(st.cpus.saturating_sub(1));
        }
        let woke = self.shared.wake_for_queue(&mut st, free);
        st.orchestration_wakes += woke;
    }

    /// The commit's part: while a job is still queued (no recorder thread has started it),
    /// the committing thread takes the newest and records it itself, on its own CPU and
    /// storage, instead of waiting for a recorder thread to be scheduled. Recorder threads run
    /// as batch threads at nice 10 so as not to preempt the orchestration, and on a busy
    /// machine one woken for a job can wait milliseconds to run (measured on graph_vector: a
    /// 1.6 ms recording wait for 32 us of recording); the committing thread would only wait
    /// for them. Jobs a recorder has started are left to it. Returns how many it recorded.
    pub fn help(&mut self) -> usize {
        if !self.helps {
            return 0;
        }
        let mut n = 0;
        loop {
            let (job, inject) = {
                let mut st = self.lock();
                // The newest: the threads `orchestrating(false)` woke go for the oldest.
                let Some(job) = st.queue.pop_back() else {
                    break;
                };
                st.recorders[job.preferred].queued -= 1;
                (job, st.inject.take())
            };
            let (recording, boundary) = &mut *self.helper;
            if let Some(part) = inject {
                recording.discard_storage();
                recording.inject_stand_up_failure(part);
            }
            run_job(COMMITTING_THREAD, recording, boundary, &job, |_| {});
            n += 1;
        }
        self.helped += n as u64;
        n
    }

    /// Whether the commit records jobs still queued itself ([`Self::help`]; on by default).
    pub fn set_commit_helps(&mut self, on: bool) {
        self.helps = on;
    }

    /// Recordings the committing thread has run so far ([`Self::help`]).
    pub fn helped(&self) -> u64 {
        self.helped
    }

    /// Sets how many recordings may run at once while the orchestration builds; 0 defers every
    /// recording to the commit (the orchestration thread then never wakes a recorder).
    pub fn set_while_building(&mut self, n: usize) {
        self.lock().while_building = n;
    }

    /// Advances the rotation by one (the next bind's first job goes to the next thread).
    pub fn rotate(&mut self, bind: u64) {
        let mut st = self.lock();
        let n = st.recorders.len().max(1);
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
        while st.settled < st.recorders.len() {
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
            .recorders
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
    let mut boundary = reserved_boundary();
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
                    st.recorders[index].busy = true;
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
                st.recorders[index].sleeping = true;
                st = shared.cvs[index]
                    .wait(st)
                    .unwrap_or_else(|e| e.into_inner());
                if st.recorders[index].sleeping {
                    // Not notified (spurious, or the pool stopping).
                    st.recorders[index].sleeping = false;
                } else {
                    st.waking -= 1;
                }
            }
        };
        run_job(index, &mut recording, &mut boundary, &job, |key| {
            // The pool learns this thread is free before the entry publishes its result: a
            // commit that has seen every result done finds every recorder free, so the next
            // bind's jobs never find the pool falsely full (and grow it).
            let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            st.running -= 1;
            st.recorders[index].busy = false;
            // A permit is free. This thread loops back and takes a job of its own, or one
            // whose thread is busy, if there is one; otherwise wake a thread for the oldest
            // job waiting.
            let mine = st
                .queue
                .iter()
                .any(|j| j.preferred == index || st.recorders[j.preferred].busy);
            if !mine {
                let free = st.permits().min(1);
                let _ = shared.wake_for_queue(&mut st, free);
            }
            let recorded = &mut st.recorders[index].recorded;
            if recorded.len() == recorded.capacity() {
                recorded.remove(0);
            }
            recorded.push(key);
        });
    }
}

/// A boundary copy with room for the largest boundary (a warm recording allocates nothing).
fn reserved_boundary() -> GraphBoundary {
    let mut boundary = GraphBoundary::default();
    boundary.tensors.reserve(GRAPH_MAX_TENSOR_ARGS);
    boundary.tags.reserve(GRAPH_MAX_TENSOR_ARGS);
    boundary.scalars.reserve(GRAPH_MAX_SCALAR_ARGS);
    boundary
}

/// Records `job` with `recording` (its boundary copied into `boundary` first), calls `done`
/// with the key once the recording ran, then publishes the result on the entry as recorder
/// `index`.
fn run_job(
    index: usize,
    recording: &mut Recording,
    boundary: &mut GraphBoundary,
    job: &QueuedRecording,
    done: impl FnOnce(u64),
) {
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
        recording
            .record(key, job.body, Some(&*boundary))
            .map(|_| ())
    } else {
        Err(RecordError::NoBoundary)
    };
    let times = recording.last_times();
    done(key);
    job.entry.finish(
        index,
        times,
        allocs_before,
        outcome.map(|()| recording.last_definition()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(_: &mut simpler_aicpu::Rt<'_, '_>) -> Result<(), simpler_aicpu::RtError> {
        Ok(())
    }

    fn state(recorders: usize) -> PoolState {
        PoolState {
            recorders: (0..recorders)
                .map(|_| RecorderThread {
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

    /// Queues jobs for `preferred` (their preferred threads), tagged by their position.
    fn queue(st: &mut PoolState, preferred: &[usize]) {
        for (k, &preferred) in preferred.iter().enumerate() {
            let entry = std::sync::Arc::new(Inflight::default());
            entry.lock().full_key = k as u64;
            st.recorders[preferred].queued += 1;
            st.queue.push_back(QueuedRecording {
                entry,
                body,
                preferred,
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
        assert!(!st.recorders[2].sleeping && st.recorders[0].sleeping);
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
        st.recorders[2].busy = true;
        assert_eq!(
            taken(&mut st, 1),
            Some(3),
            "thread 2 is busy: its job is free to take"
        );
        assert_eq!(taken(&mut st, 0), Some(1));
        assert!(st.queue.is_empty());
        assert!(st.recorders.iter().all(|w| w.queued == 0));
    }
}
