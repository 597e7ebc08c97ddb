//! The level-3 [`Worker`]: its configuration, its lifecycle (forking the children at `init()`,
//! waiting for them to report ready, starting the scheduler thread, and closing it all down),
//! and the state the other parts share. Callable registration is in `callable`, buffers and
//! control requests in `control`, runs in `orch`: each an `impl Worker` of its own.

use super::buffer::{Arena, Buffer};
use super::callable::{ChipCallable, SubCallable};
use super::child::{self, ChildSetup};
use super::engine::{Lane, LaneKind, Shared};
use super::import::ForkRanges;
use super::mailbox::{Bells, CONTROL_FRAME, SCHEDULER_BELL};
use super::L3Error;
use crate::os::{self, Forked};
use simpler_core::mailbox::MailboxState;
use simpler_core::CanonicalIdentity;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Numbers Workers within the process, so a callable id names its Worker.
static NEXT_WORKER: AtomicU64 = AtomicU64::new(1);

/// The live buffers of a Worker, by identity: every buffer it created and every scope
/// intermediate not yet released. A submit refuses a tensor whose descriptor is not here.
pub(super) type LiveBuffers = Arc<Mutex<HashMap<CanonicalIdentity, Buffer>>>;

/// How a Worker is built.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Chip children, one simulated device each.
    pub chips: usize,
    /// SUB children, each a forked process that runs SUB callables on the host.
    pub sub_workers: usize,
    /// The device every chip child starts.
    #[cfg(feature = "sim")]
    pub device: simpler_sim::DeviceConfig,
    /// Bytes of the FORK_SHM arena mapped before the fork.
    pub fork_arena_bytes: usize,
    /// Task slots of the engine's ring (a submit waits while all are in use).
    pub ring_slots: usize,
    /// How long `init()` waits for every child to report ready.
    pub startup_timeout: Duration,
    /// How long a control request waits for its child.
    pub control_timeout: Duration,
    /// How long the scheduler and the children spin on their doorbells before blocking.
    pub spin: Duration,
    /// How long `RunHandle::wait` spins (yielding the CPU) before blocking: a short run's end
    /// then reaches the caller without a kernel wake-up (the `l3` benchmark's `spin_*` arms).
    pub run_spin: Duration,
}

impl WorkerConfig {
    /// `chips` chip children and `sub_workers` SUB children with defaults: an a2a3sim device
    /// per chip with 64 MiB of GM and 4 MiB heap rings, a 64 MiB FORK_SHM arena, 1024 task slots.
    pub fn new(chips: usize, sub_workers: usize) -> Self {
        Self {
            chips,
            sub_workers,
            #[cfg(feature = "sim")]
            device: {
                // Smaller than a lone chip's default: every child zeroes its own GM at start.
                let mut d = simpler_sim::DeviceConfig::new(simpler_sim::Topology::A2a3);
                d.ring.heap_bytes = 4 << 20;
                d.gm_bytes = 64 << 20;
                d
            },
            fork_arena_bytes: 64 << 20,
            ring_slots: 1024,
            startup_timeout: Duration::from_secs(30),
            control_timeout: Duration::from_secs(30),
            spin: super::mailbox::DEFAULT_SPIN,
            run_spin: Duration::from_micros(20),
        }
    }
}

/// Where a Worker is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Built; callables and FORK_COW buffers may be added.
    New,
    /// Forking children and minting its nonce.
    Initializing,
    /// Serving runs.
    Ready,
    /// `close()` began but did not finish; call it again.
    Closing,
    /// Closed: the children are reaped and the buffers released; `close()` again does
    /// nothing.
    Closed,
}

