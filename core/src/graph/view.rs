//! The validating reader: [`DefinitionView::parse`] checks an image whole, then its accessors
//! read records without further checks, copied out of bytes of any alignment ([`Records`]).
//!
//! Its own file because it is the receiving side: the device (and the host, for an image it
//! did not build) runs only this, never the builder.

use super::error::DefinitionError;
use super::key::definition_content_hash;
use super::records::{
    GraphBoundarySignature, GraphDefinitionHeader, GraphNodeDefinition, GraphPredicate,
    GraphScalarSourceRef, GraphTensor, GraphTensorSourceRef, ScalarSourceKind, Section,
    TensorSourceKind, GRAPH_HEADER_BYTES,
};
use super::rules::{output_window, predicate_ok, rank_ok, source_ok, NodeSet};
use super::{GRAPH_IMAGE_MAX_BOUNDARY, GRAPH_MAX_NODES};
use super::{GRAPH_NODE_MAX_SCALAR_ARGS, GRAPH_NODE_MAX_TENSOR_ARGS};
use crate::dtype::DataType;
use bytemuck::Pod;
use core::marker::PhantomData;
use core::mem::size_of;

/// An iterator over plain-data records stored back to back in bytes of any alignment.
#[derive(Clone, Debug)]
pub struct Records<'a, T> {
    chunks: core::slice::ChunksExact<'a, u8>,
    _type: PhantomData<fn() -> T>,
}

impl<'a, T: Pod> Records<'a, T> {
    fn new(bytes: &'a [u8]) -> Self {
        const { assert!(size_of::<T>() > 0) };
        Self {
            chunks: bytes.chunks_exact(size_of::<T>()),
            _type: PhantomData,
        }
    }

    /// Record `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<T> {
        self.chunks.clone().nth(i).map(bytemuck::pod_read_unaligned)
    }
}

impl<T: Pod> Iterator for Records<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.chunks.next().map(bytemuck::pod_read_unaligned)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
    fn nth(&mut self, n: usize) -> Option<T> {
        self.chunks.nth(n).map(bytemuck::pod_read_unaligned)
    }
}

impl<T: Pod> ExactSizeIterator for Records<'_, T> {}

impl<T: Pod> DoubleEndedIterator for Records<'_, T> {
    fn next_back(&mut self) -> Option<T> {
        self.chunks.next_back().map(bytemuck::pod_read_unaligned)
    }
}

/// A validated Definition image. Every accessor reads inside the image; records are copied
/// out, so the bytes may have any alignment.
#[derive(Clone, Copy, Debug)]
pub struct DefinitionView<'a> {
    bytes: &'a [u8],
    header: GraphDefinitionHeader,
}

/// Element `i` of a section's bytes.
fn elem<T: Pod>(sec: &[u8], i: usize) -> Option<T> {
    let start = i.checked_mul(size_of::<T>())?;
    sec.get(start..start.checked_add(size_of::<T>())?)
        .map(bytemuck::pod_read_unaligned)
}

fn header_check(ok: bool, field: &'static str, value: u32) -> Result<(), DefinitionError> {
    if ok {
        Ok(())
    } else {
        Err(DefinitionError::Header {
            field,
            value: value as u64,
        })
    }
}

