//! The image's records: the header, the node, tensor, source, signature and predicate records,
//! the [`Section`] table that places them, and the execution storage size the header carries.
//!
//! Every record is `#[repr(C)]` plain data whose size, alignment and field offsets are pinned
//! with [`assert_layout!`](crate::assert_layout) next to its definition: these are the bytes
//! host and device exchange, so they live apart from the code that writes
//! ([`super::build`]) and reads ([`super::view`]) them.

use super::rules::rank_ok;
use super::{GRAPH_IMAGE_MAX_BOUNDARY, GRAPH_MAX_NODES};
use super::{GRAPH_NODE_MAX_SCALAR_ARGS, GRAPH_NODE_MAX_TENSOR_ARGS};
use crate::arg::TensorArgType;
use crate::buffer::AddressSpace;
use crate::dtype::DataType;
use crate::limits::MAX_TENSOR_DIMS;
use crate::task_tensor::TaskTensor;
use bytemuck::{Pod, Zeroable};
use core::fmt;
use core::mem::{align_of, size_of};

/// The Definition header: identity, totals and the thirteen section offsets (bytes from the
/// image's first byte; 0 = the section is absent).
///
/// | off | field | | off | field |
/// |---|---|---|---|---|
/// | 0 | `full_key` | | 64 | `off_fanout_offsets` |
/// | 8 | `content_hash` | | 68 | `off_fanout_indices` |
/// | 16 | `required_heap` | | 72 | `off_fanin_offsets` |
/// | 24 | `total_bytes` | | 76 | `off_fanin_indices` |
/// | 28 | `task_count` | | 80 | `off_root_indices` |
/// | 32 | `edge_count` | | 84 | `off_node_offsets` |
/// | 36 | `root_count` | | 88 | `off_nodes` |
/// | 40 | `boundary_count` | | 92 | `off_tensors` |
/// | 44 | `boundary_scalar_count` | | 96 | `off_tensor_sources` |
/// | 48 | `tensor_arg_count` | | 100 | `off_scalars` |
/// | 52 | `scalar_arg_count` | | 104 | `off_scalar_sources` |
/// | 56 | `predicate_count` | | 108 | `off_boundary_signatures` |
/// | 60 | `execution_storage_bytes` | | 112 | `off_predicates` |
/// | | | | 116 | `reserved` (0) |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphDefinitionHeader {
    /// The Graph's [`full_key`](super::full_key).
    pub full_key: u64,
    /// [`definition_content_hash`](super::definition_content_hash) of the image.
    pub content_hash: u64,
    /// Heap bytes one invocation's internal outputs need: the sum of the nodes' 64-byte-aligned
    /// output sizes.
    pub required_heap: u64,
    /// Bytes of the whole image, header included; a multiple of 8.
    pub total_bytes: u32,
    /// Internal nodes (n), `1..=GRAPH_MAX_NODES`.
    pub task_count: u32,
    /// Producer-to-consumer edges (E).
    pub edge_count: u32,
    /// Nodes without producers.
    pub root_count: u32,
    /// Boundary tensors (B).
    pub boundary_count: u32,
    /// Boundary scalars.
    pub boundary_scalar_count: u32,
    /// Tensor arguments over all nodes (T).
    pub tensor_arg_count: u32,
    /// Scalar arguments over all nodes (S).
    pub scalar_arg_count: u32,
    /// Predicates (P).
    pub predicate_count: u32,
    /// Bytes of one invocation's execution storage ([`execution_storage_bytes`]).
    pub execution_storage_bytes: u32,
    /// `u32 × (n + 1)`: where each node's consumers start in the fanout indices.
    pub off_fanout_offsets: u32,
    /// `u16 × E`: consumers, grouped by producer.
    pub off_fanout_indices: u32,
    /// `u32 × (n + 1)`: where each node's producers start in the fanin indices.
    pub off_fanin_offsets: u32,
    /// `u16 × E`: producers, grouped by consumer.
    pub off_fanin_indices: u32,
    /// `u16 × root_count`: the nodes without producers.
    pub off_root_indices: u32,
    /// `u64 × n`: each node's output window, in bytes from the invocation's heap block.
    pub off_node_offsets: u32,
    /// `GraphNodeDefinition × n`.
    pub off_nodes: u32,
    /// `GraphTensor × T`.
    pub off_tensors: u32,
    /// `GraphTensorSourceRef × T`.
    pub off_tensor_sources: u32,
    /// `u64 × S`: static scalar values (0 for boundary scalars).
    pub off_scalars: u32,
    /// `GraphScalarSourceRef × S`.
    pub off_scalar_sources: u32,
    /// `GraphBoundarySignature × B`.
    pub off_boundary_signatures: u32,
    /// `GraphPredicate × P`.
    pub off_predicates: u32,
    /// Zero.
    pub reserved: u32,
}

