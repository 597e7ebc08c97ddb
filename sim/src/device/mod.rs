//! One simulated device: GM, the AICPU's threads and the AICore cores, set up once and reused
//! for every run.
//!
//! Threads (all created at [`Device::start`], all ended at drop):
//!
//! - the **device thread** owns the device state but GM, answers the host's run requests and,
//!   during a run, is the AICPU's orchestrator thread: it runs the orchestration function.
//!   GM is shared with the [`Device`] handle: the host's copies in and out of it run on the
//!   caller's thread, with no message and no buffer of their own;
//! - the AICPU schedulers (3 on a2a3, 4 on a5), each owning whole clusters, on **scheduler
//!   threads**: one per scheduler, or one per host CPU when the host has fewer
//!   ([`DeviceConfig::sched_threads`]), each stepping its schedulers in turn. A scheduler's
//!   round is the `aicpu` scheduler pass and a step of the `aicore` loop of each core it owns.
//!   A core is stepped only when it has a task, so 30 simulated cores cost nothing when idle,
//!   and a thread with nothing to do blocks on a [`Wakeup`](crate::wake::Wakeup) instead of
//!   spinning;
//! - a **watchdog thread** that aborts a run which makes no progress for the configured time.
//!
//! The device code (`simpler_aicpu`, `simpler_aicore`, `simpler_core`) is the code the
//! firmware runs; this module supplies its registers, GM and threads. This file holds the
//! [`Device`] handle the host calls; the rest is in:
//!
//! - [`config`]: the chip generation, the sizes, the start-up errors and the layouts they
//!   imply;
//! - [`job`]: what a run is given (orchestration function, kernels, arguments, hooks, a
//!   prebuilt graph);
//! - [`gm_alloc`]: where host buffers go in GM, per run and persistent;
//! - [`state`]: what the threads share for the current run, and the watchdog thread;
//! - [`orchestrator`]: the device thread, which is the orchestrator during a run;
//! - [`scheduler`]: the scheduler threads and their dispatch loop;
//! - [`regs`]: each core's registers and payload buffers, and a thread's cores as the
//!   AICPU's `Platform`;
//! - [`trace`]: the per-thread trace buffers and the sink they flush into.

pub mod config;
pub mod gm_alloc;
pub mod job;
pub mod orchestrator;
pub mod regs;
pub mod scheduler;
pub mod state;
pub mod trace;

pub use config::{DeviceConfig, DeviceError, DeviceLayouts, Topology};
pub use job::{Job, OrchFn, Prebuilt, SharedHook};
pub use trace::{TraceSink, TRACE_EVENTS_PER_THREAD};

use crate::gm::GmWords;
use simpler_core::gm::{GmFault, GmFaultKind};

/// The GM ledger line the host's copies during a launched run register in: the last, clear of
/// the device threads' (the orchestrator's 0, the schedulers' from 1).
const HOST_LINE: usize = crate::ledger::LINES - 1;
use config::{orchestrator_config, GM_BASE};
use gm_alloc::GmAllocator;
use orchestrator::device_main;
use simpler_aicpu::RunOutcome;
use simpler_core::gm::Gm;
use simpler_core::layout::Layout;
use simpler_core::orchestrator::OrchestratorLayout;
use simpler_core::ring::MAX_RINGS;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A request from the host to the device thread, with the channel its answer goes back on.
enum Msg {
    /// Run the job to its end; answers its outcome.
    Run(Job, Sender<RunOutcome>),
}

/// A running simulated device: the host's handle on its device thread. Every method may be
/// called from any thread; dropping the handle stops the device's threads.
pub struct Device {
    /// Requests to the device thread; `None` once the device is being dropped.
    tx: Option<Sender<Msg>>,
    /// The device thread, joined at drop.
    thread: Option<JoinHandle<()>>,
    /// What the device was started with.
    config: DeviceConfig,
    /// GM placement. The host decides where its buffers go; the device thread only reads and
    /// writes GM, so allocating needs no message (and no heap allocation) per call.
    gm_alloc: Mutex<GmAllocator>,
    /// GM itself, shared with the device thread: the host's copies go straight into it.
    gm_words: Arc<GmWords>,
    /// The host's turn at GM: taken by every copy in or out and held for the whole of every
    /// blocking run ([`Device::run`]), so a plain (non-atomic) copy never overlaps a run's
    /// accesses or another copy. A launched run ([`Device::launch`]) is counted in it instead
    /// of holding it, and while one is in flight copies go through GM's access ledger like the
    /// run's own accesses.
    gm_turn: Arc<Mutex<Turn>>,
}

