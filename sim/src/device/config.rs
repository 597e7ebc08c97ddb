//! How a device is built: the chip generation ([`Topology`]), the sizes ([`DeviceConfig`]),
//! why a build is refused ([`DeviceError`]) and the memory layouts a configuration implies
//! ([`DeviceLayouts`]).
//!
//! Its own file because the host reads all of it without starting a device: `simpler run`
//! parses a [`Topology`] from `--platform`, and the hbg runtime builds its mirror of the shared
//! state from [`DeviceConfig::layouts`] so that the mirror's image imports without translation.

use crate::pages::Pages;
use simpler_aicpu::payloads::PayloadsLayout;
use simpler_core::layout::LayoutError;
use simpler_core::orchestrator::{OrchestratorConfig, OrchestratorLayout};
use simpler_core::ring::{RingConfig, MAX_RINGS};
use simpler_core::sched::SchedConfig;
use std::time::Duration;

/// Device address of the first ring's heap. The four heaps sit back to back from here, and
/// host allocations start where the last one ends.
pub(super) const GM_BASE: u64 = 0x1_0000_0000;

/// The chip generation a device simulates: it fixes how many scheduler threads the device
/// starts and how many clusters a [`DeviceConfig`] may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// a2a3: 1 orchestrator + 3 scheduler threads, up to 24 clusters.
    A2a3,
    /// a5: 1 orchestrator + 4 scheduler threads, up to 36 clusters.
    A5,
}

impl Topology {
    /// How many schedulers the AICPU runs (3 on a2a3, 4 on a5); the device deals the clusters
    /// out among them round robin, and runs them on
    /// [`DeviceConfig::scheduler_threads`] host threads.
    pub fn schedulers(self) -> usize {
        match self {
            Self::A2a3 => 3,
            Self::A5 => 4,
        }
    }

    /// The most clusters the chip has (24 on a2a3, 36 on a5): the upper bound of
    /// [`DeviceConfig::clusters`].
    pub fn max_clusters(self) -> u32 {
        match self {
            Self::A2a3 => 24,
            Self::A5 => 36,
        }
    }

    /// The platform's name as `simpler run --platform` spells it (`a2a3sim`, `a5sim`).
    pub fn name(self) -> &'static str {
        match self {
            Self::A2a3 => "a2a3sim",
            Self::A5 => "a5sim",
        }
    }
}

/// How a device is built: fixed at [`Device::start`](super::Device::start) and kept for every
/// run of that device.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// The chip generation: how many scheduler threads run and how many clusters are allowed.
    pub topology: Topology,
    /// Clusters of 1 AIC + 2 AIV cores; from 1 to [`Topology::max_clusters`].
    pub clusters: u32,
    /// The sizes every one of the four rings gets (task window, heap bytes, dependency-pool
    /// edges).
    pub ring: RingConfig,
    /// TensorMap hash buckets (a power of two).
    pub map_buckets: u32,
    /// TensorMap entries: how many live producer records the orchestrator can hold.
    pub map_entries: u32,
    /// GM bytes beyond the four heaps, for buffers the host allocates (per run and
    /// persistent); rounded down to whole 8-byte words.
    pub gm_bytes: u64,
    /// A run in which no scheduler thread's pass or core step does anything for this long
    /// ends with [`RunError::Timeout`](crate::RunError::Timeout).
    pub watchdog: Duration,
    /// Each core's local buffer (its unified buffer), in f32 words.
    pub local_words: usize,
    /// Host threads the AICPU schedulers run on; each steps whole schedulers in turn (every
    /// scheduler keeps its own cores, queues and pass, whichever thread runs it). 0 picks one
    /// per scheduler, or one per host CPU when the host has fewer.
    pub sched_threads: usize,
    /// How GM is backed: transparent huge pages by default ([`crate::pages`]), committed
    /// 2 MiB at a time as runs touch them; [`Pages::Base`] for the finest grain of resident
    /// memory.
    pub pages: Pages,
}