/// A level-3 Worker: N chip children and M SUB children, each a forked process.
pub struct Worker {
    /// How it was built (child counts, timeouts, spins, the device).
    pub(super) config: WorkerConfig,
    /// Where it is in its life.
    pub(super) lifecycle: Lifecycle,
    /// The owner instance id every buffer identity it mints carries (minted again at `init()`).
    pub(super) nonce: [u8; 8],
    /// The next buffer id to mint.
    pub(super) next_buffer_id: AtomicU64,
    /// Chip callables by index, registered before `init()` and inherited by the children.
    pub(super) chip_callables: Vec<ChipCallable>,
    /// SUB callables by index, likewise.
    pub(super) sub_callables: Vec<SubCallable>,
    /// The FORK_SHM arena, mapped before the fork so every child inherits it.
    pub(super) arena: Arc<Arena>,
    /// Every live buffer, by identity.
    pub(super) buffers: LiveBuffers,
    /// This Worker's number in the process (callable ids carry it).
    pub(super) serial: u64,
    /// Per chip, its live device allocations: address to size in bytes.
    pub(super) device_allocs: Mutex<Vec<BTreeMap<u64, u64>>>,
    /// What the Worker's threads share after `init()` (`None` before, and after close).
    pub(super) shared: Option<Arc<Shared>>,
    /// The scheduler thread, from `init()` until close.
    scheduler: Option<JoinHandle<()>>,
}

impl Worker {
    /// A new Worker. Maps the FORK_SHM arena now, so children forked by `init()` inherit it.
    pub fn new(config: WorkerConfig) -> Result<Self, L3Error> {
        let arena = Arc::new(Arena::new(config.fork_arena_bytes)?);
        Ok(Self {
            nonce: os::random8().map_err(|e| L3Error::Os(format!("getrandom: {e}")))?,
            device_allocs: Mutex::new(vec![BTreeMap::new(); config.chips]),
            config,
            lifecycle: Lifecycle::New,
            next_buffer_id: AtomicU64::new(1),
            chip_callables: Vec::new(),
            sub_callables: Vec::new(),
            arena,
            buffers: Arc::new(Mutex::new(HashMap::new())),
            serial: NEXT_WORKER.fetch_add(1, Ordering::Relaxed),
            shared: None,
            scheduler: None,
        })
    }

    /// Where the Worker is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// The nonce naming every buffer this incarnation owns (minted again by `init()`).
    pub fn owner_instance_id(&self) -> [u8; 8] {
        self.nonce
    }

    /// Chip children ([`WorkerConfig::chips`]).
    pub fn chips(&self) -> usize {
        self.config.chips
    }

    /// SUB children ([`WorkerConfig::sub_workers`]).
    pub fn sub_workers(&self) -> usize {
        self.config.sub_workers
    }

    /// The pid of chip `i`'s child (after `init()`).
    pub fn chip_pid(&self, i: usize) -> Option<i32> {
        let shared = self.shared.as_ref()?;
        (i < shared.chips).then(|| shared.lanes[i].pid.load(Ordering::Acquire))
    }

    /// The pid of SUB child `i` (after `init()`).
    pub fn sub_pid(&self, i: usize) -> Option<i32> {
        let shared = self.shared.as_ref()?;
        shared
            .lanes
            .get(shared.chips + i)
            .map(|l| l.pid.load(Ordering::Acquire))
    }

    /// Sets how long the scheduler and every child spin on their doorbells before they block,
    /// and how long `RunHandle::wait` spins (from the next run on). Takes effect in every
    /// process at once (the setting lives in shared memory).
    pub fn set_spin(&self, doorbell: Duration, wait: Duration) -> Result<(), L3Error> {
        let shared = self.shared()?;
        shared.bells.set_spin(doorbell);
        shared.set_run_spin(wait);
        Ok(())
    }

    fn fork_ranges(&self) -> ForkRanges {
        let mut r = ForkRanges::default();
        r.add(self.arena.region());
        for b in self.lock_buffers().values() {
            if let Some(region) = b.cow_region() {
                r.add(region);
            }
        }
        r
    }

    /// The memory a child of this Worker inherits at fork (for an in-process registry).
    pub fn fork_inherited(&self) -> ForkRanges {
        self.fork_ranges()
    }

