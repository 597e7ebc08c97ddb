//! The reference scenes of issue 18, part A (`dummy_task`, `spmd_multiblock_aiv`,
//! `spmd_multiblock_mix`, `mixed_example`, `scalar_data`): every case on both simulated
//! topologies, two rounds on one worker, against its golden and its Prepared task and edge
//! counts; and on a2a3 the recorded graph, task by task and edge by edge, against the
//! reference's graph as read from its orchestration and dependency rules (written out here,
//! not taken from the scenes).
//!
//! Every count is deterministic: each scene keeps the tasks that later tasks depend on in a
//! scope that is still open (the orchestration's own), so no producer retires before its
//! consumer is submitted, and `mixed_example`, whose iterations' scopes do close, has no edges.

use simpler_aicpu::{MixedKernels, NO_KERNEL};
use simpler_host::dag::DagRecorder;
use simpler_host::scenes::{self, Prepared};
use simpler_host::{ChipWorker, RunOptions, SharedHook};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::{Arc, Mutex};

const SCENES: [(&str, &[&str]); 5] = [
    (
        "dummy_task",
        &[
            "SingleDummyAutoDep",
            "LongDummyChain",
            "DummyExplicitDepBarrier",
            "DenseFanoutFanin",
        ],
    ),
    ("spmd_multiblock_aiv", &["Case1"]),
    ("spmd_multiblock_mix", &["Case1"]),
    ("mixed_example", &["case1", "case2"]),
    ("scalar_data", &["default"]),
];

