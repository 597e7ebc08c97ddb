//! The Graph side of a bind: the per-slot Graph state a mirror keeps across binds
//! ([`Graphs`]), the orchestration's Graph sink that accepts each submission ([`BindGraphs`]),
//! and `graph_commit` ([`commit`]), which waits for the recordings, places each Definition and
//! patches the outer tasks. The module documentation of `hbg` says what a Graph does on hbg.

use super::memo::{self, Accepted, Memo, StagingBytes};
use super::retention::{first_differing_node, retain, Kept};
use super::{GraphPhases, GraphRetention, HbgError};
use crate::chip_worker::WorkerError;
use crate::image_payloads::ImagePayloads;
use crate::record::{Inflight, InflightStatus, RecorderPool};
use simpler_aicpu::{GraphBody, GraphRef, GraphSink};
use simpler_core::graph::GraphDefinitionHeader;
use simpler_core::orchestrator::TaskArg;
use simpler_core::TaskId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Device memory a bind reserves for its Definitions and Graph boundaries.
pub(super) const GRAPH_STAGING_BYTES: u64 = 8 << 20;
/// Definitions one bind may hold.
pub(super) const MAX_DEFINITIONS: usize = simpler_core::graph::GRAPH_MAX_DEFINITIONS;
/// Alignment of each Graph invocation's heap block.
pub(super) const GRAPH_HEAP_ALIGN: u64 = 1024;
/// The scalars of a Graph's outer task that hold device addresses (see
/// `Rt::submit_outer`): its Definition's, its boundary's (both in the bind's Graph staging
/// unless the Definition is retained) and its heap block's.
pub(super) const SHELL_DEFINITION: usize = 1;
pub(super) const SHELL_BOUNDARY: usize = 2;
pub(super) const SHELL_HEAP: usize = 4;

/// The Graph state a mirror keeps across binds: the in-flight entries (reused), the outer
/// tasks to patch, and the staging buffer of Definitions and boundaries. (The recorder pool
/// belongs to the `ChipWorker`: started at callable registration, alive until finalize.)
#[derive(Default)]
pub(super) struct Graphs {
    /// The in-flight entries, reused across binds: the first `used` are this bind's.
    pub(super) entries: Vec<Arc<Inflight>>,
    /// Entries (new keys) this bind has begun.
    pub(super) used: usize,
    /// This bind's keys and their entry index, in the order they were first submitted.
    pub(super) keys: Vec<(u64, usize)>,
    /// Every accepted Graph invocation's outer task and its entry index, in submission order.
    pub(super) shells: Vec<(TaskId, usize)>,
    /// Per entry, the device address its Definition was placed at (set by the commit).
    pub(super) placed: Vec<u64>,
    /// The last commit: (key, heap block) per outer task, in submission order.
    pub(super) committed: Vec<(u64, u64)>,
    /// The last commit's heap blocks, as one allocation: its start and bytes.
    pub(super) heap_block: Option<(u64, u64)>,
    /// What `graph_upload` copies to the device: the boundaries (each invocation's tensors,
    /// then its scalars) as they are accepted, then the Definitions at the commit.
    pub(super) staging: StagingBytes,
    /// What the last bind accepted, followed by a bind that submits the same.
    pub(super) memo: Memo,
    /// This bind's submissions accepted by following the last bind's.
    pub(super) followed: u64,
    /// Where in `staging` each accepted boundary tensor starts (a replay whose entry moved
    /// relocates their buffer addresses).
    pub(super) boundary_at: Vec<u32>,
    /// The entry of the invocation accepted last (its outer task is submitted next).
    pub(super) pending: usize,
    /// Binds so far (the recorder pool's rotation follows it).
    pub(super) binds: u64,
    /// This bind's time in `definition` (graph_begin).
    pub(super) begin_time: Duration,
    /// This bind's Graph sub-phases (set by the commit).
    pub(super) phases: GraphPhases,
    /// Graph submissions so far that recorded a Definition, replayed one, or ran inline
    /// (cumulative: a bind reports the difference).
    pub(super) counts: [u64; 3],
    /// The retention settings this bind runs with.
    pub(super) retention: GraphRetention,
    /// The callable this bind runs.
    pub(super) callable: usize,
    /// The Definitions retained across binds.
    pub(super) kept: Kept,
}

