//! [`DefinitionError`]: every refusal of the builder and of the validating reader, typed.
//!
//! One error type for both sides, in its own file, because the two name the same faults (a
//! rank, a source, a CSR row) from either end: the builder in terms of the recorded input, the
//! reader in terms of the image's sections and records.

use super::records::Section;
use super::{GRAPH_IMAGE_MAX_BOUNDARY, GRAPH_MAX_NODES};
use super::{GRAPH_NODE_MAX_SCALAR_ARGS, GRAPH_NODE_MAX_TENSOR_ARGS};
use crate::limits::MAX_TENSOR_DIMS;
use core::fmt;

/// Which tensor a rank error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorRole {
    /// Argument `arg` of node `node`.
    Node {
        /// Index of the node, in record order.
        node: usize,
        /// The argument's position in the node.
        arg: usize,
    },
    /// Boundary tensor `index`.
    Boundary {
        /// The boundary position.
        index: usize,
    },
    /// The predicate operand of node `node`.
    Predicate {
        /// Index of the predicated node, in record order.
        node: usize,
    },
}

/// Which flat input array a range error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlatArray {
    /// [`DefinitionInput::tensors`](super::DefinitionInput::tensors).
    Tensors,
    /// [`DefinitionInput::tensor_sources`](super::DefinitionInput::tensor_sources).
    TensorSources,
    /// [`DefinitionInput::scalars`](super::DefinitionInput::scalars).
    Scalars,
    /// [`DefinitionInput::scalar_sources`](super::DefinitionInput::scalar_sources).
    ScalarSources,
    /// [`DefinitionInput::fanins`](super::DefinitionInput::fanins).
    Fanins,
}

impl fmt::Display for TensorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Node { node, arg } => write!(f, "node {node}'s tensor {arg}"),
            Self::Boundary { index } => write!(f, "boundary tensor {index}"),
            Self::Predicate { node } => write!(f, "node {node}'s predicate operand"),
        }
    }
}

impl fmt::Display for FlatArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tensors => "tensors",
            Self::TensorSources => "tensor_sources",
            Self::Scalars => "scalars",
            Self::ScalarSources => "scalar_sources",
            Self::Fanins => "fanins",
        })
    }
}

