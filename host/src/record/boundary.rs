//! The boundary of a Graph invocation: its deep copy ([`GraphBoundary`]), the cacheability
//! gate, and the match a later invocation must pass to replay a recorded Definition. Its own
//! file because the submitting thread uses it on every Graph submission (copy and compare)
//! while the rest of the recording path runs on recorder threads.

use simpler_core::graph::{GRAPH_MAX_SCALAR_ARGS, GRAPH_MAX_TENSOR_ARGS};
use simpler_core::orchestrator::TaskArg;
use simpler_core::{BufferHandle, TaskTensor, TensorArgType};

/// The deep copy of one invocation's boundary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GraphBoundary {
    /// The boundary tensors, in argument order, with the addresses the invocation gave.
    pub tensors: Vec<TaskTensor>,
    /// Each tensor's tag, parallel to `tensors` (never OUTPUT in a cacheable boundary).
    pub tags: Vec<TensorArgType>,
    /// The invocation's scalars (a Definition keeps only their count: each replay supplies
    /// its own values).
    pub scalars: Vec<u64>,
}

/// Why a boundary cannot be recorded (the body then runs inline, on the ordinary path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uncacheable {
    /// No boundary tensor, or more than 128.
    TensorCount(usize),
    /// More than 64 boundary scalars.
    ScalarCount(usize),
    /// A boundary tensor is tagged OUTPUT (runtime-allocated).
    OutputTag(usize),
    /// Tags and tensors differ in number.
    Mismatch,
}

impl std::fmt::Display for Uncacheable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::TensorCount(n) => write!(
                f,
                "the boundary has {n} tensors; a Graph boundary has 1 to {GRAPH_MAX_TENSOR_ARGS}"
            ),
            Self::ScalarCount(n) => write!(
                f,
                "the boundary has {n} scalars; a Graph boundary has at most {GRAPH_MAX_SCALAR_ARGS}"
            ),
            Self::OutputTag(i) => write!(
                f,
                "boundary tensor {i} is tagged OUTPUT; a Graph boundary holds no runtime-allocated tensor"
            ),
            Self::Mismatch => f.write_str("the boundary's tensor and tag lists differ in length"),
        }
    }
}

impl std::error::Error for Uncacheable {}

impl GraphBoundary {
    /// Makes this a copy of `tensors` (with their tags) and `scalars`, keeping its storage (no
    /// allocation once it has held as many).
    pub fn assign(
        &mut self,
        tensors: impl Iterator<Item = (TaskTensor, TensorArgType)>,
        scalars: &[u64],
    ) {
        self.tensors.clear();
        self.tags.clear();
        for (t, tag) in tensors {
            self.tensors.push(t);
            self.tags.push(tag);
        }
        self.scalars.clear();
        self.scalars.extend_from_slice(scalars);
    }

    /// The cacheability gate: 1 to 128 tensors, at most 64 scalars, no OUTPUT tag.
    pub fn cacheable(&self) -> Result<(), Uncacheable> {
        let n = self.tensors.len();
        if n == 0 || n > GRAPH_MAX_TENSOR_ARGS {
            return Err(Uncacheable::TensorCount(n));
        }
        if self.scalars.len() > GRAPH_MAX_SCALAR_ARGS {
            return Err(Uncacheable::ScalarCount(self.scalars.len()));
        }
        if self.tags.len() != n {
            return Err(Uncacheable::Mismatch);
        }
        if let Some(i) = self.tags.iter().position(|&t| t == TensorArgType::Output) {
            return Err(Uncacheable::OutputTag(i));
        }
        Ok(())
    }

    /// Whether `other` may replay a Definition recorded from `self`: equal counts (scalar
    /// values may differ: they are per invocation) and, per tensor, equal buffer size, rank,
    /// dtype, tag, shapes, strides, manual-dependency flag, alias partition and offset from
    /// its alias representative (addresses and the
    /// representatives' offsets may differ: a replay rebinds them).
    pub fn matches(&self, other: &GraphBoundary) -> bool {
        let mut ra = [0u16; GRAPH_MAX_TENSOR_ARGS];
        alias_reps(&self.tensors, &mut ra);
        self.matches_with(&ra, other)
    }

    /// [`Self::matches`] with this boundary's alias representatives (from [`alias_reps`])
    /// given, so a boundary compared many times has them worked out once.
    pub fn matches_with(&self, ra: &[u16; GRAPH_MAX_TENSOR_ARGS], other: &GraphBoundary) -> bool {
        other.tensors.len() == other.tags.len()
            && self.matches_parts(
                ra,
                other.tensors.len(),
                |i| (&other.tensors[i], other.tags[i]),
                other.scalars.len(),
            )
    }

    /// [`Self::matches_with`] against a submission's arguments as they are, without a copy.
    pub fn matches_args(
        &self,
        ra: &[u16; GRAPH_MAX_TENSOR_ARGS],
        args: &[TaskArg],
        scalars: usize,
    ) -> bool {
        self.matches_parts(ra, args.len(), |i| (&args[i].tensor, args[i].tag), scalars)
    }

