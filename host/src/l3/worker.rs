//! The level-3 [`Worker`]: lifecycle, callables, buffers, control requests and runs.

// Without a device backend (no `sim` feature) chip children cannot start; the chip path
// is compiled out and its data goes unread.
#![cfg_attr(not(feature = "sim"), allow(unused_imports, dead_code))]

use super::buffer::{self, Arena, Backing, Buffer};
use super::child::{self, ChildSetup};
use super::engine::{Lane, LaneKind, MemberTarget, NewMember, RunShared, RunSummary, Shared};
use super::import::{ForkRanges, MappedArgs};
use super::mailbox::{Bells, CONTROL_FRAME, CTRL_OFF_RESULT, SCHEDULER_BELL};
use super::L3Error;
use crate::os::{self, Forked};
use crate::task_args::TaskArgs;
use crate::transport::OrchFn;
use simpler_aicore::KernelFn;
use simpler_core::mailbox::{CallConfig, ControlCommand, ControlCopyRequest, MailboxState};
use simpler_core::{
    access_permits, AccessMode, AddressSpace, ArgDirection, BackendKind, CanonicalIdentity,
    TensorArgType,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A host function a SUB child runs: it receives the task's mapped tensors and scalars.
pub type SubFn = Arc<dyn Fn(&mut MappedArgs) -> Result<(), String> + Send + Sync>;

/// A chip callable registered on a Worker (valid only on that Worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipCallableId {
    worker: u64,
    index: usize,
}

/// A SUB callable registered on a Worker (valid only on that Worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubCallableId {
    worker: u64,
    index: usize,
}

/// Numbers Workers within the process, so a callable id names its Worker.
static NEXT_WORKER: AtomicU64 = AtomicU64::new(1);

/// The live buffers of a Worker, by identity: every buffer it created and every scope
/// intermediate not yet released. A submit refuses a tensor whose descriptor is not here.
pub(super) type LiveBuffers = Arc<Mutex<HashMap<CanonicalIdentity, Buffer>>>;

pub(super) struct ChipCallable {
    pub(super) name: String,
    pub(super) orch: OrchFn,
    pub(super) kernels: Vec<KernelFn>,
    pub(super) signature: Vec<ArgDirection>,
    pub(super) digest: [u8; 32],
}

pub(super) struct SubCallable {
    pub(super) name: String,
    pub(super) f: SubFn,
    pub(super) digest: [u8; 32],
}

/// FNV-1a over `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The 32-byte digest a task frame names its callable by: kind (1 chip, 2 SUB), the index
/// (u32 LE), the FNV-1a hash of the name (u64 LE), zeros. A child accepts a digest only if it
/// matches an entry of the table it inherited.
pub(super) fn digest(kind: u8, index: usize, name: &str) -> [u8; 32] {
    let mut d = [0u8; 32];
    d[0] = kind;
    d[1..5].copy_from_slice(&(index as u32).to_le_bytes());
    d[5..13].copy_from_slice(&fnv1a(name.as_bytes()).to_le_bytes());
    d
}

/// How a Worker is built.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Chip children, one simulated device each.
    pub chips: usize,
    /// SUB children.
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
    /// Closed.
    Closed,
}

/// A level-3 Worker: N chip children and M SUB children, each a forked process.
pub struct Worker {
    config: WorkerConfig,
    lifecycle: Lifecycle,
    nonce: [u8; 8],
    next_buffer_id: AtomicU64,
    chip_callables: Vec<ChipCallable>,
    sub_callables: Vec<SubCallable>,
    arena: Arc<Arena>,
    buffers: LiveBuffers,
    serial: u64,
    device_allocs: Mutex<Vec<BTreeMap<u64, u64>>>,
    shared: Option<Arc<Shared>>,
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

    /// Chip children.
    pub fn chips(&self) -> usize {
        self.config.chips
    }

    /// SUB children.
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