/// The orchestration's Graph sink during a bind: a new key starts a recording on the pool
/// (the body runs on a recorder thread while the orchestration goes on); a known key with a
/// matching boundary adds one more outer task; the boundary of every accepted invocation is
/// staged for `graph_upload`.
pub(super) struct BindGraphs<'g> {
    pub(super) g: &'g mut Graphs,
    pub(super) pool: &'g mut RecorderPool,
    pub(super) base: u64,
}

fn place(staging: &mut StagingBytes, base: u64, bytes: &[u8]) -> Option<u64> {
    let at = staging.len().div_ceil(8) * 8;
    let end = at + bytes.len();
    if end as u64 > GRAPH_STAGING_BYTES {
        return None;
    }
    staging.pad_to(at);
    staging.push(bytes);
    Some(base + at as u64)
}

impl Graphs {
    /// Empties the per-bind state for a new bind and tells the pool one begins: the rotation
    /// advances, and recordings may run while the orchestration builds. Returns the pool's
    /// count of orchestration wake-ups so far (the bind's own is the difference at its end).
    pub(super) fn begin_bind(
        &mut self,
        pool: &mut RecorderPool,
        callable: usize,
        retention: GraphRetention,
    ) -> u64 {
        self.callable = callable;
        self.retention = retention;
        self.kept.hits.clear();
        self.kept.binds += 1;
        self.memo.begin((callable, retention, self.kept.generation));
        self.followed = 0;
        self.staging.clear();
        self.boundary_at.clear();
        self.keys.clear();
        self.shells.clear();
        self.used = 0;
        self.binds += 1;
        self.begin_time = Duration::ZERO;
        pool.rotate(self.binds);
        let before = pool.orchestration_wakes();
        pool.orchestrating(true);
        before
    }
}

impl GraphSink for BindGraphs<'_> {
    fn definition(
        &mut self,
        full_key: u64,
        body: GraphBody,
        boundary: &[TaskArg],
        scalars: &[u64],
    ) -> Option<GraphRef> {
        let start = Instant::now();
        let r = self.accept(full_key, body, boundary, scalars);
        self.g.begin_time += start.elapsed();
        r
    }

    fn submitted(&mut self, outer: TaskId) {
        self.g.shells.push((outer, self.g.pending));
    }
}

