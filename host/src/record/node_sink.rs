//! The submit hook of a body being recorded: [`NodeSink`] turns each submitted task into a
//! node of the recording's flat arrays (its tensors and their sources, its scalars and
//! theirs, its predicate, its producers, its output window). Its own file because this is the
//! per-task work of a recording, and the one place that decides what a Definition's nodes say.

use super::boundary::GraphBoundary;
use super::recording::{Arrays, RECORD_WINDOW};
use simpler_aicpu::payloads::{TaskPayloads, NO_KERNEL};
use simpler_aicpu::{SubmitHook, SubmittedTask};
use simpler_core::deps::DepFlags;
use simpler_core::graph::{
    RecordedNode, RecordedPredicate, RecordedScalarSource, RecordedTensorSource, TensorSourceKind,
    GRAPH_MAX_NODES, TASK_ATTR_PREDICATE,
};
use simpler_core::limits::CORE_MAX_SCALAR_ARGS;
use simpler_core::{TaskId, TaskTensor, TensorArgType};

/// Turns each submitted task of the body into a node.
pub(super) struct NodeSink<'s, 'p> {
    /// The recording's arrays, which each submitted task appends a node to.
    pub(super) arrays: &'s mut Arrays,
    /// The private runtime's payload records, where a task's scalar values are read back.
    pub(super) payloads: &'s TaskPayloads<'p>,
    /// The boundary being recorded against (tensors are classified against it).
    pub(super) boundary: &'s GraphBoundary,
    /// Where the body's boundary scalars live (`rt.args().scalars()`): a node scalar read
    /// from there is forwarded, one held anywhere else is a plain value. Compared as
    /// addresses only, never dereferenced.
    pub(super) boundary_scalars: core::ops::Range<*const u64>,
}

impl NodeSink<'_, '_> {
    /// Where node scalar `s` comes from: boundary scalar `i` when it is that scalar's own
    /// storage (the body passed it on unchanged), else a static value.
    fn scalar_source(&self, s: &u64) -> RecordedScalarSource {
        let (at, base) = (
            s as *const u64 as usize,
            self.boundary_scalars.start as usize,
        );
        if self.boundary_scalars.contains(&(s as *const u64)) {
            RecordedScalarSource::Boundary((at - base) / core::mem::size_of::<u64>())
        } else {
            RecordedScalarSource::Static
        }
    }
}

fn kernel_id(k: u32) -> i32 {
    if k == NO_KERNEL {
        -1
    } else {
        k as i32
    }
}

impl NodeSink<'_, '_> {
    fn classify(
        &self,
        node: usize,
        own: (u64, u64),
        t: &TaskTensor,
    ) -> Option<RecordedTensorSource> {
        // One pass over the boundary, comparing the 16-byte buffer handle first: exact if a
        // tensor of the same buffer equals it, else a view of the first one it starts after.
        let b = &self.boundary.tensors;
        let mut view = None;
        for (i, u) in b.iter().enumerate() {
            if u.buffer() != t.buffer() {
                continue;
            }
            if u == t {
                return Some(RecordedTensorSource {
                    kind: TensorSourceKind::BoundaryExact,
                    index: i,
                    packed_offset: 0,
                });
            }
            if view.is_none() && t.start_offset() >= u.start_offset() {
                view = Some(i);
            }
        }
        if let Some(i) = view {
            return Some(RecordedTensorSource {
                kind: TensorSourceKind::BoundaryView,
                index: i,
                packed_offset: t.start_offset() - b[i].start_offset(),
            });
        }
        let addr = t.buffer().addr;
        if addr >= own.0 && addr < own.1 {
            return Some(RecordedTensorSource {
                kind: TensorSourceKind::OwnOutput,
                index: node,
                packed_offset: addr - own.0,
            });
        }
        let outs = &self.arrays.outputs[..node.min(self.arrays.outputs.len())];
        let at = outs.partition_point(|&(start, _)| start <= addr);
        let (start, end) = *outs.get(at.checked_sub(1)?)?;
        (addr < end).then_some(RecordedTensorSource {
            kind: TensorSourceKind::Internal,
            index: at - 1,
            packed_offset: addr - start,
        })
    }
}

