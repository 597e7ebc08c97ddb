//! A Graph node's scalars at expansion: a static scalar comes from the Definition, a boundary
//! scalar from the invocation's submission (after its boundary tensors), and a boundary index
//! past the submission's scalar count is refused with its specific error, never read.

use simpler_aicpu::graph_exec::{Expansion, GraphExecError, Submission, GRAPH_MAGIC};
use simpler_core::arg::TensorArgType;
use simpler_core::gm::{Gm, GmFault};
use simpler_core::graph::{
    build_definition, definition_size, DefinitionBoundary, DefinitionInput, ExecutionStorageShape,
    RecordedNode, RecordedScalarSource, RecordedTensorSource, TensorSourceKind,
};
use simpler_core::{AddressSpace, BufferHandle, CoreTaskArgs, DataType, TaskId, TaskTensor};

/// Read-only memory: the Definition at `DEF`, the submission (boundary tensors, then scalars)
/// at `SUB`.
struct Memory {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Gm for Memory {
    fn read(&self, addr: u64, dst: &mut [u8]) -> Result<(), GmFault> {
        let fault = GmFault {
            addr,
            len: dst.len() as u64,
            kind: simpler_core::gm::GmFaultKind::Outside,
        };
        let (base, data) = self
            .regions
            .iter()
            .find(|(base, data)| addr >= *base && addr - base < data.len() as u64)
            .ok_or(fault)?;
        let at = (addr - base) as usize;
        dst.copy_from_slice(data.get(at..at + dst.len()).ok_or(fault)?);
        Ok(())
    }
    fn write(&self, addr: u64, src: &[u8]) -> Result<(), GmFault> {
        Err(GmFault {
            addr,
            len: src.len() as u64,
            kind: simpler_core::gm::GmFaultKind::Outside,
        })
    }
}

const DEF: u64 = 0x10_0000;
const SUB: u64 = 0x20_0000;
const STATIC: u64 = 0xABCD;

/// One node over boundary tensor 0 with scalars [STATIC, boundary scalar 0].
fn definition() -> Vec<u8> {
    let boundary = [TaskTensor::new(
        BufferHandle {
            addr: 0x4000,
            size: 256,
        },
        0,
        &[64],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap()];
    let node = RecordedNode {
        kernel_ids: [-1, 0, -1],
        active_mask: 0b010,
        task_attrs: 0,
        logical_block_num: 1,
        total_required_subtasks: 1,
        total_output_size: 0,
        tensor_offset: 0,
        tensor_count: 1,
        tensor_source_offset: 0,
        scalar_offset: 0,
        scalar_count: 2,
        fanin_offset: 0,
        fanin_count: 0,
        predicate_index: None,
    };
    let input = DefinitionInput {
        full_key: 7,
        node_count: 1,
        nodes: &[node],
        tensors: &boundary,
        tensor_sources: &[RecordedTensorSource {
            kind: TensorSourceKind::BoundaryExact,
            index: 0,
            packed_offset: 0,
        }],
        scalars: &[STATIC, 0],
        scalar_sources: &[
            RecordedScalarSource::Static,
            RecordedScalarSource::Boundary(0),
        ],
        boundary: Some(DefinitionBoundary {
            tensors: &boundary,
            tags: &[TensorArgType::Input],
            scalar_count: 1,
        }),
        storage: ExecutionStorageShape {
            header_bytes: 64,
            node_bytes: 256,
        },
        ..DefinitionInput::default()
    };
    let mut image = vec![0u8; definition_size(&input).unwrap()];
    build_definition(&input, &mut image).unwrap();
    image
}

/// Node 0's arguments for an invocation whose submission carries `scalars` boundary scalars.
fn node_args(value: u64, scalars: u32) -> Result<CoreTaskArgs, GraphExecError> {
    let boundary_tensor = TaskTensor::new(
        BufferHandle {
            addr: 0x8000,
            size: 256,
        },
        0,
        &[64],
        &[1],
        DataType::Float32,
        AddressSpace::Device,
    )
    .unwrap();
    let mut sub = bytemuck::bytes_of(&boundary_tensor).to_vec();
    sub.extend_from_slice(&value.to_le_bytes());
    let gm = Memory {
        regions: vec![(DEF, definition()), (SUB, sub)],
    };
    let submission = Submission::of(&[GRAPH_MAGIC, DEF, SUB, 1 | (scalars as u64) << 32, 0])
        .expect("a GRAPH submission");
    let e = Expansion::start(TaskId::new(0, 0), submission, &gm)?;
    let mut args = CoreTaskArgs::default();
    e.args(&gm, 0, &mut args)?;
    Ok(args)
}

#[test]
fn a_boundary_scalar_is_the_invocations_value_and_a_static_one_the_definitions() {
    for value in [5u64, 0xDEAD_BEEF] {
        let args = node_args(value, 1).expect("node 0");
        assert_eq!(args.scalars(), [STATIC, value]);
        assert_eq!(args.tensors()[0].buffer().addr, 0x8000);
    }
}

#[test]
fn a_boundary_scalar_past_the_submissions_count_is_refused() {
    assert_eq!(
        node_args(5, 0).err(),
        Some(GraphExecError::Definition {
            what: "boundary scalar index"
        })
    );
}
