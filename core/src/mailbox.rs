//! The L3 mailbox: the shared-memory region through which a host process hands work to a
//! chip or sub-worker child, laid out byte for byte as the reference's.
//!
//! One region of [`MAILBOX_SIZE`] bytes per child: frame 0 is the control frame, frames 1 and 2
//! are task frames. Every frame has the same relative layout:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `state` ([`MailboxState`]) |
//! | 4 | 4 | `error` (0 ok) |
//! | 8 | 8 | task frames: reserved; control frame: the sub-command ([`ControlCommand`]) |
//! | 16 | 1144 | [`CallConfig`] |
//! | 1160 | 16 | [`PipelineSlotLease`] |
//! | 1176 | 32 | task: the callable digest; control: a name slot, or a [`ControlCopyRequest`] (184 B) |
//! | 1208 | ≤ 64,016 | task: the `TaskArgs` blob |
//! | 65,224 | 8 | the sticky shutdown word (0 → 1, parent only) |
//! | 65,232 | 8 | frame protocol version ([`MAILBOX_TASK_PROTOCOL_VERSION`]) |
//! | 65,240 | 8 | run id |
//! | 65,248 | 8 | lease slot id |
//! | 65,256 | 8 | lease generation |
//! | 65,264 | 8 | dispatch id |
//! | 65,272 | 4 | the sticky acceptance word (1) |
//! | 65,276 | 4 | preparation disposition |
//! | 65,280 | 256 | NUL-terminated error message |
//!
//! This module fixes the layout, the plain-data records that travel in it, with their
//! validation, and the handshake on a frame's state and error words ([`FrameWords`]); the
//! shared-memory mapping and the frame's bytes belong to the host.
//!
//! ## The handshake
//!
//! ```text
//!  task frame      (1) parent posts a task      (2) child ran it
//!        IDLE ─────────────────────▶ TASK_READY ───────────────▶ TASK_DONE
//!         ▲                                                          │
//!         └──────────────────────────────────────────────────────────┘
//!                          (3) parent collected the reply
//!
//!  control frame   (4) child started            (5) parent saw it
//!        IDLE ─────────────────────▶ INIT_READY ───────────────▶ IDLE
//!          └──────────────────────▶ INIT_FAILED (final: the parent kills the children)
//!                  (6) parent posts a request   (7) child answered         (8) parent read it
//!        IDLE ─────────────────────▶ CONTROL_REQUEST ───────────▶ CONTROL_DONE ──────────▶ IDLE
//! ```
//!
//! | # | transition | performed by | host function |
//! |---|---|---|---|
//! | 1 | IDLE → TASK_READY | the parent's scheduler thread | `l3::engine` `launch` |
//! | 2 | TASK_READY → TASK_DONE | the child | `l3::child` `serve` |
//! | 3 | TASK_DONE → IDLE | the parent's scheduler thread | `l3::engine` `collect` |
//! | 4 | IDLE → INIT_READY / INIT_FAILED | the child, once, at start | `l3::child` `serve` |
//! | 5 | INIT_READY → IDLE | the parent, in `init` | `l3::worker` |
//! | 6 | IDLE → CONTROL_REQUEST | the parent, one request at a time | `l3::worker` `control` |
//! | 7 | CONTROL_REQUEST → CONTROL_DONE | the child | `l3::child` `serve` |
//! | 8 | CONTROL_DONE → IDLE | the parent | `l3::worker` `control` |
//!
//! The word alternates between the two sides: only the side whose turn the current state says
//! it is writes it, so every [`FrameWords::publish`] finds the state its transition leaves, and
//! reports any other as a [`SkippedTransition`]. After each publish the writer rings the other
//! side's doorbell ([`crate::doorbell`]). The frame's other bytes belong to the side whose turn
//! it is; the sticky shutdown word, set by the parent alone, is outside the handshake.
//!
//! ## Memory ordering
//!
//! The state word is the publication. A side writes the frame's bytes and its error word, then
//! publishes the state with release ordering; the other side reads the state with acquire
//! ordering and, having seen it, reads those bytes and that word. So the error word itself is
//! relaxed: the state orders it.