/// Bytes of [`GraphDefinitionHeader`].
pub const GRAPH_HEADER_BYTES: usize = 120;

crate::assert_layout!(GraphDefinitionHeader, size = GRAPH_HEADER_BYTES, align = 8, {
    full_key: 0, content_hash: 8, required_heap: 16, total_bytes: 24, task_count: 28,
    edge_count: 32, root_count: 36, boundary_count: 40, boundary_scalar_count: 44,
    tensor_arg_count: 48, scalar_arg_count: 52, predicate_count: 56, execution_storage_bytes: 60,
    off_fanout_offsets: 64, off_fanout_indices: 68, off_fanin_offsets: 72, off_fanin_indices: 76,
    off_root_indices: 80, off_node_offsets: 84, off_nodes: 88, off_tensors: 92,
    off_tensor_sources: 96, off_scalars: 100, off_scalar_sources: 104,
    off_boundary_signatures: 108, off_predicates: 112, reserved: 116,
});

impl GraphDefinitionHeader {
    /// The offset field of `section`.
    pub const fn section_offset(&self, section: Section) -> u32 {
        match section {
            Section::FanoutOffsets => self.off_fanout_offsets,
            Section::FanoutIndices => self.off_fanout_indices,
            Section::FaninOffsets => self.off_fanin_offsets,
            Section::FaninIndices => self.off_fanin_indices,
            Section::RootIndices => self.off_root_indices,
            Section::NodeOffsets => self.off_node_offsets,
            Section::Nodes => self.off_nodes,
            Section::Tensors => self.off_tensors,
            Section::TensorSources => self.off_tensor_sources,
            Section::Scalars => self.off_scalars,
            Section::ScalarSources => self.off_scalar_sources,
            Section::BoundarySignatures => self.off_boundary_signatures,
            Section::Predicates => self.off_predicates,
        }
    }

    /// Sets the offset field of `section` (the builder's side of [`Self::section_offset`]).
    pub(super) fn set_section_offset(&mut self, section: Section, offset: u32) {
        let field = match section {
            Section::FanoutOffsets => &mut self.off_fanout_offsets,
            Section::FanoutIndices => &mut self.off_fanout_indices,
            Section::FaninOffsets => &mut self.off_fanin_offsets,
            Section::FaninIndices => &mut self.off_fanin_indices,
            Section::RootIndices => &mut self.off_root_indices,
            Section::NodeOffsets => &mut self.off_node_offsets,
            Section::Nodes => &mut self.off_nodes,
            Section::Tensors => &mut self.off_tensors,
            Section::TensorSources => &mut self.off_tensor_sources,
            Section::Scalars => &mut self.off_scalars,
            Section::ScalarSources => &mut self.off_scalar_sources,
            Section::BoundarySignatures => &mut self.off_boundary_signatures,
            Section::Predicates => &mut self.off_predicates,
        };
        *field = offset;
    }