impl<'a> DefinitionView<'a> {
    /// Checks `bytes` as a Definition image and returns a view of its first `total_bytes`
    /// bytes (`bytes` may be longer, e.g. a retained staging block).
    ///
    /// Checked: the header's counts and caps; every section offset is exactly where the counts
    /// place it, inside `total_bytes`; both CSRs are monotonic and in range, producers precede
    /// consumers without repeats, and the fanout is exactly the fanin's transpose; the roots
    /// are exactly the nodes without producers; node offsets are the running sum of aligned
    /// output sizes and `required_heap` their total; node argument ranges are the canonical
    /// running sums; every tensor, source, scalar, boundary signature and predicate holds
    /// values in range. Not checked here: the content hash ([`Self::verify_content_hash`]),
    /// `execution_storage_bytes` (the device's sizes), padding and reserved bytes.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DefinitionError> {
        let head = bytes
            .get(..GRAPH_HEADER_BYTES)
            .ok_or(DefinitionError::Truncated {
                needed: GRAPH_HEADER_BYTES as u64,
                provided: bytes.len(),
            })?;
        let h: GraphDefinitionHeader = bytemuck::pod_read_unaligned(head);
        let total = h.total_bytes as usize;
        if total > bytes.len() {
            return Err(DefinitionError::Truncated {
                needed: total as u64,
                provided: bytes.len(),
            });
        }
        let n = h.task_count;
        header_check((1..=GRAPH_MAX_NODES as u32).contains(&n), "task_count", n)?;
        let n64 = n as u64;
        header_check(
            h.edge_count as u64 <= n64 * (n64 - 1) / 2,
            "edge_count",
            h.edge_count,
        )?;
        header_check((1..=n).contains(&h.root_count), "root_count", h.root_count)?;
        header_check(
            h.boundary_count as usize <= GRAPH_IMAGE_MAX_BOUNDARY,
            "boundary_count",
            h.boundary_count,
        )?;
        header_check(
            h.boundary_scalar_count as usize <= GRAPH_IMAGE_MAX_BOUNDARY,
            "boundary_scalar_count",
            h.boundary_scalar_count,
        )?;
        header_check(
            h.tensor_arg_count as u64 <= n64 * GRAPH_NODE_MAX_TENSOR_ARGS as u64,
            "tensor_arg_count",
            h.tensor_arg_count,
        )?;
        header_check(
            h.scalar_arg_count as u64 <= n64 * GRAPH_NODE_MAX_SCALAR_ARGS as u64,
            "scalar_arg_count",
            h.scalar_arg_count,
        )?;
        header_check(h.predicate_count <= n, "predicate_count", h.predicate_count)?;
        let (offsets, canonical_total) = h.canonical_layout();
        for s in Section::ALL {
            let found = h.section_offset(s);
            if found != offsets[s as usize] {
                return Err(DefinitionError::Section {
                    section: s,
                    offset: found,
                });
            }
        }
        header_check(
            canonical_total == h.total_bytes as u64,
            "total_bytes",
            h.total_bytes,
        )?;
        let view = Self {
            bytes: &bytes[..total],
            header: h,
        };
        view.check_topology()?;
        view.check_nodes()?;
        view.check_boundary()?;
        Ok(view)
    }

    /// The bytes of `s` (empty when absent). `parse` placed every section inside the image.
    fn section(&self, s: Section) -> &'a [u8] {
        let start = self.header.section_offset(s) as usize;
        let len = self.header.section_len(s) as usize * s.elem_size();
        if len == 0 {
            return &[];
        }
        self.bytes.get(start..start + len).unwrap_or(&[])
    }

    fn u32_at(&self, s: Section, i: usize) -> u32 {
        elem::<u32>(self.section(s), i).unwrap_or(0)
    }

    /// A CSR's row bounds, checked monotonic and ending at E.
    fn check_csr_offsets(&self, s: Section) -> Result<(), DefinitionError> {
        let n = self.header.task_count as usize;
        let mut prev = 0u32;
        for i in 0..=n {
            let v = self.u32_at(s, i);
            let bad = (i == 0 && v != 0) || v < prev || v > self.header.edge_count;
            if bad || (i == n && v != self.header.edge_count) {
                return Err(DefinitionError::Csr {
                    section: s,
                    node: i,
                });
            }
            prev = v;
        }
        Ok(())
    }

    fn check_topology(&self) -> Result<(), DefinitionError> {
        let n = self.header.task_count as usize;
        self.check_csr_offsets(Section::FaninOffsets)?;
        self.check_csr_offsets(Section::FanoutOffsets)?;
        let mut seen = NodeSet::new();
        let mut roots = self.roots();
        for c in 0..n {
            let fanin = self.fanin(c).unwrap_or(Records::new(&[]));
            let mut fault = false;
            for p in fanin.clone() {
                if p as usize >= c || !seen.insert(p as usize) {
                    fault = true;
                    break;
                }
            }
            for p in fanin.clone() {
                if (p as usize) < c {
                    seen.remove(p as usize);
                }
            }
            if fault {
                return Err(DefinitionError::Csr {
                    section: Section::FaninIndices,
                    node: c,
                });
            }
            if fanin.len() == 0 {
                let index = self.header.root_count as usize - roots.len();
                if roots.next() != Some(c as u16) {
                    return Err(DefinitionError::Roots { index });
                }
            }
        }
        if roots.len() != 0 {
            return Err(DefinitionError::Roots {
                index: self.header.root_count as usize - roots.len(),
            });
        }
        // The fanout must be the fanin's transpose with each producer's consumers in
        // increasing order: walk consumers in order and expect each at its producer's cursor.
        let mut cursor = [0u32; GRAPH_MAX_NODES];
        for (p, c) in cursor.iter_mut().enumerate().take(n) {
            *c = self.u32_at(Section::FanoutOffsets, p);
        }
        let fanout = self.section(Section::FanoutIndices);
        for c in 0..n {
            for p in self.fanin(c).unwrap_or(Records::new(&[])) {
                let p = p as usize;
                let at = cursor[p];
                if at >= self.u32_at(Section::FanoutOffsets, p + 1)
                    || elem::<u16>(fanout, at as usize) != Some(c as u16)
                {
                    return Err(DefinitionError::Csr {
                        section: Section::FanoutIndices,
                        node: p,
                    });
                }
                cursor[p] = at + 1;
            }
        }
        for (p, &at) in cursor.iter().enumerate().take(n) {
            if at != self.u32_at(Section::FanoutOffsets, p + 1) {
                return Err(DefinitionError::Csr {
                    section: Section::FanoutIndices,
                    node: p,
                });
            }
        }
        Ok(())
    }

    /// Node `j`'s aligned output window, if `j` is a node with a valid size.
    fn window(&self, j: usize) -> Option<u64> {
        let size = self.node(j)?.total_output_size;
        u64::try_from(size).ok().and_then(output_window)
    }

    fn check_source(
        &self,
        src: &GraphTensorSourceRef,
        node: usize,
        section: Section,
        index: usize,
    ) -> Result<(), DefinitionError> {
        let bad = |field| DefinitionError::Record {
            section,
            index,
            field,
        };
        let kind = src.kind().ok_or(bad("source"))?;
        let b = self.header.boundary_count as usize;
        if !source_ok(
            kind,
            src.source_index as usize,
            src.packed_offset,
            node,
            b,
            |j| self.window(j),
        ) {
            return Err(bad("source_index"));
        }
        Ok(())
    }

    fn check_tensor(
        &self,
        t: &GraphTensor,
        section: Section,
        index: usize,
    ) -> Result<(), DefinitionError> {
        let bad = |field| DefinitionError::Record {
            section,
            index,
            field,
        };
        if !rank_ok(t.ndims as u32) {
            return Err(bad("ndims"));
        }
        t.data_type().ok_or(bad("dtype"))?;
        t.space().ok_or(bad("address_space"))?;
        Ok(())
    }

    fn check_nodes(&self) -> Result<(), DefinitionError> {
        let h = &self.header;
        let (mut heap, mut t, mut s, mut p) = (0u64, 0u32, 0u32, 0u32);
        let bad = |section, index, field| DefinitionError::Record {
            section,
            index,
            field,
        };
        for (i, node) in self.nodes().enumerate() {
            let window = u64::try_from(node.total_output_size)
                .ok()
                .and_then(output_window)
                .ok_or(bad(Section::Nodes, i, "total_output_size"))?;
            if elem::<u64>(self.section(Section::NodeOffsets), i) != Some(heap) {
                return Err(DefinitionError::NodeOffset { node: i });
            }
            heap += window;
            if !(0..=GRAPH_NODE_MAX_TENSOR_ARGS as i32).contains(&node.tensor_count) {
                return Err(bad(Section::Nodes, i, "tensor_count"));
            }
            if !(0..=GRAPH_NODE_MAX_SCALAR_ARGS as i32).contains(&node.scalar_count) {
                return Err(bad(Section::Nodes, i, "scalar_count"));
            }
            if node.tensor_offset != t {
                return Err(bad(Section::Nodes, i, "tensor_offset"));
            }
            if node.scalar_offset != s {
                return Err(bad(Section::Nodes, i, "scalar_offset"));
            }
            t += node.tensor_count as u32;
            s += node.scalar_count as u32;
            if t > h.tensor_arg_count {
                return Err(bad(Section::Nodes, i, "tensor_count"));
            }
            if s > h.scalar_arg_count {
                return Err(bad(Section::Nodes, i, "scalar_count"));
            }
            if node.predicate_slot != 0 {
                p += 1;
                if node.predicate_slot as u32 != p || p > h.predicate_count {
                    return Err(bad(Section::Nodes, i, "predicate_slot"));
                }
                let pred = self.predicates().get(p as usize - 1).ok_or(bad(
                    Section::Predicates,
                    p as usize - 1,
                    "operand",
                ))?;
                self.check_tensor(&pred.operand, Section::Predicates, p as usize - 1)?;
                if pred.operand_source.kind() == Some(TensorSourceKind::OwnOutput) {
                    return Err(bad(Section::Predicates, p as usize - 1, "operand_source"));
                }
                if !predicate_ok(
                    pred.elem_offset,
                    pred.operand.extent_elem,
                    pred.elem_size,
                    pred.op,
                ) {
                    return Err(bad(Section::Predicates, p as usize - 1, "elem_offset"));
                }
                self.check_source(&pred.operand_source, i, Section::Predicates, p as usize - 1)?;
            }
        }
        if heap != h.required_heap {
            return Err(DefinitionError::NodeOffset {
                node: h.task_count as usize,
            });
        }
        if t != h.tensor_arg_count {
            return Err(DefinitionError::Header {
                field: "tensor_arg_count",
                value: h.tensor_arg_count as u64,
            });
        }
        if s != h.scalar_arg_count {
            return Err(DefinitionError::Header {
                field: "scalar_arg_count",
                value: h.scalar_arg_count as u64,
            });
        }
        if p != h.predicate_count {
            return Err(DefinitionError::Header {
                field: "predicate_count",
                value: h.predicate_count as u64,
            });
        }
        // Arguments, node by node (ranges are canonical now).
        for (i, node) in self.nodes().enumerate() {
            let first = node.tensor_offset as usize;
            for k in first..first + node.tensor_count as usize {
                let tensor = self
                    .tensors()
                    .get(k)
                    .ok_or(bad(Section::Tensors, k, "ndims"))?;
                self.check_tensor(&tensor, Section::Tensors, k)?;
                let src =
                    self.tensor_sources()
                        .get(k)
                        .ok_or(bad(Section::TensorSources, k, "source"))?;
                self.check_source(&src, i, Section::TensorSources, k)?;
            }
            let first = node.scalar_offset as usize;
            for k in first..first + node.scalar_count as usize {
                let src =
                    self.scalar_sources()
                        .get(k)
                        .ok_or(bad(Section::ScalarSources, k, "source"))?;
                match src.kind() {
                    Some(ScalarSourceKind::Static) => {}
                    Some(ScalarSourceKind::Boundary) => {
                        if src.source_index as u32 >= h.boundary_scalar_count {
                            return Err(bad(Section::ScalarSources, k, "source_index"));
                        }
                        if self.scalars().get(k) != Some(0) {
                            return Err(bad(Section::Scalars, k, "value"));
                        }
                    }
                    None => return Err(bad(Section::ScalarSources, k, "source")),
                }
            }
        }
        Ok(())
    }

    fn check_boundary(&self) -> Result<(), DefinitionError> {
        let sigs = self.boundary_signatures();
        for (k, sig) in sigs.clone().enumerate() {
            let bad = |field| DefinitionError::Record {
                section: Section::BoundarySignatures,
                index: k,
                field,
            };
            if !rank_ok(sig.ndims as u32) {
                return Err(bad("ndims"));
            }
            DataType::from_raw(sig.dtype).ok_or(bad("dtype"))?;
            sig.arg_type().ok_or(bad("tag"))?;
            let rep = sig.alias_rep as usize;
            if rep > k {
                return Err(bad("alias_rep"));
            }
            if rep < k {
                let other = sigs.get(rep).ok_or(bad("alias_rep"))?;
                if other.alias_rep as usize != rep || other.buffer_size != sig.buffer_size {
                    return Err(bad("alias_rep"));
                }
            }
        }
        Ok(())
    }

    /// Compares the stored content hash with [`definition_content_hash`] of the image.
    pub fn verify_content_hash(&self) -> Result<(), DefinitionError> {
        let computed = definition_content_hash(self.bytes);
        if computed == self.header.content_hash {
            Ok(())
        } else {
            Err(DefinitionError::ContentHash {
                stored: self.header.content_hash,
                computed,
            })
        }
    }

    /// The image (exactly `total_bytes`).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The image's header, checked by `parse` (its `content_hash` only by
    /// [`Self::verify_content_hash`]).
    pub fn header(&self) -> &GraphDefinitionHeader {
        &self.header
    }

    /// Internal nodes (n): the header's `task_count`, `1..=GRAPH_MAX_NODES`.
    pub fn task_count(&self) -> usize {
        self.header.task_count as usize
    }

    /// Node `i`'s record; `None` past the last node.
    pub fn node(&self, i: usize) -> Option<GraphNodeDefinition> {
        elem(self.section(Section::Nodes), i)
    }

    /// Every node, in order.
    pub fn nodes(&self) -> Records<'a, GraphNodeDefinition> {
        Records::new(self.section(Section::Nodes))
    }

    /// Node `i`'s output window, in bytes from the invocation's heap block.
    pub fn node_offset(&self, i: usize) -> Option<u64> {
        elem(self.section(Section::NodeOffsets), i)
    }

    fn csr_row(&self, offsets: Section, indices: Section, i: usize) -> Option<Records<'a, u16>> {
        if i >= self.task_count() {
            return None;
        }
        let (start, end) = (
            self.u32_at(offsets, i) as usize,
            self.u32_at(offsets, i + 1) as usize,
        );
        let row = self.section(indices).get(2 * start..2 * end)?;
        Some(Records::new(row))
    }

    /// Node `i`'s producers, in record order.
    pub fn fanin(&self, i: usize) -> Option<Records<'a, u16>> {
        self.csr_row(Section::FaninOffsets, Section::FaninIndices, i)
    }

    /// Node `i`'s consumers, in increasing order.
    pub fn fanout(&self, i: usize) -> Option<Records<'a, u16>> {
        self.csr_row(Section::FanoutOffsets, Section::FanoutIndices, i)
    }

    /// The nodes without producers, in increasing order.
    pub fn roots(&self) -> Records<'a, u16> {
        Records::new(self.section(Section::RootIndices))
    }

    /// Every tensor argument, in node order.
    pub fn tensors(&self) -> Records<'a, GraphTensor> {
        Records::new(self.section(Section::Tensors))
    }

    /// Every tensor source, in node order.
    pub fn tensor_sources(&self) -> Records<'a, GraphTensorSourceRef> {
        Records::new(self.section(Section::TensorSources))
    }

    /// Every scalar value, in node order (0 for boundary scalars).
    pub fn scalars(&self) -> Records<'a, u64> {
        Records::new(self.section(Section::Scalars))
    }

    /// Every scalar source, in node order.
    pub fn scalar_sources(&self) -> Records<'a, GraphScalarSourceRef> {
        Records::new(self.section(Section::ScalarSources))
    }

    /// The boundary signatures, in boundary order.
    pub fn boundary_signatures(&self) -> Records<'a, GraphBoundarySignature> {
        Records::new(self.section(Section::BoundarySignatures))
    }

    /// Every predicate, in node order (slot `k` is entry `k - 1`).
    pub fn predicates(&self) -> Records<'a, GraphPredicate> {
        Records::new(self.section(Section::Predicates))
    }

    fn node_slice<T: Pod>(&self, s: Section, first: u32, count: i32) -> Option<Records<'a, T>> {
        let size = size_of::<T>();
        let start = first as usize * size;
        let len = usize::try_from(count).ok()? * size;
        Some(Records::new(self.section(s).get(start..start + len)?))
    }

    /// Node `i`'s tensors.
    pub fn node_tensors(&self, i: usize) -> Option<Records<'a, GraphTensor>> {
        let node = self.node(i)?;
        self.node_slice(Section::Tensors, node.tensor_offset, node.tensor_count)
    }

    /// Node `i`'s tensor sources, one per tensor.
    pub fn node_tensor_sources(&self, i: usize) -> Option<Records<'a, GraphTensorSourceRef>> {
        let node = self.node(i)?;
        self.node_slice(
            Section::TensorSources,
            node.tensor_offset,
            node.tensor_count,
        )
    }

    /// Node `i`'s scalar values.
    pub fn node_scalars(&self, i: usize) -> Option<Records<'a, u64>> {
        let node = self.node(i)?;
        self.node_slice(Section::Scalars, node.scalar_offset, node.scalar_count)
    }

    /// Node `i`'s scalar sources, one per scalar.
    pub fn node_scalar_sources(&self, i: usize) -> Option<Records<'a, GraphScalarSourceRef>> {
        let node = self.node(i)?;
        self.node_slice(
            Section::ScalarSources,
            node.scalar_offset,
            node.scalar_count,
        )
    }

    /// Node `i`'s predicate, if it has one.
    pub fn node_predicate(&self, i: usize) -> Option<GraphPredicate> {
        let slot = self.node(i)?.predicate_slot as usize;
        self.predicates().get(slot.checked_sub(1)?)
    }
}