use crate::buffer::{BufferDescriptor, DescriptorError};
use crate::limits::{MAILBOX_ARGS_CAPACITY, MAILBOX_FRAME_SIZE, MAILBOX_OFF_SHUTDOWN};
use crate::ring::MAX_RINGS;
use crate::sync::{AtomicU32, Ordering};
use bytemuck::{Pod, Zeroable};
use core::fmt;
use core::mem::size_of;
use static_assertions::const_assert_eq;

/// Frames per mailbox: control + two task frames.
pub const MAILBOX_FRAMES: usize = 3;
/// Bytes of one child's mailbox.
pub const MAILBOX_SIZE: usize = MAILBOX_FRAMES * MAILBOX_FRAME_SIZE;
/// Offset of a frame's state word ([`MailboxState`]).
pub const MAILBOX_OFF_STATE: usize = 0;
/// Offset of a frame's error word (0 ok).
pub const MAILBOX_OFF_ERROR: usize = 4;
/// Offset of the sub-command word (control frame).
pub const MAILBOX_OFF_COMMAND: usize = 8;
/// Offset of the [`CallConfig`].
pub const MAILBOX_OFF_CONFIG: usize = 16;
/// Offset of the [`PipelineSlotLease`].
pub const MAILBOX_OFF_LEASE: usize = 1_160;
/// Offset of the digest (task) or request (control) slot.
pub const MAILBOX_OFF_ARGS: usize = 1_176;
/// Offset of the frame protocol version.
pub const MAILBOX_OFF_PROTOCOL: usize = 65_232;
/// Offset of the run id.
pub const MAILBOX_OFF_RUN_ID: usize = 65_240;
/// Offset of the lease slot id.
pub const MAILBOX_OFF_LEASE_SLOT: usize = 65_248;
/// Offset of the lease generation.
pub const MAILBOX_OFF_LEASE_GENERATION: usize = 65_256;
/// Offset of the dispatch id.
pub const MAILBOX_OFF_DISPATCH_ID: usize = 65_264;
/// Offset of the sticky acceptance word.
pub const MAILBOX_OFF_ACCEPTED: usize = 65_272;
/// Offset of the preparation disposition.
pub const MAILBOX_OFF_DISPOSITION: usize = 65_276;
/// Offset of the error message.
pub const MAILBOX_OFF_ERROR_MSG: usize = 65_280;
/// Bytes of the error message.
pub const MAILBOX_ERROR_MSG_SIZE: usize = 256;
/// Room for a control request: from the request slot to the shutdown word.
pub const MAILBOX_CONTROL_ROOM: usize = MAILBOX_OFF_SHUTDOWN - MAILBOX_OFF_ARGS;
/// The task frame protocol this layout is.
pub const MAILBOX_TASK_PROTOCOL_VERSION: u64 = 3;

const_assert_eq!(MAILBOX_SIZE, 196_608);
const_assert_eq!(
    MAILBOX_OFF_ERROR_MSG + MAILBOX_ERROR_MSG_SIZE,
    MAILBOX_FRAME_SIZE
);
const_assert_eq!(MAILBOX_CONTROL_ROOM, 64_048);
const_assert_eq!(
    MAILBOX_OFF_CONFIG + size_of::<CallConfig>(),
    MAILBOX_OFF_LEASE
);
const_assert_eq!(
    MAILBOX_OFF_LEASE + size_of::<PipelineSlotLease>(),
    MAILBOX_OFF_ARGS
);
const_assert_eq!(
    MAILBOX_OFF_ARGS + 32 + MAILBOX_ARGS_CAPACITY,
    MAILBOX_OFF_SHUTDOWN
);
static_assertions::const_assert!(size_of::<ControlCopyRequest>() <= MAILBOX_CONTROL_ROOM);

/// A frame's state word.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxState {
    /// Nothing pending.
    Idle = 0,
    /// A task is ready for the child.
    TaskReady = 1,
    /// The child finished the task.
    TaskDone = 2,
    /// The child is asked to stop.
    Shutdown = 3,
    /// A control request is ready.
    ControlRequest = 4,
    /// The child finished the control request.
    ControlDone = 5,
    /// The child started.
    InitReady = 6,
    /// The child could not start.
    InitFailed = 7,
    /// A successor task is staged.
    FrameStaged = 8,
    /// The child launched the task.
    TaskLaunched = 9,
    /// The task failed.
    TaskFailed = 10,
    /// A staged frame is activated.
    Activate = 11,
    /// A frame is prepared.
    PrepareReady = 12,
}

