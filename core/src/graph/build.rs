//! Planning and building an image: [`definition_size`] checks an input and sizes its image,
//! [`build_definition`] writes it.
//!
//! Both start from one plan, so the size a caller reserves and the bytes it gets cannot
//! disagree. Planning checks everything (the shared rules of the private `rules`, every range
//! into the flat arrays, in the order the refusals are reported) before a byte is written;
//! writing then cannot fail, and reads the input without checking it again.
//!
//! Its own file because only the host's recorder builds images; the device only reads them
//! ([`super::view`]).

use super::error::{DefinitionError, FlatArray, TensorRole};
use super::input::{
    DefinitionBoundary, DefinitionInput, RecordedNode, RecordedScalarSource, RecordedTensorSource,
};
use super::key::graph_hash_bytes;
use super::records::{
    dims, execution_storage_bytes, GraphBoundarySignature, GraphDefinitionHeader,
    GraphNodeDefinition, GraphPredicate, GraphScalarSourceRef, GraphTensor, GraphTensorSourceRef,
    ScalarSourceKind, Section, TensorSourceKind,
};
use super::rules::{align_output, output_window, predicate_ok, rank_ok, source_ok, NodeSet};
use super::{GRAPH_IMAGE_MAX_BOUNDARY, GRAPH_MAX_NODES};
use super::{GRAPH_NODE_MAX_SCALAR_ARGS, GRAPH_NODE_MAX_TENSOR_ARGS};
use crate::task_tensor::TaskTensor;
use bytemuck::{Pod, Zeroable};
use core::mem::{offset_of, size_of};

// ------------------------------------------------------------------------------------------
// Planning
// ------------------------------------------------------------------------------------------

/// `slice[offset..offset + count]`, or the [`DefinitionError::Range`] naming node `node`.
fn range<T>(
    slice: &[T],
    node: usize,
    array: FlatArray,
    offset: u32,
    count: u32,
) -> Result<&[T], DefinitionError> {
    let start = offset as usize;
    start
        .checked_add(count as usize)
        .and_then(|end| slice.get(start..end))
        .ok_or(DefinitionError::Range {
            node,
            array,
            offset,
            count,
            len: slice.len(),
        })
}

/// A node's slices, checked against the flat arrays.
struct NodeArgs<'a> {
    tensors: &'a [TaskTensor],
    tensor_sources: &'a [RecordedTensorSource],
    scalar_sources: &'a [RecordedScalarSource],
    fanins: &'a [usize],
}

fn node_args<'a>(
    input: &DefinitionInput<'a>,
    i: usize,
    node: &RecordedNode,
) -> Result<NodeArgs<'a>, DefinitionError> {
    range(
        input.scalars,
        i,
        FlatArray::Scalars,
        node.scalar_offset,
        node.scalar_count,
    )?;
    Ok(NodeArgs {
        tensors: range(
            input.tensors,
            i,
            FlatArray::Tensors,
            node.tensor_offset,
            node.tensor_count,
        )?,
        tensor_sources: range(
            input.tensor_sources,
            i,
            FlatArray::TensorSources,
            node.tensor_source_offset,
            node.tensor_count,
        )?,
        scalar_sources: range(
            input.scalar_sources,
            i,
            FlatArray::ScalarSources,
            node.scalar_offset,
            node.scalar_count,
        )?,
        fanins: range(
            input.fanins,
            i,
            FlatArray::Fanins,
            node.fanin_offset,
            node.fanin_count,
        )?,
    })
}

/// The validated counts of an input and the header they give (content hash 0).
struct Plan {
    header: GraphDefinitionHeader,
}

/// What the checked nodes add up to: the header's counts.
#[derive(Default)]
struct Totals {
    /// Sum of the nodes' aligned output windows, in bytes (`required_heap`).
    heap: u64,
    edges: u64,
    roots: u32,
    tensors: u32,
    scalars: u32,
    predicates: u32,
}