    /// Elements `section` holds according to the header's counts.
    pub const fn section_len(&self, section: Section) -> u64 {
        let n = self.task_count as u64;
        let e = self.edge_count as u64;
        match section {
            Section::FanoutOffsets | Section::FaninOffsets => n + 1,
            Section::FanoutIndices | Section::FaninIndices => e,
            Section::RootIndices => self.root_count as u64,
            Section::NodeOffsets | Section::Nodes => n,
            Section::Tensors | Section::TensorSources => self.tensor_arg_count as u64,
            Section::Scalars | Section::ScalarSources => self.scalar_arg_count as u64,
            Section::BoundarySignatures => self.boundary_count as u64,
            Section::Predicates => self.predicate_count as u64,
        }
    }

    /// The canonical section offsets for the header's counts, and the image size they give.
    /// Counts are `u32`, so the `u64` sums cannot overflow.
    pub(super) fn canonical_layout(&self) -> ([u32; SECTION_COUNT], u64) {
        let mut offsets = [0u32; SECTION_COUNT];
        let mut cursor = GRAPH_HEADER_BYTES as u64;
        for s in Section::ALL {
            let len = self.section_len(s);
            if len == 0 {
                continue;
            }
            let align = s.elem_align() as u64;
            let start = cursor.div_ceil(align) * align;
            // Offsets past u32::MAX are reported by the caller through the total.
            offsets[s as usize] = u32::try_from(start).unwrap_or(u32::MAX);
            cursor = start + len * s.elem_size() as u64;
        }
        (offsets, cursor.div_ceil(8) * 8)
    }
}

/// One internal node: what to run, with which arguments, and where its outputs go.
///
/// | off | field |
/// |---|---|
/// | 0 | `kernel_id[3]` (AIC, AIV0, AIV1) |
/// | 12 | `active_mask` |
/// | 13 | `task_attrs` |
/// | 14 | `logical_block_num` |
/// | 16 | `total_required_subtasks` |
/// | 18 | `predicate_slot` |
/// | 20 | `tensor_count` |
/// | 24 | `scalar_count` |
/// | 28 | `total_output_size` |
/// | 32 | `tensor_offset` |
/// | 36 | `scalar_offset` |
///
/// The fields pack without padding. An all-zero node is a valid, predicate-free node.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphNodeDefinition {
    /// Kernel per core slot (AIC, AIV0, AIV1), as recorded.
    pub kernel_id: [i32; 3],
    /// The node's active core slots (an `ActiveMask`'s bits).
    pub active_mask: u8,
    /// The node's task attributes, as recorded.
    pub task_attrs: u8,
    /// Logical blocks the node runs.
    pub logical_block_num: i16,
    /// `logical_block_num × popcount(active_mask)`, as recorded.
    pub total_required_subtasks: i16,
    /// 1-based index of the node's predicate; 0 = none.
    pub predicate_slot: u16,
    /// Tensor arguments, `0..=GRAPH_NODE_MAX_TENSOR_ARGS`.
    pub tensor_count: i32,
    /// Scalar arguments, `0..=GRAPH_NODE_MAX_SCALAR_ARGS`.
    pub scalar_count: i32,
    /// Bytes of the node's output window (its 64-byte-aligned size is what the heap gives it).
    pub total_output_size: i32,
    /// The node's first tensor (and tensor source) in the image.
    pub tensor_offset: u32,
    /// The node's first scalar (and scalar source) in the image.
    pub scalar_offset: u32,
}

crate::assert_layout!(GraphNodeDefinition, size = 40, align = 4, {
    kernel_id: 0, active_mask: 12, task_attrs: 13, logical_block_num: 14,
    total_required_subtasks: 16, predicate_slot: 18, tensor_count: 20, scalar_count: 24,
    total_output_size: 28, tensor_offset: 32, scalar_offset: 36,
});

