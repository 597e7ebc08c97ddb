//! Graph Definitions retained across binds ([`GraphRetention`]): what is kept, the match a
//! later submission must pass to replay one, the caps and the eviction order, and the
//! comparison verification makes. The module's "Retained Definitions" says when they are used.

use crate::chip_worker::{CallableHandle, ChipWorker, WorkerError};
use simpler_core::graph::GraphDefinitionHeader;
use simpler_core::orchestrator::TaskArg;

/// How a `ChipWorker` retains Graph Definitions across binds ([`ChipWorker::set_graph_retention`];
/// the module's "Retained Definitions" says what is kept and when it is replayed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphRetention {
    /// Definitions retained at most (over every callable); 0 turns retention off (every bind
    /// records, as before retention existed).
    pub max_definitions: usize,
    /// Bytes of Definition images retained at most (each is held twice, on the host and in
    /// device memory; this caps one copy). A Definition larger than this is recorded per bind.
    pub max_bytes: usize,
    /// Record every Graph anyway and compare the new Definition's content hash with the
    /// retained one's: a mismatch fails the bind with [`HbgError::GraphChanged`](super::HbgError::GraphChanged). Retained
    /// Definitions are still placed once (no upload); only the recording is repeated.
    pub verify: bool,
}

/// Definitions a worker retains by default.
pub const RETAINED_MAX_DEFINITIONS: usize = 64;

/// Bytes of Definition images a worker retains by default.
pub const RETAINED_MAX_BYTES: usize = 4 << 20;

/// The environment variable that turns verification on by default (any value but empty or
/// `0`); the workspace's `.cargo/config.toml` sets it, so the test suite verifies.
pub const VERIFY_GRAPHS_ENV: &str = "SIMPLER_VERIFY_GRAPHS";

impl Default for GraphRetention {
    /// The default caps; verification as [`VERIFY_GRAPHS_ENV`] says.
    fn default() -> Self {
        let verify = std::env::var_os(VERIFY_GRAPHS_ENV).is_some_and(|v| !v.is_empty() && v != "0");
        Self {
            max_definitions: RETAINED_MAX_DEFINITIONS,
            max_bytes: RETAINED_MAX_BYTES,
            verify,
        }
    }
}

impl GraphRetention {
    /// Retention off: every bind records every Definition (verification is moot).
    pub const OFF: Self = Self {
        max_definitions: 0,
        max_bytes: 0,
        verify: false,
    };
}

/// A Definition retained across binds: what it was recorded for (the callable, the key, the
/// first invocation's boundary and its alias partition), its image (the host copy), where its
/// device copy lives (persistent device memory, placed once) and when a bind last used it.
pub(super) struct Retained {
    pub(super) callable: usize,
    pub(super) key: u64,
    pub(super) boundary: crate::record::GraphBoundary,
    pub(super) reps: [u16; simpler_core::graph::GRAPH_MAX_TENSOR_ARGS],
    pub(super) image: Vec<u8>,
    pub(super) content_hash: u64,
    pub(super) device: u64,
    pub(super) required_heap: u64,
    /// The bind that last recorded or replayed it (eviction takes the oldest first).
    pub(super) last_bind: u64,
}

impl Retained {
    /// Whether a submission of `key` by `callable` with `boundary` and `scalars` scalars may
    /// replay it: the same key and the same boundary signature (every layout field, tag,
    /// manual-dependency flag and alias relation [`crate::record::GraphBoundary::matches_args`]
    /// compares, and the scalar count), and, stricter than a replay within one bind, each
    /// tensor's view offset from the start of its buffer.
    pub(super) fn matches(
        &self,
        callable: usize,
        key: u64,
        boundary: &[TaskArg],
        scalars: usize,
    ) -> bool {
        self.callable == callable
            && self.key == key
            && self.boundary.matches_args(&self.reps, boundary, scalars)
            && self
                .boundary
                .tensors
                .iter()
                .zip(boundary)
                .all(|(a, b)| a.start_offset() == b.tensor.start_offset())
    }
}

/// The Definitions a worker retains across binds, and this bind's use of them. One per
/// worker, shared by both pipeline slots: it is lent to the mirror a bind builds into.
#[derive(Default)]
pub(crate) struct Kept {
    /// In the order they were retained.
    pub(super) items: Vec<Retained>,
    /// Bytes of their images.
    pub(super) bytes: usize,
    /// Per entry of this bind, the retained Definition its key and boundary matched.
    pub(super) hits: Vec<Option<usize>>,
    /// Binds that used it so far (a Definition's `last_bind` counts on it).
    pub(super) binds: u64,
    /// The first bind whose run may still be in flight in the other slot: no Definition
    /// used at or after it is evicted (its device copy may be read).
    pub(crate) spare: Option<u64>,
    /// Definitions dropped so far: a bind's guard ([`Guard`]) holds only while no Definition
    /// its image names could have been dropped.
    pub(super) generation: u64,
}

impl Kept {
    /// Drops retained Definitions until at most `keep` remain and their images fit in
    /// `bytes`, oldest-used first (fewest recent binds), freeing each one's device copy. A
    /// Definition bind `binds` uses, or one a run still in flight uses, is never dropped;
    /// returns whether the bound was met.
    pub(super) fn evict_to(
        &mut self,
        binds: u64,
        keep: usize,
        bytes: usize,
        device: &dyn crate::transport::DeviceTransport,
    ) -> Result<bool, WorkerError> {
        let protected = self.spare.map_or(binds, |b| binds.min(b));
        while self.items.len() > keep || self.bytes > bytes {
            let victim = self
                .items
                .iter()
                .enumerate()
                .filter(|(_, r)| r.last_bind < protected)
                .min_by_key(|(_, r)| r.last_bind)
                .map(|(i, _)| i);
            let Some(i) = victim else {
                return Ok(false);
            };
            self.drop_retained(i, device)?;
        }
        Ok(true)
    }