impl SubmitHook for NodeSink<'_, '_> {
    fn submitted(
        &mut self,
        task: &SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (TaskId, DepFlags)>,
    ) {
        let node = self.arrays.node_count;
        if node >= GRAPH_MAX_NODES {
            // Keep running so the body finishes; the recording cannot become a Definition.
            self.arrays.unsupported = Some("more than 1024 nodes");
            return;
        }
        let ring = task.id.ring() as usize;
        let local = task.id.local() as usize & (RECORD_WINDOW as usize - 1);
        self.arrays.ids[ring][local] = node as u32;
        // The node's own output window: the buffers its OUTPUT arguments were given.
        let own = task
            .args
            .iter()
            .filter(|a| a.tag == TensorArgType::Output)
            .map(|a| {
                (
                    a.tensor.buffer().addr,
                    a.tensor.buffer().addr + a.tensor.buffer().size,
                )
            })
            .fold((u64::MAX, 0), |(s, e), (a, b)| (s.min(a), e.max(b)));
        let own = if own.0 == u64::MAX { (0, 0) } else { own };
        let tensor_offset = self.arrays.tensor_cursor;
        let source_offset = self.arrays.sources.len();
        for arg in task.args {
            let Some(source) = self.classify(node, own, &arg.tensor) else {
                self.arrays.unsupported = Some("a tensor is neither boundary nor internal");
                continue;
            };
            // Written from a fresh value: nothing of an earlier, wider tensor survives.
            let slot = &mut self.arrays.tensors[self.arrays.tensor_cursor];
            *slot = bytemuck::Zeroable::zeroed();
            *slot = arg.tensor;
            self.arrays.tensor_cursor += 1;
            self.arrays.sources.push(source);
        }
        // An allocation task writes no payload record: it has no scalars (reading its slot
        // would pick up an earlier recording's).
        let mut scalars = [0u64; CORE_MAX_SCALAR_ARGS];
        let ns = if task.alloc {
            0
        } else {
            self.payloads.scalars(task.id, &mut scalars)
        };
        let scalar_offset = self.arrays.scalars.len();
        for (k, &s) in scalars[..ns].iter().enumerate() {
            // The payload holds the values; where the body took them from says which are the
            // boundary's (a boundary scalar is stored as 0: each replay supplies its own).
            let source = task
                .scalars
                .get(k)
                .map_or(RecordedScalarSource::Static, |p| self.scalar_source(p));
            let value = match source {
                RecordedScalarSource::Boundary(_) => 0,
                _ => s,
            };
            self.arrays.scalars.push(value);
            self.arrays.scalar_sources.push(source);
        }
        // A predicate's operand is classified like an argument; one a replay could not rebind
        // (or the node's own output, which it has not written when the predicate is read)
        // cannot be recorded. The runtime already dropped the predicate of a kernel-less task.
        let predicate_index = task.predicate.and_then(|p| {
            let source = match self.classify(node, own, p.operand()) {
                None => {
                    self.arrays.unsupported =
                        Some("a predicate's operand is neither boundary nor internal");
                    return None;
                }
                Some(s) if s.kind == TensorSourceKind::OwnOutput => {
                    self.arrays.unsupported = Some("a predicate reads its node's own output");
                    return None;
                }
                Some(s) => s,
            };
            self.arrays.predicates.push(RecordedPredicate {
                operand: *p.operand(),
                source,
                elem_offset: p.elem_offset(),
                target: p.target(),
                elem_size: p.elem_size(),
                op: p.op() as u8,
            });
            Some(self.arrays.predicates.len() as u32 - 1)
        });
        let fanin_offset = self.arrays.fanins.len();
        for (producer, _) in fanin {
            let p = self.arrays.ids[producer.ring() as usize]
                [producer.local() as usize & (RECORD_WINDOW as usize - 1)];
            if (p as usize) < node && !self.arrays.fanins[fanin_offset..].contains(&(p as usize)) {
                self.arrays.fanins.push(p as usize);
            }
        }
        let k = task.kernels;
        let mask = (k.aic != NO_KERNEL) as u8
            | ((k.aiv0 != NO_KERNEL) as u8) << 1
            | ((k.aiv1 != NO_KERNEL) as u8) << 2;
        let subtasks = task.block_num as u32 * mask.count_ones();
        if subtasks > i16::MAX as u32 {
            self.arrays.unsupported = Some("subtasks do not fit i16");
        }
        let output_size = own.1.saturating_sub(own.0);
        self.arrays.outputs.push(if own.1 > own.0 {
            own
        } else {
            let at = self.arrays.outputs.last().map_or(0, |o| o.1);
            (at, at)
        });
        let rec = RecordedNode {
            kernel_ids: [kernel_id(k.aic), kernel_id(k.aiv0), kernel_id(k.aiv1)],
            active_mask: mask,
            task_attrs: if predicate_index.is_some() {
                TASK_ATTR_PREDICATE
            } else {
                0
            },
            logical_block_num: task.block_num as i16,
            total_required_subtasks: subtasks.min(i16::MAX as u32) as i16,
            total_output_size: output_size,
            tensor_offset: tensor_offset as u32,
            tensor_count: (self.arrays.tensor_cursor - tensor_offset) as u32,
            tensor_source_offset: source_offset as u32,
            scalar_offset: scalar_offset as u32,
            scalar_count: (self.arrays.scalars.len() - scalar_offset) as u32,
            fanin_offset: fanin_offset as u32,
            fanin_count: (self.arrays.fanins.len() - fanin_offset) as u32,
            predicate_index,
        };
        // Node slots persist: overwrite the slot if it exists, else add one.
        if node < self.arrays.nodes.len() {
            self.arrays.nodes[node] = rec;
        } else {
            self.arrays.nodes.push(rec);
        }
        self.arrays.node_count += 1;
    }
}