/// The planning pass over one input: the checks, node by node, and the totals they add up.
struct Planner<'i, 'a> {
    input: &'i DefinitionInput<'a>,
    /// The first `node_count` node slots: the only nodes planning reads.
    nodes: &'a [RecordedNode],
    boundary: DefinitionBoundary<'a>,
    /// The current node's producers (empty between nodes), for the no-repeats rule.
    seen: NodeSet,
    totals: Totals,
}

impl<'i, 'a> Planner<'i, 'a> {
    /// The checks before any node is read: the recording is supported, the node count is in
    /// range and has its slots, and the boundary is present, indexable, tagged and of valid
    /// ranks.
    fn new(input: &'i DefinitionInput<'a>) -> Result<Self, DefinitionError> {
        if input.unsupported {
            return Err(DefinitionError::Unsupported);
        }
        let n = input.node_count;
        if n == 0 || n > GRAPH_MAX_NODES {
            return Err(DefinitionError::NodeCount { count: n });
        }
        let nodes = input.nodes.get(..n).ok_or(DefinitionError::MissingNodes {
            node_count: n,
            provided: input.nodes.len(),
        })?;
        // The boundary is checked for presence before any of it is read.
        let boundary = input.boundary.ok_or(DefinitionError::NoBoundary)?;
        let b = boundary.tensors.len();
        if b > GRAPH_IMAGE_MAX_BOUNDARY || boundary.scalar_count > GRAPH_IMAGE_MAX_BOUNDARY {
            return Err(DefinitionError::TooManyBoundary {
                tensors: b,
                scalars: boundary.scalar_count,
            });
        }
        if boundary.tags.len() != b {
            return Err(DefinitionError::BoundaryMismatch {
                tensors: b,
                tags: boundary.tags.len(),
            });
        }
        for (index, t) in boundary.tensors.iter().enumerate() {
            if !rank_ok(t.ndims()) {
                return Err(DefinitionError::Rank {
                    tensor: TensorRole::Boundary { index },
                    ndims: t.ndims(),
                });
            }
        }
        Ok(Self {
            input,
            nodes,
            boundary,
            seen: NodeSet::new(),
            totals: Totals::default(),
        })
    }

    /// Node `j`'s aligned window. `source_ok` asks only about `j <= i`, and node `i`'s size is
    /// checked before its sources, so every size it reads has passed `output_window` already.
    fn window(&self, j: usize) -> Option<u64> {
        self.nodes
            .get(j)
            .and_then(|nd| output_window(nd.total_output_size))
    }

    /// Whether a recorded source is consistent for node `i` (see `rules::source_ok`).
    fn source_ok(&self, i: usize, src: &RecordedTensorSource) -> bool {
        let b = self.boundary.tensors.len();
        source_ok(src.kind, src.index, src.packed_offset, i, b, |j| {
            self.window(j)
        })
    }

    /// Checks node `i`, then adds what it contributes to the totals. The checks run in the
    /// order the refusals are reported: argument counts, output size, ranges, tensors,
    /// scalars, producers, predicate.
    fn check_node(&mut self, i: usize, node: &RecordedNode) -> Result<(), DefinitionError> {
        if node.tensor_count as usize > GRAPH_NODE_MAX_TENSOR_ARGS
            || node.scalar_count as usize > GRAPH_NODE_MAX_SCALAR_ARGS
        {
            return Err(DefinitionError::NodeArgs {
                node: i,
                tensors: node.tensor_count,
                scalars: node.scalar_count,
            });
        }
        let w = output_window(node.total_output_size).ok_or(DefinitionError::OutputSize {
            node: i,
            size: node.total_output_size,
        })?;
        self.totals.heap += w;
        let args = node_args(self.input, i, node)?;
        self.check_tensors(i, &args)?;
        self.check_scalars(i, &args)?;
        self.check_fanins(i, args.fanins)?;
        if let Some(index) = node.predicate_index {
            self.check_predicate(i, index)?;
            self.totals.predicates += 1;
        }
        self.totals.edges += args.fanins.len() as u64;
        self.totals.roots += args.fanins.is_empty() as u32;
        self.totals.tensors += node.tensor_count;
        self.totals.scalars += node.scalar_count;
        Ok(())
    }