/// The wire form of a runtime [`TaskTensor`]: the same fields and caches, 8-byte aligned.
///
/// | off | field |
/// |---|---|
/// | 0 | `buffer_addr` |
/// | 8 | `buffer_size` |
/// | 16 | `owner_task_id` |
/// | 24 | `start_offset` (elements) |
/// | 32 | `extent_elem` |
/// | 40 | `version` |
/// | 44 | `shapes[5]` |
/// | 64 | `strides[5]` |
/// | 84 | `ndims`, `dtype`, `manual_dep`, `is_contiguous`, `address_space` |
/// | 89 | `reserved[7]` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphTensor {
    /// The buffer's address: a recorded virtual address for internal outputs, 0 in a
    /// Definition for a tensor taken from the boundary (rebound per invocation).
    pub buffer_addr: u64,
    /// The buffer's size in bytes.
    pub buffer_size: u64,
    /// The producing task's id, or `u64::MAX` for none.
    pub owner_task_id: u64,
    /// Start of the view, in elements.
    pub start_offset: u64,
    /// The view's extent cache, in elements.
    pub extent_elem: u64,
    /// Dependency-tracking version.
    pub version: i32,
    /// Shapes; zero past `ndims`.
    pub shapes: [u32; MAX_TENSOR_DIMS],
    /// Strides in elements; zero past `ndims`.
    pub strides: [u32; MAX_TENSOR_DIMS],
    /// Rank, `1..=5`.
    pub ndims: u8,
    /// Raw [`DataType`].
    pub dtype: u8,
    /// Creator-only dependency tracking (0/1).
    pub manual_dep: u8,
    /// Contiguity cache (0/1).
    pub is_contiguous: u8,
    /// Raw [`AddressSpace`].
    pub address_space: u8,
    /// Zero.
    pub reserved: [u8; 7],
}

crate::assert_layout!(GraphTensor, size = 96, align = 8, {
    buffer_addr: 0, buffer_size: 8, owner_task_id: 16, start_offset: 24, extent_elem: 32,
    version: 40, shapes: 44, strides: 64, ndims: 84, dtype: 85, manual_dep: 86, is_contiguous: 87,
    address_space: 88, reserved: 89,
});

/// Shapes and strides up to the rank, zero past it.
pub(super) fn dims(t: &TaskTensor) -> ([u32; MAX_TENSOR_DIMS], [u32; MAX_TENSOR_DIMS]) {
    let (mut shapes, mut strides) = ([0u32; MAX_TENSOR_DIMS], [0u32; MAX_TENSOR_DIMS]);
    shapes[..t.shapes().len()].copy_from_slice(t.shapes());
    strides[..t.strides().len()].copy_from_slice(t.strides());
    (shapes, strides)
}

impl GraphTensor {
    /// Packs a runtime tensor. Shapes and strides past the rank are written as zero, whatever
    /// the source holds there. `None` when the rank is outside `1..=5`.
    pub fn from_task_tensor(t: &TaskTensor) -> Option<Self> {
        if !rank_ok(t.ndims()) {
            return None;
        }
        let (shapes, strides) = dims(t);
        Some(Self {
            buffer_addr: t.buffer().addr,
            buffer_size: t.buffer().size,
            owner_task_id: t.owner_task_id().0,
            start_offset: t.start_offset(),
            extent_elem: t.extent_elems(),
            version: t.version(),
            shapes,
            strides,
            ndims: t.ndims() as u8,
            dtype: t.dtype().raw(),
            manual_dep: t.manual_dep() as u8,
            is_contiguous: t.is_contiguous() as u8,
            address_space: t.address_space() as u8,
            reserved: [0; 7],
        })
    }

    /// The element type, if the byte names one.
    pub fn data_type(&self) -> Option<DataType> {
        DataType::from_raw(self.dtype)
    }

    /// Where the buffer lives, if the byte names a space.
    pub fn space(&self) -> Option<AddressSpace> {
        AddressSpace::from_raw(self.address_space)
    }
}

/// Where a node's tensor comes from at replay.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorSourceKind {
    /// Boundary tensor `source_index`, field for field.
    BoundaryExact = 0,
    /// A view of boundary tensor `source_index`'s buffer; `packed_offset` is the element delta
    /// of its `start_offset` from the boundary tensor's.
    BoundaryView = 1,
    /// An output of earlier node `source_index`; `packed_offset` is the byte offset into that
    /// node's output window.
    Internal = 2,
    /// An output of this node (`source_index` is the node itself); `packed_offset` is the byte
    /// offset into its own window.
    OwnOutput = 3,
}