/// Why a Definition could not be built, or an image was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionError {
    /// The recording was marked unsupported.
    Unsupported,
    /// The recording has no boundary.
    NoBoundary,
    /// The node count is 0 or above [`GRAPH_MAX_NODES`].
    NodeCount {
        /// The `node_count` given.
        count: usize,
    },
    /// `node_count` exceeds the node slots given.
    MissingNodes {
        /// The `node_count` given.
        node_count: usize,
        /// Length of the `nodes` slice given.
        provided: usize,
    },
    /// More boundary tensors or scalars than an image can index.
    TooManyBoundary {
        /// Boundary tensors given.
        tensors: usize,
        /// Boundary scalars given.
        scalars: usize,
    },
    /// The boundary tensor and tag lists differ in length.
    BoundaryMismatch {
        /// Length of the boundary's tensor list.
        tensors: usize,
        /// Length of its tag list.
        tags: usize,
    },
    /// A tensor's rank is outside `1..=5`.
    Rank {
        /// Which tensor: a node's argument, a boundary tensor or a predicate operand.
        tensor: TensorRole,
        /// The rank it holds.
        ndims: u32,
    },
    /// A node has more tensors or scalars than a kernel takes.
    NodeArgs {
        /// Index of the node, in record order.
        node: usize,
        /// Its `tensor_count`.
        tensors: u32,
        /// Its `scalar_count`.
        scalars: u32,
    },
    /// A node's range reaches past a flat input array.
    Range {
        /// Index of the node whose range it is, in record order.
        node: usize,
        /// The flat array the range indexes.
        array: FlatArray,
        /// The range's first element.
        offset: u32,
        /// The range's length, in elements.
        count: u32,
        /// The array's length, in elements.
        len: usize,
    },
    /// A producer index is not smaller than its consumer's.
    ForwardFanin {
        /// Index of the consumer, in record order.
        node: usize,
        /// The producer named.
        producer: usize,
    },
    /// A node names one producer twice.
    DuplicateFanin {
        /// Index of the consumer, in record order.
        node: usize,
        /// The producer named twice.
        producer: usize,
    },
    /// A node's aligned output size does not fit an `i32`.
    OutputSize {
        /// Index of the node, in record order.
        node: usize,
        /// Its `total_output_size`, in bytes.
        size: u64,
    },
    /// A tensor source names no boundary tensor or earlier node, or an offset outside the
    /// window it names (`arg` is `None` for the predicate operand).
    TensorSource {
        /// Index of the node, in record order.
        node: usize,
        /// The argument, or `None` for the predicate operand.
        arg: Option<usize>,
    },
    /// A boundary scalar source names no boundary scalar.
    ScalarSource {
        /// Index of the node, in record order.
        node: usize,
        /// The scalar's position in the node.
        arg: usize,
        /// The boundary scalar index the source names (at or past the boundary's count).
        index: usize,
    },
    /// A scalar derived through a mutable boundary access cannot be packed.
    InvalidatedScalar {
        /// Index of the node, in record order.
        node: usize,
        /// The scalar's position in the node.
        arg: usize,
    },
    /// A node's predicate index names no predicate.
    PredicateIndex {
        /// Index of the node, in record order.
        node: usize,
        /// Its `predicate_index`.
        index: u32,
        /// Length of the `predicates` slice given.
        len: usize,
    },
    /// A predicate operand is the node's own output.
    PredicateOwnOutput {
        /// Index of the predicated node, in record order.
        node: usize,
    },
    /// A predicate names no element of its operand, or compares in a way the device does not
    /// (an unknown operator, a width other than 1, 2, 4 or 8 bytes).
    PredicateElement {
        /// Index of the predicated node, in record order.
        node: usize,
    },
    /// The execution storage does not fit a `u32`.
    StorageTooLarge,
    /// The output buffer is shorter than the image.
    OutputTooSmall {
        /// Bytes of the image ([`definition_size`](super::definition_size)).
        needed: usize,
        /// Length of the output buffer given.
        provided: usize,
    },
    /// The bytes end before the header or before `total_bytes`.
    Truncated {
        /// Bytes the image needs: the header's, or its `total_bytes`.
        needed: u64,
        /// Length of the bytes given.
        provided: usize,
    },
    /// A header field is out of range or disagrees with the others.
    Header {
        /// The header field's name, as in [`GraphDefinitionHeader`](super::GraphDefinitionHeader).
        field: &'static str,
        /// The value the image holds there.
        value: u64,
    },
    /// A section offset is not where the header's counts place it.
    Section {
        /// The misplaced section.
        section: Section,
        /// The offset the header holds for it, in bytes from the image's start.
        offset: u32,
    },
    /// A CSR section is not well formed (or the fanout is not the fanin's transpose).
    Csr {
        /// The offsets or indices section at fault.
        section: Section,
        /// The node whose row is at fault (for an offsets section, `n` is its final entry).
        node: usize,
    },
    /// The roots are not exactly the nodes without producers.
    Roots {
        /// The first position in the root list that disagrees with the nodes without
        /// producers.
        index: usize,
    },
    /// A node's heap offset is not the running sum of aligned output sizes (`node == n` names
    /// `required_heap`).
    NodeOffset {
        /// Index of the node whose offset is wrong, or `n` for `required_heap`.
        node: usize,
    },
    /// A record holds a value out of range.
    Record {
        /// The section holding the record.
        section: Section,
        /// The record's index within its section.
        index: usize,
        /// The field's name, as in the record's struct.
        field: &'static str,
    },
    /// The stored content hash does not match the content.
    ContentHash {
        /// The header's `content_hash`.
        stored: u64,
        /// [`definition_content_hash`](super::definition_content_hash) of the image.
        computed: u64,
    },
}