    /// Every tensor argument of node `i` has a valid rank and a consistent source.
    fn check_tensors(&self, i: usize, args: &NodeArgs<'_>) -> Result<(), DefinitionError> {
        for (arg, (t, src)) in args.tensors.iter().zip(args.tensor_sources).enumerate() {
            if !rank_ok(t.ndims()) {
                return Err(DefinitionError::Rank {
                    tensor: TensorRole::Node { node: i, arg },
                    ndims: t.ndims(),
                });
            }
            if !self.source_ok(i, src) {
                return Err(DefinitionError::TensorSource {
                    node: i,
                    arg: Some(arg),
                });
            }
        }
        Ok(())
    }

    /// Every scalar of node `i` is static or names a boundary scalar that exists.
    fn check_scalars(&self, i: usize, args: &NodeArgs<'_>) -> Result<(), DefinitionError> {
        for (arg, src) in args.scalar_sources.iter().enumerate() {
            match *src {
                RecordedScalarSource::Static => {}
                RecordedScalarSource::Boundary(index) if index < self.boundary.scalar_count => {}
                RecordedScalarSource::Boundary(index) => {
                    return Err(DefinitionError::ScalarSource {
                        node: i,
                        arg,
                        index,
                    })
                }
                RecordedScalarSource::InvalidatedBoundary(_) => {
                    return Err(DefinitionError::InvalidatedScalar { node: i, arg })
                }
            }
        }
        Ok(())
    }

    /// Node `i`'s producers all precede it, none twice.
    fn check_fanins(&mut self, i: usize, fanins: &[usize]) -> Result<(), DefinitionError> {
        let mut fault = None;
        for &p in fanins {
            if p >= i {
                fault = Some(DefinitionError::ForwardFanin {
                    node: i,
                    producer: p,
                });
                break;
            }
            if !self.seen.insert(p) {
                fault = Some(DefinitionError::DuplicateFanin {
                    node: i,
                    producer: p,
                });
                break;
            }
        }
        if let Some(e) = fault {
            return Err(e);
        }
        // Every producer is below `i` and was inserted once: empty the set for the next node.
        for &p in fanins {
            self.seen.remove(p);
        }
        Ok(())
    }

    /// Node `i`'s predicate `index` exists, reads a valid-rank operand that is not the node's
    /// own output, from a consistent source, at an element and width the device compares.
    fn check_predicate(&self, i: usize, index: u32) -> Result<(), DefinitionError> {
        let predicates = self.input.predicates;
        let pred = predicates
            .get(index as usize)
            .ok_or(DefinitionError::PredicateIndex {
                node: i,
                index,
                len: predicates.len(),
            })?;
        if !rank_ok(pred.operand.ndims()) {
            return Err(DefinitionError::Rank {
                tensor: TensorRole::Predicate { node: i },
                ndims: pred.operand.ndims(),
            });
        }
        if pred.source.kind == TensorSourceKind::OwnOutput {
            return Err(DefinitionError::PredicateOwnOutput { node: i });
        }
        if !self.source_ok(i, &pred.source) {
            return Err(DefinitionError::TensorSource { node: i, arg: None });
        }
        if !predicate_ok(
            pred.elem_offset,
            pred.operand.extent_elems(),
            pred.elem_size,
            pred.op,
        ) {
            return Err(DefinitionError::PredicateElement { node: i });
        }
        Ok(())
    }

    /// The header the totals give: counts, execution storage and the canonical section
    /// offsets (content hash 0; the builder writes it last).
    fn header(&self) -> Result<GraphDefinitionHeader, DefinitionError> {
        let (input, t) = (self.input, &self.totals);
        let n = self.nodes.len() as u32;
        // n ≤ 1024: every count below is far inside u32 (E < n²/2, T ≤ 32n, S ≤ 16n).
        let storage = execution_storage_bytes(input.storage, n, t.tensors, t.scalars)
            .ok_or(DefinitionError::StorageTooLarge)?;
        let mut header = GraphDefinitionHeader {
            full_key: input.full_key,
            content_hash: 0,
            required_heap: t.heap,
            total_bytes: 0,
            task_count: n,
            edge_count: t.edges as u32,
            root_count: t.roots,
            boundary_count: self.boundary.tensors.len() as u32,
            boundary_scalar_count: self.boundary.scalar_count as u32,
            tensor_arg_count: t.tensors,
            scalar_arg_count: t.scalars,
            predicate_count: t.predicates,
            execution_storage_bytes: storage,
            ..GraphDefinitionHeader::zeroed()
        };
        let (offsets, total) = header.canonical_layout();
        // Within the caps every image is far below 4 GiB (`MAX_IMAGE_BYTES`).
        header.total_bytes = total as u32;
        for s in Section::ALL {
            header.set_section_offset(s, offsets[s as usize]);
        }
        Ok(header)
    }
}