impl MailboxState {
    /// Decodes a state word; `None` for unknown values.
    pub const fn from_raw(raw: i32) -> Option<Self> {
        Some(match raw {
            0 => Self::Idle,
            1 => Self::TaskReady,
            2 => Self::TaskDone,
            3 => Self::Shutdown,
            4 => Self::ControlRequest,
            5 => Self::ControlDone,
            6 => Self::InitReady,
            7 => Self::InitFailed,
            8 => Self::FrameStaged,
            9 => Self::TaskLaunched,
            10 => Self::TaskFailed,
            11 => Self::Activate,
            12 => Self::PrepareReady,
            _ => return None,
        })
    }
}

impl MailboxState {
    /// Whether the handshake moves a frame from `from` to `self` (the module's diagram).
    pub const fn follows(self, from: Self) -> bool {
        use MailboxState::*;
        matches!(
            (from, self),
            (Idle, TaskReady)
                | (TaskReady, TaskDone)
                | (TaskDone, Idle)
                | (Idle, InitReady | InitFailed)
                | (InitReady, Idle)
                | (Idle, ControlRequest)
                | (ControlRequest, ControlDone)
                | (ControlDone, Idle)
        )
    }
}

/// A publish that found the frame in a state its transition does not leave: a side wrote the
/// word out of turn, or a transition was skipped. The word holds the new state regardless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkippedTransition {
    /// The raw state the word held.
    pub from: u32,
    /// The state the publish wrote, which the word now holds.
    pub to: MailboxState,
}

impl fmt::Display for SkippedTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match MailboxState::from_raw(self.from as i32) {
            Some(from) => write!(
                f,
                "mailbox state {from:?} -> {:?} is no transition",
                self.to
            ),
            None => write!(f, "mailbox state {} (unknown) -> {:?}", self.from, self.to),
        }
    }
}

impl core::error::Error for SkippedTransition {}

/// A frame's state and error words: the handshake between the parent and a child (see the
/// module's diagram and memory-ordering sections). Both words are written by the side whose
/// turn it is and read by the other.
pub struct FrameWords<'a> {
    state: &'a AtomicU32,
    error: &'a AtomicU32,
}

impl<'a> FrameWords<'a> {
    /// The frame whose state word ([`MAILBOX_OFF_STATE`]) is `state` and error word
    /// ([`MAILBOX_OFF_ERROR`]) is `error`.
    pub const fn new(state: &'a AtomicU32, error: &'a AtomicU32) -> Self {
        Self { state, error }
    }

    /// The raw state (acquire: the bytes written before it was published are visible).
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Whether the frame is in `state` (acquire, as [`Self::state`]).
    pub fn is(&self, state: MailboxState) -> bool {
        self.state() == state as i32 as u32
    }

    /// Publishes `to` (release: every byte written before is visible to a reader that observes
    /// it), and checks that the frame was in a state `to` follows.
    pub fn publish(&self, to: MailboxState) -> Result<(), SkippedTransition> {
        let from = self.state.swap(to as i32 as u32, Ordering::Release);
        match MailboxState::from_raw(from as i32) {
            Some(f) if to.follows(f) => Ok(()),
            _ => Err(SkippedTransition { from, to }),
        }
    }

    /// Clears the error word, as a side posts a request (before publishing it).
    pub fn clear_error(&self) {
        self.error.store(0, Ordering::Relaxed);
    }

    /// Sets the error word of a reply (before publishing it; 0 ok).
    pub fn set_error(&self, code: u32) {
        self.error.store(code, Ordering::Relaxed);
    }

    /// The error word of a reply, read after its state was observed.
    pub fn error(&self) -> u32 {
        self.error.load(Ordering::Relaxed)
    }
}

/// The control frame's sub-commands this project uses.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlCommand {
    /// Allocate device memory.
    Malloc = 0,
    /// Free device memory.
    Free = 1,
    /// Copy host → device ([`ControlCopyRequest`]).
    CopyTo = 2,
    /// Copy device → host ([`ControlCopyRequest`]).
    CopyFrom = 3,
    /// Prepare a callable by digest.
    Prepare = 4,
    /// Release an imported buffer.
    ImportRelease = 13,
}

