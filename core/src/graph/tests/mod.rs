//! Tests of the Graph Definition: keys, building, parsing and random round trips, one file
//! per concern, over the fixtures here (owned bodies, the diamond, leftovers of a longer body).
//!
//! - [`keys`]: key and image hashes against independent reference loops.
//! - [`build`]: the diamond field for field, stale input, every typed build refusal.
//! - [`parse`]: every typed parse refusal, truncations, corrupted offsets and bytes.
//! - [`random`]: random DAGs round trip; the largest DAG the caps allow builds.

use super::*;
use crate::arg::TensorArgType;
use crate::buffer::AddressSpace;
use crate::chip::BufferHandle;
use crate::dtype::DataType;
use crate::task_tensor::TaskTensor;
use bytemuck::Pod;
use std::vec;
use std::vec::Vec;

mod build;
mod keys;
mod parse;
mod random;

const VBASE: u64 = 1 << 63;

fn tensor(addr: u64, size: u64, start: u64, shapes: &[u32], strides: &[u32]) -> TaskTensor {
    let t = TaskTensor::new(
        BufferHandle { addr, size },
        0,
        shapes,
        strides,
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap();
    // A view moves the origin; build the start offset through one.
    if start == 0 {
        return t;
    }
    let row = strides[0] as u64;
    let mut offsets = vec![0u32; shapes.len()];
    offsets[0] = (start / row) as u32;
    let mut bigger: Vec<u32> = shapes.to_vec();
    bigger[0] += offsets[0];
    TaskTensor::new(
        BufferHandle { addr, size },
        0,
        &bigger,
        strides,
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()
    .view(shapes, &offsets)
    .unwrap()
}

/// A tensor whose rank field says `ndims`, whatever its geometry.
fn forged_rank(t: TaskTensor, ndims: u32) -> TaskTensor {
    let mut bytes = bytemuck::bytes_of(&t).to_vec();
    bytes[36..40].copy_from_slice(&ndims.to_le_bytes());
    bytemuck::pod_read_unaligned(&bytes)
}

fn src(kind: TensorSourceKind, index: usize, packed_offset: u64) -> RecordedTensorSource {
    RecordedTensorSource {
        kind,
        index,
        packed_offset,
    }
}

/// An owned recording, as a recorder's storage would hold it.
#[derive(Clone)]
struct Body {
    nodes: Vec<RecordedNode>,
    node_count: usize,
    tensors: Vec<TaskTensor>,
    tensor_sources: Vec<RecordedTensorSource>,
    scalars: Vec<u64>,
    scalar_sources: Vec<RecordedScalarSource>,
    fanins: Vec<usize>,
    predicates: Vec<RecordedPredicate>,
    boundary: Vec<TaskTensor>,
    tags: Vec<TensorArgType>,
    boundary_scalars: usize,
    storage: ExecutionStorageShape,
    full_key: u64,
}

impl Body {
    fn input(&self) -> DefinitionInput<'_> {
        DefinitionInput {
            full_key: self.full_key,
            unsupported: false,
            node_count: self.node_count,
            nodes: &self.nodes,
            tensors: &self.tensors,
            tensor_sources: &self.tensor_sources,
            scalars: &self.scalars,
            scalar_sources: &self.scalar_sources,
            fanins: &self.fanins,
            predicates: &self.predicates,
            boundary: Some(DefinitionBoundary {
                tensors: &self.boundary,
                tags: &self.tags,
                scalar_count: self.boundary_scalars,
            }),
            storage: self.storage,
        }
    }

    fn build(&self) -> Result<Vec<u8>, DefinitionError> {
        build(&self.input())
    }
}

fn build(input: &DefinitionInput<'_>) -> Result<Vec<u8>, DefinitionError> {
    let size = definition_size(input)?;
    let mut out = vec![0xA5u8; size + 16];
    let len = build_definition(input, &mut out)?;
    assert_eq!(len, size);
    assert!(
        out[len..].iter().all(|&b| b == 0xA5),
        "bytes past the image untouched"
    );
    out.truncate(len);
    Ok(out)
}

/// The diamond A -> {B, C} -> D over a boundary (x, y, a view of x). The flat arrays are
/// deliberately not in node order, so the builder's compaction is visible.
fn diamond() -> Body {
    let x = tensor(0x1000, 4096, 0, &[32, 32], &[32, 1]);
    let y = tensor(0x2000, 4096, 0, &[32, 32], &[32, 1]).with_manual_dep(true);
    let xv = tensor(0x1000, 4096, 512, &[16, 32], &[32, 1]);
    let o_a = tensor(VBASE, 4096, 0, &[32, 32], &[32, 1]).with_version(2);
    let o_b = tensor(VBASE + 4096, 100, 0, &[25], &[1]);
    let o_c = tensor(VBASE + 4224, 64, 0, &[4, 4], &[4, 1]);
    let o_a_half = tensor(VBASE, 4096, 512, &[16, 32], &[32, 1]);
    use TensorSourceKind::*;
    // Flat tensors: D's three, then A's two, then B's two, then C's three.
    let tensors = vec![o_b, o_c, y, x, o_a, o_a, o_b, xv, o_a_half, o_c];
    // Sources in another order: A, B, C, D.
    let tensor_sources = vec![
        src(BoundaryExact, 0, 0),
        src(OwnOutput, 0, 0),
        src(Internal, 0, 0),
        src(OwnOutput, 1, 0),
        src(BoundaryView, 2, 0),
        src(Internal, 0, 2048),
        src(OwnOutput, 2, 0),
        src(Internal, 1, 0),
        src(Internal, 2, 0),
        src(BoundaryExact, 1, 0),
    ];
    let scalars = vec![99, 7, 0xdead, 1234];
    let scalar_sources = vec![
        RecordedScalarSource::Static, // unused slot
        RecordedScalarSource::Static,
        RecordedScalarSource::Boundary(0),
        RecordedScalarSource::Boundary(1),
    ];
    let fanins = vec![0, 0, 2, 1];
    let predicates = vec![RecordedPredicate {
        operand: o_b,
        source: src(Internal, 1, 0),
        elem_offset: 3,
        target: -5,
        elem_size: 4,
        op: 2,
    }];
    let node = |k: [i32; 3], mask: u8, out: u64| RecordedNode {
        kernel_ids: k,
        active_mask: mask,
        task_attrs: 0,
        logical_block_num: 1,
        total_required_subtasks: mask.count_ones() as i16,
        total_output_size: out,
        ..RecordedNode::default()
    };
    let mut a = node([1, -1, -1], 0b001, 4096);
    (a.tensor_offset, a.tensor_count, a.tensor_source_offset) = (3, 2, 0);
    (a.scalar_offset, a.scalar_count) = (1, 2);
    let mut b = node([-1, 2, 3], 0b110, 100);
    (b.tensor_offset, b.tensor_count, b.tensor_source_offset) = (5, 2, 2);
    (b.scalar_offset, b.scalar_count) = (3, 1);
    (b.fanin_offset, b.fanin_count) = (0, 1);
    b.logical_block_num = 4;
    b.total_required_subtasks = 8;
    b.task_attrs = 0x5;
    let mut c = node([4, 5, 6], 0b111, 64);
    (c.tensor_offset, c.tensor_count, c.tensor_source_offset) = (7, 3, 4);
    (c.fanin_offset, c.fanin_count) = (1, 1);
    let mut d = node([7, -1, -1], 0b001, 0);
    (d.tensor_offset, d.tensor_count, d.tensor_source_offset) = (0, 3, 7);
    (d.fanin_offset, d.fanin_count) = (2, 2);
    d.predicate_index = Some(0);
    Body {
        nodes: vec![a, b, c, d],
        node_count: 4,
        tensors,
        tensor_sources,
        scalars,
        scalar_sources,
        fanins,
        predicates,
        boundary: vec![x, y, xv],
        tags: vec![
            TensorArgType::Input,
            TensorArgType::OutputExisting,
            TensorArgType::Input,
        ],
        boundary_scalars: 2,
        storage: ExecutionStorageShape {
            header_bytes: 64,
            node_bytes: 296,
        },
        full_key: full_key(0x4000, graph_key(b"diamond")),
    }
}

fn collect<T: Pod>(r: Option<Records<'_, T>>) -> Vec<T> {
    r.expect("node exists").collect()
}

/// Appends leftovers a longer earlier body would leave: more node slots whose ranges point
/// past this body's arrays, and extra entries in every flat array.
fn with_leftovers(body: &Body) -> Body {
    let mut b = body.clone();
    let wide = tensor(0x9000, 1 << 20, 0, &[2, 3, 4, 5, 6], &[360, 120, 30, 6, 1]);
    let stale = RecordedNode {
        kernel_ids: [9, 9, 9],
        active_mask: 7,
        total_output_size: u64::MAX,
        tensor_offset: 10_000,
        tensor_count: 99,
        tensor_source_offset: 10_000,
        scalar_offset: 10_000,
        scalar_count: 99,
        fanin_offset: 10_000,
        fanin_count: 99,
        predicate_index: Some(77),
        ..RecordedNode::default()
    };
    b.nodes.extend([stale; 5]);
    b.tensors.extend([forged_rank(wide, 9), wide, wide]);
    b.tensor_sources
        .extend([src(TensorSourceKind::Internal, 500, 1 << 40); 3]);
    b.scalars.extend([1, 2, 3]);
    b.scalar_sources
        .extend([RecordedScalarSource::InvalidatedBoundary(9); 3]);
    b.fanins.extend([1000, 5, 5]);
    b.predicates.push(RecordedPredicate {
        operand: forged_rank(wide, 0),
        source: src(TensorSourceKind::OwnOutput, 99, 0),
        elem_offset: 0,
        target: 0,
        elem_size: 0,
        op: 0,
    });
    b
}

fn err(body: &Body) -> DefinitionError {
    body.build().unwrap_err()
}
