//! Level 3: one host driving several chips and sub-workers, each in a forked child process.
//!
//! ```text
//!  parent process                                   child processes (forked in init())
//!  ───────────────                                  ──────────────────────────────────
//!  Worker ── orchestration fn ──► L3Orch::submit_*   chip i: ChipWorker on its own simulated
//!    │          (engine: slot ring, TensorMap by       device, ImportRegistry (device context)
//!    │           identity + byte range, scopes)      sub j:  host callables, ImportRegistry
//!    └─ scheduler thread ── mailbox (196,608 B) ──►          (host context)
//!                         ◄── doorbell futex ───────
//! ```
//!
//! Task arguments cross the process boundary only as the `TaskArgs` blob of address-free wire
//! tensors; each child validates and materializes them through its [`ImportRegistry`].
//! Buffers ([`Buffer`]) are POSIX_SHM, FORK_SHM, FORK_COW or DEVICE_MALLOC; see [`buffer`].
//!
//! ## Lifecycle
//!
//! - **Processes.** [`Worker::new`] maps the FORK_SHM arena; `register_chip` and `register_sub`
//!   add callables, which the children inherit, so they are registered before `init`. `init`
//!   mints the 8-byte `owner_instance_id` from the kernel's random source, maps one 196,608-byte
//!   mailbox per child and a doorbell page, forks the SUB children and then the chips before any
//!   thread starts, waits for every child's INIT_READY, and only then starts the one scheduler
//!   thread. A child asks for SIGKILL when its parent dies and ends with `_exit`.
//! - **Mailbox.** The reference's byte layout ([`simpler_core::mailbox`]): a control frame and
//!   two task frames of 64 KiB; these endpoints use task frame 1 (the single-frame protocol). A
//!   task is the callable's 32-byte digest, the `CallConfig`, the pipeline lease and the
//!   `TaskArgs` blob; the child validates the lease, the config, the blob and every tensor before
//!   it materializes them. State words are published with release ordering; each side wakes the
//!   other through futex doorbells that count sleepers (a ring is a system call only when someone
//!   is blocked), after a short spin that yields the CPU once it passes 2 us.
//! - **Buffers.** `create_buffer(nbytes, access, backend)`: POSIX_SHM (`shm_open` under a name
//!   derived from the nonce), FORK_SHM (a slice of the arena mapped before the fork), FORK_COW (a
//!   private mapping made before `init`, READ only); `alloc_child_tensor(chip, nbytes)` for
//!   DEVICE_MALLOC memory on one chip, filled with `copy_to` and read with `copy_from` (a
//!   `ControlCopyRequest` naming both ends, validated by the child before it acts).
//!   `release_buffer` refuses while a run in flight names the buffer, unlinks its name and tells
//!   every child to drop its mapping. `close()` drains, shuts the children down, reaps them and
//!   releases every buffer, and may be called again after running out of budget; dropping an
//!   unclosed Worker kills its children. No shared-memory name survives `close()`, a child's
//!   crash or a drop.
//! - **Import registry** (one per child): an identity is mapped once; a second descriptor under
//!   a known identity must be equal field for field, or it is refused naming the differing
//!   fields; a POSIX_SHM object shorter than its descriptor, or gone, is refused; a FORK address
//!   must lie inside a region the child inherited; READ POSIX_SHM buffers are mapped read-only,
//!   and a SUB callable's `MappedArg::bytes_mut` refuses a READ argument. A host endpoint refuses
//!   every DEVICE backing; a chip endpoint refuses DEVICE backings of another
//!   `owner_instance_id`. Views resolve to exactly `[byte_offset, byte_offset + extent)`.
//! - **Engine.** `worker.run(|o| ...)` and `worker.submit(..)` run the orchestration on the
//!   caller's thread: `submit_next_level(chip, ..)`, `submit_next_level_group`, `submit_sub`,
//!   `submit_sub_group`, `scope(..)` and `alloc(nbytes)` (a scope-owned FORK_SHM intermediate,
//!   released once the scope's tasks retire, with back-pressure when the arena is full).
//!   Dependencies come from a TensorMap keyed by buffer identity and byte range (the exact box
//!   test where it applies): read-after-write, write-after-write and write-after-read. A failed
//!   task fails its consumers without running them; a dead child fails its task with an endpoint
//!   error and the others keep serving. `RunHandle::wait(timeout)` replays the terminal result.
//!
//! ## Decided differently from the reference, on purpose
//!
//! - OUTPUT needs WRITE at level 3 (the reference lets a READ buffer through and loses the
//!   writes).
//! - A submit refuses any tensor whose buffer is not live on the Worker: a tensor kept past
//!   `release_buffer` would otherwise reach memory that now belongs to another buffer.
//! - Any two arguments of one task that share bytes, one of them written, are refused (the
//!   reference checks each writer only against later arguments).
//! - Write-after-read is tracked; copy requests carry their length.
//! - The reference resolves remote exports N bytes short; here a view resolves to exactly its
//!   extent.
//!
//! ## Not built
//!
//! Levels above 3, remote workers and sidecars, the two-frame pipelined protocol, CTRL_PREPARE
//! and registration after `init` (callables are inherited at fork), SHA-256 digests (the digest
//! is the callable's index and name hash, enough to refuse an unknown one).
//!
//! # Submodules
//!
//! The public items are re-exported here, so every `l3::Item` path names the item whichever
//! file holds it:
//!
//! - `worker` (private): [`Worker`] and [`WorkerConfig`], the lifecycle: forking the children,
//!   start-up, close;
//! - `callable` (private): chip and SUB callables, their ids and the digests task frames name
//!   them by;
//! - `control` (private): the Worker's buffers, device allocations and control-plane copies,
//!   over the control frame;
//! - `orch` (private): runs: [`L3Orch`] (the submit-time argument checks, scopes) and
//!   [`RunHandle`];
//! - `engine` (private): the dependency engine, failure propagation and the scheduler thread;
//! - `mailbox` (private): the mailbox protocol over shared memory and the doorbells;
//! - `child` (private): what a forked child runs;
//! - [`buffer`]: buffers, their backings and life;
//! - [`import`]: the import registry a child materializes wire tensors through.
//! - `tensormap` (crate): the dependency map by identity and byte range, shared with level 4.
//!
//! The OS calls under all of this (fork, mmap, futex) are in `crate::os`.