/// A host copy's answer: `true` when done, `false` for a range outside GM, the conflict when
/// the ledger refused it.
fn copied(result: Result<(), GmFault>) -> Result<bool, DeviceError> {
    match result {
        Ok(()) => Ok(true),
        Err(fault) if fault.kind == GmFaultKind::Conflict => Err(DeviceError::GmConflict(fault)),
        Err(_) => Ok(false),
    }
}

/// The state behind the host's turn at GM.
#[derive(Default)]
struct Turn {
    /// A run ended without its answer (the device thread is gone, its scheduler threads
    /// perhaps still in the run): no copy is made after that.
    dead: bool,
    /// Launched runs not yet finished: the device's threads may touch GM at any time.
    in_flight: usize,
}

/// A run [`Device::launch`] started: [`Pending::wait`] gives its outcome. The device runs
/// launched jobs one at a time, in launch order. Dropping a pending run waits for its end.
pub struct Pending {
    rx: std::sync::mpsc::Receiver<RunOutcome>,
    /// The device's turn at GM, whose `in_flight` counts this run until its answer.
    turn: Arc<Mutex<Turn>>,
    /// Counted out of `in_flight` (once).
    settled: bool,
}

impl Pending {
    /// Waits for the run's outcome ([`DeviceError::Stopped`] if the device stopped first).
    pub fn wait(mut self) -> Result<RunOutcome, DeviceError> {
        let outcome = self.rx.recv().ok();
        self.settle(outcome.is_some());
        outcome.ok_or(DeviceError::Stopped)
    }

    /// The outcome if the run ends within `timeout`; `Ok(None)` while it still runs (call
    /// again, or [`Pending::wait`]).
    pub fn wait_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Option<RunOutcome>, DeviceError> {
        use std::sync::mpsc::RecvTimeoutError;
        if self.settled {
            return Err(DeviceError::Stopped);
        }
        match self.rx.recv_timeout(timeout) {
            Ok(o) => {
                self.settle(true);
                Ok(Some(o))
            }
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                self.settle(false);
                Err(DeviceError::Stopped)
            }
        }
    }

    /// Counts the run out of the turn once its answer came (`answered`) or never will.
    fn settle(&mut self, answered: bool) {
        if self.settled {
            return;
        }
        self.settled = true;
        let mut turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        turn.in_flight -= 1;
        // No answer: the device thread is gone, its scheduler threads perhaps still in the
        // run; GM is theirs for good.
        turn.dead |= !answered;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.settled {
            let answered = self.rx.recv().is_ok();
            self.settle(answered);
        }
    }
}