    fn matches_parts<'o>(
        &self,
        ra: &[u16; GRAPH_MAX_TENSOR_ARGS],
        n: usize,
        other: impl Fn(usize) -> (&'o TaskTensor, TensorArgType),
        scalars: usize,
    ) -> bool {
        // Boundary scalars are per-invocation values (a replay supplies its own), so only
        // their count has to agree; a value the body computed from one is static Definition
        // data, which a replay reuses whatever its scalars (the documented trap).
        if n != self.tensors.len()
            || n > GRAPH_MAX_TENSOR_ARGS
            || self.tags.len() != n
            || self.scalars.len() != scalars
        {
            return false;
        }
        let mut rb = [0u16; GRAPH_MAX_TENSOR_ARGS];
        alias_reps_of(n, |i| other(i).0.buffer(), &mut rb);
        // One pass: tag, alias relation, layout, and the distance from the first view of the
        // same buffer (a recorded sub-view of the first is rebased on it; a tensor that is its
        // buffer's first view has distance zero on both sides).
        (0..n).all(|i| {
            let (b, tag) = other(i);
            let a = &self.tensors[i];
            let (pa, pb) = (ra[i] as usize, rb[i] as usize);
            tag == self.tags[i]
                && pa == pb
                && a.same_layout(b)
                && (pa == i
                    || a.start_offset()
                        .wrapping_sub(self.tensors[pa].start_offset())
                        == b.start_offset().wrapping_sub(other(pb).0.start_offset()))
        })
    }
}

/// For each tensor, the index of the first tensor over the same buffer (itself if none
/// earlier): one pass with a small open-addressing table on the stack.
pub fn alias_reps(tensors: &[TaskTensor], out: &mut [u16; GRAPH_MAX_TENSOR_ARGS]) {
    alias_reps_of(tensors.len(), |i| tensors[i].buffer(), out);
}

/// [`alias_reps`] over the `n` buffers `buffer(i)` names.
fn alias_reps_of(
    n: usize,
    buffer: impl Fn(usize) -> BufferHandle,
    out: &mut [u16; GRAPH_MAX_TENSOR_ARGS],
) {
    const SLOTS: usize = 2 * GRAPH_MAX_TENSOR_ARGS;
    const _: () = assert!(SLOTS.is_power_of_two());
    // At most half full: the smallest power of two at least twice `n`, so a small boundary
    // clears a small table.
    let bits = (2 * n.max(1))
        .next_power_of_two()
        .min(SLOTS)
        .trailing_zeros();
    let mask = (1usize << bits) - 1;
    let mut table = [u16::MAX; SLOTS];
    let table = &mut table[..=mask];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        let b = buffer(i);
        // The product's top bits: its low ones depend only on the low bits of the address,
        // which alignment makes equal for every buffer (all would probe from one slot).
        let mixed = (b.addr ^ b.size.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut h = (mixed >> (u64::BITS - bits)) as usize;
        loop {
            h &= mask;
            match table[h] {
                u16::MAX => {
                    table[h] = i as u16;
                    *o = i as u16;
                    break;
                }
                j if buffer(j as usize) == b => {
                    *o = j;
                    break;
                }
                _ => h += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simpler_core::{AddressSpace, DataType};

    fn tensor(addr: u64, size: u64, offset: u64) -> TaskTensor {
        TaskTensor::new(
            BufferHandle { addr, size },
            offset,
            &[4],
            &[1],
            DataType::Float32,
            AddressSpace::Device,
        )
        .unwrap()
    }

    fn boundary(tensors: Vec<TaskTensor>) -> GraphBoundary {
        let tags = vec![TensorArgType::Input; tensors.len()];
        GraphBoundary {
            tensors,
            tags,
            scalars: Vec::new(),
        }
    }

    /// The first index over the same buffer, by comparing every earlier tensor.
    fn naive_reps(tensors: &[TaskTensor]) -> Vec<u16> {
        (0..tensors.len())
            .map(|i| {
                (0..=i)
                    .find(|&j| tensors[j].buffer() == tensors[i].buffer())
                    .unwrap() as u16
            })
            .collect()
    }

    #[test]
    fn alias_reps_agree_with_the_pairwise_comparison_on_aligned_buffers() {
        // 128 arguments over 4 KiB-aligned buffers (their low address bits all equal), every
        // third one a repeat of an earlier buffer, one pair differing only in size.
        for n in [1, 2, 7, 40, 64, 128] {
            let tensors: Vec<TaskTensor> = (0..n as u64)
                .map(|i| {
                    let b = if i % 3 == 2 { i / 2 } else { i };
                    let size = if i == 5 { 4096 } else { 8192 };
                    tensor(0x10_0000 + b * 0x1000, size, 0)
                })
                .collect();
            let mut reps = [0u16; GRAPH_MAX_TENSOR_ARGS];
            alias_reps(&tensors, &mut reps);
            assert_eq!(&reps[..n], &naive_reps(&tensors)[..], "{n} tensors");
        }
    }

    #[test]
    fn a_changed_alias_relation_does_not_match() {
        let recorded = boundary(vec![tensor(0x1000, 64, 0), tensor(0x2000, 64, 4)]);
        // New addresses, the same relation: matches.
        assert!(recorded.matches(&boundary(vec![
            tensor(0x5000, 64, 0),
            tensor(0x9000, 64, 4)
        ])));
        // Two buffers then, one now.
        assert!(!recorded.matches(&boundary(vec![
            tensor(0x5000, 64, 0),
            tensor(0x5000, 64, 4)
        ])));
        // One buffer then, two now.
        let shared = boundary(vec![tensor(0x1000, 64, 0), tensor(0x1000, 64, 4)]);
        assert!(!shared.matches(&boundary(vec![
            tensor(0x5000, 64, 0),
            tensor(0x9000, 64, 4)
        ])));
        // One buffer both times, the second view moved against the first: no match.
        assert!(shared.matches(&boundary(vec![
            tensor(0x7000, 64, 8),
            tensor(0x7000, 64, 12)
        ])));
        assert!(!shared.matches(&boundary(vec![
            tensor(0x7000, 64, 0),
            tensor(0x7000, 64, 8)
        ])));
    }
}
