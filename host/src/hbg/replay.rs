//! Guarded replay of a whole bind ([`BindReplay`]): the guard a bind leaves, the check a
//! later bind in the same slot makes against it, and the replay that ships the retained image
//! without running the orchestration.

use super::{BindReport, BuiltImage, GraphRetention, HostViews, Mirror};
use crate::chip_worker::{ChipArg, ChipWorker, Staging, WorkerError};
use simpler_core::gm::Gm;
use simpler_core::{ChipStorageTaskArgs, ChipTensor};

/// How a worker replays a whole bind ([`ChipWorker::set_bind_replay`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindReplay {
    /// Replay a bind whose guard matches the slot's last bind: its orchestration is not run,
    /// the slot's retained image is shipped again.
    pub enabled: bool,
    /// Run the orchestration anyway and compare the image it builds with the one a replay
    /// would have shipped; a difference fails the bind with [`HbgError::ReplayChanged`](super::HbgError::ReplayChanged).
    pub verify: bool,
}

impl Default for BindReplay {
    /// On; verification as [`VERIFY_GRAPHS_ENV`](super::VERIFY_GRAPHS_ENV) says (on in the test suite).
    fn default() -> Self {
        Self {
            enabled: true,
            verify: GraphRetention::default().verify,
        }
    }
}

/// A bind's guard: everything its image depends on besides the orchestration's code. The
/// callable; the chip entry as adopted (every entry tensor's address, layout and view, every
/// entry scalar); every entry-tensor byte the orchestration read, with its value; where the
/// bind's per-run device memory went (its Graph staging and heap blocks); and the retained
/// Definitions' generation (none of those its image names was dropped since). A later bind in
/// the same slot that matches all of it would build the same image byte for byte, so it ships
/// the retained one. Its buffers are kept across binds (no allocation once grown).
#[derive(Default)]
pub(super) struct Guard {
    /// The rest is meaningful.
    pub(super) valid: bool,
    pub(super) callable: usize,
    /// The chip entry's tensors and scalars, as bytes.
    pub(super) entry: Vec<u8>,
    pub(super) scalars: Vec<u64>,
    /// Each entry read: its address and length, and the values read, concatenated.
    pub(super) reads: Vec<(u64, u32)>,
    pub(super) values: Vec<u8>,
    pub(super) generation: u64,
    /// The retained Definitions' bind counter at this bind: a replay in flight protects the
    /// Definitions used from it on, as the bind's own run did.
    pub(super) kept_bind: u64,
    pub(super) staging_base: u64,
    pub(super) heap: Option<(u64, u64)>,
    pub(super) built: Option<BuiltImage>,
    /// The report fields the image implies.
    pub(super) tasks: u64,
    pub(super) image_bytes: usize,
    pub(super) graphs: [u64; 3],
}

impl Guard {
    /// Whether a bind of `callable` on `chip`, reading `views`, would build the image this
    /// guard was taken for.
    pub(super) fn holds(
        &self,
        callable: usize,
        chip: &ChipStorageTaskArgs,
        views: &HostViews<'_>,
        generation: u64,
    ) -> bool {
        if !self.valid
            || self.callable != callable
            || self.generation != generation
            || self.scalars != chip.scalars()
            || self.entry != bytemuck::cast_slice::<ChipTensor, u8>(chip.tensors())
        {
            return false;
        }
        let mut at = 0;
        let mut buf = [0u8; 64];
        for &(addr, len) in &self.reads {
            let len = len as usize;
            let Some(dst) = buf.get_mut(..len) else {
                return false;
            };
            if views.read(addr, dst).is_err() || self.values.get(at..at + len) != Some(&*dst) {
                return false;
            }
            at += len;
        }
        true
    }
}

/// Takes the guard of the bind just built into `mirror` (see [`Guard`]): its reads' values
/// are read again from the entry (the reads themselves were recorded as they happened).
pub(super) fn take_guard(
    mirror: &mut Mirror,
    callable: usize,
    args: &[ChipArg],
    staging: &Staging,
    staging_base: u64,
    built: BuiltImage,
    report: &BindReport,
) {
    let g = &mut mirror.guard;
    g.callable = callable;
    g.entry.clear();
    g.entry
        .extend_from_slice(bytemuck::cast_slice::<ChipTensor, u8>(
            staging.chip.tensors(),
        ));
    g.scalars.clear();
    g.scalars.extend_from_slice(staging.chip.scalars());
    let views = HostViews {
        args,
        staged: &staging.staged,
        reads: None,
    };
    g.values.clear();
    let mut buf = [0u8; 64];
    let mut readable = true;
    for &(addr, len) in &g.reads {
        match buf.get_mut(..len as usize) {
            Some(dst) => match views.read(addr, dst) {
                Ok(()) => g.values.extend_from_slice(dst),
                Err(_) => readable = false,
            },
            None => readable = false,
        }
    }
    g.generation = mirror.graphs.kept.generation;
    g.kept_bind = mirror.graphs.kept.binds;
    g.staging_base = staging_base;
    g.heap = mirror.graphs.heap_block;
    g.built = Some(built);
    g.tasks = report.tasks;
    g.image_bytes = report.image_bytes;
    g.graphs = report.graphs;
    g.valid = readable;
}

impl ChipWorker {
    /// Sets how whole hbg binds are replayed ([`BindReplay`]; on by default).
    pub fn set_bind_replay(&mut self, replay: BindReplay) {
        self.replay = replay;
    }

    /// How whole hbg binds are replayed.
    pub fn bind_replay(&self) -> BindReplay {
        self.replay
    }

    /// A replay of slot `slot`'s last bind, whose guard matched: the orchestration is not
    /// run; the bind's heap blocks are placed again where they were (`None`, and the bind is
    /// built as usual, if they cannot be) and the retained image is shipped as it is.
    pub(super) fn replay_bind(
        &mut self,
        slot: usize,
        report: &mut BindReport,
    ) -> Result<Option<BuiltImage>, WorkerError> {
        let m = self.hbg[slot].as_ref().expect("guarded");
        let (heap, built) = (m.guard.heap, m.guard.built);
        if let Some((base, bytes)) = heap {
            if self.device.alloc_in(slot, bytes)? != Some(base) {
                return Ok(None);
            }
        }
        let g = &m.guard;
        report.tasks = g.tasks;
        report.image_bytes = g.image_bytes;
        report.graphs = g.graphs;
        report.replayed = true;
        Ok(built)
    }
}