impl TensorSourceKind {
    /// Decodes the image byte; `None` for 4..=255.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::BoundaryExact),
            1 => Some(Self::BoundaryView),
            2 => Some(Self::Internal),
            3 => Some(Self::OwnOutput),
            _ => None,
        }
    }
}

/// The classification of one tensor (a node argument or a predicate operand).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphTensorSourceRef {
    /// Raw [`TensorSourceKind`].
    pub source: u8,
    /// Zero.
    pub reserved: u8,
    /// Boundary tensor or node index, per the kind.
    pub source_index: u16,
    /// Zero.
    pub reserved2: u32,
    /// Element delta (boundary view) or byte offset into a window (internal, own output).
    pub packed_offset: u64,
}

crate::assert_layout!(GraphTensorSourceRef, size = 16, align = 8, {
    source: 0, reserved: 1, source_index: 2, reserved2: 4, packed_offset: 8,
});

impl GraphTensorSourceRef {
    /// The kind, if the byte names one.
    pub const fn kind(&self) -> Option<TensorSourceKind> {
        TensorSourceKind::from_raw(self.source)
    }
}

/// Where a node's scalar comes from at replay.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScalarSourceKind {
    /// The value stored in the Definition.
    Static = 0,
    /// Boundary scalar `source_index` of each invocation.
    Boundary = 1,
}

impl ScalarSourceKind {
    /// Decodes the image byte; `None` for 2..=255.
    pub const fn from_raw(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Static),
            1 => Some(Self::Boundary),
            _ => None,
        }
    }
}

/// The classification of one scalar.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphScalarSourceRef {
    /// Boundary scalar index (0 for static scalars).
    pub source_index: u16,
    /// Raw [`ScalarSourceKind`].
    pub source: u8,
    /// Zero.
    pub reserved: u8,
}

crate::assert_layout!(GraphScalarSourceRef, size = 4, align = 2, {
    source_index: 0, source: 2, reserved: 3,
});

impl GraphScalarSourceRef {
    /// The kind, if the byte names one.
    pub const fn kind(&self) -> Option<ScalarSourceKind> {
        ScalarSourceKind::from_raw(self.source)
    }
}

/// What a later invocation's boundary tensor must look like to reuse the Definition.
///
/// | off | field |
/// |---|---|
/// | 0 | `buffer_size` |
/// | 8 | `shapes[5]` |
/// | 28 | `strides[5]` |
/// | 48 | `alias_rep` |
/// | 50 | `ndims`, `dtype`, `tag`, `manual_dep`, `is_contiguous` |
/// | 55 | `padding` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphBoundarySignature {
    /// The buffer's size in bytes.
    pub buffer_size: u64,
    /// Shapes; zero past `ndims`.
    pub shapes: [u32; MAX_TENSOR_DIMS],
    /// Strides; zero past `ndims`.
    pub strides: [u32; MAX_TENSOR_DIMS],
    /// The first boundary tensor with the same buffer address and size (itself if none
    /// earlier).
    pub alias_rep: u16,
    /// Rank of the boundary tensor, `1..=5`.
    pub ndims: u8,
    /// Raw [`DataType`].
    pub dtype: u8,
    /// Raw [`TensorArgType`] (its `i32` value, which fits a byte).
    pub tag: u8,
    /// Creator-only dependency tracking (0/1).
    pub manual_dep: u8,
    /// Contiguity (0/1).
    pub is_contiguous: u8,
    /// Zero.
    pub padding: u8,
}

crate::assert_layout!(GraphBoundarySignature, size = 56, align = 8, {
    buffer_size: 0, shapes: 8, strides: 28, alias_rep: 48, ndims: 50, dtype: 51, tag: 52,
    manual_dep: 53, is_contiguous: 54, padding: 55,
});

