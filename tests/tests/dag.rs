//! The recorded task graph of the scenes: the reference's edges and counts, every edge
//! forward in submit order, and the same file for the same scene and case.

use simpler_host::dag::DagRecorder;
use simpler_host::{scenes, ChipWorker, SharedHook};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::{Arc, Mutex};

fn record(scene: &str, case: &str) -> Arc<Mutex<DagRecorder>> {
    let prepared = scenes::find(scene).unwrap().prepare(case).unwrap();
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).unwrap();
    let handle = worker.register_callable(
        prepared.orch.clone(),
        prepared.kernels.clone(),
        prepared.signature.clone(),
    );
    let recorder = Arc::new(Mutex::new(DagRecorder::new()));
    let mut tensors = prepared.tensors.clone();
    worker
        .run_with_hook(
            handle,
            &mut tensors,
            &prepared.scalars,
            Some(recorder.clone() as SharedHook),
        )
        .unwrap();
    assert!((prepared.check)(&tensors).pass);
    recorder
}

fn check_forward_and_unique(dag: &DagRecorder) {
    let mut seen = std::collections::HashSet::new();
    for e in dag.edges() {
        assert!(
            e.from < e.to,
            "edge {} -> {} points backwards",
            e.from,
            e.to
        );
        assert!(
            seen.insert((e.from, e.to)),
            "edge {} -> {} twice",
            e.from,
            e.to
        );
        assert!(
            !e.reasons.is_empty(),
            "edge {} -> {} has no reason",
            e.from,
            e.to
        );
    }
}

#[test]
fn vector_example_has_exactly_the_reference_edges() {
    let r = record("vector_example", "default");
    let dag = r.lock().unwrap();
    assert_eq!(dag.tasks().len(), 5);
    let mut edges: Vec<(usize, usize)> = dag.edges().iter().map(|e| (e.from, e.to)).collect();
    edges.sort();
    assert_eq!(edges, vec![(0, 1), (0, 2), (0, 4), (1, 3), (2, 3), (3, 4)]);
    for e in dag.edges() {
        assert_eq!(e.reasons, vec!["creator"]);
        assert!(e.wait && e.retain);
        assert_eq!(e.carriers.len(), 1);
        assert_eq!(e.carriers[0].shape, vec![128, 128]);
    }
    check_forward_and_unique(&dag);
}

#[test]
fn bgemm_case1_and_paged_attention_counts() {
    for (scene, case, tasks, edges) in [
        ("bgemm", "Case1", 128, 96),
        ("paged_attention", "CaseSmall1", 13, 17),
    ] {
        let r = record(scene, case);
        let dag = r.lock().unwrap();
        assert_eq!(dag.tasks().len(), tasks, "{scene} {case} tasks");
        assert_eq!(dag.edges().len(), edges, "{scene} {case} edges");
        check_forward_and_unique(&dag);
    }
    // bgemm's ADD chain through C is found by overlap, with INOUT on both ends.
    let r = record("bgemm", "Case1");
    let dag = r.lock().unwrap();
    assert!(dag.edges().iter().any(|e| e.reasons.contains(&"overlap")
        && e.carriers
            .iter()
            .any(|c| c.producer_tag == simpler_core::TensorArgType::InOut
                && c.consumer_tag == simpler_core::TensorArgType::InOut)));
}

#[test]
fn the_same_case_gives_the_same_file() {
    let a = record("paged_attention", "CaseSmall1")
        .lock()
        .unwrap()
        .to_json();
    let b = record("paged_attention", "CaseSmall1")
        .lock()
        .unwrap()
        .to_json();
    assert_eq!(a, b);
    assert_eq!(a.matches("\"index\"").count(), 13);
    let dot = record("vector_example", "default").lock().unwrap().to_dot();
    assert_eq!(dot.matches(" -> ").count(), 6);
    assert!(dot.starts_with("digraph") && dot.trim_end().ends_with('}'));
}