    /// Registers a chip callable (before `init()`): an orchestration function, its kernel
    /// table and the directions of the tensors it takes.
    pub fn register_chip(
        &mut self,
        name: &str,
        orch: OrchFn,
        kernels: Vec<KernelFn>,
        signature: Vec<ArgDirection>,
    ) -> Result<ChipCallableId, L3Error> {
        if self.lifecycle != Lifecycle::New {
            return Err(L3Error::RegisterAfterInit);
        }
        let index = self.chip_callables.len();
        self.chip_callables.push(ChipCallable {
            name: name.to_string(),
            orch,
            kernels,
            signature,
            digest: digest(1, index, name),
        });
        Ok(ChipCallableId {
            worker: self.serial,
            index,
        })
    }

    /// Registers a SUB callable (before `init()`).
    pub fn register_sub(&mut self, name: &str, f: SubFn) -> Result<SubCallableId, L3Error> {
        if self.lifecycle != Lifecycle::New {
            return Err(L3Error::RegisterAfterInit);
        }
        let index = self.sub_callables.len();
        self.sub_callables.push(SubCallable {
            name: name.to_string(),
            f,
            digest: digest(2, index, name),
        });
        Ok(SubCallableId {
            worker: self.serial,
            index,
        })
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

    fn shared(&self) -> Result<&Arc<Shared>, L3Error> {
        match self.lifecycle {
            Lifecycle::Ready => Ok(self
                .shared
                .as_ref()
                .expect("ready workers have shared state")),
            Lifecycle::New | Lifecycle::Initializing => Err(L3Error::NotInitialized),
            Lifecycle::Closing | Lifecycle::Closed => Err(L3Error::Closed),
        }
    }

    fn lock_buffers(&self) -> std::sync::MutexGuard<'_, HashMap<CanonicalIdentity, Buffer>> {
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn mint(&self) -> CanonicalIdentity {
        CanonicalIdentity::new(
            self.nonce,
            self.next_buffer_id.fetch_add(1, Ordering::Relaxed),
            1,
        )
    }

    /// Creates a host buffer of `nbytes` granting consumers `access`: POSIX_SHM or FORK_SHM at
    /// any time, FORK_COW (READ only) before `init()`.
    pub fn create_buffer(
        &self,
        nbytes: u64,
        access: AccessMode,
        backend: BackendKind,
    ) -> Result<Buffer, L3Error> {
        if matches!(self.lifecycle, Lifecycle::Closing | Lifecycle::Closed) {
            return Err(L3Error::Closed);
        }
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        if self.config.chips + self.config.sub_workers == 0 {
            return Err(L3Error::NoBufferConsumer);
        }
        let id = self.mint();
        let buf = match backend {
            BackendKind::PosixShm => buffer::create_shm(id, access, nbytes)?,
            BackendKind::ForkShm => buffer::create_arena(&self.arena, id, access, nbytes)?,
            BackendKind::ForkCow => {
                if self.lifecycle != Lifecycle::New {
                    return Err(L3Error::ForkCowAfterInit);
                }
                if access != AccessMode::Read {
                    return Err(L3Error::ForkCowAccess);
                }
                buffer::create_cow(id, nbytes)?
            }
            other => {
                return Err(L3Error::UnsupportedBackend {
                    backend: other as u8,
                })
            }
        };
        self.lock_buffers().insert(buf.identity(), buf.clone());
        Ok(buf)
    }

    /// A dense wire tensor over `buffer` at `byte_offset` (the reference's `make_tensor_arg`).
    pub fn make_tensor_arg(
        &self,
        buffer: &Buffer,
        shapes: &[u32],
        dtype: simpler_core::DataType,
        byte_offset: u64,
    ) -> Result<simpler_core::ValidTensor, L3Error> {
        buffer.tensor(shapes, dtype, byte_offset)
    }

    /// Ends `buffer`'s life: refused while a run in flight names it; otherwise closes it
    /// (unlinking its name), tells every child to drop its mapping, and frees device memory.
    pub fn release_buffer(&self, buffer: &Buffer) -> Result<(), L3Error> {
        let identity = buffer.identity();
        let known = self.lock_buffers().contains_key(&identity);
        if !known {
            return Err(if buffer.is_closed() {
                L3Error::BufferClosed {
                    buffer_id: identity.buffer_id,
                }
            } else {
                L3Error::UnknownBuffer {
                    buffer_id: identity.buffer_id,
                }
            });
        }
        if let Some(shared) = &self.shared {
            if shared.in_flight_names(&identity) {
                return Err(L3Error::BufferInUse {
                    buffer_id: identity.buffer_id,
                });
            }
        }
        let result = buffer.close();
        if let (Backing::Device { chip, addr }, Ok(_)) = (&buffer.inner.backing, self.shared()) {
            let _ = self.control(*chip, ControlCommand::Free, *addr, &[]);
            self.lock_device_allocs()[*chip].remove(addr);
        }
        self.broadcast_release(&identity);
        self.lock_buffers().remove(&identity);
        result
    }

    fn broadcast_release(&self, identity: &CanonicalIdentity) {
        let Ok(shared) = self.shared() else {
            return;
        };
        let mut payload = [0u8; 32];
        payload[..8].copy_from_slice(&identity.owner_instance_id);
        payload[8..16].copy_from_slice(&identity.buffer_id.to_le_bytes());
        payload[16..20].copy_from_slice(&identity.generation.to_le_bytes());
        for lane in 0..shared.lanes.len() {
            // Best effort: the owner already unlinked; a child that fails only keeps a mapping.
            if let Err(e) = self.control(lane, ControlCommand::ImportRelease, 0, &payload) {
                log::debug!("import release on {}: {e}", shared.lanes[lane].kind);
            }
        }
    }

    fn lock_device_allocs(&self) -> std::sync::MutexGuard<'_, Vec<BTreeMap<u64, u64>>> {
        self.device_allocs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `nbytes` of device memory on `chip` (DEVICE_MALLOC, READWRITE). It lives
    /// until released; fill it with [`Self::copy_to`].
    pub fn alloc_child_tensor(&self, chip: usize, nbytes: u64) -> Result<Buffer, L3Error> {
        let shared = self.shared()?;
        if chip >= shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: shared.chips,
            });
        }
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        let addr = self.control(chip, ControlCommand::Malloc, nbytes, &[])?;
        let desc = buffer::descriptor(
            self.mint(),
            AddressSpace::Device,
            AccessMode::ReadWrite,
            BackendKind::DeviceMalloc,
            nbytes,
            &addr.to_le_bytes(),
        )?;
        self.lock_device_allocs()[chip].insert(addr, nbytes);
        let buf = Buffer::new(desc, Backing::Device { chip, addr });
        self.lock_buffers().insert(buf.identity(), buf.clone());
        Ok(buf)
    }

    /// Copies the first `nbytes` of host buffer `src` into device buffer `dst`.
    pub fn copy_to(&self, dst: &Buffer, src: &Buffer, nbytes: u64) -> Result<(), L3Error> {
        self.copy(ControlCommand::CopyTo, dst, src, nbytes)
    }

    /// Copies the first `nbytes` of device buffer `src` into host buffer `dst`.
    pub fn copy_from(&self, dst: &Buffer, src: &Buffer, nbytes: u64) -> Result<(), L3Error> {
        self.copy(ControlCommand::CopyFrom, dst, src, nbytes)
    }

    fn copy(
        &self,
        command: ControlCommand,
        dst: &Buffer,
        src: &Buffer,
        nbytes: u64,
    ) -> Result<(), L3Error> {
        self.shared()?;
        let to_device = command == ControlCommand::CopyTo;
        let (device, host) = if to_device { (dst, src) } else { (src, dst) };
        let ddesc = device.descriptor()?;
        let hdesc = host.descriptor()?;
        // Device side: a DEVICE_MALLOC buffer of this Worker, live, big enough, granting the
        // direction.
        let Backing::Device { chip, addr } = device.inner.backing else {
            return Err(L3Error::CopyDevice {
                reason: format!(
                    "{} buffer {} is not device memory",
                    backend_name(&ddesc),
                    ddesc.identity.buffer_id
                ),
            });
        };
        let need = if to_device {
            TensorArgType::OutputExisting
        } else {
            TensorArgType::Input
        };
        if !access_permits(ddesc.access_mode().unwrap_or(AccessMode::Read), need) {
            return Err(L3Error::CopyDevice {
                reason: format!("access {:?} does not grant the copy", ddesc.access_mode()),
            });
        }
        if nbytes > ddesc.nbytes {
            return Err(L3Error::CopyDevice {
                reason: format!("{nbytes} bytes exceed the device buffer's {}", ddesc.nbytes),
            });
        }
        if self.lock_device_allocs()[chip].get(&addr) != Some(&ddesc.nbytes) {
            return Err(L3Error::CopyDevice {
                reason: format!("{addr:#x} is not a live allocation on chip {chip}"),
            });
        }
        // Host side: a HOST buffer granting the opposite direction.
        if hdesc.space() != Some(AddressSpace::Host) {
            return Err(L3Error::CopyHost {
                reason: "the host side is DEVICE memory".into(),
            });
        }
        let host_need = if to_device {
            TensorArgType::Input
        } else {
            TensorArgType::OutputExisting
        };
        if !access_permits(hdesc.access_mode().unwrap_or(AccessMode::Read), host_need) {
            return Err(L3Error::CopyHost {
                reason: format!(
                    "access {:?} does not grant {}",
                    hdesc.access_mode(),
                    if to_device { "reading" } else { "writing" }
                ),
            });
        }
        if nbytes > hdesc.nbytes {
            return Err(L3Error::CopyHost {
                reason: format!("{nbytes} bytes exceed the host buffer's {}", hdesc.nbytes),
            });
        }
        let request = ControlCopyRequest {
            dst: if to_device { ddesc } else { hdesc },
            src: if to_device { hdesc } else { ddesc },
            nbytes,
        };
        let bytes = bytemuck::bytes_of(&request);
        self.control(chip, command, bytes.len() as u64, bytes)
            .map(|_| ())
    }

    /// Sends the raw bytes of a copy request to chip `chip` (for tests of the child's own
    /// validation: the child must refuse a request whose descriptors are invalid).
    pub fn send_raw_copy_request(
        &self,
        chip: usize,
        to_device: bool,
        request: &[u8],
    ) -> Result<(), L3Error> {
        let shared = self.shared()?;
        if chip >= shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: shared.chips,
            });
        }
        let command = if to_device {
            ControlCommand::CopyTo
        } else {
            ControlCommand::CopyFrom
        };
        self.control(chip, command, request.len() as u64, request)
            .map(|_| ())
    }

    /// One control request to lane `lane`, waited for: returns the result word.
    fn control(
        &self,
        lane: usize,
        command: ControlCommand,
        arg0: u64,
        payload: &[u8],
    ) -> Result<u64, L3Error> {
        let shared = self.shared()?;
        let l = &shared.lanes[lane];
        let endpoint = l.kind.to_string();
        let _serial = l.control.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = shared.is_dead(lane) {
            return Err(L3Error::Control {
                endpoint,
                message: format!("child is gone: {reason}"),
            });
        }
        if !l.mailbox.post_control(command as u64, arg0, payload) {
            return Err(L3Error::Control {
                endpoint,
                message: "request does not fit the control frame".into(),
            });
        }
        l.mailbox
            .set_state(CONTROL_FRAME, MailboxState::ControlRequest);
        shared.bells.ring(Bells::child(lane));
        let deadline = Instant::now() + self.config.control_timeout;
        loop {
            let seen = shared.bells.seen(SCHEDULER_BELL);
            if l.mailbox.state(CONTROL_FRAME) == MailboxState::ControlDone as u32 {
                break;
            }
            if let Some(exit) = l.exit() {
                let reason = format!("{endpoint} (pid {}) {exit}", l.pid.load(Ordering::Relaxed));
                shared.mark_dead(lane, reason.clone());
                return Err(L3Error::Control {
                    endpoint,
                    message: format!("child is gone: {reason}"),
                });
            }
            if Instant::now() >= deadline {
                // The child may still answer later; nothing else may use this frame now.
                shared.mark_dead(lane, "control request timed out".into());
                os::kill(l.pid.load(Ordering::Acquire));
                return Err(L3Error::Control {
                    endpoint,
                    message: "no answer before the control timeout; endpoint poisoned".into(),
                });
            }
            shared
                .bells
                .wait(SCHEDULER_BELL, seen, Duration::from_millis(20));
        }
        let (code, message) = l.mailbox.error(CONTROL_FRAME);
        let result = l.mailbox.control_u64(CTRL_OFF_RESULT);
        l.mailbox.set_state(CONTROL_FRAME, MailboxState::Idle);
        if code != 0 {
            return Err(L3Error::Control { endpoint, message });
        }
        Ok(result)
    }

    /// Runs `orch` (which submits tasks through [`L3Orch`]) and waits for every task.
    pub fn run<F>(&self, orch: F) -> Result<RunSummary, L3Error>
    where
        F: FnOnce(&mut L3Orch<'_>) -> Result<(), L3Error>,
    {
        self.submit(orch)?.wait(None)
    }

    /// Runs `orch` on this thread, then returns a handle to wait for the tasks it submitted.
    /// A second run is admitted once the previous one drained.
    pub fn submit<F>(&self, orch: F) -> Result<RunHandle, L3Error>
    where
        F: FnOnce(&mut L3Orch<'_>) -> Result<(), L3Error>,
    {
        let shared = self.shared()?;
        let (run_id, result) = shared.begin_run();
        let mut o = L3Orch {
            worker: self,
            shared,
            run_id,
            scopes: vec![Vec::new()],
            scope_first: vec![shared.next_task_id()],
            last_task: None,
        };
        // A panicking orchestration must still close its run, or the next run would wait for
        // it forever; the panic continues once the run is closed.
        let mut panic = None;
        let mut outcome =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| orch(&mut o))) {
                Ok(r) => r,
                Err(p) => {
                    panic = Some(p);
                    Err(L3Error::Orchestration(
                        "the orchestration function panicked".into(),
                    ))
                }
            };
        // The run's own scope: its intermediates go once every task retired.
        while o.scopes.len() > 1 {
            o.end_scope();
        }
        let run_allocs = std::mem::take(&mut o.scopes[0]);
        shared.defer_release(o.last_task, run_allocs);
        if outcome.is_ok() && o.scope_first.len() != 1 {
            outcome = Err(L3Error::Orchestration("unbalanced scopes".into()));
        }
        let error = outcome.err().map(|e| match e {
            e @ L3Error::Orchestration(_) => e,
            other => L3Error::Orchestration(other.to_string()),
        });
        shared.end_orchestration(error);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        Ok(RunHandle { result, run_id })
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

fn backend_name(d: &simpler_core::BufferDescriptor) -> &'static str {
    d.backend().map_or("unknown", BackendKind::name)
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

/// The handle of a submitted run: wait for its terminal result, as often as needed.
pub struct RunHandle {
    result: Arc<RunShared>,
    run_id: u64,
}

impl RunHandle {
    /// Waits for the run's terminal result, at most `timeout` (forever with `None`). After
    /// the run ends, every call returns the same result; a timeout returns
    /// [`L3Error::WaitTimeout`] and the run goes on.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<RunSummary, L3Error> {
        self.result.wait(timeout)
    }

    /// Whether the run has ended.
    pub fn done(&self) -> bool {
        self.result.done()
    }

    /// The run's id.
    pub fn run_id(&self) -> u64 {
        self.run_id
    }
}