impl DeviceConfig {
    /// The default device of `topology`: 8 clusters, rings of 4096 tasks with 16 MiB heaps,
    /// 256 MiB of GM, a 10 s watchdog.
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            clusters: 8,
            ring: RingConfig {
                window: 4096,
                heap_bytes: 16 << 20,
                edges: 16_384,
            },
            map_buckets: 4096,
            map_entries: 16_384,
            gm_bytes: 256 << 20,
            watchdog: Duration::from_secs(10),
            local_words: simpler_aicore::LOCAL_BUFFER_WORDS,
            sched_threads: 0,
            pages: Pages::Huge,
        }
    }

    /// The host threads the schedulers run on: [`Self::sched_threads`], or by default one
    /// per host CPU; at most one per scheduler and at least one. More threads than CPUs only
    /// trade the host's time between them: on two CPUs, three scheduler threads beside the
    /// orchestrator spent a tenth of paged attention's samples switching.
    pub fn scheduler_threads(&self) -> usize {
        let nsched = self.topology.schedulers();
        let wanted = match self.sched_threads {
            0 => std::thread::available_parallelism().map_or(nsched, |n| n.get()),
            n => n,
        };
        wanted.clamp(1, nsched)
    }

    /// Whether a device can be built with this configuration's cluster count: 1 to
    /// [`Topology::max_clusters`], else [`DeviceError::Clusters`] with the range.
    pub fn check_clusters(&self) -> Result<(), DeviceError> {
        let max = self.topology.max_clusters();
        if (1..=max).contains(&self.clusters) {
            Ok(())
        } else {
            Err(DeviceError::Clusters {
                clusters: self.clusters,
                max,
                platform: self.topology.name(),
            })
        }
    }

    /// The layouts a device of this configuration uses, with heap addresses in its GM.
    pub fn layouts(&self) -> Result<DeviceLayouts, DeviceError> {
        Ok(DeviceLayouts {
            orchestrator: OrchestratorLayout::new(orchestrator_config(self, GM_BASE))?,
            payloads: PayloadsLayout::new([self.ring.window; MAX_RINGS])?,
        })
    }
}

/// Why a device could not be started, or why a request to it failed.
#[derive(Debug)]
pub enum DeviceError {
    /// [`DeviceConfig::clusters`] is 0 or more than the topology has.
    Clusters {
        /// Clusters asked for.
        clusters: u32,
        /// The most the topology has ([`Topology::max_clusters`]).
        max: u32,
        /// The platform, as `--platform` spells it.
        platform: &'static str,
    },
    /// A memory layout the configuration implies was refused: a size out of range (a ring
    /// window that is not a power of two) or more bytes than `usize` counts.
    Layout(LayoutError),
    /// The device thread is gone: it failed to start, or the device is being dropped.
    Stopped,
    /// A host copy made while a launched run was in flight overlapped GM the run was
    /// accessing in a way that would race (the GM ledger refused it); nothing was copied.
    GmConflict(simpler_core::gm::GmFault),
}

impl std::fmt::Display for DeviceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Clusters {
                clusters,
                max,
                platform,
            } => write!(
                f,
                "{clusters} clusters asked for; {platform} has from 1 to {max} clusters"
            ),
            Self::Layout(_) => f.write_str("the configuration's memory layout was refused"),
            Self::Stopped => f.write_str("the device thread is gone"),
            Self::GmConflict(fault) => write!(
                f,
                "a host copy of {} bytes at {:#x} overlapped GM the run in flight was accessing",
                fault.len, fault.addr
            ),
        }
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Layout(e) => Some(e),
            Self::GmConflict(e) => Some(e),
            _ => None,
        }
    }
}

impl From<LayoutError> for DeviceError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

/// The layouts a device of some configuration uses, so a host can build a mirror of its
/// shared state that imports without translation.
#[derive(Clone, Copy, Debug)]
pub struct DeviceLayouts {
    /// The orchestrator's private state; its `sched()` is the layout of the state it shares
    /// with the schedulers, the part a mirror exports.
    pub orchestrator: OrchestratorLayout,
    /// The per-slot task payload records (one window of slots per ring).
    pub payloads: PayloadsLayout,
}

/// The orchestrator's sizes for `config`, with the four heaps back to back from `gm_base`.
pub(super) fn orchestrator_config(config: &DeviceConfig, gm_base: u64) -> OrchestratorConfig {
    let heap = config.ring.heap_bytes;
    OrchestratorConfig {
        sched: SchedConfig::uniform(config.ring),
        map_buckets: config.map_buckets,
        map_entries: config.map_entries,
        heap_base: [0, 1, 2, 3].map(|r| gm_base + r * heap),
    }
}
