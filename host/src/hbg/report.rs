//! What a bind reports: its phases in order, their times and counts, and the bind window.

use std::fmt;
use std::time::Duration;

/// A phase of a bind, in the order a bind runs them (the module's table says what each does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BindPhase {
    /// `args`: place the entry tensors in GM (addresses only), adopt the chip entry.
    Args,
    /// `arena_build`: format the mirror.
    ArenaBuild,
    /// `host_orch`: run the orchestration function into the mirror.
    HostOrch,
    /// `graph_commit`: wait for the recordings, place the Definitions, patch the outer tasks.
    GraphCommit,
    /// `shared_mem`: measure the live prefix and export it into the image buffers.
    SharedMem,
    /// `graph_upload`: copy the bind's Definitions and Graph boundaries to the device.
    GraphUpload,
    /// `arena_h2d`: copy the IN and INOUT entry tensors to the device.
    ArenaH2d,
    /// `runtime_init`: on the device, reset its shared state and import the images.
    RuntimeInit,
    /// `device_run`: ship the images and run the schedulers.
    DeviceRun,
    /// `copy_back`: copy OUT and INOUT tensors back.
    CopyBack,
}

impl BindPhase {
    /// Every phase, in the order a bind runs them.
    pub const ALL: [Self; 10] = [
        Self::Args,
        Self::ArenaBuild,
        Self::HostOrch,
        Self::GraphCommit,
        Self::SharedMem,
        Self::GraphUpload,
        Self::ArenaH2d,
        Self::RuntimeInit,
        Self::DeviceRun,
        Self::CopyBack,
    ];

    /// The phase's name, as the module's table, the `--phases` table and traces show it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Args => "args",
            Self::ArenaBuild => "arena_build",
            Self::HostOrch => "host_orch",
            Self::GraphCommit => "graph_commit",
            Self::SharedMem => "shared_mem",
            Self::GraphUpload => "graph_upload",
            Self::ArenaH2d => "arena_h2d",
            Self::RuntimeInit => "runtime_init",
            Self::DeviceRun => "device_run",
            Self::CopyBack => "copy_back",
        }
    }

    /// The phase's place in [`Self::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for BindPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// A name that is not one of [`BindPhase::ALL`]'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownBindPhase(pub String);

impl fmt::Display for UnknownBindPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no bind phase is named {:?}", self.0)
    }
}

impl std::error::Error for UnknownBindPhase {}

impl std::str::FromStr for BindPhase {
    type Err = UnknownBindPhase;

    /// The phase [`BindPhase::name`] names.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| UnknownBindPhase(name.to_string()))
    }
}

/// The control plane: the host's phases that turn one orchestration into a graph on the
/// device, a cost per bind whatever the inputs' size. The reference's is its `host_orch` (which
/// holds the recording wait and the commit), `graph_upload` and the image's copy (here inside
/// `device_run`). Not the entry staging (`args`, `arena_h2d`: per byte of input) nor the
/// device's phases.
pub const CONTROL_PLANE: &[BindPhase] = &[
    BindPhase::ArenaBuild,
    BindPhase::HostOrch,
    BindPhase::GraphCommit,
    BindPhase::SharedMem,
    BindPhase::GraphUpload,
];

/// One phase's cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phase {
    /// Wall time from the phase's start to its end, on the binding thread's clock.
    pub time: Duration,
    /// CPU time the binding thread used in it (wall time minus waiting and preemption).
    pub cpu: Duration,
    /// Minor page faults the binding thread took in it (not the recorder threads', which
    /// record during `host_orch` and `graph_commit`).
    pub minflt: u64,
    /// Heap allocations the binding thread made in it (0 unless the program installed a
    /// counter, [`crate::alloc_count::install`]).
    pub allocs: u64,
    /// When it started, from the bind's start.
    pub at: Duration,
}