/// The orchestration API of one L3 run.
pub struct L3Orch<'w> {
    worker: &'w Worker,
    shared: &'w Arc<Shared>,
    run_id: u64,
    /// Intermediates per open scope (index 0: the run's).
    scopes: Vec<Vec<Buffer>>,
    /// The first task id of each open scope.
    scope_first: Vec<u64>,
    last_task: Option<u64>,
}

impl L3Orch<'_> {
    /// The run's id.
    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The Worker (to create buffers inside the orchestration).
    pub fn worker(&self) -> &Worker {
        self.worker
    }

    /// Runs `body` in a nested scope (up to 64 deep): the intermediates it allocates with
    /// [`Self::alloc`] are released once the scope has ended and every task submitted so far
    /// has retired. Tasks inside a scope depend on tasks outside it exactly as anywhere else.
    pub fn scope<R>(
        &mut self,
        body: impl FnOnce(&mut Self) -> Result<R, L3Error>,
    ) -> Result<R, L3Error> {
        if self.scopes.len() > simpler_core::ring::MAX_SCOPE_DEPTH {
            return Err(L3Error::Orchestration(format!(
                "scopes nest deeper than {}",
                simpler_core::ring::MAX_SCOPE_DEPTH
            )));
        }
        self.scopes.push(Vec::new());
        self.scope_first.push(self.shared.next_task_id());
        let r = body(self);
        self.end_scope();
        r
    }

    fn end_scope(&mut self) {
        if self.scopes.len() <= 1 {
            return;
        }
        let allocs = self.scopes.pop().unwrap_or_default();
        let first = self.scope_first.pop().unwrap_or(0);
        let last = self.last_task.filter(|&l| l >= first);
        self.shared.defer_release(last, allocs);
    }

    /// An intermediate buffer of `nbytes` (FORK_SHM, READWRITE, zeroed) owned by the innermost
    /// scope: after the scope ends and its tasks retire it is released, and any tensor or
    /// descriptor derived from it afterwards is refused ([`L3Error::BufferClosed`]).
    pub fn alloc(&mut self, nbytes: u64) -> Result<Buffer, L3Error> {
        if nbytes == 0 {
            return Err(L3Error::ZeroSizeBuffer);
        }
        // Back-pressure: when the arena is full but earlier scopes' intermediates are waiting
        // for their tasks to retire, wait for them instead of failing.
        let buf = loop {
            match buffer::create_arena(
                &self.worker.arena,
                self.worker.mint(),
                AccessMode::ReadWrite,
                nbytes,
            ) {
                Err(L3Error::ArenaFull { .. }) if self.shared.wait_for_release() => continue,
                other => break other?,
            }
        };
        self.worker
            .lock_buffers()
            .insert(buf.identity(), buf.clone());
        self.scopes
            .last_mut()
            .expect("the run's scope is always open")
            .push(buf.clone());
        Ok(buf)
    }

    /// How deep the scopes are nested (0 at the run's top level).
    pub fn scope_depth(&self) -> usize {
        self.scopes.len() - 1
    }

    fn check_chip(&self, chip: usize) -> Result<(), L3Error> {
        if chip >= self.shared.chips {
            return Err(L3Error::UnknownChip {
                chip,
                chips: self.shared.chips,
            });
        }
        Ok(())
    }

    /// Submits `callable` to chip `chip`; tags drive the dependencies.
    pub fn submit_next_level(
        &mut self,
        chip: usize,
        callable: ChipCallableId,
        args: &TaskArgs,
        config: &CallConfig,
    ) -> Result<u64, L3Error> {
        self.submit_next_level_group(callable, &[chip], std::slice::from_ref(args), config)
    }

    /// Submits one group task: member `i` runs `args_list[i]` on chip `chips[i]`; the task
    /// completes when every member has.
    pub fn submit_next_level_group(
        &mut self,
        callable: ChipCallableId,
        chips: &[usize],
        args_list: &[TaskArgs],
        config: &CallConfig,
    ) -> Result<u64, L3Error> {
        let c = self
            .worker
            .chip_callables
            .get(callable.index)
            .filter(|_| callable.worker == self.worker.serial)
            .ok_or(L3Error::UnknownCallable)?;
        config.validate().map_err(L3Error::Config)?;
        if chips.len() != args_list.len() || chips.is_empty() {
            return Err(L3Error::GroupShape {
                workers: chips.len(),
                args: args_list.len(),
            });
        }
        let mut members = Vec::with_capacity(chips.len());
        for (i, (&chip, args)) in chips.iter().zip(args_list).enumerate() {
            self.check_chip(chip)?;
            if chips[..i].contains(&chip) {
                return Err(L3Error::DuplicateChip { chip });
            }
            check_args(args)?;
            check_signature(args, &c.signature)?;
            self.check_device_args(chip, args)?;
            self.check_live(args)?;
            members.push(NewMember {
                target: MemberTarget::Chip(chip),
                blob: args.to_mailbox_blob().map_err(L3Error::Args)?,
                tensors: args.tensors(),
                tags: args.tags(),
            });
        }
        let id = self.shared.submit(c.digest, config, members)?;
        self.last_task = Some(id);
        Ok(id)
    }

    /// Submits `callable` to any idle SUB child.
    pub fn submit_sub(&mut self, callable: SubCallableId, args: &TaskArgs) -> Result<u64, L3Error> {
        self.submit_sub_group(callable, std::slice::from_ref(args))
    }

    /// Submits a group of SUB members, each on a distinct SUB child.
    pub fn submit_sub_group(
        &mut self,
        callable: SubCallableId,
        args_list: &[TaskArgs],
    ) -> Result<u64, L3Error> {
        let c = self
            .worker
            .sub_callables
            .get(callable.index)
            .filter(|_| callable.worker == self.worker.serial)
            .ok_or(L3Error::UnknownCallable)?;
        let have = self.worker.config.sub_workers;
        if args_list.is_empty() {
            return Err(L3Error::GroupShape {
                workers: 0,
                args: 0,
            });
        }
        if args_list.len() > have {
            return Err(L3Error::NoSubWorkers {
                needed: args_list.len(),
                have,
            });
        }
        let mut members = Vec::with_capacity(args_list.len());
        for args in args_list {
            check_args(args)?;
            for (index, t) in args.tensors().iter().enumerate() {
                if t.buffer.space() == Some(AddressSpace::Device) {
                    return Err(L3Error::DeviceToSub { index });
                }
            }
            self.check_live(args)?;
            members.push(NewMember {
                target: MemberTarget::AnySub,
                blob: args.to_mailbox_blob().map_err(L3Error::Args)?,
                tensors: args.tensors(),
                tags: args.tags(),
            });
        }
        let config: CallConfig = bytemuck::Zeroable::zeroed();
        let id = self.shared.submit(c.digest, &config, members)?;
        self.last_task = Some(id);
        Ok(id)
    }

    /// Every tensor must name a live buffer of this Worker by its exact descriptor: a tensor
    /// kept past `release_buffer` (or past its scope) would reach memory that now belongs to
    /// another buffer.
    fn check_live(&self, args: &TaskArgs) -> Result<(), L3Error> {
        let live = self.worker.lock_buffers();
        for (index, t) in args.tensors().iter().enumerate() {
            let ok = live
                .get(&t.buffer.identity)
                .is_some_and(|b| !b.is_closed() && b.inner.desc == t.buffer);
            if !ok {
                return Err(L3Error::DeadBuffer {
                    index,
                    buffer_id: t.buffer.identity.buffer_id,
                });
            }
        }
        Ok(())
    }

    /// Every DEVICE tensor must name exactly a live allocation this Worker made on `chip`.
    fn check_device_args(&self, chip: usize, args: &TaskArgs) -> Result<(), L3Error> {
        for (index, t) in args.tensors().iter().enumerate() {
            let d = &t.buffer;
            if d.space() != Some(AddressSpace::Device) {
                continue;
            }
            let reason = if d.identity.owner_instance_id != self.worker.nonce {
                Some("DEVICE backing minted by another Worker".to_string())
            } else {
                let addr = d.body_address().unwrap_or(0);
                let allocs = self.worker.lock_device_allocs();
                match allocs[chip].get(&addr) {
                    Some(&len) if len == d.nbytes => None,
                    Some(_) => Some(format!("{addr:#x} on chip {chip} has a different size")),
                    None => {
                        let elsewhere = allocs
                            .iter()
                            .enumerate()
                            .find(|(_, a)| a.contains_key(&addr))
                            .map(|(c, _)| c);
                        Some(match elsewhere {
                            Some(c) => format!("{addr:#x} lives on chip {c}, not chip {chip}"),
                            None => format!(
                                "{addr:#x} is not the start of a live allocation on chip {chip}"
                            ),
                        })
                    }
                }
            };
            if let Some(reason) = reason {
                return Err(L3Error::DeviceProvenance { index, reason });
            }
        }
        Ok(())
    }
}

