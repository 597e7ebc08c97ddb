//! Graph Definitions: a recorded Graph body as one position-independent image, the keys that
//! name it, and the reader that validates it.
//!
//! A Graph's body is recorded once into a *Definition*: plain data with no pointers, where
//! every reference is a `u32` byte offset from the image's first byte. The host builds it with
//! [`build_definition`] into memory the caller provides (sized by [`definition_size`]); whoever
//! receives the bytes checks them with [`DefinitionView::parse`] before reading a field, and
//! [`DefinitionView::verify_content_hash`] compares the stored hash with the content.
//!
//! # Image layout
//!
//! A [`GraphDefinitionHeader`] (120 bytes) followed by up to thirteen sections, in this order,
//! each starting at the first offset past the previous section that is a multiple of its
//! element alignment. A section with no elements is absent: its offset is 0 and it takes no
//! room. The image ends at the last section's end rounded up to 8 bytes; every gap is zero.
//!
//! | section ([`Section`]) | element | count |
//! |---|---|---|
//! | fanout offsets | `u32` | n + 1 |
//! | fanout indices | `u16` | E |
//! | fanin offsets | `u32` | n + 1 |
//! | fanin indices | `u16` | E |
//! | root indices | `u16` | roots |
//! | node offsets | `u64` | n |
//! | nodes | [`GraphNodeDefinition`] (40 B) | n |
//! | tensors | [`GraphTensor`] (96 B) | T |
//! | tensor sources | [`GraphTensorSourceRef`] (16 B) | T |
//! | scalars | `u64` | S |
//! | scalar sources | [`GraphScalarSourceRef`] (4 B) | S |
//! | boundary signatures | [`GraphBoundarySignature`] (56 B) | B |
//! | predicates | [`GraphPredicate`] (136 B) | P |
//!
//! The image is canonical: one input gives exactly one image. The reader refuses any other
//! placement, so a corrupted offset is a refusal rather than a misread.
//!
//! # What the builder guarantees (and the reader checks)
//!
//! - Nodes are numbered in record order, and every producer precedes its consumers, so node
//!   order is a topological order. The fanin CSR keeps each node's producers in record order,
//!   without repeats; the fanout CSR is its exact transpose, each producer's consumers in
//!   increasing order; the roots are exactly the nodes without producers, in increasing order.
//! - `node_offsets[i]` is the sum of the 64-byte-aligned output sizes of the nodes before `i`,
//!   and `required_heap` is the sum over all nodes.
//! - A node's tensors, tensor sources, scalars and scalar sources are contiguous and in node
//!   order: `tensor_offset` and `scalar_offset` are running sums. Predicates are numbered in
//!   node order; `predicate_slot` is 1-based, 0 meaning none.
//! - Boundary scalars are stored as 0 (the value arrives with each invocation).
//!
//! # Stale input
//!
//! [`DefinitionInput::node_count`] is the only bound on every traversal. The input slices may
//! be longer and hold a longer earlier body's leftovers; nothing past `node_count` nodes, and
//! nothing those nodes do not reference, reaches the image.
//!
//! # Keys and hashes
//!
//! [`graph_key`] names a body by string, [`make_key`] mixes construction parameters into a key
//! by value, [`full_key`] adds the callable, and [`graph_hash_bytes`] / [`GraphHasher`] hash
//! images (host and device use the same function).
//!
//! # Submodules
//!
//! One file per stage a Definition passes through, each re-exported here, so every
//! `graph::Item` path names the item whichever file holds it:
//!
//! - [`key`]: key hashing ([`graph_key`], [`full_key`], [`make_key`]) and the image hash
//!   ([`GraphHasher`]).
//! - [`records`]: the image's records, each with its layout asserted, the [`Section`] table and
//!   the execution storage size.
//! - [`input`]: what the builder reads, [`DefinitionInput`], as a recorder holds it.
//! - [`error`]: [`DefinitionError`], every refusal of the builder and of the reader.
//! - `rules` (private): the checks the builder enforces and the reader repeats, written once
//!   so the two cannot disagree.
//! - [`build`]: planning ([`definition_size`]) and writing ([`build_definition`]) an image.
//! - [`view`]: the validating reader, [`DefinitionView`].

pub mod build;
pub mod error;
pub mod input;
pub mod key;
pub mod records;
mod rules;
pub mod view;

#[cfg(test)]
mod tests;

pub use build::{build_definition, definition_size};
pub use error::{DefinitionError, FlatArray, TensorRole};
pub use input::{
    DefinitionBoundary, DefinitionInput, RecordedNode, RecordedPredicate, RecordedScalarSource,
    RecordedTensorSource, TASK_ATTR_PREDICATE,
};
pub use key::{
    definition_content_hash, full_key, graph_hash_bytes, graph_key, make_key, ConfigValue,
    GraphHasher, FNV_OFFSET_BASIS, FNV_PRIME,
};
pub use records::{
    execution_storage_bytes, ExecutionStorageShape, GraphBoundarySignature, GraphDefinitionHeader,
    GraphNodeDefinition, GraphPredicate, GraphScalarSourceRef, GraphTensor, GraphTensorSourceRef,
    ScalarSourceKind, Section, TensorSourceKind, GRAPH_HEADER_BYTES, SECTION_COUNT,
};
pub use view::{DefinitionView, Records};

use crate::limits::{CORE_MAX_SCALAR_ARGS, CORE_MAX_TENSOR_ARGS};

/// Internal nodes in one Definition.
pub const GRAPH_MAX_NODES: usize = 1024;
/// Definitions (published and in flight) one run may hold.
pub const GRAPH_MAX_DEFINITIONS: usize = 16;
/// Tensors a Graph's boundary may carry (the cacheability gate; the image itself indexes
/// boundary tensors with `u16`, see [`GRAPH_IMAGE_MAX_BOUNDARY`]).
pub const GRAPH_MAX_TENSOR_ARGS: usize = 128;
/// Scalars a Graph's boundary may carry.
pub const GRAPH_MAX_SCALAR_ARGS: usize = 64;
/// Tensors one node passes to its kernel.
pub const GRAPH_NODE_MAX_TENSOR_ARGS: usize = CORE_MAX_TENSOR_ARGS;
/// Scalars one node passes to its kernel.
pub const GRAPH_NODE_MAX_SCALAR_ARGS: usize = CORE_MAX_SCALAR_ARGS;
/// Boundary tensors (and boundary scalars) an image can index: source indices are `u16`.
pub const GRAPH_IMAGE_MAX_BOUNDARY: usize = u16::MAX as usize;
/// Alignment of each node's output window inside the Graph's heap block.
pub const GRAPH_OUTPUT_ALIGN: u64 = 64;

// Node indices travel as u16.
static_assertions::const_assert!(GRAPH_MAX_NODES <= u16::MAX as usize);
