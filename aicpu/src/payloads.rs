//! Per-slot task payloads: what the cores need to run a task, written by the orchestrator
//! before the task is published and read by the scheduler that dispatches it.
//!
//! Each slot of each ring holds one record of atomic words (so the structure can be shared by
//! the orchestrator and scheduler threads without locks or `unsafe`): the kernel id per core
//! slot, the SPMD block count, the tensor and scalar counts, then the used tensors and scalars.
//! Only the used words are copied. The publish (a Release in the slot state machine) orders
//! the writes before any scheduler's pop of the task (an Acquire).

use core::sync::atomic::{AtomicU64, Ordering};
use simpler_core::image::{export_words, import_words, ImageError, Reader, Writer};
use simpler_core::layout::{Carver, Layout, LayoutError, Span};
use simpler_core::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};
use simpler_core::ring::MAX_RINGS;
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

const TENSOR_WORDS: usize = core::mem::size_of::<TaskTensor>() / 8;
const HEADER_WORDS: usize = 3;
/// Words of one slot's record.
pub const RECORD_WORDS: usize =
    HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS + CORE_MAX_SCALAR_ARGS;

/// Where the payload records live.
#[derive(Clone, Copy, Debug)]
pub struct PayloadsLayout {
    layout: Layout,
    rings: [Span<AtomicU64>; MAX_RINGS],
    windows: [u32; MAX_RINGS],
}

impl PayloadsLayout {
    /// Records for rings of `windows` slots.
    pub fn new(windows: [u32; MAX_RINGS]) -> Result<Self, LayoutError> {
        let mut layout = Layout::new();
        let mut rings = [Span::empty(); MAX_RINGS];
        for (r, span) in rings.iter_mut().enumerate() {
            *span = layout.array::<AtomicU64>(windows[r] as usize * RECORD_WORDS)?;
        }
        Ok(Self {
            layout,
            rings,
            windows,
        })
    }

    /// Bytes needed.
    pub fn size(&self) -> usize {
        self.layout.size()
    }
}

/// The payload records of every slot.
pub struct TaskPayloads<'a> {
    rings: [&'a [AtomicU64]; MAX_RINGS],
    masks: [u32; MAX_RINGS],
}

impl<'a> TaskPayloads<'a> {
    /// Carves the records out of `region`.
    pub fn init(region: &'a mut [u8], layout: &PayloadsLayout) -> Result<Self, LayoutError> {
        let mut c = Carver::new(region, &layout.layout)?;
        let [a, b, d, e] = layout.rings;
        Ok(Self {
            rings: [c.atomic(a)?, c.atomic(b)?, c.atomic(d)?, c.atomic(e)?],
            masks: layout.windows.map(|w| w.wrapping_sub(1)),
        })
    }

    /// Carves the records out of `region` keeping its bytes: a record is written whole when its
    /// slot is claimed, so a region that held earlier records (or fresh zeroed pages, which
    /// then stay untouched) needs no formatting.
    pub fn attach(region: &'a mut [u8], layout: &PayloadsLayout) -> Result<Self, LayoutError> {
        let mut c = Carver::new(region, &layout.layout)?;
        let [a, b, d, e] = layout.rings;
        Ok(Self {
            rings: [
                c.atomic_as_is(a)?,
                c.atomic_as_is(b)?,
                c.atomic_as_is(d)?,
                c.atomic_as_is(e)?,
            ],
            masks: layout.windows.map(|w| w.wrapping_sub(1)),
        })
    }