/// Ring sizes a run asks for: per ring, 0 means "the default".
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RuntimeEnv {
    /// Task window per ring (a power of two in [4, i32::MAX], or 0).
    pub ring_task_window: [u64; MAX_RINGS],
    /// Heap bytes per ring (at least 1024, or 0).
    pub ring_heap: [u64; MAX_RINGS],
    /// Dependency-pool entries per ring ([4, i32::MAX], or 0).
    pub ring_dep_pool: [u64; MAX_RINGS],
}

crate::assert_layout!(RuntimeEnv, size = 96);

/// Bytes of the diagnostic output prefix.
pub const OUTPUT_PREFIX_SIZE: usize = 1024;

/// A run's configuration, packed as it travels in a frame. 1144 bytes.
#[repr(C, packed)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub struct CallConfig {
    /// AICPU threads (0 = the platform's default).
    pub aicpu_thread_num: i32,
    /// Record the chip swimlane.
    pub enable_chip_swimlane: i32,
    /// Dump task arguments.
    pub enable_dump_args: i32,
    /// Collect PMU counters.
    pub enable_pmu: i32,
    /// Record the dependency graph.
    pub enable_dep_gen: i32,
    /// Collect scope statistics.
    pub enable_scope_stats: i32,
    /// Ring sizes the run asks for (0 per field: the default).
    pub runtime_env: RuntimeEnv,
    /// Where diagnostics go: a NUL-terminated path prefix.
    pub output_prefix: [u8; OUTPUT_PREFIX_SIZE],
}

crate::assert_layout!(CallConfig, size = 1144, { runtime_env: 24, output_prefix: 120 });

impl fmt::Debug for CallConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (threads, env) = (self.aicpu_thread_num, self.runtime_env);
        f.debug_struct("CallConfig")
            .field("aicpu_thread_num", &threads)
            .field("runtime_env", &env)
            .finish_non_exhaustive()
    }
}

/// A configuration that must be refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A diagnostic is switched on but there is no output prefix.
    DiagnosticsWithoutPrefix,
    /// A task window that is not 0 or a power of two in [4, i32::MAX].
    TaskWindow {
        /// Index of the ring whose size is refused, `0..MAX_RINGS`.
        ring: usize,
        /// The size given for it.
        value: u64,
    },
    /// A heap that is not 0 or at least 1024 bytes.
    Heap {
        /// Index of the ring whose size is refused, `0..MAX_RINGS`.
        ring: usize,
        /// The size given for it.
        value: u64,
    },
    /// A dependency pool that is not 0 or in [4, i32::MAX].
    DepPool {
        /// Index of the ring whose size is refused, `0..MAX_RINGS`.
        ring: usize,
        /// The size given for it.
        value: u64,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::DiagnosticsWithoutPrefix => {
                f.write_str("a diagnostic is enabled but output_prefix is empty")
            }
            Self::TaskWindow { ring, value } => write!(
                f,
                "ring {ring} task window {value} is not 0 or a power of two in [4, 2^31)"
            ),
            Self::Heap { ring, value } => {
                write!(
                    f,
                    "ring {ring} heap {value} is not 0 or at least 1024 bytes"
                )
            }
            Self::DepPool { ring, value } => {
                write!(
                    f,
                    "ring {ring} dependency pool {value} is not 0 or in [4, 2^31)"
                )
            }
        }
    }
}

impl core::error::Error for ConfigError {}

impl CallConfig {
    /// Every check of the reference's `validate()`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let diagnostics = [
            self.enable_chip_swimlane,
            self.enable_dump_args,
            self.enable_pmu,
            self.enable_dep_gen,
            self.enable_scope_stats,
        ];
        if diagnostics.iter().any(|&d| d != 0) && self.output_prefix[0] == 0 {
            return Err(ConfigError::DiagnosticsWithoutPrefix);
        }
        let env = self.runtime_env;
        let (windows, heaps, pools) = (env.ring_task_window, env.ring_heap, env.ring_dep_pool);
        let max = i32::MAX as u64;
        for ring in 0..MAX_RINGS {
            let w = windows[ring];
            if w != 0 && (w < 4 || w > max || !w.is_power_of_two()) {
                return Err(ConfigError::TaskWindow { ring, value: w });
            }
            if heaps[ring] != 0 && heaps[ring] < 1024 {
                return Err(ConfigError::Heap {
                    ring,
                    value: heaps[ring],
                });
            }
            let p = pools[ring];
            if p != 0 && !(4..=max).contains(&p) {
                return Err(ConfigError::DepPool { ring, value: p });
            }
        }
        Ok(())
    }
}