impl GraphBoundarySignature {
    /// The tag, if the byte names one.
    pub const fn arg_type(&self) -> Option<TensorArgType> {
        TensorArgType::from_raw(self.tag as i32)
    }
}

/// A node's run condition: compare one element of `operand` with `target`.
///
/// | off | field |
/// |---|---|
/// | 0 | `operand` |
/// | 96 | `operand_source` |
/// | 112 | `elem_offset` |
/// | 120 | `target` |
/// | 128 | `elem_size`, `op` |
/// | 130 | `reserved[6]` |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct GraphPredicate {
    /// The tensor read.
    pub operand: GraphTensor,
    /// Where the operand comes from at replay (never this node's own output).
    pub operand_source: GraphTensorSourceRef,
    /// The element read, as recorded.
    pub elem_offset: u64,
    /// The value compared with.
    pub target: i64,
    /// Bytes of the element.
    pub elem_size: u8,
    /// The comparison, as recorded.
    pub op: u8,
    /// Zero.
    pub reserved: [u8; 6],
}

crate::assert_layout!(GraphPredicate, size = 136, align = 8, {
    operand: 0, operand_source: 96, elem_offset: 112, target: 120, elem_size: 128, op: 129,
    reserved: 130,
});

/// Number of image sections.
pub const SECTION_COUNT: usize = 13;

/// The image's sections, in image order.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// `u32 × (n + 1)`.
    FanoutOffsets = 0,
    /// `u16 × E`.
    FanoutIndices = 1,
    /// `u32 × (n + 1)`.
    FaninOffsets = 2,
    /// `u16 × E`.
    FaninIndices = 3,
    /// `u16 × roots`.
    RootIndices = 4,
    /// `u64 × n`.
    NodeOffsets = 5,
    /// `GraphNodeDefinition × n`.
    Nodes = 6,
    /// `GraphTensor × T`.
    Tensors = 7,
    /// `GraphTensorSourceRef × T`.
    TensorSources = 8,
    /// `u64 × S`.
    Scalars = 9,
    /// `GraphScalarSourceRef × S`.
    ScalarSources = 10,
    /// `GraphBoundarySignature × B`.
    BoundarySignatures = 11,
    /// `GraphPredicate × P`.
    Predicates = 12,
}

impl Section {
    /// Every section, in image order.
    pub const ALL: [Section; SECTION_COUNT] = [
        Self::FanoutOffsets,
        Self::FanoutIndices,
        Self::FaninOffsets,
        Self::FaninIndices,
        Self::RootIndices,
        Self::NodeOffsets,
        Self::Nodes,
        Self::Tensors,
        Self::TensorSources,
        Self::Scalars,
        Self::ScalarSources,
        Self::BoundarySignatures,
        Self::Predicates,
    ];

    /// Bytes of one element.
    pub const fn elem_size(self) -> usize {
        match self {
            Self::FanoutOffsets | Self::FaninOffsets => 4,
            Self::FanoutIndices | Self::FaninIndices | Self::RootIndices => 2,
            Self::NodeOffsets | Self::Scalars => 8,
            Self::Nodes => size_of::<GraphNodeDefinition>(),
            Self::Tensors => size_of::<GraphTensor>(),
            Self::TensorSources => size_of::<GraphTensorSourceRef>(),
            Self::ScalarSources => size_of::<GraphScalarSourceRef>(),
            Self::BoundarySignatures => size_of::<GraphBoundarySignature>(),
            Self::Predicates => size_of::<GraphPredicate>(),
        }
    }

    /// Alignment of the section's offset. Fixed numbers, not the host's `align_of`, so the
    /// image is the same on every target.
    pub const fn elem_align(self) -> usize {
        match self {
            Self::FanoutOffsets | Self::FaninOffsets | Self::Nodes => 4,
            Self::FanoutIndices | Self::FaninIndices | Self::RootIndices => 2,
            Self::ScalarSources => 2,
            Self::NodeOffsets
            | Self::Scalars
            | Self::Tensors
            | Self::TensorSources
            | Self::BoundarySignatures
            | Self::Predicates => 8,
        }
    }

