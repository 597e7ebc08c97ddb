//! The mailbox protocol over shared memory, and the doorbells that wake its two sides.
//!
//! A [`Mailbox`] is one `MAP_SHARED` region of [`MAILBOX_SIZE`] bytes per child, laid out as
//! `simpler_core::mailbox` fixes it. The parent writes a request into a frame, then publishes
//! the frame's state word with release ordering and rings the child's doorbell; the child does
//! the work, writes the error word and message, publishes the reply state and rings the
//! scheduler's doorbell. Only this module reads or writes frame bytes. The state and error
//! words follow core's handshake ([`FrameWords`]), and the bells core's [`Doorbell`] over the
//! kernel's futex, so the loom model `core/tests/loom_mailbox.rs` checks the same source.
//!
//! [`Bells`] are futex words in one shared page: word 0 wakes the parent's scheduler (children
//! ring it when a task finishes; the orchestrator rings it on submit), word `1 + i` wakes
//! child `i` (the parent rings it after posting a task, a control request or shutdown). A
//! waiter spins briefly on its word, then blocks in the kernel: nothing on the dispatch path
//! sleeps.

use crate::os::{futex_wait, futex_wake, Mapping, Region};
use simpler_core::doorbell::{Doorbell, Futex};
use simpler_core::limits::{MAILBOX_ARGS_CAPACITY, MAILBOX_FRAME_SIZE, MAILBOX_OFF_SHUTDOWN};
use simpler_core::mailbox::{
    CallConfig, FrameWords, MailboxState, PipelineSlotLease, MAILBOX_ERROR_MSG_SIZE,
    MAILBOX_OFF_ACCEPTED, MAILBOX_OFF_ARGS, MAILBOX_OFF_COMMAND, MAILBOX_OFF_CONFIG,
    MAILBOX_OFF_DISPATCH_ID, MAILBOX_OFF_ERROR, MAILBOX_OFF_ERROR_MSG, MAILBOX_OFF_LEASE,
    MAILBOX_OFF_PROTOCOL, MAILBOX_OFF_RUN_ID, MAILBOX_OFF_STATE, MAILBOX_SIZE,
    MAILBOX_TASK_PROTOCOL_VERSION,
};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Index of the control frame: requests outside the task path (device malloc and free,
/// copies, import release), one at a time per child.
pub const CONTROL_FRAME: usize = 0;
/// The task frame every endpoint here uses (single-frame protocol).
pub const TASK_FRAME: usize = 1;
/// Where a task frame's args blob starts.
pub const OFF_BLOB: usize = MAILBOX_OFF_ARGS + 32;
/// Control frame: the first argument word.
pub const CTRL_OFF_ARG0: usize = 16;
/// Control frame: the result word.
pub const CTRL_OFF_RESULT: usize = 40;
/// How long a waiter spins on its bell before it blocks in the kernel, by default: long
/// enough to catch the reply to a task it just handed out, short enough not to starve the
/// thread that will ring when the machine has fewer CPUs than runnable threads.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The first part of a spin that never yields the CPU.
pub const PURE_SPIN: Duration = Duration::from_micros(2);

/// One child's mailbox.
#[derive(Debug)]
pub struct Mailbox {
    map: Mapping,
}

impl Mailbox {
    /// A zeroed mailbox (every frame IDLE), shared with children forked afterwards.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            map: Mapping::anon_shared(MAILBOX_SIZE)?,
        })
    }

    fn frame(&self, frame: usize) -> Region {
        self.map
            .region()
            .sub(frame * MAILBOX_FRAME_SIZE, MAILBOX_FRAME_SIZE)
            .expect("frame index is a module constant below MAILBOX_FRAMES")
    }

    fn word(&self, frame: usize, offset: usize) -> &AtomicU32 {
        mapping_atomic(&self.map, frame * MAILBOX_FRAME_SIZE + offset)
    }

    fn words(&self, frame: usize) -> FrameWords<'_> {
        FrameWords::new(
            self.word(frame, MAILBOX_OFF_STATE),
            self.word(frame, MAILBOX_OFF_ERROR),
        )
    }

    /// The state word of `frame`.
    pub fn state(&self, frame: usize) -> u32 {
        self.words(frame).state()
    }

    /// Publishes `state` on `frame` (release: every byte written before is visible to a reader
    /// that observes it).
    pub fn set_state(&self, frame: usize, state: MailboxState) {
        let published = self.words(frame).publish(state);
        debug_assert!(
            published.is_ok(),
            "frame {frame}: {}",
            published.unwrap_err()
        );
    }

    /// Writes a task request into the task frame (not yet published).
    pub fn post_task(
        &self,
        digest: &[u8; 32],
        config: &CallConfig,
        lease: PipelineSlotLease,
        run_id: u64,
        dispatch_id: u64,
        blob: &[u8],
    ) -> bool {
        let f = self.frame(TASK_FRAME);
        if blob.len() > MAILBOX_ARGS_CAPACITY {
            return false;
        }
        f.write(MAILBOX_OFF_CONFIG, bytemuck::bytes_of(config))
            && f.write(MAILBOX_OFF_LEASE, bytemuck::bytes_of(&lease))
            && f.write(MAILBOX_OFF_ARGS, digest)
            && f.write(OFF_BLOB, blob)
            && f.write(
                MAILBOX_OFF_PROTOCOL,
                &MAILBOX_TASK_PROTOCOL_VERSION.to_le_bytes(),
            )
            && f.write(MAILBOX_OFF_RUN_ID, &run_id.to_le_bytes())
            && f.write(MAILBOX_OFF_DISPATCH_ID, &dispatch_id.to_le_bytes())
            && {
                self.words(TASK_FRAME).clear_error();
                self.word(TASK_FRAME, MAILBOX_OFF_ACCEPTED)
                    .store(0, Ordering::Relaxed);
                true
            }
    }

    /// Copies `len` bytes of `frame` from `offset`.
    pub fn read(&self, frame: usize, offset: usize, out: &mut [u8]) -> bool {
        self.frame(frame).read(offset, out)
    }

    /// Writes bytes into `frame` at `offset`.
    pub fn write(&self, frame: usize, offset: usize, data: &[u8]) -> bool {
        self.frame(frame).write(offset, data)
    }

    /// The task frame's args blob region (read in place by the child's decoder).
    ///
    /// # Safety
    ///
    /// Only the child may call it, while the task frame is its own (from observing
    /// `TASK_READY` until it publishes `TASK_DONE`), and it must drop the slice before that
    /// publication: the parent writes the frame's bytes only outside that window.
    #[allow(unsafe_code)]
    pub unsafe fn blob(&self) -> &[u8] {
        // SAFETY: the caller holds the task frame (this function's contract).
        unsafe {
            self.map.bytes(
                TASK_FRAME * MAILBOX_FRAME_SIZE + OFF_BLOB,
                MAILBOX_ARGS_CAPACITY,
            )
        }
        .expect("frame regions lie inside the mailbox mapping")
    }

    /// The run id of the posted task.
    pub fn run_id(&self) -> u64 {
        let mut b = [0u8; 8];
        self.read(TASK_FRAME, MAILBOX_OFF_RUN_ID, &mut b);
        u64::from_le_bytes(b)
    }

    /// Marks the task accepted (the sticky launch acknowledgement).
    pub fn accept(&self) {
        self.word(TASK_FRAME, MAILBOX_OFF_ACCEPTED)
            .store(1, Ordering::Release);
    }

    /// Writes `frame`'s error word and message (before its reply state is published).
    pub fn set_error(&self, frame: usize, code: u32, message: &str) {
        let mut msg = [0u8; MAILBOX_ERROR_MSG_SIZE];
        let mut n = message.len().min(MAILBOX_ERROR_MSG_SIZE - 1);
        while !message.is_char_boundary(n) {
            n -= 1;
        }
        msg[..n].copy_from_slice(&message.as_bytes()[..n]);
        // The message and its terminating NUL only (most replies carry none).
        self.write(frame, MAILBOX_OFF_ERROR_MSG, &msg[..=n]);
        self.words(frame).set_error(code);
    }

    /// `frame`'s error word and message.
    pub fn error(&self, frame: usize) -> (u32, String) {
        let code = self.words(frame).error();
        if code == 0 {
            return (0, String::new());
        }
        let mut msg = [0u8; MAILBOX_ERROR_MSG_SIZE];
        self.read(frame, MAILBOX_OFF_ERROR_MSG, &mut msg);
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        (code, String::from_utf8_lossy(&msg[..end]).into_owned())
    }

    /// Writes a control request (sub-command, first argument) into the control frame.
    pub fn post_control(&self, command: u64, arg0: u64, payload: &[u8]) -> bool {
        self.write(CONTROL_FRAME, MAILBOX_OFF_COMMAND, &command.to_le_bytes())
            && self.write(CONTROL_FRAME, CTRL_OFF_ARG0, &arg0.to_le_bytes())
            && self.write(CONTROL_FRAME, CTRL_OFF_RESULT, &0u64.to_le_bytes())
            && (payload.len() <= MAILBOX_OFF_SHUTDOWN - MAILBOX_OFF_ARGS)
            && self.write(CONTROL_FRAME, MAILBOX_OFF_ARGS, payload)
            && {
                self.words(CONTROL_FRAME).clear_error();
                true
            }
    }

    /// Reads a u64 of the control frame.
    pub fn control_u64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        self.read(CONTROL_FRAME, offset, &mut b);
        u64::from_le_bytes(b)
    }

    /// Sets the sticky shutdown word (parent only; 0 → 1, never back).
    pub fn request_shutdown(&self) {
        self.word(CONTROL_FRAME, MAILBOX_OFF_SHUTDOWN)
            .store(1, Ordering::Release);
    }

    /// Whether shutdown was requested.
    pub fn shutdown_requested(&self) -> bool {
        self.word(CONTROL_FRAME, MAILBOX_OFF_SHUTDOWN)
            .load(Ordering::Acquire)
            != 0
    }

    /// The control frame's request slot (a copy request, a name).
    ///
    /// # Safety
    ///
    /// Only the child may call it, while the control frame is its own (from observing
    /// `CONTROL_REQUEST` until it publishes `CONTROL_DONE`), and it must drop the slice before
    /// that publication: the parent writes the frame's bytes only outside that window (and a
    /// parent that gives up waiting kills the child rather than reuse the frame).
    #[allow(unsafe_code)]
    pub unsafe fn control_slot(&self) -> &[u8] {
        // SAFETY: the caller holds the control frame (this function's contract).
        unsafe {
            self.map.bytes(
                CONTROL_FRAME * MAILBOX_FRAME_SIZE + MAILBOX_OFF_ARGS,
                MAILBOX_OFF_SHUTDOWN - MAILBOX_OFF_ARGS,
            )
        }
        .expect("frame regions lie inside the mailbox mapping")
    }

    /// The task frame's raw header fields the child reads: digest, config, lease.
    pub fn task_header(&self) -> ([u8; 32], CallConfig, PipelineSlotLease) {
        let mut digest = [0u8; 32];
        self.read(TASK_FRAME, MAILBOX_OFF_ARGS, &mut digest);
        let mut cfg = [0u8; core::mem::size_of::<CallConfig>()];
        self.read(TASK_FRAME, MAILBOX_OFF_CONFIG, &mut cfg);
        let mut lease = [0u8; 16];
        self.read(TASK_FRAME, MAILBOX_OFF_LEASE, &mut lease);
        (
            digest,
            bytemuck::pod_read_unaligned(&cfg),
            bytemuck::pod_read_unaligned(&lease),
        )
    }
}