/// Submit-time checks every task's arguments pass: the tag/access rule again (a `set_tag`
/// may have changed it), no REMOTE_SIDECAR, no two writing arguments over shared bytes.
fn check_args(args: &TaskArgs) -> Result<(), L3Error> {
    let tensors = args.tensors();
    let tags = args.tags();
    for (index, (t, &tag)) in tensors.iter().zip(tags).enumerate() {
        let granted = t.buffer.access_mode().unwrap_or(AccessMode::Read);
        // At level 3 an OUTPUT is a write into the caller's buffer, so it needs WRITE too (the
        // reference lets a READ buffer through here and loses the writes in the child).
        let output_on_read = tag == TensorArgType::Output && granted == AccessMode::Read;
        if !access_permits(granted, tag) || output_on_read {
            return Err(L3Error::Access {
                index,
                tag,
                granted,
            });
        }
        if t.buffer.backend() == Some(BackendKind::RemoteSidecar) {
            return Err(L3Error::RemoteSidecar { index });
        }
    }
    // Two arguments of one task may not share bytes when either writes (NO_DEP exempt): the
    // reference compares each writer with the arguments after it; this compares every pair.
    let writes = |tag: TensorArgType| {
        matches!(
            tag,
            TensorArgType::Output | TensorArgType::InOut | TensorArgType::OutputExisting
        )
    };
    let tracked = |tag: TensorArgType| tag != TensorArgType::NoDep;
    for i in 0..tensors.len() {
        for j in i + 1..tensors.len() {
            let either = writes(tags[i]) || writes(tags[j]);
            if either
                && tracked(tags[i])
                && tracked(tags[j])
                && super::engine::may_overlap(&tensors[i], &tensors[j])
            {
                return Err(L3Error::OverlappingWrites {
                    first: i,
                    second: j,
                });
            }
        }
    }
    Ok(())
}

