//! Graph execution on the AICPU: an outer GRAPH task expands into the internal nodes of its
//! Definition, which take no ring slots.
//!
//! An outer task is a kernel-less task whose scalars are [`GRAPH_MAGIC`], the Definition's GM
//! address, the submission's GM address (the invocation's boundary tensors, 128 bytes each,
//! then its boundary scalars, 8 bytes each), the boundary's tensor count and scalar count
//! (one word, tensors in the low half), and the GM address of the heap block its internal
//! outputs live in (`required_heap` bytes; the host reserves it once the recording is done and patches the
//! Definition's and the heap's addresses into the task before the image ships). When the outer task becomes
//! ready, the scheduler thread that pops it takes it on: it reads the Definition's header,
//! counts each node's producers from the fanin CSR and queues the roots; it dispatches ready
//! nodes to its own idle cores, materializing each node's tensors from their recorded sources
//! (a boundary tensor of this invocation, or a window of the outer task's heap) and each
//! scalar from its source (static Definition data, or this invocation's value of a boundary
//! scalar the body forwarded unchanged); a finished node releases its consumers through the
//! fanout CSR; the last one completes the outer task.
//! Every read of the image is bounds-checked against its header.

use crate::payloads::NO_KERNEL;
use simpler_core::chip::BufferHandle;
use simpler_core::gm::Gm;
use simpler_core::graph::{
    GraphDefinitionHeader, GraphNodeDefinition, GraphPredicate, GraphScalarSourceRef, GraphTensor,
    GraphTensorSourceRef, ScalarSourceKind, Section, TensorSourceKind, GRAPH_MAX_NODES,
};
use simpler_core::predicate::DispatchPredicate;
use simpler_core::{AddressSpace, CoreTaskArgs, DataType, TaskId, TaskTensor};

/// The first scalar of an outer GRAPH task.
pub const GRAPH_MAGIC: u64 = 0x4752_4150_4845_5844; // "GRAPHEXD"

/// Concurrent expansions one scheduler thread holds.
pub const MAX_EXPANSIONS: usize = 4;

/// Internal node ids: ring `INTERNAL_RING_BASE + expansion slot`, local = node index.
pub const INTERNAL_RING_BASE: u32 = 0x100;

/// Why an expansion failed (the run ends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphExecError {
    /// The outer task's payload is not a GRAPH submission.
    Submission,
    /// A read outside the Definition, or a record that contradicts its header.
    Definition {
        /// What was being read.
        what: &'static str,
    },
    /// The GM read failed.
    Memory,
    /// More graphs ready at once than this thread can hold.
    Capacity,
}

impl core::fmt::Display for GraphExecError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::Submission => f.write_str("the outer task's scalars are not a GRAPH submission"),
            Self::Definition { what } => write!(f, "the Definition image is out of bounds or contradicts its header ({what})"),
            Self::Memory => {
                f.write_str("device memory refused a read of the Definition or the boundary")
            }
            Self::Capacity => write!(
                f,
                "more Graphs are ready at once than the {MAX_EXPANSIONS} one scheduler thread expands"
            ),
        }
    }
}

impl core::error::Error for GraphExecError {}

/// What an outer task's payload names.
#[derive(Clone, Copy, Debug)]
pub struct Submission {
    /// The Definition image's GM address.
    pub definition: u64,
    /// The boundary tensors' GM address (the boundary scalars follow them).
    pub boundary: u64,
    /// Boundary tensors.
    pub boundary_count: u32,
    /// Boundary scalars.
    pub boundary_scalars: u32,
    /// The outer task's heap block (internal outputs).
    pub heap: u64,
}

impl Submission {
    /// Scalars an outer task carries.
    pub const SCALARS: usize = 5;

    /// Reads a submission from a kernel-less task's first scalars; `None` if it is not a GRAPH
    /// task.
    pub fn of(s: &[u64]) -> Option<Self> {
        if s.len() < Self::SCALARS || s[0] != GRAPH_MAGIC {
            return None;
        }
        Some(Self {
            definition: s[1],
            boundary: s[2],
            boundary_count: s[3] as u32,
            boundary_scalars: (s[3] >> 32) as u32,
            heap: s[4],
        })
    }
}

/// One expansion in progress.
pub struct Expansion {
    /// The GRAPH task this expansion runs the nodes of.
    pub outer: TaskId,
    sub: Submission,
    header: GraphDefinitionHeader,
    remaining_fanin: [u16; GRAPH_MAX_NODES],
    remaining_subtasks: [u16; GRAPH_MAX_NODES],
    ready: [u16; GRAPH_MAX_NODES],
    ready_head: usize,
    ready_len: usize,
    done: usize,
    /// The front ready node's next SPMD block, when partly placed.
    pub next_block: u16,
}

fn read<T: bytemuck::Pod>(gm: &dyn Gm, addr: u64) -> Result<T, GraphExecError> {
    let mut buf = [0u8; 160];
    let dst = buf
        .get_mut(..core::mem::size_of::<T>())
        .ok_or(GraphExecError::Definition {
            what: "record wider than the read buffer",
        })?;
    gm.read(addr, dst).map_err(|_| GraphExecError::Memory)?;
    Ok(bytemuck::pod_read_unaligned(dst))
}