/// The Graph work of one bind, by sub-phase (see [`BindReport::graph_phases`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphPhases {
    /// Orchestration thread, accepting Graph submissions (boundary copy and compare, staging).
    pub graph_begin: Duration,
    /// Recorder threads, running bodies (every node captured), summed.
    pub record_node: Duration,
    /// Recorder threads, building Definition images, summed.
    pub build_definition: Duration,
    /// The commit's wait for the recordings.
    pub recording_wait: Duration,
    /// Nodes recorded in the bind (over every new Definition).
    pub recorded_nodes: u64,
    /// Heap allocations on the recording path: the recorder threads, from taking a job to
    /// publishing its Definition, summed (0 unless the program installed a counter).
    pub record_allocs: u64,
    /// Parked recorder threads the orchestration thread woke during `host_orch`.
    pub host_orch_wakes: u64,
    /// Parked recorder threads the orchestration thread woke over the bind window
    /// (`host_orch` and `graph_commit`).
    pub recorder_wakes: u64,
    /// Definitions built (recorded) in the bind.
    pub definitions_built: u64,
    /// Bytes of Definition images the bind sends to the device: those placed in its staging
    /// (copied in `graph_upload` when the device runs) and those newly retained (copied to
    /// their persistent place at the commit).
    pub definition_bytes_uploaded: u64,
    /// Keys whose Definition was retained from an earlier bind (replayed without a
    /// recording, or recorded again and verified against it).
    pub retained_hits: u64,
    /// Recordings the committing thread ran itself because no recorder had started them
    /// (`RecorderPool::help`; inside `recording_wait`).
    pub commit_recordings: u64,
    /// Graph submissions accepted as the slot's last bind accepted the same submission at the
    /// same position, their boundary found staged already (nothing compared but its bytes).
    pub followed: u64,
}

/// What one bind cost, by phase, and what it shipped.
#[derive(Clone, Copy, Debug, Default)]
pub struct BindReport {
    /// Each phase's cost, in [`BindPhase::ALL`] order.
    pub(super) phases: [Phase; 10],
    /// Graph submissions that recorded a Definition, replayed one, or ran inline.
    pub graphs: [u64; 3],
    /// Inside `host_orch` and `graph_commit`: the orchestration thread's time accepting Graph
    /// submissions (`graph_begin`), the recorder threads' time running bodies (`record_node`)
    /// and building Definitions (`build_definition`), summed over the bind's recordings, and
    /// the commit's wait for them (`recording_wait`).
    pub graph_phases: GraphPhases,
    /// Tasks the host built.
    pub tasks: u64,
    /// Bytes shipped: the shared state's live image plus the payloads'.
    pub image_bytes: usize,
    /// The bind replayed the slot's last image: its guard matched, so the orchestration did
    /// not run (`host_orch` and the phases after it up to `shared_mem` are zero).
    pub replayed: bool,
}

impl BindReport {
    /// What bind phase `phase` cost.
    pub fn phase(&self, phase: BindPhase) -> &Phase {
        &self.phases[phase.index()]
    }

    /// Every phase with its cost, in [`BindPhase::ALL`] order.
    pub fn phases(&self) -> impl Iterator<Item = (BindPhase, &Phase)> {
        BindPhase::ALL.into_iter().zip(&self.phases)
    }

    /// Where the bind records phase `phase`'s cost.
    pub(super) fn phase_mut(&mut self, phase: BindPhase) -> &mut Phase {
        &mut self.phases[phase.index()]
    }

    /// The bind window: from the start of the orchestration (`host_orch`) to the end of the
    /// commit (`graph_commit`), the span the reference's `host_orch` covers (its span closes
    /// after `rt_orchestration_done`, so it holds the recording wait and the commit). Compare
    /// this, not [`BindPhase::HostOrch`], with the reference's figure.
    pub fn bind_window(&self) -> Duration {
        let orch = self.phase(BindPhase::HostOrch);
        let commit = self.phase(BindPhase::GraphCommit);
        (commit.at + commit.time).saturating_sub(orch.at)
    }

    /// The [`CONTROL_PLANE`] phases summed: wall and CPU time, faults, allocations; `at` is
    /// the first one's.
    pub fn control_plane(&self) -> Phase {
        let mut phases = CONTROL_PLANE.iter().map(|&p| self.phase(p));
        let first = phases.next().copied().unwrap_or_default();
        phases.fold(first, |sum, ph| Phase {
            time: sum.time + ph.time,
            cpu: sum.cpu + ph.cpu,
            minflt: sum.minflt + ph.minflt,
            allocs: sum.allocs + ph.allocs,
            at: sum.at,
        })
    }
}