    fn record(&self, task: TaskId) -> Option<&[AtomicU64]> {
        let ring = task.ring() as usize;
        let words = self.rings.get(ring)?;
        let slot = (task.local() & self.masks[ring]) as usize;
        words.get(slot * RECORD_WORDS..(slot + 1) * RECORD_WORDS)
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
    ) {
        let Some(rec) = self.record(task) else {
            return;
        };
        let nt = tensors.len().min(CORE_MAX_TENSOR_ARGS);
        let ns = scalars.len().min(CORE_MAX_SCALAR_ARGS);
        rec[0].store(
            kernels.aic as u64 | (kernels.aiv0 as u64) << 32,
            Ordering::Relaxed,
        );
        rec[1].store(
            kernels.aiv1 as u64 | (block_num as u64) << 32,
            Ordering::Relaxed,
        );
        rec[2].store(nt as u64 | (ns as u64) << 32, Ordering::Relaxed);
        for (i, t) in tensors.take(nt).enumerate() {
            let words: [u64; TENSOR_WORDS] = bytemuck::cast(t);
            let at = HEADER_WORDS + i * TENSOR_WORDS;
            for (cell, w) in rec[at..at + TENSOR_WORDS].iter().zip(words) {
                cell.store(w, Ordering::Relaxed);
            }
        }
        let at = HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS;
        for (cell, &v) in rec[at..at + ns].iter().zip(scalars) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    /// Copies `task`'s first `out.len()` scalars (fewer if it has fewer) into `out`; returns
    /// how many. Reads only the record's header and those scalar words.
    pub fn scalars(&self, task: TaskId, out: &mut [u64]) -> usize {
        let Some(rec) = self.record(task) else {
            return 0;
        };
        let ns = ((rec[2].load(Ordering::Relaxed) >> 32) as usize)
            .min(CORE_MAX_SCALAR_ARGS)
            .min(out.len());
        let at = HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS;
        for (o, cell) in out[..ns].iter_mut().zip(&rec[at..at + ns]) {
            *o = cell.load(Ordering::Relaxed);
        }
        ns
    }

    /// Overwrites scalar `index` of `task`'s record (the host patches a Graph's outer task
    /// once its Definition is placed); false if the task has no such scalar.
    pub fn patch_scalar(&self, task: TaskId, index: usize, value: u64) -> bool {
        let Some(rec) = self.record(task) else {
            return false;
        };
        let ns = ((rec[2].load(Ordering::Relaxed) >> 32) as usize).min(CORE_MAX_SCALAR_ARGS);
        if index >= ns {
            return false;
        }
        let at = HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS + index;
        rec[at].store(value, Ordering::Relaxed);
        true
    }

    /// The kernels and block count of `task`.
    pub fn kernels(&self, task: TaskId) -> (MixedKernels, u16) {
        let Some(rec) = self.record(task) else {
            return (MixedKernels::NONE, 1);
        };
        let w0 = rec[0].load(Ordering::Relaxed);
        let w1 = rec[1].load(Ordering::Relaxed);
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
        let counts = rec[2].load(Ordering::Relaxed);
        let (nt, ns) = (
            (counts as u32 as usize).min(CORE_MAX_TENSOR_ARGS),
            ((counts >> 32) as usize).min(CORE_MAX_SCALAR_ARGS),
        );
        for i in 0..nt {
            let at = HEADER_WORDS + i * TENSOR_WORDS;
            let mut words = [0u64; TENSOR_WORDS];
            for (w, cell) in words.iter_mut().zip(&rec[at..at + TENSOR_WORDS]) {
                *w = cell.load(Ordering::Relaxed);
            }
            // Within the caps; the push cannot fail.
            let _ = args.push_tensor(bytemuck::cast(words));
        }
        let at = HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS;
        for cell in &rec[at..at + ns] {
            let _ = args.push_scalar(cell.load(Ordering::Relaxed));
        }
    }
}

/// The live image of the payloads: per ring, the first `tasks[r]` records, each with only its
/// header, its used tensors and its used scalars (a record is 531 words; a task uses a few).
impl TaskPayloads<'_> {
    fn counts(rec: &[AtomicU64]) -> (usize, usize) {
        let counts = rec[2].load(Ordering::Relaxed);
        (
            (counts as u32 as usize).min(CORE_MAX_TENSOR_ARGS),
            ((counts >> 32) as usize).min(CORE_MAX_SCALAR_ARGS),
        )
    }

    fn parts(rec: &[AtomicU64], nt: usize, ns: usize) -> [&[AtomicU64]; 2] {
        let scalars = HEADER_WORDS + CORE_MAX_TENSOR_ARGS * TENSOR_WORDS;
        [
            &rec[HEADER_WORDS..HEADER_WORDS + nt * TENSOR_WORDS],
            &rec[scalars..scalars + ns],
        ]
    }

    fn records(&self, ring: usize, tasks: u32) -> Result<&[AtomicU64], ImageError> {
        self.rings[ring]
            .get(..tasks as usize * RECORD_WORDS)
            .ok_or(ImageError::Usage {
                field: "payload.tasks",
                value: tasks as u64,
            })
    }

    /// An upper bound of the image of the first `tasks[r]` records of every ring.
    pub fn image_bound(tasks: &[u32; MAX_RINGS]) -> usize {
        tasks.iter().map(|&t| t as usize * RECORD_WORDS * 8).sum()
    }

    /// Writes the live image of the first `tasks[r]` records of every ring.
    pub fn export(&self, tasks: &[u32; MAX_RINGS], w: &mut Writer<'_>) -> Result<(), ImageError> {
        for (ring, &n) in tasks.iter().enumerate() {
            for rec in self.records(ring, n)?.chunks_exact(RECORD_WORDS) {
                let (nt, ns) = Self::counts(rec);
                export_words(&rec[..HEADER_WORDS], w)?;
                for part in Self::parts(rec, nt, ns) {
                    export_words(part, w)?;
                }
            }
        }
        Ok(())
    }

    /// Reads an image written by [`Self::export`] for the same `tasks`.
    pub fn import(&self, tasks: &[u32; MAX_RINGS], r: &mut Reader<'_>) -> Result<(), ImageError> {
        for (ring, &n) in tasks.iter().enumerate() {
            for rec in self.records(ring, n)?.chunks_exact(RECORD_WORDS) {
                import_words(&rec[..HEADER_WORDS], r)?;
                let (nt, ns) = Self::counts(rec);
                for part in Self::parts(rec, nt, ns) {
                    import_words(part, r)?;
                }
            }
        }
        Ok(())
    }
}