/// Runs `prepared` once on `worker`, with `hook` if given; checks the golden and the counts.
fn run_once(worker: &mut ChipWorker, what: &str, prepared: &Prepared, hook: Option<SharedHook>) {
    let handle = worker.register(prepared.callable.clone());
    let mut tensors = prepared.tensors.clone();
    let report = worker
        .run(
            handle,
            &mut tensors,
            &prepared.scalars,
            RunOptions {
                hook,
                ..RunOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let check = (prepared.check)(&tensors);
    assert!(check.pass, "{what}: max diff {}", check.max_diff);
    let stated = (
        prepared.tasks.expect("stated"),
        prepared.edges.expect("stated"),
    );
    assert_eq!(
        (report.outcome.tasks, report.outcome.edges),
        stated,
        "{what}: tasks and edges"
    );
}

#[test]
fn every_case_on_both_topologies_over_two_rounds() {
    let names: Vec<&str> = scenes::all().iter().map(|s| s.name()).collect();
    for topology in [Topology::A2a3, Topology::A5] {
        let mut worker = ChipWorker::init(DeviceConfig::new(topology)).unwrap();
        for (scene, cases) in SCENES {
            assert!(names.contains(&scene), "{scene} is registered");
            let found = scenes::find(scene).unwrap();
            assert_eq!(found.cases(), cases, "{scene}: the reference's case names");
            for case in cases {
                let prepared = found.prepare(case).unwrap();
                for round in 0..2 {
                    let what = format!("{scene} {case} on {} round {round}", topology.name());
                    run_once(&mut worker, &what, &prepared, None);
                }
            }
        }
    }
}

/// One task of the expected graph: kind, kernel per slot, SPMD blocks.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Node {
    kind: &'static str,
    kernels: [Option<u32>; 3],
    blocks: u16,
}

fn task(aic: Option<u32>, aiv0: Option<u32>, aiv1: Option<u32>) -> Node {
    Node {
        kind: "task",
        kernels: [aic, aiv0, aiv1],
        blocks: 1,
    }
}

fn aic(k: u32) -> Node {
    task(Some(k), None, None)
}

fn aiv(k: u32) -> Node {
    task(None, Some(k), None)
}

const DUMMY: Node = Node {
    kind: "dummy",
    kernels: [None; 3],
    blocks: 1,
};

const ALLOC: Node = Node {
    kind: "alloc",
    kernels: [None; 3],
    blocks: 1,
};

/// The reference's graph: tasks in submit order, and edges `(from, to, reason)` with the
/// reason this runtime's recorder names (`creator`, `overlap` for a TensorMap lookup,
/// `explicit`).
struct Graph {
    nodes: Vec<Node>,
    edges: Vec<(usize, usize, &'static str)>,
}

fn chain(n: usize) -> Vec<(usize, usize, &'static str)> {
    (0..n - 1).map(|i| (i, i + 1, "overlap")).collect()
}

/// The reference's graph of each case, from its orchestration source.
fn reference_graph(scene: &str, case: &str) -> Graph {
    const WRITE_CONST: u32 = 0;
    const COPY_FIRST: u32 = 1;
    match (scene, case) {
        ("dummy_task", "SingleDummyAutoDep") => Graph {
            nodes: vec![aic(WRITE_CONST), DUMMY, aic(COPY_FIRST)],
            edges: chain(3),
        },
        ("dummy_task", "LongDummyChain") => {
            let mut nodes = vec![aic(WRITE_CONST)];
            nodes.extend([DUMMY; 4]);
            nodes.push(aic(COPY_FIRST));
            Graph {
                nodes,
                edges: chain(6),
            }
        }
        ("dummy_task", "DummyExplicitDepBarrier") => Graph {
            nodes: vec![aic(WRITE_CONST), aic(WRITE_CONST), DUMMY, aic(COPY_FIRST)],
            edges: vec![
                (0, 2, "explicit"),
                (1, 2, "explicit"),
                (2, 3, "explicit"),
                (0, 3, "overlap"),
            ],
        },
        ("dummy_task", "DenseFanoutFanin") => {
            let mut nodes = vec![aic(WRITE_CONST)];
            nodes.extend([DUMMY; 18]);
            nodes.push(aic(COPY_FIRST));
            let mut edges: Vec<_> = (1..=18).map(|d| (0, d, "explicit")).collect();
            edges.extend((1..=18).map(|d| (d, 19, "explicit")));
            edges.push((0, 19, "overlap"));
            Graph { nodes, edges }
        }
        ("spmd_multiblock_aiv", "Case1") => Graph {
            nodes: [4, 16, 24, 48, 96]
                .map(|blocks| Node { blocks, ..aiv(0) })
                .to_vec(),
            edges: chain(5),
        },
        ("spmd_multiblock_mix", "Case1") => Graph {
            nodes: [2, 8, 12, 24, 48]
                .map(|blocks| Node {
                    blocks,
                    ..task(Some(0), Some(1), Some(2))
                })
                .to_vec(),
            edges: chain(5),
        },
        ("mixed_example", _) => {
            let iters = if case == "case1" { 4 } else { 1 };
            let per_iteration = [
                task(Some(0), Some(1), Some(2)),
                aic(0),
                aiv(3),
                task(None, Some(3), Some(4)),
                task(Some(0), Some(1), None),
            ];
            Graph {
                nodes: per_iteration.repeat(iters),
                edges: Vec::new(),
            }
        }
        ("scalar_data", "default") => {
            const ADD: u32 = 0;
            const NOOP: u32 = 1;
            Graph {
                nodes: vec![
                    aiv(ADD),
                    ALLOC,
                    aiv(NOOP),
                    ALLOC,
                    aiv(ADD),
                    aiv(ADD),
                    aiv(NOOP),
                    aiv(ADD),
                ],
                edges: vec![
                    (1, 2, "creator"),
                    (3, 4, "creator"),
                    (0, 5, "creator"),
                    (6, 7, "overlap"),
                ],
            }
        }
        _ => panic!("no reference graph for {scene} {case}"),
    }
}

fn slot(id: u32) -> Option<u32> {
    (id != NO_KERNEL).then_some(id)
}

fn kernels(k: MixedKernels) -> [Option<u32>; 3] {
    [slot(k.aic), slot(k.aiv0), slot(k.aiv1)]
}

#[test]
fn every_graph_is_the_references_task_by_task_and_edge_by_edge() {
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).unwrap();
    for (scene, cases) in SCENES {
        for case in cases {
            let what = format!("{scene} {case}");
            let prepared = scenes::find(scene).unwrap().prepare(case).unwrap();
            let recorder = Arc::new(Mutex::new(DagRecorder::new()));
            run_once(
                &mut worker,
                &what,
                &prepared,
                Some(recorder.clone() as SharedHook),
            );
            let dag = recorder.lock().unwrap();
            let want = reference_graph(scene, case);
            let got: Vec<Node> = dag
                .tasks()
                .iter()
                .map(|t| Node {
                    kind: t.kind,
                    kernels: kernels(t.kernels),
                    blocks: t.block_num,
                })
                .collect();
            assert_eq!(got, want.nodes, "{what}: tasks");
            assert_eq!(
                prepared.tasks,
                Some(want.nodes.len() as u64),
                "{what}: tasks"
            );
            let mut got: Vec<(usize, usize, Vec<&str>)> = dag
                .edges()
                .iter()
                .map(|e| {
                    assert!(e.wait, "{what}: {} -> {} waits", e.from, e.to);
                    (e.from, e.to, e.reasons.clone())
                })
                .collect();
            got.sort();
            let mut expected: Vec<(usize, usize, Vec<&str>)> = want
                .edges
                .iter()
                .map(|&(from, to, reason)| (from, to, vec![reason]))
                .collect();
            expected.sort();
            assert_eq!(got, expected, "{what}: edges");
            assert_eq!(prepared.edges, Some(expected.len() as u64), "{what}: edges");
        }
    }
}

/// A case number the orchestration does not know ends the run with an error, not a graph.
#[test]
fn dummy_task_refuses_an_unknown_case_number() {
    let mut prepared = scenes::find("dummy_task")
        .unwrap()
        .prepare("SingleDummyAutoDep")
        .unwrap();
    prepared.scalars = vec![5];
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).unwrap();
    let handle = worker.register(prepared.callable.clone());
    let mut tensors = prepared.tensors.clone();
    let run = worker.run(
        handle,
        &mut tensors,
        &prepared.scalars,
        RunOptions::default(),
    );
    let Err(err) = run else {
        panic!("case 5 is refused");
    };
    let text = simpler_host::ErrorChain(&err).to_string();
    assert!(
        text.contains(&scenes::dummy_task::UNKNOWN_CASE.to_string())
            || text.contains(&format!("{:#x}", scenes::dummy_task::UNKNOWN_CASE)),
        "{text}"
    );
}