impl Expansion {
    /// Takes on `outer`: reads the Definition's header and fanin counts, queues the roots.
    pub fn start(outer: TaskId, sub: Submission, gm: &dyn Gm) -> Result<Self, GraphExecError> {
        let header: GraphDefinitionHeader = read(gm, sub.definition)?;
        let n = header.task_count as usize;
        if n == 0 || n > GRAPH_MAX_NODES {
            return Err(GraphExecError::Definition { what: "node count" });
        }
        let mut e = Self {
            outer,
            sub,
            header,
            remaining_fanin: [0; GRAPH_MAX_NODES],
            remaining_subtasks: [0; GRAPH_MAX_NODES],
            ready: [0; GRAPH_MAX_NODES],
            ready_head: 0,
            ready_len: 0,
            done: 0,
            next_block: 0,
        };
        let mut lo: u32 = e.element(gm, Section::FaninOffsets, 0)?;
        for i in 0..n {
            let hi: u32 = e.element(gm, Section::FaninOffsets, i + 1)?;
            let count = hi.checked_sub(lo).ok_or(GraphExecError::Definition {
                what: "fanin offsets",
            })?;
            e.remaining_fanin[i] = count as u16;
            let node = e.node(gm, i)?;
            e.remaining_subtasks[i] = (node.total_required_subtasks.max(0) as u16).max(1);
            if count == 0 {
                e.push_ready(i);
            }
            lo = hi;
        }
        Ok(e)
    }

    fn push_ready(&mut self, i: usize) {
        let at = (self.ready_head + self.ready_len) % GRAPH_MAX_NODES;
        self.ready[at] = i as u16;
        self.ready_len += 1;
    }

    /// The front ready node, if any.
    pub fn front(&self) -> Option<usize> {
        if self.ready_len == 0 {
            return None;
        }
        self.ready.get(self.ready_head).map(|&n| n as usize)
    }

    /// Takes the front ready node off the queue (once all its blocks are placed).
    pub fn pop_front(&mut self) {
        if self.ready_len > 0 {
            self.ready_head = (self.ready_head + 1) % GRAPH_MAX_NODES;
            self.ready_len -= 1;
            self.next_block = 0;
        }
    }

    /// Nodes in the Definition.
    pub fn node_count(&self) -> usize {
        self.header.task_count as usize
    }

    /// The internal id of node `i` of the expansion in `slot`.
    pub fn id(slot: usize, i: usize) -> TaskId {
        TaskId::new(INTERNAL_RING_BASE + slot as u32, i as u32)
    }

    /// Whether `id` names an internal node, and which expansion slot and node.
    pub fn decode(id: TaskId) -> Option<(usize, usize)> {
        let r = id.ring();
        (r >= INTERNAL_RING_BASE && ((r - INTERNAL_RING_BASE) as usize) < MAX_EXPANSIONS)
            .then(|| ((r - INTERNAL_RING_BASE) as usize, id.local() as usize))
    }

    fn element<T: bytemuck::Pod>(
        &self,
        gm: &dyn Gm,
        section: Section,
        index: usize,
    ) -> Result<T, GraphExecError> {
        let what = "section index";
        if index as u64 >= self.header.section_len(section) {
            return Err(GraphExecError::Definition { what });
        }
        let off = self.header.section_offset(section) as u64
            + index as u64 * core::mem::size_of::<T>() as u64;
        if off + core::mem::size_of::<T>() as u64 > self.header.total_bytes as u64 {
            return Err(GraphExecError::Definition { what });
        }
        read(gm, self.sub.definition + off)
    }

    /// Node `i`'s record.
    pub fn node(&self, gm: &dyn Gm, i: usize) -> Result<GraphNodeDefinition, GraphExecError> {
        self.element(gm, Section::Nodes, i)
    }

    /// Node `i`'s arguments, materialized for this invocation.
    pub fn args(
        &self,
        gm: &dyn Gm,
        i: usize,
        out: &mut CoreTaskArgs,
    ) -> Result<GraphNodeDefinition, GraphExecError> {
        let node = self.node(gm, i)?;
        out.clear();
        for k in 0..node.tensor_count.max(0) as usize {
            let at = node.tensor_offset as usize + k;
            let g: GraphTensor = self.element(gm, Section::Tensors, at)?;
            let src: GraphTensorSourceRef = self.element(gm, Section::TensorSources, at)?;
            let t = self.materialize(gm, &g, &src)?;
            out.push_tensor(t).map_err(|_| GraphExecError::Definition {
                what: "tensor count",
            })?;
        }
        for k in 0..node.scalar_count.max(0) as usize {
            let at = node.scalar_offset as usize + k;
            let src: GraphScalarSourceRef = self.element(gm, Section::ScalarSources, at)?;
            let v = match src.kind() {
                Some(ScalarSourceKind::Static) => self.element(gm, Section::Scalars, at)?,
                Some(ScalarSourceKind::Boundary) => self.boundary_scalar(gm, src.source_index)?,
                None => {
                    return Err(GraphExecError::Definition {
                        what: "scalar source",
                    })
                }
            };
            out.push_scalar(v).map_err(|_| GraphExecError::Definition {
                what: "scalar count",
            })?;
        }
        Ok(node)
    }