fn mapping_atomic(map: &Mapping, at: usize) -> &AtomicU32 {
    map.atomic_u32(at)
        .expect("state words sit at aligned offsets inside the mapping")
}

/// The kernel's futex on a word in shared memory, which works across processes.
struct SharedFutex;

impl Futex for SharedFutex {
    fn wait(&self, word: &AtomicU32, expected: u32, timeout: Duration) {
        futex_wait(word, expected, timeout);
    }

    fn wake_all(&self, word: &AtomicU32) {
        futex_wake(word);
    }
}

/// The doorbell page: bell 0 for the scheduler, bell `1 + i` for child `i`. Each bell is a
/// cache line holding a sequence word (counts rings; the futex word) and a sleeper count, so a
/// ring costs a system call only when someone is blocked on it ([`Doorbell`]).
#[derive(Debug)]
pub struct Bells {
    map: Mapping,
    /// Where the spin time (in nanoseconds, a u32) lives: in the shared page, so the parent
    /// can change it for every process at once.
    spin_at: usize,
}

/// Index of the scheduler's bell in [`Bells`] (children ring it when they finish, the
/// orchestrator when it submits).
pub const SCHEDULER_BELL: usize = 0;
/// Bytes per bell (one cache line, so two bells never share a line).
const BELL_STRIDE: usize = 64;