    /// Drops retained Definition `i`: its device copy is freed, its host copy dropped, and
    /// this bind's hits past it renumbered.
    pub(super) fn drop_retained(
        &mut self,
        i: usize,
        device: &dyn crate::transport::DeviceTransport,
    ) -> Result<(), WorkerError> {
        let r = self.items.remove(i);
        self.bytes -= r.image.len();
        self.generation += 1;
        for h in self.hits.iter_mut().flatten() {
            if *h > i {
                *h -= 1;
            }
        }
        device.free(r.device)?;
        Ok(())
    }

    /// Drops every retained Definition of `callable` (`None`: of every callable).
    pub(super) fn forget(
        &mut self,
        callable: Option<usize>,
        device: &dyn crate::transport::DeviceTransport,
    ) -> Result<(), WorkerError> {
        let mut i = 0;
        while i < self.items.len() {
            if callable.map_or(true, |c| self.items[i].callable == c) {
                self.drop_retained(i, device)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }
}

/// Retains the Definition `inner` holds (room for it was made): its image is copied to a
/// persistent device allocation of its own, once, and kept on the host beside it. Returns the
/// device address, or `None` when device memory has no room for it (it is then staged per
/// bind).
pub(super) fn retain(
    kept: &mut Kept,
    (callable, binds): (usize, u64),
    inner: &crate::record::InflightInner,
    header: &GraphDefinitionHeader,
    required_heap: u64,
    device: &dyn crate::transport::DeviceTransport,
) -> Result<Option<u64>, WorkerError> {
    let len = inner.image.len() as u64;
    let Some(at) = device.malloc(len)? else {
        return Ok(None);
    };
    if !device.copy_to_device(at, &inner.image)? {
        device.free(at)?;
        return Ok(None);
    }
    let boundary = inner.boundary.clone().unwrap_or_default();
    kept.bytes += inner.image.len();
    kept.items.push(Retained {
        callable,
        key: inner.full_key,
        boundary,
        reps: inner.reps,
        image: inner.image.clone(),
        content_hash: header.content_hash,
        device: at,
        required_heap,
        last_bind: binds,
    });
    Ok(Some(at))
}

/// The first node at which Definition images `a` and `b` differ: its record, its output
/// window, its producers, its tensors and their sources, its scalars and their sources, or
/// its predicate; the shorter one's node count when one's nodes are a prefix of the other's;
/// `None` when every node agrees (or an image does not parse).
pub fn first_differing_node(a: &[u8], b: &[u8]) -> Option<u32> {
    use simpler_core::graph::DefinitionView;
    let (Ok(a), Ok(b)) = (DefinitionView::parse(a), DefinitionView::parse(b)) else {
        return None;
    };
    let n = a.task_count().min(b.task_count());
    let differs = |i: usize| {
        a.node(i) != b.node(i)
            || a.node_offset(i) != b.node_offset(i)
            || !opt_eq(a.fanin(i), b.fanin(i))
            || !opt_eq(a.node_tensors(i), b.node_tensors(i))
            || !opt_eq(a.node_tensor_sources(i), b.node_tensor_sources(i))
            || !opt_eq(a.node_scalars(i), b.node_scalars(i))
            || !opt_eq(a.node_scalar_sources(i), b.node_scalar_sources(i))
            || a.node_predicate(i) != b.node_predicate(i)
    };
    match (0..n).find(|&i| differs(i)) {
        Some(i) => Some(i as u32),
        None if a.task_count() != b.task_count() => Some(n as u32),
        None => None,
    }
}

/// Whether two optional record sequences hold the same records.
pub(super) fn opt_eq<I: Iterator<Item = T>, T: PartialEq>(a: Option<I>, b: Option<I>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.eq(b),
        (None, None) => true,
        _ => false,
    }
}

impl ChipWorker {
    /// Sets how Graph Definitions are retained across binds (the caps, verification). Lower
    /// caps take effect at once: the oldest-used Definitions past them are dropped, host and
    /// device copies; [`GraphRetention::OFF`] drops them all. Waits for the runs in flight
    /// first (their results stay for [`ChipWorker::wait`]).
    pub fn set_graph_retention(&mut self, retention: GraphRetention) -> Result<(), WorkerError> {
        self.settle_all();
        self.retention = retention;
        // No bind is running and none is in flight, so every Definition may go.
        let binds = self.kept.binds + 1;
        self.kept.spare = None;
        self.kept.evict_to(
            binds,
            retention.max_definitions,
            retention.max_bytes,
            &*self.device,
        )?;
        Ok(())
    }

    /// How Graph Definitions are retained across binds.
    pub fn graph_retention(&self) -> GraphRetention {
        self.retention
    }

    /// Drops every retained Graph Definition, freeing its host and device copies: the next
    /// bind records every Graph again. Waits for the runs in flight first.
    pub fn forget_graphs(&mut self) -> Result<(), WorkerError> {
        self.settle_all();
        self.kept.forget(None, &*self.device)
    }

    /// Drops the retained Graph Definitions of `handle`'s callable (its re-registration),
    /// after the runs in flight.
    pub(crate) fn forget_graphs_of(&mut self, handle: CallableHandle) -> Result<(), WorkerError> {
        self.settle_all();
        self.kept.forget(Some(handle.0), &*self.device)
    }

    /// The Graph Definitions retained now: how many, and their images' bytes (each held once
    /// on the host and once in device memory).
    pub fn retained_graphs(&self) -> (usize, usize) {
        (self.kept.items.len(), self.kept.bytes)
    }
}