/// The pipeline slot a task frame is leased to. 16 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct PipelineSlotLease {
    /// Index of the pipeline slot (task frame) leased; below the child's frame count.
    pub slot_id: u32,
    /// Must be 0.
    pub reserved: u32,
    /// The lease's generation: the id of the run the parent posted the task for.
    pub generation: u64,
}

crate::assert_layout!(PipelineSlotLease, size = 16, { generation: 8 });

/// A lease a child must refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseError {
    /// The reserved word is not 0.
    Reserved {
        /// The reserved word the lease holds.
        value: u32,
    },
    /// The slot is past the child's frames.
    Slot {
        /// The `slot_id` the lease names.
        slot: u32,
        /// Task frames the child has.
        frames: u32,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Reserved { value } => {
                write!(f, "lease reserved word is {value:#x}; it must be 0")
            }
            Self::Slot { slot, frames } => write!(
                f,
                "lease names pipeline slot {slot}; the child has {frames} task frames"
            ),
        }
    }
}

impl core::error::Error for LeaseError {}

impl PipelineSlotLease {
    /// Checks the lease against a child with `frames` task frames.
    pub fn validate(&self, frames: u32) -> Result<(), LeaseError> {
        if self.reserved != 0 {
            return Err(LeaseError::Reserved {
                value: self.reserved,
            });
        }
        if self.slot_id >= frames {
            return Err(LeaseError::Slot {
                slot: self.slot_id,
                frames,
            });
        }
        Ok(())
    }
}

/// A control-plane copy between two buffers, both named by descriptor. 184 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ControlCopyRequest {
    /// Where the bytes go (the device for COPY_TO, the host for COPY_FROM).
    pub dst: BufferDescriptor,
    /// Where they come from.
    pub src: BufferDescriptor,
    /// Bytes to copy, from the start of each buffer; at most either descriptor's `nbytes`.
    pub nbytes: u64,
}

crate::assert_layout!(ControlCopyRequest, size = 184, { dst: 0, src: 88, nbytes: 176 });

/// A copy request a child must refuse before acting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyRequestError {
    /// The region is shorter than a request.
    Truncated {
        /// Length of the region given, in bytes.
        len: usize,
    },
    /// The destination descriptor is invalid.
    Dst(DescriptorError),
    /// The source descriptor is invalid.
    Src(DescriptorError),
}

impl fmt::Display for CopyRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { len } => write!(
                f,
                "copy request region is {len} bytes; a request takes {}",
                size_of::<ControlCopyRequest>()
            ),
            Self::Dst(_) => f.write_str("copy request's destination descriptor is invalid"),
            Self::Src(_) => f.write_str("copy request's source descriptor is invalid"),
        }
    }
}

impl core::error::Error for CopyRequestError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Truncated { .. } => None,
            Self::Dst(e) | Self::Src(e) => Some(e),
        }
    }
}

