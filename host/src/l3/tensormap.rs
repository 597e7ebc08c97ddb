//! The dependency map shared by every level: per buffer identity, the accesses of tasks that
//! may still order a later one, and the overlap test (identity first, then byte range, the
//! exact box test where it applies). Level 3's engine and level 4's orchestration both derive
//! their edges here, so the two levels cannot disagree on what orders what.

use simpler_core::overlap::{self, Footprint, Overlap};
use simpler_core::{CanonicalIdentity, TensorArgType, ValidTensor};
use std::collections::{HashMap, HashSet};

/// One task's access to a buffer, kept per buffer identity until the task finishes well (a
/// later access that overlaps it depends on the task).
#[derive(Clone, Copy)]
struct TrackedAccess {
    /// The task that made the access.
    task: u64,
    /// Whether it writes (OUTPUT, OUTPUT_EXISTING, INOUT) rather than only reads.
    writer: bool,
    /// The elements it touches, in units of its dtype.
    fp: Footprint,
    /// The buffer's length in the same units (the bound of the overlap test).
    buffer_elems: u64,
}

fn footprint(t: &ValidTensor) -> (Footprint, u64) {
    let elem = t.data_type().elem_size() as u64;
    let fp = Footprint {
        start: t.byte_offset / elem,
        extent: t.extent_bytes() / elem,
        version: 0,
        ndims: t.ndims,
        dtype: t.dtype,
        elem_size: elem as u32,
        contiguous: false,
        shapes: t.shapes,
        strides: t.strides,
    };
    (fp, t.buffer.nbytes / elem)
}

/// Whether two wire tensors over one identity may share a byte (the exact box test where it
/// applies, the byte ranges otherwise; it only errs towards "may").
pub(crate) fn may_overlap(a: &ValidTensor, b: &ValidTensor) -> bool {
    if a.buffer.identity != b.buffer.identity {
        return false;
    }
    let (fa, na) = footprint(a);
    let (fb, _) = footprint(b);
    overlap::check(&fa, &fb, na) != Overlap::None
}

/// The TensorMap: buffer identity to the tracked accesses over it.
#[derive(Default)]
pub(crate) struct TensorMap {
    map: HashMap<CanonicalIdentity, Vec<TrackedAccess>>,
}

impl TensorMap {
    /// Looks up the producers task `id`'s access to `t` under `tag` depends on and records the
    /// access. Readers wait for overlapping writers; writers wait for overlapping writers and
    /// readers (write-after-read is tracked). `live(task)` says whether a task may still order
    /// others; entries of tasks that finished well are dropped, those of `failed` tasks stay so
    /// that they poison their consumers (`poison` gets the first such producer).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn track(
        &mut self,
        id: u64,
        t: &ValidTensor,
        tag: TensorArgType,
        live: &dyn Fn(u64) -> bool,
        failed: &HashSet<u64>,
        producers: &mut Vec<u64>,
        poison: &mut Option<u64>,
    ) {
        let writes = match tag {
            TensorArgType::Input => false,
            TensorArgType::Output | TensorArgType::OutputExisting | TensorArgType::InOut => true,
            TensorArgType::NoDep => return,
        };
        let (fp, elems) = footprint(t);
        let entries = self.map.entry(t.buffer.identity).or_default();
        entries.retain(|e| live(e.task) || failed.contains(&e.task));
        for e in entries.iter() {
            if !(e.writer || writes) {
                continue;
            }
            if overlap::check(&fp, &e.fp, elems.max(e.buffer_elems)) == Overlap::None {
                continue;
            }
            if failed.contains(&e.task) {
                poison.get_or_insert(e.task);
            } else if e.task != id && !producers.contains(&e.task) {
                producers.push(e.task);
            }
        }
        entries.push(TrackedAccess {
            task: id,
            writer: writes,
            fp,
            buffer_elems: elems,
        });
    }

    /// Forgets every access (a run ended).
    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}
