//! Guarded replay of a whole bind ([`BindReplay`]): the guard a bind leaves, the check a
//! later bind in the same slot makes against it, the moves of the retained image to where
//! this bind's entry buffers, Graph staging and heap blocks are, and the replay that ships
//! the image without running the orchestration.

use super::graphs::{GRAPH_STAGING_BYTES, SHELL_BOUNDARY, SHELL_DEFINITION, SHELL_HEAP};
use super::{BindReport, BuiltImage, GraphRetention, HostViews, Mirror};
use crate::chip_worker::{ChipArg, ChipWorker, Staging, WorkerError};
use simpler_core::gm::Gm;
use simpler_core::{BufferHandle, ChipStorageTaskArgs, ChipTensor};

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
/// callable; the chip entry as adopted (every entry tensor's layout and view, how the entry
/// buffers overlap one another, every entry scalar); every entry-tensor byte the
/// orchestration read, with its value; and the retained Definitions' generation (none of
/// those its image names was dropped since). A later bind in the same slot that matches all
/// of it builds the same image but for where its per-run memory is: the entry buffers
/// ([`Guard::relocate`]), the Graph staging ([`Guard::move_staging`]) and the heap blocks
/// (moved as the replay places them). The retained image is moved there and shipped. Its
/// buffers are kept across binds (no allocation once grown).
#[derive(Default)]
pub(super) struct Guard {
    /// The rest is meaningful.
    pub(super) valid: bool,
    pub(super) callable: usize,
    /// The chip entry's tensors and scalars.
    pub(super) entry: Vec<ChipTensor>,
    pub(super) scalars: Vec<u64>,
    /// The entry buffers that moved since the guard was taken, as the last check found them,
    /// by old base; and whether two entry buffers overlap.
    moves: Vec<Move>,
    nested: bool,
    /// Whether no two of the guard's entry buffers overlap (found on the first check that
    /// sees a move; a relocation keeps it), and the sort buffer that finds it.
    disjoint: Option<bool>,
    spans: Vec<(u64, u64)>,
    /// Every entry address in the image, found on the first relocation after the guard was
    /// taken (a bind that is never relocated pays nothing for it), and whether it was.
    sites: Vec<Site>,
    sites_found: bool,
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

/// An entry buffer at another address than when the guard was taken: its old base and
/// size, and its new base.
#[derive(Clone, Copy, Debug)]
struct Move {
    from: u64,
    size: u64,
    to: u64,
}

/// Where `addr` is now: moved with the buffer of `moves` (sorted by old base) that held it,
/// or where it was. Found by bisection; buffers that overlap one another keep their distance
/// (the guard checks it), so whichever holds `addr` moves it the same, and only then is the
/// search linear.
fn relocated(moves: &[Move], nested: bool, addr: u64) -> u64 {
    holder(moves, nested, addr, |m| (m.from, m.size)).map_or(addr, |m| addr - m.from + m.to)
}

/// The span of `spans` (sorted by base; `span` gives an item's base and size) that holds
/// `addr`: by bisection, or when spans overlap one another (`nested`) the first that holds it.
fn holder<T>(spans: &[T], nested: bool, addr: u64, span: impl Fn(&T) -> (u64, u64)) -> Option<&T> {
    let holds = |t: &&T| {
        let (base, size) = span(t);
        addr.wrapping_sub(base) < size
    };
    match nested {
        false => spans[..spans.partition_point(|t| span(t).0 <= addr)]
            .last()
            .filter(holds),
        true => spans.iter().find(holds),
    }
}

/// An entry address in a retained image: where it is, which entry buffer holds it, and how
/// far into that buffer it points.
#[derive(Clone, Copy, Debug)]
struct Site {
    /// A word of the payload records, or (with [`STAGING_SITE`] set) a byte offset in the
    /// Graph staging.
    at: u32,
    entry: u32,
    offset: u64,
}

/// Marks a [`Site`] in the Graph staging.
const STAGING_SITE: u32 = 1 << 31;

fn overlap(a: BufferHandle, b: BufferHandle) -> bool {
    a.addr < b.addr.saturating_add(b.size) && b.addr < a.addr.saturating_add(a.size)
}

/// Whether two of `entry`'s buffers overlap: sorted by base into `spans` (kept storage), each
/// compared with the furthest end before it.
fn any_overlap(spans: &mut Vec<(u64, u64)>, entry: &[ChipTensor]) -> bool {
    spans.clear();
    spans.extend(
        (entry.iter())
            .filter(|t| t.buffer.size > 0)
            .map(|t| (t.buffer.addr, t.buffer.addr.saturating_add(t.buffer.size))),
    );
    spans.sort_unstable();
    let mut end = 0;
    for (i, &(base, e)) in spans.iter().enumerate() {
        if i > 0 && base < end {
            return true;
        }
        end = end.max(e);
    }
    false
}

/// Whether every pair of buffers overlaps in `now` exactly when it did in `was`, and an
/// overlapping pair keeps its distance.
fn same_overlaps(was: &[ChipTensor], now: &[ChipTensor]) -> bool {
    for (i, (wi, ni)) in was.iter().zip(now).enumerate() {
        for (wj, nj) in was[i + 1..].iter().zip(&now[i + 1..]) {
            let before = overlap(wi.buffer, wj.buffer);
            if before != overlap(ni.buffer, nj.buffer)
                || (before
                    && wi.buffer.addr.wrapping_sub(wj.buffer.addr)
                        != ni.buffer.addr.wrapping_sub(nj.buffer.addr))
            {
                return false;
            }
        }
    }
    true
}

impl Guard {
    /// Whether a bind of `callable` on `chip`, reading `views`, would build the image this
    /// guard was taken for, up to where its entry buffers are. The buffers that moved are
    /// kept for [`Self::relocate`].
    ///
    /// Moving keeps the image only if the entry buffers overlap one another exactly as they
    /// did (the dependencies the orchestration derived come from that overlap): every pair
    /// overlaps now if and only if it did, and an overlapping pair keeps its distance.
    pub(super) fn holds(
        &mut self,
        callable: usize,
        chip: &ChipStorageTaskArgs,
        views: &HostViews<'_>,
        generation: u64,
    ) -> bool {
        self.moves.clear();
        let now = chip.tensors();
        if !self.valid
            || self.callable != callable
            || self.generation != generation
            || self.scalars != chip.scalars()
            || self.entry.len() != now.len()
        {
            return false;
        }
        for (was, is) in self.entry.iter().zip(now) {
            let mut at_new = *was;
            at_new.buffer.addr = is.buffer.addr;
            if at_new != *is {
                return false;
            }
            if was.buffer.addr != is.buffer.addr {
                self.moves.push(Move {
                    from: was.buffer.addr,
                    size: was.buffer.size,
                    to: is.buffer.addr,
                });
            }
        }
        if !self.moves.is_empty() {
            // The guard's entry either has no two buffers overlapping (the usual case: then
            // the new one must not either, a sort and a sweep) or is compared pair by pair.
            let disjoint = *self
                .disjoint
                .get_or_insert_with(|| !any_overlap(&mut self.spans, &self.entry));
            if disjoint {
                if any_overlap(&mut self.spans, now) {
                    return false;
                }
                self.nested = false;
            } else if !same_overlaps(&self.entry, now) {
                return false;
            } else {
                self.nested = true;
            }
            self.moves.sort_unstable_by_key(|m| m.from);
        }
        let mut at = 0;
        let mut buf = [0u8; 64];
        for &(addr, len) in &self.reads {
            let len = len as usize;
            let Some(dst) = buf.get_mut(..len) else {
                return false;
            };
            let addr = relocated(&self.moves, self.nested, addr);
            if views.read(addr, dst).is_err() || self.values.get(at..at + len) != Some(&*dst) {
                return false;
            }
            at += len;
        }
        true
    }

