//! A run's task graph: every task in submit order and every producer-to-consumer edge with
//! what carries it, recorded as the orchestration submits and written as JSON or Graphviz.
//!
//! The recorder is a [`SubmitHook`]: it sees each task right after its submit, with the edges
//! the submit recorded. An edge's carriers are the consumer's tensors (any tag but OUTPUT)
//! over the same buffer as a tensor the producer wrote (OUTPUT, INOUT, OUTPUT_EXISTING). Its
//! reasons: `creator` when the consumer's tensor was produced by that task, `overlap` when it
//! was found through the TensorMap, `explicit` when the consumer asked for it.
//!
//! JSON format (one object; deterministic for a given scene and case):
//!
//! ```text
//! { "tasks": [ { "index": 0, "kind": "task" | "alloc" | "dummy",
//!                "kernels": { "aic": id | null, "aiv0": id | null, "aiv1": id | null },
//!                "block_num": 1, "scope_depth": 2, "ring": 1 } ... ],
//!   "edges": [ { "from": 0, "to": 1, "wait": true, "retain": true,
//!                "reasons": ["creator"],
//!                "carriers": [ { "buffer": "0x100000000", "byte_offset": 0, "shape": [128, 128],
//!                                "producer_tag": "OUTPUT", "consumer_tag": "INPUT" } ] } ... ] }
//! ```
//!
//! Task indices are submit order; buffers are device addresses in the run.

use simpler_aicpu::{MixedKernels, SubmitHook, SubmittedTask, NO_KERNEL};
use simpler_core::deps::DepFlags;
use simpler_core::orchestrator::TaskArg;
use simpler_core::{TaskId, TensorArgType};
use std::collections::HashMap;
use std::fmt::Write;

/// One recorded task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DagTask {
    /// Submit order.
    pub index: usize,
    /// `task`, `alloc` or `dummy`.
    pub kind: &'static str,
    /// Kernel per core slot.
    pub kernels: MixedKernels,
    /// SPMD blocks.
    pub block_num: u16,
    /// Scope depth at submit.
    pub scope_depth: usize,
    /// The ring it ran on.
    pub ring: u32,
    args: Vec<TaskArg>,
}

impl DagTask {
    /// Its tensor arguments as submitted (OUTPUT tensors with the buffers the runtime gave them).
    pub fn args(&self) -> &[TaskArg] {
        &self.args
    }
}

/// What carries an edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carrier {
    /// The buffer's device address.
    pub buffer: u64,
    /// The consumer view's start in bytes from the buffer.
    pub byte_offset: u64,
    /// The consumer view's shape.
    pub shape: Vec<u32>,
    /// How the producer used its tensor over this buffer.
    pub producer_tag: TensorArgType,
    /// How the consumer uses it.
    pub consumer_tag: TensorArgType,
}

/// One producer-to-consumer edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DagEdge {
    /// Producer's submit index.
    pub from: usize,
    /// Consumer's submit index.
    pub to: usize,
    /// The edge orders the consumer after the producer.
    pub wait: bool,
    /// The edge keeps the producer's outputs alive until the consumer completes.
    pub retain: bool,
    /// Why the edge exists: `creator`, `overlap`, `explicit`.
    pub reasons: Vec<&'static str>,
    /// The tensors that carry it.
    pub carriers: Vec<Carrier>,
}

/// Records a run's task graph.
#[derive(Debug, Default)]
pub struct DagRecorder {
    tasks: Vec<DagTask>,
    edges: Vec<DagEdge>,
    index: HashMap<TaskId, usize>,
}

