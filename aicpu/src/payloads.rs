//! Per-slot task payloads: what the cores need to run a task, written by the orchestrator
//! before the task is published and read by the scheduler that dispatches it.
//!
//! A record is atomic words (so the structure can be shared by the orchestrator and scheduler
//! threads without locks or `unsafe`): per slot a head (the kernel id per core slot, the SPMD
//! block count, the tensor and scalar counts, where the body starts), and a body in the
//! ring's arena holding only the used tensors and scalars, then the task's dispatch predicate
//! if it has one. The publish (a Release in the slot
//! state machine) orders the writes before any scheduler's pop of the task (an Acquire).
//! [`PayloadSink`] is what the orchestration API writes through: these records on a device,
//! the live image directly on a host build.

use simpler_core::image::{export_words, import_words, ImageError, Reader, Writer};
use simpler_core::layout::{Carver, Layout, LayoutError, Span};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::TaskArg;
use simpler_core::predicate::DispatchPredicate;
use simpler_core::ring::MAX_RINGS;
use simpler_core::sync::{AtomicU64, AtomicUsize, Ordering};
use simpler_core::{CoreTaskArgs, TaskId, TaskTensor};

/// A kernel slot with no kernel.
pub const NO_KERNEL: u32 = u32::MAX;

/// The kernel per core slot of one cluster: AIC, AIV0, AIV1 (`NO_KERNEL` when unused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixedKernels {
    /// The cube core's kernel.
    pub aic: u32,
    /// The left vector core's kernel.
    pub aiv0: u32,
    /// The right vector core's kernel.
    pub aiv1: u32,
}

impl MixedKernels {
    /// No kernel at all (a dummy task).
    pub const NONE: Self = Self {
        aic: NO_KERNEL,
        aiv0: NO_KERNEL,
        aiv1: NO_KERNEL,
    };

    /// The kernel of slot `sub` (0 AIC, 1 AIV0, 2 AIV1).
    pub fn slot(&self, sub: usize) -> u32 {
        match sub {
            0 => self.aic,
            1 => self.aiv0,
            _ => self.aiv1,
        }
    }
}

/// Words of one tensor in a record.
pub const TENSOR_WORDS: usize = TaskTensor::PACKED_WORDS;
/// Words of a slot's head: the kernels, the block count, the tensor and scalar counts and
/// where the body starts.
const HEAD_WORDS: usize = 4;
/// The head words an image carries: all but the body's start, which the import chooses.
const EXPORTED_HEAD_WORDS: usize = 3;
/// The most words one record's body takes: every tensor and every scalar at their caps, and a
/// predicate.
pub const MAX_BODY_WORDS: usize =
    CORE_MAX_TENSOR_ARGS * TENSOR_WORDS + CORE_MAX_SCALAR_ARGS + DispatchPredicate::WORDS;
/// The bit of a head's counts word (above the tensor count) saying the body ends with a
/// [`DispatchPredicate`].
const PREDICATE_FLAG: u64 = 1 << 31;

/// Where the payload records live: per ring, a dense array of slot heads and a body arena of
/// `window × MAX_BODY_WORDS` words that the records' bodies (used tensors, then used scalars)
/// fill one after another in submission order.
///
/// The arena is what keeps a task's payload write to the few cache lines it uses: records at
/// a fixed stride of their caps (4 KiB) put every task on its own page, and a build from
/// cold caches paid a miss and a TLB walk per task for them.
#[derive(Clone, Copy, Debug)]
pub struct PayloadsLayout {
    layout: Layout,
    heads: [Span<AtomicU64>; MAX_RINGS],
    bodies: [Span<AtomicU64>; MAX_RINGS],
    windows: [u32; MAX_RINGS],
}

impl PayloadsLayout {
    /// Records for rings of `windows` slots.
    pub fn new(windows: [u32; MAX_RINGS]) -> Result<Self, LayoutError> {
        let mut layout = Layout::new();
        let mut heads = [Span::empty(); MAX_RINGS];
        let mut bodies = [Span::empty(); MAX_RINGS];
        for r in 0..MAX_RINGS {
            let slots = windows[r] as usize;
            heads[r] = layout.array::<AtomicU64>(slots * HEAD_WORDS)?;
            bodies[r] = layout.array::<AtomicU64>(slots * MAX_BODY_WORDS)?;
        }
        Ok(Self {
            layout,
            heads,
            bodies,
            windows,
        })
    }