pub mod buffer;
mod callable;
mod child;
mod control;
mod engine;
pub mod import;
mod mailbox;
mod orch;
pub(crate) mod tensormap;
mod worker;

pub use buffer::{shm_prefix, Buffer};
pub use callable::{ChipCallableId, SubCallableId, SubFn};
pub use engine::{LaneKind, RunSummary};
pub use import::{
    ForkRanges, ImportContext, ImportError, ImportRegistry, MappedArg, MappedArgs, ReadOnlyArg,
};
pub use orch::{L3Orch, RunHandle};
pub use worker::{Lifecycle, Worker, WorkerConfig};

use simpler_core::mailbox::{ConfigError, CopyRequestError};
use simpler_core::{AccessMode, DescriptorError, TensorArgType, TensorError};
use std::fmt;

/// Everything that can go wrong at level 3. Each refusal names its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L3Error {
    /// An OS call failed.
    Os(String),
    /// The call needs an initialized Worker.
    NotInitialized,
    /// `init()` ran already (or the Worker closed).
    AlreadyInitialized,
    /// The Worker is closed.
    Closed,
    /// Callables are registered before `init()`: children inherit them across the fork.
    RegisterAfterInit,
    /// A child did not start.
    ChildStartup {
        /// The child, as `chip i` or `sub-worker j`.
        endpoint: String,
        /// Its INIT_FAILED message, how it ended, or the missed start-up deadline.
        message: String,
    },
    /// `close()` ran out of budget; the Worker can be closed again.
    CloseTimeout {
        /// What was still pending.
        pending: String,
    },
    /// `create_buffer(0)`.
    ZeroSizeBuffer,
    /// At level 3 a buffer needs a forked consumer: the Worker has no chip or SUB child.
    NoBufferConsumer,
    /// A FORK_COW buffer is a snapshot children inherit at fork: it must exist before `init()`.
    ForkCowAfterInit,
    /// FORK_COW grants READ only.
    ForkCowAccess,
    /// The FORK_SHM arena has no room.
    ArenaFull {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The backend cannot be created by `create_buffer`.
    UnsupportedBackend {
        /// The backend's raw `BackendKind` value.
        backend: u8,
    },
    /// The buffer was released.
    BufferClosed {
        /// The released buffer's id.
        buffer_id: u64,
    },
    /// The buffer is not one of this Worker's live buffers.
    UnknownBuffer {
        /// The id the buffer handle carries.
        buffer_id: u64,
    },
    /// `release_buffer` while a run in flight names the buffer.
    BufferInUse {
        /// The buffer's id.
        buffer_id: u64,
    },
    /// A task names a buffer that is not live on this Worker (released, out of its scope, or
    /// never this Worker's), or a descriptor that differs from the live one.
    DeadBuffer {
        /// The tensor's index.
        index: usize,
        /// The buffer it names.
        buffer_id: u64,
    },
    /// Host access to a device buffer (use `copy_from`).
    DeviceBufferAccess {
        /// The device buffer's id.
        buffer_id: u64,
    },
    /// A host access outside the buffer.
    BufferRange {
        /// The access's first byte, from the buffer's start.
        offset: u64,
        /// Bytes the access covers.
        len: u64,
        /// The buffer's size in bytes.
        nbytes: u64,
    },
    /// A descriptor failed validation.
    Descriptor(DescriptorError),
    /// A tensor failed the wire gate.
    Tensor(TensorError),
    /// The task arguments were refused.
    Args(crate::TaskArgsError),
    /// The call config was refused.
    Config(ConfigError),
    /// No chip with this index.
    UnknownChip {
        /// The index given.
        chip: usize,
        /// Chips the Worker has.
        chips: usize,
    },
    /// No callable behind the id.
    UnknownCallable,
    /// A chip appears twice in one group.
    DuplicateChip {
        /// The chip index named more than once.
        chip: usize,
    },
    /// A group's worker list and argument list differ in length (or are empty).
    GroupShape {
        /// Workers given.
        workers: usize,
        /// Argument lists given.
        args: usize,
    },
    /// The Worker has no SUB child (or too few for the group).
    NoSubWorkers {
        /// SUB children needed.
        needed: usize,
        /// SUB children the Worker has.
        have: usize,
    },
    /// A scene needs more chip children than it was given.
    TooFewChips {
        /// Chip children needed.
        needed: usize,
        /// Chip children given.
        have: usize,
    },
    /// A DEVICE tensor given to a SUB task.
    DeviceToSub {
        /// The tensor's index.
        index: usize,
    },
    /// A DEVICE tensor that does not name a live allocation of the target chip.
    DeviceProvenance {
        /// The tensor's index.
        index: usize,
        /// What is wrong with the address (another Worker's, another chip's, a different
        /// size, not an allocation's start).
        reason: String,
    },
    /// A REMOTE_SIDECAR tensor given to a local worker.
    RemoteSidecar {
        /// The tensor's index.
        index: usize,
    },
    /// The tag asks for access the buffer does not grant.
    Access {
        /// The tensor's index.
        index: usize,
        /// The tensor's tag.
        tag: TensorArgType,
        /// What the buffer grants.
        granted: AccessMode,
    },
    /// Two arguments of one task share bytes and at least one writes.
    OverlappingWrites {
        /// The earlier tensor's index.
        first: usize,
        /// The later tensor's index.
        second: usize,
    },
    /// The arguments do not fit the callable's signature.
    Signature {
        /// Tensors the signature names.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A tag disagrees with the callable's direction for that tensor.
    DirectionTag {
        /// The tensor's index.
        index: usize,
        /// The tag given.
        tag: TensorArgType,
    },
    /// The slot ring stayed full.
    SlotTimeout {
        /// Task slots in the ring ([`WorkerConfig::ring_slots`]).
        slots: usize,
    },
    /// Submit outside a run.
    NoRun,
    /// A control-plane copy was refused on the device side.
    CopyDevice {
        /// Which device-side check failed.
        reason: String,
    },
    /// A control-plane copy was refused on the host side.
    CopyHost {
        /// Which host-side check failed.
        reason: String,
    },
    /// A control request was refused by its child.
    Control {
        /// The child, as `chip i` or `sub-worker j`.
        endpoint: String,
        /// The child's error message, or why the request never got an answer.
        message: String,
    },
    /// A copy request was refused before use.
    CopyRequest(CopyRequestError),
    /// A task failed in its child.
    TaskFailed {
        /// The task's id.
        task: u64,
        /// Where it ran.
        endpoint: String,
        /// The child's message.
        message: String,
    },
    /// The child running (or meant to run) a task is gone.
    Endpoint {
        /// The task's id.
        task: u64,
        /// The child that ran (or was to run) it.
        endpoint: String,
        /// How it ended.
        message: String,
    },
    /// A task did not run because a producer failed.
    Upstream {
        /// The skipped task's id.
        task: u64,
        /// The failed producer.
        producer: u64,
    },
    /// The orchestration function failed.
    Orchestration(String),
    /// `wait` timed out; the run goes on.
    WaitTimeout,
}

impl fmt::Display for L3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Os(m) => write!(f, "OS error: {m}"),
            Self::NotInitialized => f.write_str("the Worker is not initialized"),
            Self::AlreadyInitialized => f.write_str("the Worker was initialized already"),
            Self::Closed => f.write_str("the Worker is closed"),
            Self::RegisterAfterInit => {
                f.write_str("callables must be registered before init(): children inherit them at fork")
            }
            Self::ChildStartup { endpoint, message } => {
                write!(f, "{endpoint} did not start: {message}")
            }
            Self::CloseTimeout { pending } => {
                write!(f, "close() ran out of budget ({pending}); close again")
            }
            Self::ZeroSizeBuffer => f.write_str("create_buffer(0): a buffer needs at least one byte"),
            Self::NoBufferConsumer => f.write_str(
                "a level-3 buffer needs a forked consumer, and this Worker has no chip or SUB child",
            ),
            Self::ForkCowAfterInit => f.write_str(
                "FORK_COW buffers are inherited at fork and must be created before init()",
            ),
            Self::ForkCowAccess => f.write_str("FORK_COW buffers grant READ only"),
            Self::ArenaFull { bytes } => write!(f, "the FORK_SHM arena has no room for {bytes} bytes"),
            Self::UnsupportedBackend { backend } => {
                write!(f, "create_buffer cannot make backend {backend}")
            }
            Self::BufferClosed { buffer_id } => write!(f, "buffer {buffer_id} was released"),
            Self::UnknownBuffer { buffer_id } => {
                write!(f, "buffer {buffer_id} is not a live buffer of this Worker")
            }
            Self::BufferInUse { buffer_id } => {
                write!(f, "buffer {buffer_id} is named by a run in flight")
            }
            Self::DeadBuffer { index, buffer_id } => write!(
                f,
                "tensor {index} names buffer {buffer_id}, which is not a live buffer of this Worker"
            ),
            Self::DeviceBufferAccess { buffer_id } => {
                write!(f, "buffer {buffer_id} is device memory; use copy_from / copy_to")
            }
            Self::BufferRange { offset, len, nbytes } => write!(
                f,
                "access of {len} bytes at {offset} is outside the buffer's {nbytes}"
            ),
            Self::Descriptor(e) => write!(f, "descriptor: {e}"),
            Self::Tensor(e) => write!(f, "tensor: {e}"),
            Self::Args(e) => write!(f, "task arguments: {e}"),
            Self::Config(e) => write!(f, "call config: {e}"),
            Self::UnknownChip { chip, chips } => {
                write!(f, "no chip {chip}: the Worker has {chips}")
            }
            Self::UnknownCallable => f.write_str("no callable behind this id"),
            Self::DuplicateChip { chip } => write!(f, "chip {chip} appears twice in one group"),
            Self::GroupShape { workers, args } => write!(
                f,
                "a group needs one argument list per worker (got {workers} workers, {args} lists)"
            ),
            Self::NoSubWorkers { needed, have } => {
                write!(f, "needs {needed} SUB workers, the Worker has {have}")
            }
            Self::TooFewChips { needed, have } => {
                write!(f, "needs {needed} chips, {have} given")
            }
            Self::DeviceToSub { index } => write!(
                f,
                "tensor {index} is a DEVICE backing; SUB workers run on the host"
            ),
            Self::DeviceProvenance { index, reason } => write!(f, "tensor {index}: {reason}"),
            Self::RemoteSidecar { index } => write!(
                f,
                "tensor {index} is a REMOTE_SIDECAR placeholder; local workers need a real backing"
            ),
            Self::Access {
                index,
                tag,
                granted,
            } => write!(f, "tensor {index}: tag {tag:?} needs more than {granted:?} grants"),
            Self::OverlappingWrites { first, second } => write!(
                f,
                "tensors {first} and {second} share bytes and at least one of them is written"
            ),
            Self::Signature { expected, got } => {
                write!(f, "the callable takes {expected} tensors, got {got}")
            }
            Self::DirectionTag { index, tag } => write!(
                f,
                "tensor {index}: tag {tag:?} does not match the callable's direction"
            ),
            Self::SlotTimeout { slots } => write!(f, "all {slots} task slots stayed busy"),
            Self::NoRun => f.write_str("submit outside a run"),
            Self::CopyDevice { reason } => write!(f, "copy refused (device side): {reason}"),
            Self::CopyHost { reason } => write!(f, "copy refused (host side): {reason}"),
            Self::Control { endpoint, message } => write!(f, "{endpoint} refused: {message}"),
            Self::CopyRequest(_) => f.write_str("copy request refused"),
            Self::TaskFailed {
                task,
                endpoint,
                message,
            } => write!(f, "task {task} failed on {endpoint}: {message}"),
            Self::Endpoint {
                task,
                endpoint,
                message,
            } => write!(f, "task {task}: endpoint {endpoint} failed: {message}"),
            Self::Upstream { task, producer } => {
                write!(f, "task {task} skipped: its producer task {producer} failed")
            }
            Self::Orchestration(m) => write!(f, "orchestration failed: {m}"),
            Self::WaitTimeout => f.write_str("wait timed out; the run is still in flight"),
        }
    }
}

impl std::error::Error for L3Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Descriptor(e) => Some(e),
            Self::Tensor(e) => Some(e),
            Self::Args(e) => Some(e),
            Self::Config(e) => Some(e),
            Self::CopyRequest(e) => Some(e),
            _ => None,
        }
    }
}