impl fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Unsupported => f.write_str("the recording is unsupported"),
            Self::NoBoundary => f.write_str("the recording has no boundary"),
            Self::NodeCount { count } => {
                write!(f, "{count} nodes is outside 1..={GRAPH_MAX_NODES}")
            }
            Self::MissingNodes {
                node_count,
                provided,
            } => write!(f, "node_count {node_count} exceeds the {provided} node slots"),
            Self::TooManyBoundary { tensors, scalars } => write!(
                f,
                "boundary of {tensors} tensors and {scalars} scalars exceeds {GRAPH_IMAGE_MAX_BOUNDARY}"
            ),
            Self::BoundaryMismatch { tensors, tags } => {
                write!(f, "{tensors} boundary tensors but {tags} tags")
            }
            Self::Rank { tensor, ndims } => {
                write!(f, "{tensor}: rank {ndims} is outside 1..={MAX_TENSOR_DIMS}")
            }
            Self::NodeArgs {
                node,
                tensors,
                scalars,
            } => write!(
                f,
                "node {node}: {tensors} tensors / {scalars} scalars exceed \
                 {GRAPH_NODE_MAX_TENSOR_ARGS} / {GRAPH_NODE_MAX_SCALAR_ARGS}"
            ),
            Self::Range {
                node,
                array,
                offset,
                count,
                len,
            } => write!(
                f,
                "node {node}: {array}[{offset}..+{count}] exceeds its {len} entries"
            ),
            Self::ForwardFanin { node, producer } => {
                write!(f, "node {node}: producer {producer} does not precede it")
            }
            Self::DuplicateFanin { node, producer } => {
                write!(f, "node {node}: producer {producer} named twice")
            }
            Self::OutputSize { node, size } => {
                write!(f, "node {node}: output size {size} does not fit an i32")
            }
            Self::TensorSource { node, arg } => match arg {
                Some(arg) => write!(f, "node {node}: tensor {arg} has an invalid source"),
                None => write!(f, "node {node}: the predicate operand has an invalid source"),
            },
            Self::ScalarSource { node, arg, index } => write!(
                f,
                "node {node}: scalar {arg} names boundary scalar {index}, which does not exist"
            ),
            Self::InvalidatedScalar { node, arg } => write!(
                f,
                "node {node}: scalar {arg} derives from an invalidated boundary scalar"
            ),
            Self::PredicateIndex { node, index, len } => {
                write!(f, "node {node}: predicate {index} of {len} does not exist")
            }
            Self::PredicateOwnOutput { node } => {
                write!(f, "node {node}: the predicate reads the node's own output")
            }
            Self::PredicateElement { node } => write!(
                f,
                "node {node}: the predicate's element, width or operator is invalid"
            ),
            Self::StorageTooLarge => f.write_str("execution storage exceeds u32"),
            Self::OutputTooSmall { needed, provided } => {
                write!(f, "image needs {needed} bytes, {provided} given")
            }
            Self::Truncated { needed, provided } => {
                write!(f, "image needs {needed} bytes, {provided} given")
            }
            Self::Header { field, value } => write!(f, "header {field} = {value} is invalid"),
            Self::Section { section, offset } => {
                write!(f, "section {section} at offset {offset} is misplaced")
            }
            Self::Csr { section, node } => write!(f, "{section} is malformed at node {node}"),
            Self::Roots { index } => write!(f, "root list is wrong at position {index}"),
            Self::NodeOffset { node } => write!(f, "node offset {node} is wrong"),
            Self::Record {
                section,
                index,
                field,
            } => write!(f, "{section}[{index}].{field} is invalid"),
            Self::ContentHash { stored, computed } => write!(
                f,
                "content hash {stored:#018x} does not match the content's {computed:#018x}"
            ),
        }
    }
}

impl core::error::Error for DefinitionError {}