    /// Bytes needed.
    pub fn size(&self) -> usize {
        self.layout.size()
    }
}

/// The payload records of every slot: a head per slot and a body in its ring's arena.
///
/// The orchestrator (the one writer of a ring) places each body right after the previous one,
/// starting over at the arena's beginning when the rest is too short for it. The bodies of live
/// tasks never collide: at most `window - 1` tasks of a ring are live (the orchestrator's claim
/// keeps a slot free), a body is at most [`MAX_BODY_WORDS`], and the one restart within them
/// wastes less than a body, so they span less than the arena's `window × MAX_BODY_WORDS`. A
/// retired task's record is never read again, so its body may be overwritten.
pub struct TaskPayloads<'a> {
    heads: [&'a [AtomicU64]; MAX_RINGS],
    bodies: [&'a [AtomicU64]; MAX_RINGS],
    masks: [u32; MAX_RINGS],
    /// Per ring, where the next body goes: the ring's writer's own state, read and written
    /// only by it (an atomic because the structure is shared with the schedulers).
    cursors: [AtomicUsize; MAX_RINGS],
    /// Told the arena words a coming record will be written into ([`Self::with_write_hint`]).
    write_hint: fn(&[AtomicU64]),
}

/// How far past the end of the record just written [`TaskPayloads::write`] hints the arena,
/// and how much of it: a window one typical record long (five tensors and a few scalars),
/// one record ahead, so each line is hinted about one record before its stores.
pub const WRITE_AHEAD_WORDS: usize = 64;

/// One record: its head's fields and its body (used tensors, then used scalars).
struct PayloadRecord<'r> {
    head: &'r [AtomicU64],
    tensors: usize,
    scalars: usize,
    predicated: bool,
    body: &'r [AtomicU64],
}

impl PayloadRecord<'_> {
    fn scalar_words(&self) -> &[AtomicU64] {
        // `record` checked that the body holds `body_words` words: tensors, scalars, predicate.
        let at = self.tensors * TENSOR_WORDS;
        self.body.get(at..at + self.scalars).unwrap_or(&[])
    }

    fn predicate_words(&self) -> Option<&[AtomicU64]> {
        let at = self.tensors * TENSOR_WORDS + self.scalars;
        self.predicated
            .then(|| self.body.get(at..at + DispatchPredicate::WORDS))
            .flatten()
    }
}

/// Words of a body of `tensors` tensors, `scalars` scalars and maybe a predicate.
const fn body_words(tensors: usize, scalars: usize, predicated: bool) -> usize {
    tensors * TENSOR_WORDS
        + scalars
        + if predicated {
            DispatchPredicate::WORDS
        } else {
            0
        }
}

/// A record's first three head words, as the device's records hold them and an image carries
/// them: the kernels of the AIC and AIV0 slots, the AIV1 kernel and the block count, and the
/// tensor and scalar counts with whether a predicate follows them.
pub fn head_words(
    kernels: MixedKernels,
    block_num: u16,
    tensors: usize,
    scalars: usize,
    predicated: bool,
) -> [u64; 3] {
    [
        kernels.aic as u64 | (kernels.aiv0 as u64) << 32,
        kernels.aiv1 as u64 | (block_num as u64) << 32,
        tensors as u64 | (scalars as u64) << 32 | if predicated { PREDICATE_FLAG } else { 0 },
    ]
}

/// The tensor and scalar counts a head's counts word (the third of [`head_words`]) holds,
/// unclamped, and whether a predicate follows.
pub const fn decode_counts(counts: u64) -> (usize, usize, bool) {
    (
        (counts & (PREDICATE_FLAG - 1)) as usize,
        (counts >> 32) as usize,
        counts & PREDICATE_FLAG != 0,
    )
}

/// The tensor and scalar counts a head holds, clamped to the caps, and whether a predicate
/// follows.
fn counts(head: &[AtomicU64]) -> (usize, usize, bool) {
    let (t, s, p) = decode_counts(head[2].load(Ordering::Relaxed));
    (t.min(CORE_MAX_TENSOR_ARGS), s.min(CORE_MAX_SCALAR_ARGS), p)
}