    /// The section's name, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::FanoutOffsets => "fanout_offsets",
            Self::FanoutIndices => "fanout_indices",
            Self::FaninOffsets => "fanin_offsets",
            Self::FaninIndices => "fanin_indices",
            Self::RootIndices => "root_indices",
            Self::NodeOffsets => "node_offsets",
            Self::Nodes => "nodes",
            Self::Tensors => "tensors",
            Self::TensorSources => "tensor_sources",
            Self::Scalars => "scalars",
            Self::ScalarSources => "scalar_sources",
            Self::BoundarySignatures => "boundary_signatures",
            Self::Predicates => "predicates",
        }
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// The fixed alignments are what the records need on this target.
static_assertions::const_assert!(align_of::<GraphNodeDefinition>() <= 4);
static_assertions::const_assert!(align_of::<GraphTensor>() <= 8);
static_assertions::const_assert!(align_of::<GraphTensorSourceRef>() <= 8);
static_assertions::const_assert!(align_of::<GraphScalarSourceRef>() <= 2);
static_assertions::const_assert!(align_of::<GraphBoundarySignature>() <= 8);
static_assertions::const_assert!(align_of::<GraphPredicate>() <= 8);
static_assertions::const_assert!(align_of::<u64>() <= 8);

/// The largest image the caps allow: every section at its cap, plus alignment slack.
pub(super) const MAX_IMAGE_BYTES: u64 = {
    let n = GRAPH_MAX_NODES as u64;
    let edges = n * (n - 1) / 2;
    let t = n * GRAPH_NODE_MAX_TENSOR_ARGS as u64;
    let s = n * GRAPH_NODE_MAX_SCALAR_ARGS as u64;
    GRAPH_HEADER_BYTES as u64
        + 2 * 4 * (n + 1)
        + 2 * 2 * edges
        + 2 * n
        + 8 * n
        + size_of::<GraphNodeDefinition>() as u64 * n
        + (size_of::<GraphTensor>() + size_of::<GraphTensorSourceRef>()) as u64 * t
        + (8 + size_of::<GraphScalarSourceRef>()) as u64 * s
        + size_of::<GraphBoundarySignature>() as u64 * GRAPH_IMAGE_MAX_BOUNDARY as u64
        + size_of::<GraphPredicate>() as u64 * n
        + 8 * (SECTION_COUNT as u64 + 1)
};
// Image offsets and sizes are u32: the caps keep every image inside that range.
static_assertions::const_assert!(MAX_IMAGE_BYTES <= u32::MAX as u64);

/// The per-invocation records whose sizes the device runtime defines: the execution header and
/// one node's storage (descriptor, slot state and payload). The Definition only records the
/// total, [`execution_storage_bytes`]; both sides compute it with the same function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutionStorageShape {
    /// Bytes of the execution header.
    pub header_bytes: u32,
    /// Bytes of one node's storage.
    pub node_bytes: u32,
}

/// Bytes of one invocation's execution storage: the header rounded up to 64, then per node its
/// storage rounded up to 64, then `tensor_count` [`TaskTensor`]s (128 bytes each), then
/// `scalar_count` `u64`s, the whole rounded up to 64. `None` when it does not fit a `u32`.
pub fn execution_storage_bytes(
    shape: ExecutionStorageShape,
    task_count: u32,
    tensor_count: u32,
    scalar_count: u32,
) -> Option<u32> {
    let line = |b: u64| b.div_ceil(64) * 64;
    let nodes = (task_count as u64).checked_mul(line(shape.node_bytes as u64))?;
    // The other terms are below 2^40, so only the node term and the sums can overflow.
    let total = line(shape.header_bytes as u64)
        .checked_add(nodes)?
        .checked_add(tensor_count as u64 * size_of::<TaskTensor>() as u64)?
        .checked_add(scalar_count as u64 * 8)?;
    u32::try_from(line(total)).ok()
}

// The "128 bytes each" above.
crate::assert_layout!(TaskTensor, size = 128);
