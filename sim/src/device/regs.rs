//! The simulated cores' registers: each core's handshake words and its two dispatch payload
//! buffers (`CoreBlock`), and a scheduler thread's cores seen as the AICPU's `Platform`
//! (`SimCores`).
//!
//! Its own file because it is the one place the two sides of the register handshake meet:
//! the `aicpu` scheduler writes a core's task register and reads its status through
//! `SimCores`; the `aicore` loop reads the task and writes the status through
//! `CoreBlock`'s `CorePort`. The orderings here (release on each write a peer waits for,
//! acquire on each read of one) are what make a payload written before dispatch, and a
//! kernel's GM writes before FIN, visible to the other side.

use crate::tile_ops::ahead::{for_each_line, prefetch_line};
use crate::tile_ops::HostTileOps;
use simpler_aicore::core_loop::CorePort;
use simpler_aicore::TileOps;
use simpler_aicpu::Platform;
use simpler_core::handshake::{DispatchPayload, AICORE_IDLE, AICPU_IDLE};
use simpler_core::sync::AtomicU64;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// The registers and payload buffers of one core, owned by its scheduler thread.
pub(super) struct CoreBlock {
    /// The task register the AICPU writes (a dispatch token, or `AICPU_IDLE`).
    pub(super) task: AtomicU32,
    /// The status register the core writes (ACK and FIN of a token, or `AICORE_IDLE`).
    status: AtomicU32,
    /// The error code the core reports with a failed FIN.
    error: AtomicU32,
    /// The detail word of that error.
    detail: AtomicU32,
    /// The two dispatch payloads, by the token's parity: the AICPU fills one while the core
    /// may still read the other.
    pub(super) payloads: Box<[DispatchPayload; 2]>,
}

impl CoreBlock {
    /// An idle core: both registers idle, no error, zeroed payloads.
    pub(super) fn idle() -> Self {
        Self {
            task: AtomicU32::new(AICPU_IDLE),
            status: AtomicU32::new(AICORE_IDLE),
            error: AtomicU32::new(0),
            detail: AtomicU32::new(0),
            payloads: Box::new([bytemuck::Zeroable::zeroed(); 2]),
        }
    }
}

impl CorePort for CoreBlock {
    fn read_task(&self) -> u32 {
        self.task.load(Ordering::Acquire)
    }
    fn write_status(&self, value: u32) {
        self.status.store(value, Ordering::Release);
    }
    fn write_error(&self, code: u32, detail: u32) {
        self.error.store(code, Ordering::Relaxed);
        self.detail.store(detail, Ordering::Relaxed);
    }
    fn payload(&self, parity: u32) -> &DispatchPayload {
        &self.payloads[(parity & 1) as usize]
    }
    fn tile_ops(&self) -> &dyn TileOps {
        &HostTileOps
    }
}

/// The cores one scheduler thread owns, as its `Platform`.
pub(super) struct SimCores {
    /// One block per owned core, in the order of the thread's `OwnedCore` list.
    pub(super) blocks: Vec<CoreBlock>,
    /// What [`Platform::cycles`] counts from: the thread's start, or the run's start when
    /// the run is traced.
    pub(super) epoch: Instant,
}

impl Platform for SimCores {
    fn write_task(&mut self, core: usize, value: u32) {
        if let Some(b) = self.blocks.get(core) {
            b.task.store(value, Ordering::Release);
        }
    }
    fn read_status(&self, core: usize) -> u32 {
        self.blocks
            .get(core)
            .map_or(0, |b| b.status.load(Ordering::Acquire))
    }
    fn read_error(&self, core: usize) -> (u32, u32) {
        self.blocks.get(core).map_or((0, 0), |b| {
            (
                b.error.load(Ordering::Relaxed),
                b.detail.load(Ordering::Relaxed),
            )
        })
    }
    fn payload_mut(&mut self, core: usize, parity: u32) -> &mut DispatchPayload {
        // The scheduler only names cores it owns, so a thread without cores never gets here;
        // an out-of-range index is clamped rather than trusted.
        let i = core.min(self.blocks.len().saturating_sub(1));
        &mut self.blocks[i].payloads[(parity & 1) as usize]
    }
    fn cycles(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn hint_read(&self, words: &[AtomicU64]) {
        for_each_line(words, prefetch_line);
    }
}