    /// The dispatch predicate of the node `node` records, its operand rebound for this
    /// invocation, if it has one.
    pub fn predicate(
        &self,
        gm: &dyn Gm,
        node: &GraphNodeDefinition,
    ) -> Result<Option<DispatchPredicate>, GraphExecError> {
        let Some(at) = (node.predicate_slot as usize).checked_sub(1) else {
            return Ok(None);
        };
        let p: GraphPredicate = self.element(gm, Section::Predicates, at)?;
        if p.operand_source.kind() == Some(TensorSourceKind::OwnOutput) {
            return Err(GraphExecError::Definition {
                what: "predicate operand",
            });
        }
        let operand = self.materialize(gm, &p.operand, &p.operand_source)?;
        if p.elem_offset >= operand.extent_elems() {
            return Err(GraphExecError::Definition {
                what: "predicate element",
            });
        }
        Ok(Some(DispatchPredicate::at(
            operand.data_addr(),
            p.elem_offset,
            p.elem_size,
            p.op,
            p.target,
        )))
    }

    /// This invocation's boundary scalar `index`.
    fn boundary_scalar(&self, gm: &dyn Gm, index: u16) -> Result<u64, GraphExecError> {
        if index as u32 >= self.sub.boundary_scalars {
            return Err(GraphExecError::Definition {
                what: "boundary scalar index",
            });
        }
        let at = self.sub.boundary + self.sub.boundary_count as u64 * 128 + index as u64 * 8;
        read(gm, at)
    }

    fn materialize(
        &self,
        gm: &dyn Gm,
        g: &GraphTensor,
        src: &GraphTensorSourceRef,
    ) -> Result<TaskTensor, GraphExecError> {
        let bad = GraphExecError::Definition {
            what: "tensor source",
        };
        let (buffer, start) = match TensorSourceKind::from_raw(src.source).ok_or(bad)? {
            TensorSourceKind::BoundaryExact | TensorSourceKind::BoundaryView => {
                let idx = src.source_index as u64;
                if idx >= self.sub.boundary_count as u64 {
                    return Err(bad);
                }
                let b: TaskTensor = read(gm, self.sub.boundary + idx * 128)?;
                (b.buffer(), b.start_offset() + src.packed_offset)
            }
            TensorSourceKind::Internal | TensorSourceKind::OwnOutput => {
                let base: u64 =
                    self.element(gm, Section::NodeOffsets, src.source_index as usize)?;
                let addr = self.sub.heap + base + src.packed_offset;
                (
                    BufferHandle {
                        addr,
                        size: g.buffer_size,
                    },
                    g.start_offset,
                )
            }
        };
        let rank = (g.ndims as usize).min(5);
        let dtype = DataType::from_raw(g.dtype).ok_or(bad)?;
        let space = AddressSpace::from_raw(g.address_space).ok_or(bad)?;
        TaskTensor::new(
            buffer,
            start,
            &g.shapes[..rank],
            &g.strides[..rank],
            dtype,
            space,
        )
        .map_err(|_| bad)
    }

    /// Records that one subtask of node `i` finished; returns whether the whole expansion is
    /// done (the outer task completes).
    pub fn finish_subtask(&mut self, gm: &dyn Gm, i: usize) -> Result<bool, GraphExecError> {
        let count = self.node_count();
        let Some(left) = self.remaining_subtasks.get_mut(i).filter(|_| i < count) else {
            return Err(GraphExecError::Definition { what: "node index" });
        };
        *left = left.saturating_sub(1);
        if *left > 0 {
            return Ok(false);
        }
        self.finish_node(gm, i)
    }

    /// Node `i` finished (all its subtasks, or it had no kernel): releases its consumers.
    pub fn finish_node(&mut self, gm: &dyn Gm, i: usize) -> Result<bool, GraphExecError> {
        let lo: u32 = self.element(gm, Section::FanoutOffsets, i)?;
        let hi: u32 = self.element(gm, Section::FanoutOffsets, i + 1)?;
        for e in lo..hi {
            let c: u16 = self.element(gm, Section::FanoutIndices, e as usize)?;
            let c = c as usize;
            let count = self.node_count();
            let Some(fanin) = self.remaining_fanin.get_mut(c).filter(|_| c < count) else {
                return Err(GraphExecError::Definition { what: "fanout" });
            };
            *fanin = fanin.saturating_sub(1);
            if *fanin == 0 {
                self.push_ready(c);
            }
        }
        self.done += 1;
        Ok(self.done == self.node_count())
    }
}

/// A node's kernel for a core slot (0 AIC, 1 AIV0, 2 AIV1), or [`NO_KERNEL`].
pub fn node_kernel(node: &GraphNodeDefinition, slot: usize) -> u32 {
    let k = node.kernel_id[slot.min(2)];
    if k < 0 {
        NO_KERNEL
    } else {
        k as u32
    }
}