    /// Forks every child (SUB children first, then chips) before starting any thread, mints
    /// the nonce, waits for every child to report ready, then starts the scheduler thread.
    pub fn init(&mut self) -> Result<(), L3Error> {
        if self.lifecycle != Lifecycle::New {
            return Err(L3Error::AlreadyInitialized);
        }
        self.lifecycle = Lifecycle::Initializing;
        // Minted after entering INITIALIZING, in the process that owns the Worker: a nested
        // Worker built in a child re-mints here, so its nonce is never older than its fork.
        // FORK_COW buffers made before init keep the identity they were minted with.
        self.nonce = os::random8().map_err(|e| L3Error::Os(format!("getrandom: {e}")))?;
        let result = self.start_children();
        match result {
            Ok(shared) => {
                let s = shared.clone();
                let handle = std::thread::Builder::new()
                    .name("l3-scheduler".into())
                    .spawn(move || s.schedule())
                    .map_err(|e| L3Error::Os(format!("scheduler thread: {e}")));
                match handle {
                    Ok(h) => {
                        self.scheduler = Some(h);
                        self.shared = Some(shared);
                        self.lifecycle = Lifecycle::Ready;
                        Ok(())
                    }
                    Err(e) => {
                        kill_all(&shared);
                        self.lifecycle = Lifecycle::Closed;
                        Err(e)
                    }
                }
            }
            Err(e) => {
                self.lifecycle = Lifecycle::Closed;
                self.release_all_buffers();
                Err(e)
            }
        }
    }

    #[allow(unsafe_code)] // the fork: see its SAFETY comment
    fn start_children(&mut self) -> Result<Arc<Shared>, L3Error> {
        let chips = self.config.chips;
        let subs = self.config.sub_workers;
        let bells = Bells::new(chips + subs, self.config.spin)
            .map_err(|e| L3Error::Os(format!("doorbells: {e}")))?;
        let mut lanes = Vec::with_capacity(chips + subs);
        for i in 0..chips {
            lanes.push(Lane::new(LaneKind::Chip(i))?);
        }
        for i in 0..subs {
            lanes.push(Lane::new(LaneKind::Sub(i))?);
        }
        let shared = Arc::new(Shared::new(
            bells,
            lanes,
            chips,
            self.config.ring_slots,
            self.config.run_spin,
            self.buffers.clone(),
        ));
        let fork = self.fork_ranges();
        let parent = os::pid();
        // SUB children first, then chips (the reference's order).
        let order: Vec<usize> = (chips..chips + subs).chain(0..chips).collect();
        for lane in order {
            let setup = ChildSetup {
                lane,
                kind: shared.lanes[lane].kind,
                mailbox: &shared.lanes[lane].mailbox,
                bells: &shared.bells,
                nonce: self.nonce,
                fork: &fork,
                chip_callables: &self.chip_callables,
                sub_callables: &self.sub_callables,
                #[cfg(feature = "sim")]
                device: &self.config.device,
                parent,
            };
            // SAFETY: in the child, `child_main` never returns: it catches a panic of the
            // child's work and ends with `exit_now`, so no frame or destructor of the parent's
            // runs there. No thread of this Worker exists yet (the scheduler starts after the
            // last fork), and the child uses no other thread of the process; one that held a
            // lock at the fork (a logger's) can only leave the child blocked, which the
            // start-up deadline below reports.
            match unsafe { os::fork() } {
                Ok(Forked::Child) => child::child_main(setup),
                Ok(Forked::Parent(pid)) => shared.lanes[lane].pid.store(pid, Ordering::Release),
                Err(e) => {
                    kill_all(&shared);
                    return Err(L3Error::Os(format!("fork: {e}")));
                }
            }
        }
        // Start-up may poll: wait for every child's INIT_READY / INIT_FAILED.
        let deadline = Instant::now() + self.config.startup_timeout;
        for lane in &shared.lanes {
            loop {
                let seen = shared.bells.seen(SCHEDULER_BELL);
                let state = lane.mailbox.state(CONTROL_FRAME);
                if state == MailboxState::InitReady as u32 {
                    lane.mailbox.set_state(CONTROL_FRAME, MailboxState::Idle);
                    break;
                }
                let failure = if state == MailboxState::InitFailed as u32 {
                    Some(lane.mailbox.error(CONTROL_FRAME).1)
                } else if let Some(exit) = lane.exit() {
                    Some(format!("child {exit} during start-up"))
                } else if Instant::now() >= deadline {
                    Some("no INIT_READY before the start-up deadline".into())
                } else {
                    None
                };
                if let Some(message) = failure {
                    kill_all(&shared);
                    return Err(L3Error::ChildStartup {
                        endpoint: lane.kind.to_string(),
                        message,
                    });
                }
                shared
                    .bells
                    .wait(SCHEDULER_BELL, seen, Duration::from_millis(10));
            }
        }
        Ok(shared)
    }

