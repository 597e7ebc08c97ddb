//! The builder's input: a recorded Graph body as plain slices, the way a recorder holds it.
//!
//! Its own file because it is the recorder's side of the contract (the host fills these
//! types; nothing on the device sees them), apart from the image records the builder turns
//! them into ([`super::records`]).

use super::records::{ExecutionStorageShape, TensorSourceKind};
use crate::arg::TensorArgType;
use crate::task_tensor::TaskTensor;

/// The `task_attrs` bit of a node with a dispatch predicate (the reference's `has_predicate`).
pub const TASK_ATTR_PREDICATE: u8 = 1 << 2;

/// One recorded node: its fields and the ranges it owns in the input's flat arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordedNode {
    /// Kernel per core slot (AIC, AIV0, AIV1).
    pub kernel_ids: [i32; 3],
    /// The core slots the node runs on, as an `ActiveMask`'s bits.
    pub active_mask: u8,
    /// The node's task attribute bits, copied into the image unchanged
    /// ([`TASK_ATTR_PREDICATE`] marks a predicated node).
    pub task_attrs: u8,
    /// SPMD blocks the node runs, as recorded (the builder does not check it).
    pub logical_block_num: i16,
    /// Blocks × active slots.
    pub total_required_subtasks: i16,
    /// Bytes of the node's output window; its 64-byte-aligned size must fit an `i32`.
    pub total_output_size: u64,
    /// First tensor in [`DefinitionInput::tensors`].
    pub tensor_offset: u32,
    /// Tensors, at most [`GRAPH_NODE_MAX_TENSOR_ARGS`](super::GRAPH_NODE_MAX_TENSOR_ARGS).
    pub tensor_count: u32,
    /// First source in [`DefinitionInput::tensor_sources`] (one per tensor).
    pub tensor_source_offset: u32,
    /// First scalar in [`DefinitionInput::scalars`] and [`DefinitionInput::scalar_sources`].
    pub scalar_offset: u32,
    /// Scalars, at most [`GRAPH_NODE_MAX_SCALAR_ARGS`](super::GRAPH_NODE_MAX_SCALAR_ARGS).
    pub scalar_count: u32,
    /// First producer in [`DefinitionInput::fanins`].
    pub fanin_offset: u32,
    /// Producers in [`DefinitionInput::fanins`] from `fanin_offset` (each an earlier node's
    /// index, none twice).
    pub fanin_count: u32,
    /// Index into [`DefinitionInput::predicates`], if the node is predicated.
    pub predicate_index: Option<u32>,
}

/// A recorded tensor classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedTensorSource {
    /// Where the tensor comes from at replay: the boundary, an earlier node or this node.
    pub kind: TensorSourceKind,
    /// Boundary tensor or node index, per the kind.
    pub index: usize,
    /// Element delta (boundary view, 0 for an exact match) or byte offset into the window
    /// (internal, own output).
    pub packed_offset: u64,
}

/// A recorded scalar classification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordedScalarSource {
    /// A plain value: stored in the Definition.
    Static,
    /// Boundary scalar `n`, forwarded unchanged.
    Boundary(usize),
    /// Derived from boundary scalar `n` through a mutable access: cannot be packed.
    InvalidatedBoundary(usize),
}

/// A recorded predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedPredicate {
    /// The tensor read (copied at record time).
    pub operand: TaskTensor,
    /// Where it comes from (never the node's own output).
    pub source: RecordedTensorSource,
    /// The element read, in elements from the operand's first element (below its extent).
    pub elem_offset: u64,
    /// The value compared with.
    pub target: i64,
    /// Bytes of the element: 1, 2, 4 or 8.
    pub elem_size: u8,
    /// The raw [`PredicateOp`](crate::predicate::PredicateOp).
    pub op: u8,
}

/// The Graph's boundary as the first invocation passed it.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefinitionBoundary<'a> {
    /// Boundary tensors, at most [`GRAPH_IMAGE_MAX_BOUNDARY`](super::GRAPH_IMAGE_MAX_BOUNDARY).
    pub tensors: &'a [TaskTensor],
    /// Their tags; same length as `tensors`.
    pub tags: &'a [TensorArgType],
    /// Boundary scalars, at most [`GRAPH_IMAGE_MAX_BOUNDARY`](super::GRAPH_IMAGE_MAX_BOUNDARY).
    pub scalar_count: usize,
}

/// Everything a Definition is built from: plain slices, as a recorder holds them.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefinitionInput<'a> {
    /// The Graph's [`full_key`](super::full_key).
    pub full_key: u64,
    /// The recording was marked unsupported: refuse it.
    pub unsupported: bool,
    /// Nodes recorded; the only bound on every traversal. `1..=GRAPH_MAX_NODES`.
    pub node_count: usize,
    /// Node slots; at least `node_count`, slots past it are ignored.
    pub nodes: &'a [RecordedNode],
    /// Flat tensor arguments, indexed by node ranges.
    pub tensors: &'a [TaskTensor],
    /// Flat tensor sources, indexed by node ranges.
    pub tensor_sources: &'a [RecordedTensorSource],
    /// Flat scalar values, indexed by node ranges.
    pub scalars: &'a [u64],
    /// Flat scalar sources, indexed like `scalars`.
    pub scalar_sources: &'a [RecordedScalarSource],
    /// Flat producer indices, indexed by node ranges.
    pub fanins: &'a [usize],
    /// Recorded predicates, indexed by `RecordedNode::predicate_index`.
    pub predicates: &'a [RecordedPredicate],
    /// The boundary; `None` when the recording has none (refused).
    pub boundary: Option<DefinitionBoundary<'a>>,
    /// Sizes for [`execution_storage_bytes`](super::execution_storage_bytes).
    pub storage: ExecutionStorageShape,
}