impl BindGraphs<'_> {
    fn accept(
        &mut self,
        full_key: u64,
        body: GraphBody,
        boundary: &[TaskArg],
        scalars: &[u64],
    ) -> Option<GraphRef> {
        let g = &mut *self.g;
        // The tensors back to back (128 bytes each, so each stays 8-byte aligned), room checked
        // once for all of them.
        const SIZE: usize = core::mem::size_of::<simpler_core::TaskTensor>();
        let mark = (g.staging.len(), g.boundary_at.len());
        let first = g.staging.len().div_ceil(8) * 8;
        let inline = |g: &mut Graphs| {
            g.staging.truncate(mark.0);
            g.boundary_at.truncate(mark.1);
            g.memo
                .note(full_key, first, boundary, scalars.len(), None, false);
            g.counts[2] += 1;
            None
        };
        if (first + boundary.len() * SIZE) as u64 > GRAPH_STAGING_BYTES {
            // No room: nothing half-staged stays, and the body runs inline.
            return inline(g);
        }
        g.staging.pad_to(first);
        // The last bind accepted the same submission here: its decision stands, and its
        // boundary is staged already (the memo module says why that is sound).
        let recalled = g
            .memo
            .recall(full_key, first, boundary, scalars.len())
            .filter(|&(_, e)| match g.entries.get(e) {
                Some(entry) => {
                    let inner = entry.lock();
                    let first_invocation = inner.boundary.as_ref().map_or(&[][..], |b| &b.tensors);
                    g.memo.confirm(boundary, first_invocation)
                }
                None => g.memo.confirm(boundary, &[]),
            })
            .map(|(accepted, _)| accepted);
        debug_assert!(
            recalled.is_none() || g.staging.holds_at(first, boundary),
            "graph {full_key:#x}: a followed boundary is not the one staged"
        );
        // Whether the boundary equals its key's first invocation past the view words, for a
        // later submission of a key (what the memo may remember).
        let mut rememberable = true;
        let decided = match recalled {
            Some(Accepted::Again(e)) => Some(e),
            Some(Accepted::Retained(_)) => None,
            None => match g.keys.iter().find(|(k, _)| *k == full_key) {
                Some(&(_, e)) => {
                    // Compared with the first invocation's boundary, on the entry, under its
                    // lock (against the arguments as they are: a replay's boundary is not
                    // copied).
                    let inner = g.entries[e].lock();
                    let same = inner.boundary.as_ref().is_some_and(|first| {
                        let same = first.matches_args(&inner.reps, boundary, scalars.len());
                        rememberable = same
                            && first
                                .tensors
                                .iter()
                                .zip(boundary)
                                .all(|(t, a)| memo::same_past_view(t, &a.tensor));
                        same
                    });
                    drop(inner);
                    if !same {
                        log::warn!(
                            "graph {full_key:#x}: boundary differs from the recorded one; inline"
                        );
                        return inline(g);
                    }
                    Some(e)
                }
                None => None,
            },
        };
        let entry = match decided {
            Some(e) => e,
            None => {
                if g.used >= MAX_DEFINITIONS {
                    return inline(g);
                }
                if g.entries.len() <= g.used {
                    g.entries.push(Arc::new(Inflight::default()));
                }
                g.used
            }
        };
        if recalled.is_some() {
            g.staging.skip(boundary.len() * SIZE);
        } else {
            for a in boundary {
                g.staging.push(bytemuck::bytes_of(&a.tensor));
            }
        }
        // Below GRAPH_STAGING_BYTES, so every offset fits.
        g.boundary_at
            .extend((0..boundary.len()).map(|i| (first + i * SIZE) as u32));
        let at = (!boundary.is_empty()).then_some(self.base + first as u64);
        // The boundary scalars follow the tensors: replays read their own values there.
        if !scalars.is_empty()
            && place(&mut g.staging, self.base, bytemuck::cast_slice(scalars)).is_none()
        {
            return inline(g);
        }
        let accepted = if decided.is_none() {
            // A Definition retained from an earlier bind for this key and boundary signature
            // replays as it is: nothing recorded, no recorder woken (unless verifying).
            let hit = match recalled {
                Some(Accepted::Retained(r)) => Some(r),
                _ if g.retention.max_definitions == 0 => None,
                _ => {
                    let callable = g.callable;
                    g.kept
                        .items
                        .iter()
                        .position(|r| r.matches(callable, full_key, boundary, scalars.len()))
                }
            };
            // The first invocation's deep copy, kept on the entry; a retained Definition's
            // boundary matched has this one's alias relation.
            if recalled.is_some() {
                // Followed: the entry holds this boundary already (the memo confirmed it).
                debug_assert!(g.entries[entry].lock().boundary.as_ref().is_some_and(|b| {
                    b.tensors.len() == boundary.len()
                        && b.tensors.iter().zip(boundary).all(|(t, a)| *t == a.tensor)
                        && b.tags.iter().zip(boundary).all(|(&t, a)| t == a.tag)
                }));
                g.entries[entry].begin_same(full_key, scalars);
            } else {
                let reps = hit.map(|r| &g.kept.items[r].reps);
                g.entries[entry].begin(full_key, boundary, scalars, reps);
            }
            if g.kept.hits.len() <= entry {
                g.kept.hits.resize(entry + 1, None);
            }
            g.kept.hits[entry] = hit;
            if let Some(r) = hit {
                g.kept.items[r].last_bind = g.kept.binds;
            }
            let accepted = match hit {
                Some(r) if !g.retention.verify => {
                    g.entries[entry].ready();
                    g.counts[1] += 1;
                    Some(Accepted::Retained(r))
                }
                _ => {
                    self.pool.submit(g.entries[entry].clone(), body);
                    g.counts[0] += 1;
                    None
                }
            };
            g.keys.push((full_key, entry));
            g.used += 1;
            accepted
        } else {
            g.counts[1] += 1;
            Some(Accepted::Again(entry))
        };
        let remembered = accepted.filter(|_| rememberable).map(|a| (a, entry));
        g.memo.note(
            full_key,
            first,
            boundary,
            scalars.len(),
            remembered,
            recalled.is_some(),
        );
        g.followed += recalled.is_some() as u64;
        g.pending = entry;
        at.map(|at| GraphRef {
            boundary: at,
            scalars: scalars.len() as u32,
        })
    }
}