impl ControlCopyRequest {
    /// Reads a request from a control frame's request slot and validates both descriptors.
    /// This is the only way request bytes become a request.
    pub fn read(bytes: &[u8]) -> Result<Self, CopyRequestError> {
        let raw = bytes
            .get(..size_of::<Self>())
            .ok_or(CopyRequestError::Truncated { len: bytes.len() })?;
        let req: Self = bytemuck::pod_read_unaligned(raw);
        req.dst.validate().map_err(CopyRequestError::Dst)?;
        req.src.validate().map_err(CopyRequestError::Src)?;
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arg::AccessMode;
    use crate::buffer::{AddressSpace, BackendKind, CanonicalIdentity};

    fn desc(id: u64) -> BufferDescriptor {
        BufferDescriptor::new(
            CanonicalIdentity::new([9; 8], id, 1),
            AddressSpace::Host,
            AccessMode::ReadWrite,
            BackendKind::PosixShm,
            4096,
            b"psm_copy",
        )
        .unwrap()
    }

    #[test]
    fn a_copy_request_validates_both_descriptors() {
        let req = ControlCopyRequest {
            dst: desc(1),
            src: desc(2),
            nbytes: 4096,
        };
        let bytes = bytemuck::bytes_of(&req);
        assert_eq!(ControlCopyRequest::read(bytes).unwrap().nbytes, 4096);
        let mut bad = req;
        bad.src.magic = 0;
        assert_eq!(
            ControlCopyRequest::read(bytemuck::bytes_of(&bad)).err(),
            Some(CopyRequestError::Src(DescriptorError::Magic { value: 0 }))
        );
        let mut bad = req;
        bad.dst.identity.generation = 0;
        assert_eq!(
            ControlCopyRequest::read(bytemuck::bytes_of(&bad)).err(),
            Some(CopyRequestError::Dst(DescriptorError::ZeroGeneration))
        );
        assert_eq!(
            ControlCopyRequest::read(&bytes[..183]).err(),
            Some(CopyRequestError::Truncated { len: 183 })
        );
    }

    #[test]
    fn call_config_validation_matches_the_reference() {
        let mut c = CallConfig::zeroed();
        assert_eq!(c.validate(), Ok(()));
        c.enable_pmu = 1;
        assert_eq!(c.validate(), Err(ConfigError::DiagnosticsWithoutPrefix));
        c.output_prefix[0] = b'/';
        assert_eq!(c.validate(), Ok(()));
        let mut env = c.runtime_env;
        env.ring_task_window[2] = 6;
        c.runtime_env = env;
        assert_eq!(
            c.validate(),
            Err(ConfigError::TaskWindow { ring: 2, value: 6 })
        );
        env.ring_task_window[2] = 8;
        env.ring_heap[1] = 1023;
        c.runtime_env = env;
        assert_eq!(
            c.validate(),
            Err(ConfigError::Heap {
                ring: 1,
                value: 1023
            })
        );
        env.ring_heap[1] = 1024;
        env.ring_dep_pool[3] = 3;
        c.runtime_env = env;
        assert_eq!(
            c.validate(),
            Err(ConfigError::DepPool { ring: 3, value: 3 })
        );
        env.ring_dep_pool[3] = 1 << 31;
        c.runtime_env = env;
        assert_eq!(
            c.validate(),
            Err(ConfigError::DepPool {
                ring: 3,
                value: 1 << 31
            })
        );
    }

    #[test]
    fn leases_are_checked() {
        let lease = PipelineSlotLease {
            slot_id: 1,
            reserved: 0,
            generation: 7,
        };
        assert_eq!(lease.validate(2), Ok(()));
        assert_eq!(
            lease.validate(1),
            Err(LeaseError::Slot { slot: 1, frames: 1 })
        );
        let bad = PipelineSlotLease {
            reserved: 5,
            ..lease
        };
        assert_eq!(bad.validate(2), Err(LeaseError::Reserved { value: 5 }));
        assert_eq!(MailboxState::from_raw(8), Some(MailboxState::FrameStaged));
        assert_eq!(MailboxState::from_raw(13), None);
    }

    #[test]
    fn publishing_checks_the_transition() {
        use MailboxState::*;
        let (state, error) = (AtomicU32::new(0), AtomicU32::new(0));
        let frame = FrameWords::new(&state, &error);
        for to in [TaskReady, TaskDone, Idle, ControlRequest, ControlDone, Idle] {
            assert_eq!(frame.publish(to), Ok(()), "-> {to:?}");
            assert!(frame.is(to));
        }
        assert_eq!(
            frame.publish(TaskDone),
            Err(SkippedTransition {
                from: Idle as u32,
                to: TaskDone
            })
        );
        assert!(
            frame.is(TaskDone),
            "the word holds the new state regardless"
        );
        assert_eq!(
            frame.publish(TaskReady),
            Err(SkippedTransition {
                from: TaskDone as u32,
                to: TaskReady
            })
        );
        state.store(99, Ordering::Relaxed);
        assert_eq!(
            frame.publish(Idle),
            Err(SkippedTransition { from: 99, to: Idle })
        );
        assert!(!Idle.follows(InitFailed) && !Shutdown.follows(Idle));
        frame.set_error(7);
        assert_eq!(frame.error(), 7);
        frame.clear_error();
        assert_eq!(frame.error(), 0);
    }
}