    /// Moves the retained image to the entry buffers [`Self::holds`] last found moved: every
    /// payload tensor's buffer address and predicate address, and every Graph boundary
    /// tensor's, inside an entry buffer moves with it; the guard then describes the entry as
    /// it is now. Nothing else in an image holds an entry address (the scheduler's state
    /// holds none; Definitions keep no boundary address), and scalars are values: one the
    /// orchestration computed from an address is what verification catches.
    pub(super) fn relocate(mirror: &mut Mirror, chip: &ChipStorageTaskArgs) {
        if mirror.guard.moves.is_empty() {
            return;
        }
        let mut sites = std::mem::take(&mut mirror.guard.sites);
        if !mirror.guard.sites_found {
            sites.clear();
            find_sites(mirror, &mut sites);
            mirror.guard.sites_found = true;
        }
        let now = chip.tensors();
        let words = mirror.payloads.words_mut();
        // The boundaries staged are rewritten: the next bind cannot follow this one's.
        mirror.graphs.memo.forget();
        let staging = &mut mirror.graphs.staging;
        for s in &sites {
            let Some(t) = now.get(s.entry as usize) else {
                continue;
            };
            let addr = t.buffer.addr + s.offset;
            if s.at & STAGING_SITE == 0 {
                if let Some(w) = words.get_mut(s.at as usize) {
                    *w = addr;
                }
            } else {
                let at = (s.at & !STAGING_SITE) as usize;
                if let Some(w) = staging.get_mut(at..at + 8) {
                    w.copy_from_slice(&addr.to_le_bytes());
                }
            }
        }
        let guard = &mut mirror.guard;
        guard.sites = sites;
        let (moves, nested) = (&guard.moves, guard.nested);
        for (addr, _) in &mut guard.reads {
            *addr = relocated(moves, nested, *addr);
        }
        guard.entry.clear();
        guard.entry.extend_from_slice(now);
        guard.moves.clear();
    }
}

impl Guard {
    /// Moves the retained image to this bind's Graph staging at `base`: the Graph outer
    /// tasks' Definition and boundary addresses that point into the last bind's staging (a
    /// retained Definition lives elsewhere and stays).
    pub(super) fn move_staging(mirror: &mut Mirror, base: u64) {
        let was = mirror.guard.staging_base;
        if was == base {
            return;
        }
        for &(shell, _) in &mirror.graphs.shells {
            for index in [SHELL_DEFINITION, SHELL_BOUNDARY] {
                if let Some(w) = mirror.payloads.scalar_word(shell, index) {
                    let words = mirror.payloads.words_mut();
                    if words[w].wrapping_sub(was) < GRAPH_STAGING_BYTES {
                        words[w] = words[w] - was + base;
                    }
                }
            }
        }
        mirror.guard.staging_base = base;
    }