/// `graph_commit`: waits for every recording of the bind, places each Definition once, and
/// patches each outer task, in submission order, with its Definition's address and a heap
/// block of its own. A failed recording fails the bind (its outer tasks are already in the
/// graph, so there is no inline fallback).
pub(super) fn commit(
    g: &mut Graphs,
    payloads: &ImagePayloads,
    device: &dyn crate::transport::DeviceTransport,
    (slot, staging_base): (usize, u64),
    pool: &mut RecorderPool,
) -> Result<(), WorkerError> {
    g.placed.clear();
    let mut failure = None;
    let wait_start = Instant::now();
    // Jobs no recorder has started yet are recorded here rather than waited for.
    let helped = pool.help() as u64;
    for e in 0..g.used {
        let entry = &g.entries[e];
        if entry.wait() == InflightStatus::Failed && failure.is_none() {
            let inner = entry.lock();
            failure = Some(HbgError::GraphFailed {
                key: inner.full_key,
                reason: inner
                    .error
                    .as_ref()
                    .map_or_else(String::new, |e| crate::ErrorChain(e).to_string()),
            });
        }
    }
    g.phases = GraphPhases {
        graph_begin: g.begin_time,
        recording_wait: wait_start.elapsed(),
        host_orch_wakes: g.phases.host_orch_wakes,
        commit_recordings: helped,
        followed: g.followed,
        ..GraphPhases::default()
    };
    if let Some(f) = failure {
        return Err(WorkerError::Hbg(f));
    }
    let mut heaps = 0u64;
    let mut required = [0u64; MAX_DEFINITIONS];
    for (e, need) in required.iter_mut().enumerate().take(g.used) {
        let hit = g.kept.hits.get(e).copied().flatten();
        if hit.is_some() {
            g.phases.retained_hits += 1;
        }
        let replayed = hit.filter(|_| !g.retention.verify);
        if let Some(r) = replayed {
            // Retained: placed once, in persistent device memory; nothing to stage.
            let r = &g.kept.items[r];
            *need = r.required_heap;
            g.placed.push(r.device);
            continue;
        }
        let inner = g.entries[e].lock();
        let header: GraphDefinitionHeader = inner
            .image
            .get(..core::mem::size_of::<GraphDefinitionHeader>())
            .map(bytemuck::pod_read_unaligned)
            .ok_or_else(|| {
                WorkerError::Hbg(HbgError::GraphFailed {
                    key: inner.full_key,
                    reason: "the Definition image is shorter than its header".into(),
                })
            })?;
        g.phases.record_node += inner.times.0;
        g.phases.build_definition += inner.times.1;
        g.phases.record_allocs += inner.allocs;
        g.phases.recorded_nodes += header.task_count as u64;
        g.phases.definitions_built += 1;
        *need = header.required_heap.max(1).div_ceil(GRAPH_HEAP_ALIGN) * GRAPH_HEAP_ALIGN;
        if let Some(r) = hit {
            // Verification: the body recorded again must give the retained Definition.
            let kept = &g.kept.items[r];
            if kept.content_hash != header.content_hash || kept.image != inner.image {
                return Err(WorkerError::Hbg(HbgError::GraphChanged {
                    key: inner.full_key,
                    node: first_differing_node(&kept.image, &inner.image),
                }));
            }
            g.placed.push(kept.device);
            continue;
        }
        let len = inner.image.len();
        let retainable = g.retention.max_definitions > 0 && len <= g.retention.max_bytes;
        let room = retainable
            && g.kept.evict_to(
                g.kept.binds,
                g.retention.max_definitions - 1,
                g.retention.max_bytes - len,
                device,
            )?;
        let kept = if room {
            let owner = (g.callable, g.kept.binds);
            retain(&mut g.kept, owner, &inner, &header, *need, device)?
        } else {
            None
        };
        let at = match kept {
            Some(at) => at,
            // Not retained (retention off, over the caps, or no device memory for it): placed
            // in this bind's staging and uploaded with it.
            None => place(&mut g.staging, staging_base, &inner.image)
                .ok_or(WorkerError::OutOfDeviceMemory { bytes: len as u64 })?,
        };
        g.phases.definition_bytes_uploaded += len as u64;
        g.placed.push(at);
    }
    for &(_, e) in &g.shells {
        heaps += required[e];
    }
    g.heap_block = None;
    if g.shells.is_empty() {
        return Ok(());
    }
    let heap_base = device
        .alloc_in(slot, heaps)?
        .ok_or(WorkerError::OutOfDeviceMemory { bytes: heaps })?;
    g.heap_block = Some((heap_base, heaps));
    let mut at = heap_base;
    g.committed.clear();
    for &(shell, e) in &g.shells {
        payloads.patch_scalar(shell, SHELL_DEFINITION, g.placed[e]);
        payloads.patch_scalar(shell, SHELL_HEAP, at);
        g.committed.push((g.keys[e].0, at));
        at += required[e];
    }
    Ok(())
}
