//! The rules both sides apply: what the builder refuses to write, the reader refuses to read.
//!
//! Each rule is written once, here, and called by the builder's planning ([`super::build`]) on
//! the recorded input and by the validating reader ([`super::view`]) on the image's records,
//! so an image the builder writes is exactly one the reader accepts.

use super::records::TensorSourceKind;
use super::{GRAPH_MAX_NODES, GRAPH_OUTPUT_ALIGN};
use crate::limits::MAX_TENSOR_DIMS;

/// Whether a tensor's rank is one the records can hold, `1..=MAX_TENSOR_DIMS`.
pub(super) fn rank_ok(ndims: u32) -> bool {
    (1..=MAX_TENSOR_DIMS as u32).contains(&ndims)
}

/// Whether a predicate reads an element inside its operand's extent, of a width the device
/// compares, with a known operator.
pub(super) fn predicate_ok(elem_offset: u64, extent: u64, elem_size: u8, op: u8) -> bool {
    elem_offset < extent
        && matches!(elem_size, 1 | 2 | 4 | 8)
        && crate::predicate::PredicateOp::from_raw(op).is_some()
}

/// `size` rounded up to [`GRAPH_OUTPUT_ALIGN`], if that fits a `u64`.
pub(super) fn align_output(size: u64) -> Option<u64> {
    size.checked_add(GRAPH_OUTPUT_ALIGN - 1)
        .map(|s| s & !(GRAPH_OUTPUT_ALIGN - 1))
}

/// One node's aligned output window, if it fits an `i32`.
pub(super) fn output_window(size: u64) -> Option<u64> {
    align_output(size).filter(|&a| a <= i32::MAX as u64)
}

/// Whether a classification is consistent: boundary indices name boundary tensors (an exact
/// match has no delta), internal sources name earlier nodes, own outputs name the node, and a
/// window offset lies inside the window. `window(j)` is node `j`'s aligned output size.
pub(super) fn source_ok(
    kind: TensorSourceKind,
    index: usize,
    packed_offset: u64,
    node: usize,
    boundary_count: usize,
    window: impl Fn(usize) -> Option<u64>,
) -> bool {
    match kind {
        TensorSourceKind::BoundaryExact => index < boundary_count && packed_offset == 0,
        TensorSourceKind::BoundaryView => index < boundary_count,
        TensorSourceKind::Internal => {
            index < node && window(index).is_some_and(|w| packed_offset < w)
        }
        TensorSourceKind::OwnOutput => {
            index == node && window(index).is_some_and(|w| packed_offset < w)
        }
    }
}

/// A set of node indices below [`GRAPH_MAX_NODES`]: the producers of one consumer seen so far,
/// for the no-repeats rule.
pub(super) struct NodeSet([u64; GRAPH_MAX_NODES / 64]);

impl NodeSet {
    /// The empty set.
    pub(super) const fn new() -> Self {
        Self([0; GRAPH_MAX_NODES / 64])
    }
    /// Inserts `i`; false if it was already there.
    pub(super) fn insert(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
    /// Removes `i` (a no-op if it is absent).
    pub(super) fn remove(&mut self, i: usize) {
        self.0[i / 64] &= !(1u64 << (i % 64));
    }
}