    /// Moves the retained image's heap blocks to `base`: each Graph outer task's heap block
    /// address, and the commit's record of them.
    fn move_heap(mirror: &mut Mirror, base: u64) {
        let Some((was, bytes)) = mirror.guard.heap else {
            return;
        };
        for &(shell, _) in &mirror.graphs.shells {
            if let Some(w) = mirror.payloads.scalar_word(shell, SHELL_HEAP) {
                let words = mirror.payloads.words_mut();
                words[w] = words[w] - was + base;
            }
        }
        for (_, at) in &mut mirror.graphs.committed {
            *at = *at - was + base;
        }
        mirror.guard.heap = Some((base, bytes));
        mirror.graphs.heap_block = Some((base, bytes));
    }
}

/// Finds every entry address in `mirror`'s image (see [`Site`]), against the entry its guard
/// was taken with: the entry buffers sorted by base and found by bisection, or, when two of
/// them overlap, the first that holds the address (overlapping buffers keep their distance,
/// so either gives the same new address).
fn find_sites(mirror: &mut Mirror, sites: &mut Vec<Site>) {
    let guard = &mirror.guard;
    let mut by_base: Vec<(u64, u64, u32)> = (guard.entry.iter().enumerate())
        .map(|(i, t)| (t.buffer.addr, t.buffer.size, i as u32))
        .collect();
    by_base.sort_unstable();
    let holder = |addr: u64| -> Option<(u32, u64)> {
        holder(&by_base, guard.nested, addr, |&(base, size, _)| {
            (base, size)
        })
        .map(|&(base, _, i)| (i, addr - base))
    };
    mirror.payloads.addresses(|at, addr| {
        if let Some((entry, offset)) = holder(addr) {
            sites.push(Site {
                at: at as u32,
                entry,
                offset,
            });
        }
    });
    let staging = &mirror.graphs.staging;
    for &at in &mirror.graphs.boundary_at {
        let Some(w) = staging.get(at as usize..at as usize + 8) else {
            continue;
        };
        let addr = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        if let Some((entry, offset)) = holder(addr) {
            sites.push(Site {
                at: at | STAGING_SITE,
                entry,
                offset,
            });
        }
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
    g.entry.extend_from_slice(staging.chip.tensors());
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
    g.sites_found = false;
    g.disjoint = None;
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
    /// run; the bind's heap blocks are placed again (and the image moved with them, if they
    /// land elsewhere) and the retained image is shipped.
    pub(super) fn replay_bind(
        &mut self,
        slot: usize,
        report: &mut BindReport,
    ) -> Result<Option<BuiltImage>, WorkerError> {
        let heap = self.hbg[slot].as_ref().expect("guarded").guard.heap;
        if let Some((base, bytes)) = heap {
            let at = self
                .device
                .alloc_in(slot, bytes)?
                .ok_or(WorkerError::OutOfDeviceMemory { bytes })?;
            if at != base {
                Guard::move_heap(self.hbg[slot].as_mut().expect("guarded"), at);
            }
        }
        let g = &self.hbg[slot].as_ref().expect("guarded").guard;
        report.tasks = g.tasks;
        report.image_bytes = g.image_bytes;
        report.graphs = g.graphs;
        report.replayed = true;
        Ok(g.built)
    }
}