impl Device {
    /// Builds the device and starts its threads; returns once the device thread has built
    /// every byte of device state. Refused with [`DeviceError::Clusters`] for 0 clusters or more
    /// than the topology has, with [`DeviceError::Layout`] for sizes a layout refuses.
    pub fn start(config: DeviceConfig) -> Result<Self, DeviceError> {
        config.check_clusters()?;
        // Check the layouts here so a bad configuration is reported, not a dead thread.
        let orch_config = orchestrator_config(&config, 0);
        OrchestratorLayout::new(orch_config)?;
        let heaps = config.ring.heap_bytes * MAX_RINGS as u64;
        let words = Layout::new()
            .array::<AtomicU64>(((heaps + config.gm_bytes) / 8) as usize)?
            .len();
        let gm_words = Arc::new(GmWords::zeroed_on(words, config.pages));
        let (tx, rx) = channel();
        let (ready_tx, ready_rx) = channel();
        let device_gm = gm_words.clone();
        let thread = std::thread::Builder::new()
            .name("simpler-device".into())
            .spawn(move || device_main(config, device_gm, rx, ready_tx))
            .map_err(|_| DeviceError::Stopped)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx: Some(tx),
                thread: Some(thread),
                config,
                gm_alloc: Mutex::new(GmAllocator::new(&config)),
                gm_words,
                gm_turn: Arc::new(Mutex::new(Turn::default())),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(DeviceError::Stopped),
        }
    }

    /// The configuration the device was started with (it never changes).
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn send(&self, msg: Msg) -> Result<(), DeviceError> {
        self.tx
            .as_ref()
            .ok_or(DeviceError::Stopped)?
            .send(msg)
            .map_err(|_| DeviceError::Stopped)
    }

    /// Allocates `bytes` of GM for the current run (1024-byte aligned, bumped upward from
    /// the end of the heaps); `None` when GM is full. The bump never reaches into a live
    /// persistent allocation ([`Device::malloc`]).
    pub fn alloc(&self, bytes: u64) -> Result<Option<u64>, DeviceError> {
        Ok(self.gm()?.alloc(bytes))
    }

    /// [`Device::alloc`] in run slot `slot` (0 or 1, [`gm_alloc::RUN_SLOTS`]): slot 0 bumps up
    /// from the heaps, slot 1 down from under the persistent allocations, so one run can be
    /// staged while the other slot's is in flight.
    pub fn alloc_in(&self, slot: usize, bytes: u64) -> Result<Option<u64>, DeviceError> {
        Ok(self.gm()?.alloc_in(slot.min(1), bytes))
    }

    /// Releases every per-run allocation of run slot `slot`.
    pub fn free_slot(&self, slot: usize) -> Result<(), DeviceError> {
        self.gm()?.free_slot(slot.min(1));
        Ok(())
    }

    /// The GM allocator, while the device runs.
    fn gm(&self) -> Result<MutexGuard<'_, GmAllocator>, DeviceError> {
        self.live()?;
        // Every update is a single assignment or map operation: a panic elsewhere cannot
        // leave the allocator half-updated, so a poisoned lock is used as it is.
        Ok(self.gm_alloc.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Releases every per-run allocation of both run slots ([`Device::alloc`],
    /// [`Device::alloc_in`]); persistent allocations ([`Device::malloc`]) are kept.
    pub fn free_all(&self) -> Result<(), DeviceError> {
        self.gm()?.free_all();
        Ok(())
    }

    /// Allocates `bytes` of persistent GM (`DEVICE_MALLOC`): 1024-byte aligned, taken from the
    /// top of GM downward, first fit in the gaps between live persistent allocations. It
    /// survives [`Device::free_all`] and every run until [`Device::free`]. A size of 0 is
    /// taken as 1 byte; `None` when no gap above the current per-run allocations holds it.
    pub fn malloc(&self, bytes: u64) -> Result<Option<u64>, DeviceError> {
        Ok(self.gm()?.malloc(bytes))
    }

    /// Releases the persistent allocation starting at `addr`; `false` when `addr` is not the
    /// start of a live persistent allocation.
    pub fn free(&self, addr: u64) -> Result<bool, DeviceError> {
        Ok(self.gm()?.free(addr))
    }

    /// Copies `data` to GM at `addr`; `false` if the range is outside GM.
    ///
    /// The copy runs on the calling thread, straight into GM: no message to the device thread
    /// and no buffer of its own. With no run under way it is one memory copy; a copy asked for
    /// while another thread's blocking run is under way waits for the run to end; while a
    /// launched run is in flight it registers in GM's access ledger as the run's accesses do
    /// (the run may be touching other parts of GM, and an unregistered plain copy beside an
    /// access would be a data race), and one that overlaps what the run is accessing is
    /// refused with [`DeviceError::GmConflict`], nothing copied.
    #[allow(unsafe_code)] // the copy into GM: see its SAFETY comment
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<bool, DeviceError> {
        let turn = self.gm_turn()?;
        let written = if turn.in_flight > 0 {
            self.gm_words.arena_at(GM_BASE, HOST_LINE).write(addr, data)
        } else {
            // SAFETY: `turn` is the host's exclusive turn at GM and no launched run is in
            // flight: no run is under way (a blocking run holds the turn from its request to
            // its answer, a launched one is counted in `in_flight` until its answer, and the
            // device's threads touch GM only inside a run, which ends with every scheduler
            // thread out of it), no other copy holds the turn, and a device whose run ended
            // without its answer refuses it.
            unsafe { self.gm_words.write_exclusive(GM_BASE, addr, data) }
        };
        drop(turn);
        copied(written)
    }

    /// Fills `out` from GM at `addr`; `false` (and `out` unchanged) if the range is outside
    /// GM. Like [`Device::write`]: one memory copy on the calling thread with no run under
    /// way, through the access ledger while a launched run is in flight (refused with
    /// [`DeviceError::GmConflict`] where it overlaps what the run is writing).
    #[allow(unsafe_code)] // the copy out of GM: see its SAFETY comment
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<bool, DeviceError> {
        let turn = self.gm_turn()?;
        let read = if turn.in_flight > 0 {
            self.gm_words.arena_at(GM_BASE, HOST_LINE).read(addr, out)
        } else {
            // SAFETY: as in `write`: `turn` is the host's exclusive turn at GM and no launched
            // run is in flight.
            unsafe { self.gm_words.read_exclusive(GM_BASE, addr, out) }
        };
        drop(turn);
        copied(read)
    }

    /// The host's turn at GM (the `gm_turn` field says who takes it); refused once the device
    /// is stopping or a run ended without its answer.
    fn gm_turn(&self) -> Result<MutexGuard<'_, Turn>, DeviceError> {
        self.live()?;
        // Nothing panics while holding the turn, so a poisoned lock is used as it is.
        let turn = self.gm_turn.lock().unwrap_or_else(|e| e.into_inner());
        if turn.dead {
            return Err(DeviceError::Stopped);
        }
        Ok(turn)
    }

    /// `Ok` while the device runs.
    fn live(&self) -> Result<(), DeviceError> {
        if self.tx.is_none() {
            Err(DeviceError::Stopped)
        } else {
            Ok(())
        }
    }

    /// Runs `job` to completion (or failure). Host copies wait while it runs; a run launched
    /// before it ([`Device::launch`]) runs first.
    pub fn run(&self, job: Job) -> Result<RunOutcome, DeviceError> {
        let mut turn = self.gm_turn()?;
        let (tx, rx) = channel();
        self.send(Msg::Run(job, tx))?;
        let outcome = rx.recv();
        // No answer: the device thread is gone, and its scheduler threads may still be in
        // the run; GM is theirs for good.
        turn.dead |= outcome.is_err();
        outcome.map_err(|_| DeviceError::Stopped)
    }

    /// Starts `job` without waiting for it: the device runs it after every job launched
    /// before it. Host copies go on meanwhile (through GM's access ledger, see
    /// [`Device::write`]); they must not touch memory the run uses.
    pub fn launch(&self, job: Job) -> Result<Pending, DeviceError> {
        let mut turn = self.gm_turn()?;
        let (tx, rx) = channel();
        self.send(Msg::Run(job, tx))?;
        turn.in_flight += 1;
        Ok(Pending {
            rx,
            turn: self.gm_turn.clone(),
            settled: false,
        })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::gm_alloc::ALLOC_ALIGN;
    use super::*;

    #[test]
    fn per_run_and_persistent_allocations_do_not_overlap() {
        let mut config = DeviceConfig::new(Topology::A2a3);
        config.gm_bytes = 64 << 10;
        let device = Device::start(config).unwrap();
        let p = device.malloc(16 << 10).unwrap().unwrap();
        assert_eq!(p % ALLOC_ALIGN, 0);
        // The bump allocator stops at the persistent allocation.
        let mut bumped = Vec::new();
        while let Some(at) = device.alloc(4096).unwrap() {
            bumped.push(at);
        }
        assert!(bumped.iter().all(|&at| at + 4096 <= p));
        assert!(!bumped.is_empty());
        // Persistent memory does not come from below the live bump.
        assert_eq!(device.malloc(16 << 10).unwrap(), None);
        device.free_all().unwrap();
        let q = device.malloc(16 << 10).unwrap().unwrap();
        assert!(q + (16 << 10) <= p);
        assert!(device.free(p).unwrap());
        assert!(!device.free(p).unwrap());
        assert!(!device.free(q + 8).unwrap());
        assert!(device.free(q).unwrap());
        // With nothing persistent left, the bump reaches the end of GM again.
        assert!(device.alloc(48 << 10).unwrap().is_some());
        assert_eq!(device.malloc(0).unwrap().map(|a| a % ALLOC_ALIGN), Some(0));
    }
}