    /// The shared state of a ready Worker; refused before `init()` and once closing.
    pub(super) fn shared(&self) -> Result<&Arc<Shared>, L3Error> {
        match self.lifecycle {
            Lifecycle::Ready => Ok(self
                .shared
                .as_ref()
                .expect("ready workers have shared state")),
            Lifecycle::New | Lifecycle::Initializing => Err(L3Error::NotInitialized),
            Lifecycle::Closing | Lifecycle::Closed => Err(L3Error::Closed),
        }
    }

    /// Drains accepted work, stops the scheduler, shuts every child down and reaps it, then
    /// releases every buffer. Within `budget`; a close that runs out leaves the Worker
    /// closable again (lifecycle [`Lifecycle::Closing`]).
    pub fn close(&mut self, budget: Duration) -> Result<(), L3Error> {
        match self.lifecycle {
            Lifecycle::Closed => return Ok(()),
            Lifecycle::New => {
                self.lifecycle = Lifecycle::Closed;
                self.release_all_buffers();
                return Ok(());
            }
            Lifecycle::Initializing => return Err(L3Error::NotInitialized),
            Lifecycle::Ready | Lifecycle::Closing => {}
        }
        let deadline = Instant::now() + budget;
        let shared = self
            .shared
            .clone()
            .expect("ready workers have shared state");
        if !shared.drain(budget) {
            self.lifecycle = Lifecycle::Closing;
            return Err(L3Error::CloseTimeout {
                pending: "a run is still in flight".into(),
            });
        }
        self.lifecycle = Lifecycle::Closing;
        if let Some(h) = self.scheduler.take() {
            shared.stop();
            let _ = h.join();
        }
        for (i, lane) in shared.lanes.iter().enumerate() {
            lane.mailbox.request_shutdown();
            shared.bells.ring(Bells::child(i));
        }
        // Teardown may poll.
        loop {
            let running: Vec<String> = shared
                .lanes
                .iter()
                .filter(|l| l.exit().is_none())
                .map(|l| l.kind.to_string())
                .collect();
            if running.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(L3Error::CloseTimeout {
                    pending: format!("{} still running", running.join(", ")),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.release_all_buffers();
        self.shared = None;
        self.lifecycle = Lifecycle::Closed;
        Ok(())
    }

    fn release_all_buffers(&self) {
        let buffers: Vec<Buffer> = self.lock_buffers().drain().map(|(_, b)| b).collect();
        for b in buffers {
            if let Err(e) = b.close() {
                log::warn!("releasing buffer {}: {e}", b.identity().buffer_id);
            }
        }
    }
}

fn kill_all(shared: &Shared) {
    for lane in &shared.lanes {
        let pid = lane.pid.load(Ordering::Acquire);
        if pid > 0 && lane.exit().is_none() {
            os::kill(pid);
            for _ in 0..1000 {
                if lane.exit().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            if let Some(h) = self.scheduler.take() {
                kill_all(&shared);
                shared.stop();
                let _ = h.join();
            } else {
                kill_all(&shared);
            }
        }
        self.release_all_buffers();
    }
}