impl DagRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The submit index of `task`, if it was recorded.
    pub fn index_of(&self, task: TaskId) -> Option<usize> {
        self.index.get(&task).copied()
    }

    /// The tasks, in submit order.
    pub fn tasks(&self) -> &[DagTask] {
        &self.tasks
    }

    /// The edges, by consumer then producer.
    pub fn edges(&self) -> &[DagEdge] {
        &self.edges
    }

    /// The graph as JSON (see the module docs).
    pub fn to_json(&self) -> String {
        let mut s = String::from("{\n  \"tasks\": [");
        for (i, t) in self.tasks.iter().enumerate() {
            let k = |id: u32| {
                if id == NO_KERNEL {
                    "null".to_string()
                } else {
                    id.to_string()
                }
            };
            let _ = write!(
                s,
                "{}\n    {{\"index\": {}, \"kind\": \"{}\", \"kernels\": {{\"aic\": {}, \"aiv0\": {}, \"aiv1\": {}}}, \"block_num\": {}, \"scope_depth\": {}, \"ring\": {}}}",
                if i == 0 { "" } else { "," },
                t.index,
                t.kind,
                k(t.kernels.aic),
                k(t.kernels.aiv0),
                k(t.kernels.aiv1),
                t.block_num,
                t.scope_depth,
                t.ring
            );
        }
        s.push_str("\n  ],\n  \"edges\": [");
        for (i, e) in self.edges.iter().enumerate() {
            let reasons: Vec<String> = e.reasons.iter().map(|r| format!("\"{r}\"")).collect();
            let carriers: Vec<String> = e
                .carriers
                .iter()
                .map(|c| {
                    format!(
                        "{{\"buffer\": \"{:#x}\", \"byte_offset\": {}, \"shape\": {:?}, \"producer_tag\": \"{}\", \"consumer_tag\": \"{}\"}}",
                        c.buffer, c.byte_offset, c.shape, c.producer_tag, c.consumer_tag
                    )
                })
                .collect();
            let _ = write!(
                s,
                "{}\n    {{\"from\": {}, \"to\": {}, \"wait\": {}, \"retain\": {}, \"reasons\": [{}], \"carriers\": [{}]}}",
                if i == 0 { "" } else { "," },
                e.from,
                e.to,
                e.wait,
                e.retain,
                reasons.join(", "),
                carriers.join(", ")
            );
        }
        s.push_str("\n  ]\n}\n");
        s
    }

    /// The graph in Graphviz `dot` form: one node per task, one edge per producer-consumer
    /// pair labelled with its reasons (dashed when it only retains).
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph simpler {\n  rankdir=LR;\n");
        for t in &self.tasks {
            let _ = writeln!(s, "  t{0} [label=\"{0} {1}\"];", t.index, t.kind);
        }
        for e in &self.edges {
            let style = if e.wait { "solid" } else { "dashed" };
            let _ = writeln!(
                s,
                "  t{} -> t{} [label=\"{}\", style={}];",
                e.from,
                e.to,
                e.reasons.join(","),
                style
            );
        }
        s.push_str("}\n");
        s
    }
}

fn writes(tag: TensorArgType) -> bool {
    matches!(
        tag,
        TensorArgType::Output | TensorArgType::InOut | TensorArgType::OutputExisting
    )
}

impl SubmitHook for DagRecorder {
    fn submitted(
        &mut self,
        task: &SubmittedTask<'_>,
        fanin: &mut dyn Iterator<Item = (TaskId, DepFlags)>,
    ) {
        let index = self.tasks.len();
        let kind = if task.alloc {
            "alloc"
        } else if task.kernels == MixedKernels::NONE {
            "dummy"
        } else {
            "task"
        };
        self.index.insert(task.id, index);
        let mut edges: Vec<DagEdge> = Vec::new();
        for (producer, flags) in fanin {
            let Some(&from) = self.index.get(&producer) else {
                continue;
            };
            let p = &self.tasks[from];
            let mut reasons = Vec::new();
            let mut carriers = Vec::new();
            for a in task.args.iter().filter(|a| a.tag != TensorArgType::Output) {
                for w in p.args.iter().filter(|w| writes(w.tag)) {
                    if w.tensor.buffer().addr != a.tensor.buffer().addr {
                        continue;
                    }
                    let reason = if a.tensor.owner_task_id() == producer {
                        "creator"
                    } else {
                        "overlap"
                    };
                    if !reasons.contains(&reason) {
                        reasons.push(reason);
                    }
                    let elem = a.tensor.dtype().elem_size() as u64;
                    carriers.push(Carrier {
                        buffer: a.tensor.buffer().addr,
                        byte_offset: a.tensor.start_offset() * elem,
                        shape: a.tensor.shapes().to_vec(),
                        producer_tag: w.tag,
                        consumer_tag: a.tag,
                    });
                }
            }
            if task.deps.iter().any(|d| d.task == producer) {
                reasons.push("explicit");
            }
            edges.push(DagEdge {
                from,
                to: index,
                wait: flags.contains(DepFlags::WAIT),
                retain: flags.contains(DepFlags::RETAIN),
                reasons,
                carriers,
            });
        }
        edges.sort_by_key(|e| e.from);
        self.edges.extend(edges);
        self.tasks.push(DagTask {
            index,
            kind,
            kernels: task.kernels,
            block_num: task.block_num,
            scope_depth: task.scope_depth,
            ring: task.id.ring(),
            args: task.args.to_vec(),
        });
    }
}