impl Bells {
    /// A page of bells for `children` children whose waiters spin for `spin` before blocking.
    pub fn new(children: usize, spin: Duration) -> io::Result<Self> {
        let spin_at = (children + 1) * BELL_STRIDE;
        let len = (spin_at + BELL_STRIDE).div_ceil(4096) * 4096;
        let bells = Self {
            map: Mapping::anon_shared(len)?,
            spin_at,
        };
        bells.set_spin(spin);
        Ok(bells)
    }

    /// Sets how long every waiter (scheduler and children) spins before blocking.
    pub fn set_spin(&self, spin: Duration) {
        let ns = u32::try_from(spin.as_nanos()).unwrap_or(u32::MAX);
        mapping_atomic(&self.map, self.spin_at).store(ns, Ordering::Relaxed);
    }

    fn spin(&self) -> Duration {
        Duration::from_nanos(mapping_atomic(&self.map, self.spin_at).load(Ordering::Relaxed) as u64)
    }

    /// The bell of child `i`.
    pub const fn child(i: usize) -> usize {
        1 + i
    }

    fn bell(&self, bell: usize) -> Doorbell<'_, SharedFutex> {
        Doorbell::new(
            mapping_atomic(&self.map, bell * BELL_STRIDE),
            mapping_atomic(&self.map, bell * BELL_STRIDE + 4),
            &SharedFutex,
        )
    }

    /// The bell's current count (read before checking for work, then passed to [`Self::wait`]).
    pub fn seen(&self, bell: usize) -> u32 {
        self.bell(bell).seen()
    }

    /// Rings `bell`: counts, then wakes the blocked waiters, if any.
    pub fn ring(&self, bell: usize) {
        self.bell(bell).ring();
    }

    /// Waits until `bell` moves past `seen`, or `timeout`: spins for at most the bells' spin time,
    /// then blocks.
    pub fn wait(&self, bell: usize, seen: u32, timeout: Duration) {
        let bell = self.bell(bell);
        let start = Instant::now();
        let spin_for = self.spin().min(timeout);
        'spin: loop {
            for _ in 0..64 {
                if bell.rung_since(seen) {
                    return;
                }
                std::hint::spin_loop();
            }
            let spent = start.elapsed();
            if spent >= spin_for {
                break 'spin;
            }
            // Past the first microseconds, offer the CPU to any runnable thread between
            // checks: with more runnable threads than CPUs, the one that will ring may be
            // waiting for this CPU.
            if spent >= PURE_SPIN {
                std::thread::yield_now();
            }
        }
        let deadline = start + timeout;
        bell.block(seen, || {
            let now = Instant::now();
            (now < deadline).then(|| deadline - now)
        });
    }
}