impl<'a> TaskPayloads<'a> {
    fn carve(
        region: &'a mut [u8],
        layout: &PayloadsLayout,
        zero: bool,
    ) -> Result<Self, LayoutError> {
        let mut c = Carver::new(region, &layout.layout)?;
        let mut heads: [&'a [AtomicU64]; MAX_RINGS] = [&[]; MAX_RINGS];
        let mut bodies: [&'a [AtomicU64]; MAX_RINGS] = [&[]; MAX_RINGS];
        for r in 0..MAX_RINGS {
            heads[r] = c.atomic_with(layout.heads[r], zero)?;
            bodies[r] = c.atomic_with(layout.bodies[r], zero)?;
        }
        Ok(Self {
            heads,
            bodies,
            masks: layout.windows.map(|w| w.wrapping_sub(1)),
            cursors: Default::default(),
            write_hint: |_| {},
        })
    }

    /// Has [`Self::write`], after each record, hand `hint` the arena words one record further
    /// on, where the record after next will likely go (the platform's prefetch for writing,
    /// where it has one). The schedulers on other cores last read those lines, so without it
    /// each store of a record waits for its line to be given up; with it, that happens while
    /// the orchestrator builds the next task. By default, nothing is hinted.
    pub fn with_write_hint(mut self, hint: fn(&[AtomicU64])) -> Self {
        self.write_hint = hint;
        self
    }

    /// Carves the records out of `region`, zeroed.
    pub fn init(region: &'a mut [u8], layout: &PayloadsLayout) -> Result<Self, LayoutError> {
        Self::carve(region, layout, true)
    }

    /// Carves the records out of `region` keeping its bytes, the arenas' bodies placed from
    /// their beginnings again: a record is written whole when its slot is claimed, so a region
    /// that held earlier records (or fresh zeroed pages, which then stay untouched) needs no
    /// formatting.
    pub fn attach(region: &'a mut [u8], layout: &PayloadsLayout) -> Result<Self, LayoutError> {
        Self::carve(region, layout, false)
    }

    fn head(&self, task: TaskId) -> Option<&[AtomicU64]> {
        let ring = task.ring() as usize;
        let heads = self.heads.get(ring)?;
        let slot = (task.local() & self.masks[ring]) as usize;
        heads.get(slot * HEAD_WORDS..(slot + 1) * HEAD_WORDS)
    }

    /// Hands `hint` the words of `task`'s record (its head, then its body) ahead of its
    /// dispatch: the orchestrator's thread wrote them, so on another core they are misses
    /// that a prefetch can overlap with the rest of a scheduler pass.
    pub fn hint_record(&self, task: TaskId, mut hint: impl FnMut(&[AtomicU64])) {
        if let Some(head) = self.head(task) {
            hint(head);
        }
        if let Some(rec) = self.record(task) {
            hint(rec.body);
        }
    }

    /// `task`'s record, if its head names a body inside the arena.
    fn record(&self, task: TaskId) -> Option<PayloadRecord<'_>> {
        let head = self.head(task)?;
        let (tensors, scalars, predicated) = counts(head);
        let start = head[3].load(Ordering::Relaxed) as usize;
        let len = body_words(tensors, scalars, predicated);
        let body = self
            .bodies
            .get(task.ring() as usize)?
            .get(start..start.checked_add(len)?)?;
        Some(PayloadRecord {
            head,
            tensors,
            scalars,
            predicated,
            body,
        })
    }

    /// Writes `task`'s record. Tensors and scalars past the caps are the caller's error to
    /// refuse before submitting; here they are clamped.
    pub fn write(
        &self,
        task: TaskId,
        kernels: MixedKernels,
        block_num: u16,
        tensors: impl ExactSizeIterator<Item = TaskTensor>,
        scalars: &[u64],
        predicate: Option<&DispatchPredicate>,
    ) {
        let Some(head) = self.head(task) else {
            return;
        };
        let ring = task.ring() as usize;
        let nt = tensors.len().min(CORE_MAX_TENSOR_ARGS);
        let ns = scalars.len().min(CORE_MAX_SCALAR_ARGS);
        let len = body_words(nt, ns, predicate.is_some());
        let arena = self.bodies[ring];
        let mut start = self.cursors[ring].load(Ordering::Relaxed);
        if start + len > arena.len() {
            start = 0;
        }
        // A ring with slots has an arena of at least one whole body.
        let Some(body) = arena.get(start..start + len) else {
            return;
        };
        self.cursors[ring].store(start + len, Ordering::Relaxed);
        let words = head_words(kernels, block_num, nt, ns, predicate.is_some());
        for (cell, w) in head.iter().zip(words) {
            cell.store(w, Ordering::Relaxed);
        }
        head[3].store(start as u64, Ordering::Relaxed);
        // `body` holds `len` words, at least the tensors' and the scalars' (`body_words`).
        let Some((tensor_words, rest)) = body.split_at_checked(nt * TENSOR_WORDS) else {
            return;
        };
        let Some((scalar_words, predicate_words)) = rest.split_at_checked(ns) else {
            return;
        };
        for (cells, t) in tensor_words.chunks_exact(TENSOR_WORDS).zip(tensors) {
            for (cell, w) in cells.iter().zip(t.packed()) {
                cell.store(w, Ordering::Relaxed);
            }
        }
        for (cell, &v) in scalar_words.iter().zip(scalars) {
            cell.store(v, Ordering::Relaxed);
        }
        if let Some(p) = predicate {
            for (cell, w) in predicate_words.iter().zip(p.to_words()) {
                cell.store(w, Ordering::Relaxed);
            }
        }
        let ahead = (start + len + WRITE_AHEAD_WORDS).min(arena.len());
        let window = arena.get(ahead..(ahead + WRITE_AHEAD_WORDS).min(arena.len()));
        (self.write_hint)(window.unwrap_or(&[]));
    }

    /// `task`'s dispatch predicate, if its record carries one.
    pub fn predicate(&self, task: TaskId) -> Option<DispatchPredicate> {
        // Most tasks have none: the head's flag answers before the body is located.
        if !counts(self.head(task)?).2 {
            return None;
        }
        let rec = self.record(task)?;
        let cells = rec.predicate_words()?;
        let mut words = [0u64; DispatchPredicate::WORDS];
        for (w, cell) in words.iter_mut().zip(cells) {
            *w = cell.load(Ordering::Relaxed);
        }
        Some(DispatchPredicate::from_words(words))
    }

    /// Copies `task`'s first `out.len()` scalars (fewer if it has fewer) into `out`; returns
    /// how many. Reads only the record's head and those scalar words.
    pub fn scalars(&self, task: TaskId, out: &mut [u64]) -> usize {
        let Some(rec) = self.record(task) else {
            return 0;
        };
        let n = rec.scalars.min(out.len());
        for (o, cell) in out.iter_mut().take(n).zip(rec.scalar_words()) {
            *o = cell.load(Ordering::Relaxed);
        }
        n
    }

    /// Overwrites scalar `index` of `task`'s record (the host patches a Graph's outer task
    /// once its Definition is placed); false if the task has no such scalar.
    pub fn patch_scalar(&self, task: TaskId, index: usize, value: u64) -> bool {
        let Some(rec) = self.record(task) else {
            return false;
        };
        match rec.scalar_words().get(index) {
            Some(cell) => {
                cell.store(value, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// The kernels and block count of `task`.
    pub fn kernels(&self, task: TaskId) -> (MixedKernels, u16) {
        let Some(head) = self.head(task) else {
            return (MixedKernels::NONE, 1);
        };
        let w0 = head[0].load(Ordering::Relaxed);
        let w1 = head[1].load(Ordering::Relaxed);
        (
            MixedKernels {
                aic: w0 as u32,
                aiv0: (w0 >> 32) as u32,
                aiv1: w1 as u32,
            },
            (w1 >> 32) as u16,
        )
    }

    /// Copies `task`'s arguments into `args` (replacing its contents).
    pub fn read_args(&self, task: TaskId, args: &mut CoreTaskArgs) {
        args.clear();
        let Some(rec) = self.record(task) else {
            return;
        };
        let tensor_words = rec.body.get(..rec.tensors * TENSOR_WORDS).unwrap_or(&[]);
        for cells in tensor_words.chunks_exact(TENSOR_WORDS) {
            let mut words = [0u64; TENSOR_WORDS];
            for (w, cell) in words.iter_mut().zip(cells) {
                *w = cell.load(Ordering::Relaxed);
            }
            // Within the caps; the push cannot fail.
            let _ = args.push_tensor(TaskTensor::from_packed(words));
        }
        for cell in rec.scalar_words() {
            let _ = args.push_scalar(cell.load(Ordering::Relaxed));
        }
    }
}

/// The live image of the payloads: the records of the first `tasks[r]` tasks of every ring,
/// each its task id, its head's first three words (kernels, block count, counts) and its
/// body. Within a ring the records come in task order; rings may interleave (a host build
/// writes its image in submission order, [`PayloadSink`] by [`PayloadSink`]). The import places
/// each ring's bodies one after another from its arena's beginning, as a build from an empty
/// ring does, and writes where each starts into its head.
impl TaskPayloads<'_> {
    /// An upper bound of the image of the first `tasks[r]` records of every ring.
    pub fn image_bound(tasks: &[u32; MAX_RINGS]) -> usize {
        tasks
            .iter()
            .map(|&t| t as usize * (1 + EXPORTED_HEAD_WORDS + MAX_BODY_WORDS) * 8)
            .sum()
    }

    /// Writes the live image of the first `tasks[r]` records of every ring, ring by ring.
    pub fn export(&self, tasks: &[u32; MAX_RINGS], w: &mut Writer<'_>) -> Result<(), ImageError> {
        for (ring, &n) in tasks.iter().enumerate() {
            for local in 0..n {
                let id = TaskId::new(ring as u32, local);
                let rec = self.record(id).ok_or(ImageError::Usage {
                    field: "payload.tasks",
                    value: n as u64,
                })?;
                export_words(&[AtomicU64::new(id.0)], w)?;
                export_words(&rec.head[..EXPORTED_HEAD_WORDS], w)?;
                export_words(rec.body, w)?;
            }
        }
        Ok(())
    }

    /// Reads an image of the first `tasks[r]` records of every ring (by [`Self::export`] or
    /// a host build). Refused by field: more tasks than a ring has slots, a record of a ring
    /// out of range, out of task order or past its ring's count, and more tensors or scalars
    /// than the caps.
    pub fn import(&self, tasks: &[u32; MAX_RINGS], r: &mut Reader<'_>) -> Result<(), ImageError> {
        for (ring, &n) in tasks.iter().enumerate() {
            if n as usize * HEAD_WORDS > self.heads[ring].len() {
                return Err(ImageError::Usage {
                    field: "payload.tasks",
                    value: n as u64,
                });
            }
        }
        let mut next = [0u32; MAX_RINGS];
        let mut starts = [0usize; MAX_RINGS];
        let total: u64 = tasks.iter().map(|&t| t as u64).sum();
        for _ in 0..total {
            let word = AtomicU64::new(0);
            import_words(core::slice::from_ref(&word), r)?;
            let id = TaskId(word.load(Ordering::Relaxed));
            let ring = id.ring() as usize;
            if ring >= MAX_RINGS || id.local() != next[ring] || next[ring] >= tasks[ring] {
                return Err(ImageError::Usage {
                    field: "payload.order",
                    value: id.0,
                });
            }
            let head = self.head(id).ok_or(ImageError::Usage {
                field: "payload.tasks",
                value: tasks[ring] as u64,
            })?;
            next[ring] += 1;
            import_words(&head[..EXPORTED_HEAD_WORDS], r)?;
            let (nt, ns, predicated) = decode_counts(head[2].load(Ordering::Relaxed));
            if nt > CORE_MAX_TENSOR_ARGS {
                return Err(ImageError::Usage {
                    field: "payload.tensors",
                    value: nt as u64,
                });
            }
            if ns > CORE_MAX_SCALAR_ARGS {
                return Err(ImageError::Usage {
                    field: "payload.scalars",
                    value: ns as u64,
                });
            }
            let start = starts[ring];
            let end = start + body_words(nt, ns, predicated);
            let body = self.bodies[ring].get(start..end).ok_or(ImageError::Usage {
                field: "payload.words",
                value: end as u64,
            })?;
            head[3].store(start as u64, Ordering::Relaxed);
            import_words(body, r)?;
            starts[ring] = end;
        }
        for (cursor, start) in self.cursors.iter().zip(starts) {
            cursor.store(start, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Where an orchestrator puts each task's payload record: the shared records a device's
/// schedulers read ([`TaskPayloads`]), or a host build's image.
pub trait PayloadSink {
    /// Records `task`'s payload: its kernels, block count, the tensors of `args`, `scalars`
    /// (within the caps, checked by the caller) and its dispatch predicate.
    fn record(
        &self,
        task: TaskId,
        kernels: MixedKernels,
        block_num: u16,
        args: &[TaskArg],
        scalars: &[u64],
        predicate: Option<&DispatchPredicate>,
    );
}

impl PayloadSink for TaskPayloads<'_> {
    fn record(
        &self,
        task: TaskId,
        kernels: MixedKernels,
        block_num: u16,
        args: &[TaskArg],
        scalars: &[u64],
        predicate: Option<&DispatchPredicate>,
    ) {
        self.write(
            task,
            kernels,
            block_num,
            args.iter().map(|a| a.tensor),
            scalars,
            predicate,
        );
    }
}