/// Checks `input` whole and plans its image.
fn plan(input: &DefinitionInput<'_>) -> Result<Plan, DefinitionError> {
    let mut planner = Planner::new(input)?;
    let nodes = planner.nodes;
    for (i, node) in nodes.iter().enumerate() {
        planner.check_node(i, node)?;
    }
    Ok(Plan {
        header: planner.header()?,
    })
}

/// Bytes the image of `input` takes: the length [`build_definition`] needs and returns.
/// Refuses every input `build_definition` refuses, except a short output.
pub fn definition_size(input: &DefinitionInput<'_>) -> Result<usize, DefinitionError> {
    Ok(plan(input)?.header.total_bytes as usize)
}

// ------------------------------------------------------------------------------------------
// Writing
// ------------------------------------------------------------------------------------------

/// A node tensor as its Definition keeps it. A tensor taken from the boundary is rebound to
/// each invocation's boundary tensor, so its recorded buffer address is never read; it is
/// written as 0, which keeps the Definition the same wherever the recorded invocation's
/// boundary lived (a retained Definition is matched on the boundary's layout, not its
/// addresses, and verified by content).
fn recorded_tensor(t: &TaskTensor, kind: TensorSourceKind) -> GraphTensor {
    let mut packed = GraphTensor::from_task_tensor(t).unwrap_or_default();
    if matches!(
        kind,
        TensorSourceKind::BoundaryExact | TensorSourceKind::BoundaryView
    ) {
        packed.buffer_addr = 0;
    }
    packed
}

fn packed_source(kind: TensorSourceKind, index: usize, packed_offset: u64) -> GraphTensorSourceRef {
    GraphTensorSourceRef {
        source: kind as u8,
        reserved: 0,
        // Checked by `plan`: below the boundary count (≤ 65535) or the node count (≤ 1024).
        source_index: index as u16,
        reserved2: 0,
        packed_offset,
    }
}

/// An image being written: its zeroed bytes and the planned header that places its sections.
struct Image<'o> {
    bytes: &'o mut [u8],
    header: GraphDefinitionHeader,
}