/// The arguments must match the chip callable's signature: as many tensors, and each tag
/// agreeing with the direction (IN: INPUT; OUT: OUTPUT / OUTPUT_EXISTING; INOUT: INOUT;
/// NO_DEP fits any direction).
fn check_signature(args: &TaskArgs, signature: &[ArgDirection]) -> Result<(), L3Error> {
    if args.tensor_count() != signature.len() {
        return Err(L3Error::Signature {
            expected: signature.len(),
            got: args.tensor_count(),
        });
    }
    for (index, (&tag, &dir)) in args.tags().iter().zip(signature).enumerate() {
        let ok = matches!(
            (dir, tag),
            (_, TensorArgType::NoDep)
                | (ArgDirection::In, TensorArgType::Input)
                | (
                    ArgDirection::Out,
                    TensorArgType::Output | TensorArgType::OutputExisting
                )
                | (ArgDirection::InOut, TensorArgType::InOut)
        );
        if !ok {
            return Err(L3Error::DirectionTag { index, tag });
        }
        let granted = args.tensors()[index]
            .buffer
            .access_mode()
            .unwrap_or(AccessMode::Read);
        let reads = dir != ArgDirection::Out;
        let writes = dir != ArgDirection::In;
        if (writes && granted == AccessMode::Read) || (reads && granted == AccessMode::Write) {
            return Err(L3Error::Access {
                index,
                tag,
                granted,
            });
        }
    }
    Ok(())
}