impl Image<'_> {
    /// Where element `i` of section `s` starts in the image.
    fn at(&self, s: Section, i: usize) -> usize {
        self.header.section_offset(s) as usize + s.elem_size() * i
    }

    /// Writes element `i` of section `s`.
    fn put<T: Pod>(&mut self, s: Section, i: usize, value: &T) {
        debug_assert_eq!(size_of::<T>(), s.elem_size());
        let at = self.at(s, i);
        self.bytes[at..at + size_of::<T>()].copy_from_slice(bytemuck::bytes_of(value));
    }

    /// Reads element `i` of section `s` back (the CSR passes build on earlier ones).
    fn get<T: Pod>(&self, s: Section, i: usize) -> T {
        let at = self.at(s, i);
        bytemuck::pod_read_unaligned(&self.bytes[at..at + size_of::<T>()])
    }

    /// The fanin CSR and the roots, in node order; each producer's consumer count lands in
    /// `fanout_offsets[p + 1]` for [`Self::write_fanout`].
    fn write_fanin(&mut self, input: &DefinitionInput<'_>, nodes: &[RecordedNode]) {
        let (mut e, mut roots) = (0usize, 0usize);
        for (c, node) in nodes.iter().enumerate() {
            self.put(Section::FaninOffsets, c, &(e as u32));
            let fanins = &input.fanins[node.fanin_offset as usize..][..node.fanin_count as usize];
            if fanins.is_empty() {
                self.put(Section::RootIndices, roots, &(c as u16));
                roots += 1;
            }
            for &p in fanins {
                self.put(Section::FaninIndices, e, &(p as u16));
                let count = self.get::<u32>(Section::FanoutOffsets, p + 1);
                self.put(Section::FanoutOffsets, p + 1, &(count + 1));
                e += 1;
            }
        }
        self.put(Section::FaninOffsets, nodes.len(), &(e as u32));
    }

    /// The fanout CSR by counting sort: prefix sums make `fanout_offsets[p]` the start of `p`,
    /// placing advances it to the end of `p`, and a shift by one restores the starts.
    fn write_fanout(&mut self, n: usize) {
        use Section::{FaninIndices, FaninOffsets, FanoutIndices, FanoutOffsets};
        for k in 1..=n {
            let sum = self.get::<u32>(FanoutOffsets, k) + self.get::<u32>(FanoutOffsets, k - 1);
            self.put(FanoutOffsets, k, &sum);
        }
        for c in 0..n {
            let (start, end) = (
                self.get::<u32>(FaninOffsets, c) as usize,
                self.get::<u32>(FaninOffsets, c + 1) as usize,
            );
            for k in start..end {
                let p = self.get::<u16>(FaninIndices, k) as usize;
                let cursor = self.get::<u32>(FanoutOffsets, p);
                self.put(FanoutIndices, cursor as usize, &(c as u16));
                self.put(FanoutOffsets, p, &(cursor + 1));
            }
        }
        for k in (1..=n).rev() {
            let v = self.get::<u32>(FanoutOffsets, k - 1);
            self.put(FanoutOffsets, k, &v);
        }
        self.put(FanoutOffsets, 0, &0u32);
    }

    /// Nodes, their heap windows, tensors, scalars and predicates, compacted in node order.
    fn write_nodes(&mut self, input: &DefinitionInput<'_>, nodes: &[RecordedNode]) {
        let (mut heap, mut t, mut s, mut p) = (0u64, 0usize, 0usize, 0usize);
        for (i, node) in nodes.iter().enumerate() {
            self.put(Section::NodeOffsets, i, &heap);
            heap += align_output(node.total_output_size).unwrap_or(0);
            let predicate_slot = match node.predicate_index {
                Some(index) => {
                    self.write_predicate(input, index as usize, p);
                    p += 1;
                    p as u16
                }
                None => 0,
            };
            let def = GraphNodeDefinition {
                kernel_id: node.kernel_ids,
                active_mask: node.active_mask,
                task_attrs: node.task_attrs,
                logical_block_num: node.logical_block_num,
                total_required_subtasks: node.total_required_subtasks,
                predicate_slot,
                tensor_count: node.tensor_count as i32,
                scalar_count: node.scalar_count as i32,
                total_output_size: node.total_output_size as i32,
                tensor_offset: t as u32,
                scalar_offset: s as u32,
            };
            self.put(Section::Nodes, i, &def);
            t = self.write_tensors(input, node, t);
            s = self.write_scalars(input, node, s);
        }
    }

    /// Recorded predicate `index` as predicate record `p`.
    fn write_predicate(&mut self, input: &DefinitionInput<'_>, index: usize, p: usize) {
        let pred = &input.predicates[index];
        let packed = GraphPredicate {
            operand: recorded_tensor(&pred.operand, pred.source.kind),
            operand_source: packed_source(
                pred.source.kind,
                pred.source.index,
                pred.source.packed_offset,
            ),
            elem_offset: pred.elem_offset,
            target: pred.target,
            elem_size: pred.elem_size,
            op: pred.op,
            reserved: [0; 6],
        };
        self.put(Section::Predicates, p, &packed);
    }

    /// `node`'s tensors and their sources from record `t` on; returns the next free record.
    fn write_tensors(
        &mut self,
        input: &DefinitionInput<'_>,
        node: &RecordedNode,
        t: usize,
    ) -> usize {
        let tc = node.tensor_count as usize;
        let tensors = &input.tensors[node.tensor_offset as usize..][..tc];
        let sources = &input.tensor_sources[node.tensor_source_offset as usize..][..tc];
        for (k, (tensor, src)) in tensors.iter().zip(sources).enumerate() {
            let packed = recorded_tensor(tensor, src.kind);
            self.put(Section::Tensors, t + k, &packed);
            let packed = packed_source(src.kind, src.index, src.packed_offset);
            self.put(Section::TensorSources, t + k, &packed);
        }
        t + tc
    }

    /// `node`'s scalars and their sources from record `s` on (a boundary scalar's value is
    /// stored as 0); returns the next free record.
    fn write_scalars(
        &mut self,
        input: &DefinitionInput<'_>,
        node: &RecordedNode,
        s: usize,
    ) -> usize {
        let sc = node.scalar_count as usize;
        let values = &input.scalars[node.scalar_offset as usize..][..sc];
        let sources = &input.scalar_sources[node.scalar_offset as usize..][..sc];
        for (k, (&value, src)) in values.iter().zip(sources).enumerate() {
            let (value, packed) = match *src {
                RecordedScalarSource::Boundary(index) => (
                    0,
                    GraphScalarSourceRef {
                        source_index: index as u16,
                        source: ScalarSourceKind::Boundary as u8,
                        reserved: 0,
                    },
                ),
                _ => (value, GraphScalarSourceRef::zeroed()),
            };
            self.put(Section::Scalars, s + k, &value);
            self.put(Section::ScalarSources, s + k, &packed);
        }
        s + sc
    }

    /// The boundary signatures; an alias representative is the first boundary tensor over the
    /// same (address, size).
    fn write_boundary(&mut self, boundary: &DefinitionBoundary<'_>) {
        for (k, (tensor, tag)) in boundary.tensors.iter().zip(boundary.tags).enumerate() {
            let key = (tensor.buffer().addr, tensor.buffer().size);
            let alias_rep = boundary.tensors[..k]
                .iter()
                .position(|o| (o.buffer().addr, o.buffer().size) == key)
                .unwrap_or(k);
            let (shapes, strides) = dims(tensor);
            let sig = GraphBoundarySignature {
                buffer_size: tensor.buffer().size,
                shapes,
                strides,
                alias_rep: alias_rep as u16,
                ndims: tensor.ndims() as u8,
                dtype: tensor.dtype().raw(),
                tag: *tag as i32 as u8,
                manual_dep: tensor.manual_dep() as u8,
                is_contiguous: tensor.is_contiguous() as u8,
                padding: 0,
            };
            self.put(Section::BoundarySignatures, k, &sig);
        }
    }

    /// The header, then the content hash over the finished image (its hash field still 0).
    fn seal(&mut self) {
        let header = self.header;
        self.bytes[..size_of::<GraphDefinitionHeader>()]
            .copy_from_slice(bytemuck::bytes_of(&header));
        let hash = graph_hash_bytes(self.bytes);
        let at = offset_of!(GraphDefinitionHeader, content_hash);
        self.bytes[at..at + 8].copy_from_slice(&hash.to_le_bytes());
    }
}

/// Builds the Definition image of `input` into the front of `out` and returns its length.
///
/// `out` may have any alignment; bytes past the image are left untouched. The image depends
/// only on the first `node_count` nodes and what they reference (see the module docs); on an
/// error nothing is written.
pub fn build_definition(
    input: &DefinitionInput<'_>,
    out: &mut [u8],
) -> Result<usize, DefinitionError> {
    let Plan { header } = plan(input)?;
    let total = header.total_bytes as usize;
    if out.len() < total {
        return Err(DefinitionError::OutputTooSmall {
            needed: total,
            provided: out.len(),
        });
    }
    let bytes = &mut out[..total];
    bytes.fill(0);
    let mut image = Image { bytes, header };
    // `plan` checked every range, rank, source and index the writers use.
    let nodes = &input.nodes[..input.node_count];
    image.write_fanin(input, nodes);
    image.write_fanout(nodes.len());
    image.write_nodes(input, nodes);
    image.write_boundary(&input.boundary.unwrap_or_default());
    image.seal();
    Ok(total)
}
