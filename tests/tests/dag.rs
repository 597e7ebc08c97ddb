//! The recorded task graph of the scenes: the reference's edges and counts, every edge
//! forward in submit order, and the same file for the same scene and case.

use simpler_host::dag::DagRecorder;
use simpler_host::RunOptions;
use simpler_host::{scenes, ChipWorker, SharedHook};
use simpler_sim::{DeviceConfig, Topology};
use std::sync::{Arc, Mutex};

fn record(scene: &str, case: &str) -> Arc<Mutex<DagRecorder>> {
    let prepared = scenes::find(scene).unwrap().prepare(case).unwrap();
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).unwrap();
    let handle = worker.register(prepared.callable.clone());
    let recorder = Arc::new(Mutex::new(DagRecorder::new()));
    let mut tensors = prepared.tensors.clone();
    worker
        .run(
            handle,
            &mut tensors,
            &prepared.scalars,
            RunOptions {
                hook: Some(recorder.clone() as SharedHook),
                ..RunOptions::default()
            },
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

/// What a task is, without where the heap placed its outputs: a runtime-allocated tensor is
/// named by its owner task and its view, an entry tensor also by its address. A heap that
/// drained between two scopes restarts at its base, which depends on how far the schedulers
/// got while the orchestration ran, so two runs of one stream may place outputs differently.
#[allow(clippy::type_complexity)]
fn placement_free(
    dag: &DagRecorder,
) -> Vec<(usize, &'static str, String, u16, usize, u32, Vec<String>)> {
    dag.tasks()
        .iter()
        .map(|t| {
            let args = t
                .args()
                .iter()
                .map(|a| {
                    let v = &a.tensor;
                    let owned = v.owner_task_id() != simpler_core::TaskId::INVALID;
                    let addr = if owned { None } else { Some(v.buffer().addr) };
                    format!(
                        "{:?} owner {:?} addr {addr:?} size {} start {} shapes {:?} strides {:?} dtype {:?} version {} manual {}",
                        a.tag,
                        v.owner_task_id(),
                        v.buffer().size,
                        v.start_offset(),
                        v.shapes(),
                        v.strides(),
                        v.dtype(),
                        v.version(),
                        v.manual_dep()
                    )
                })
                .collect();
            (
                t.index,
                t.kind,
                format!("{:?}", t.kernels),
                t.block_num,
                t.scope_depth,
                t.ring,
                args,
            )
        })
        .collect()
}

/// One paged-attention query tile's edges by submit index, from the scenes' structure: `base`
/// is its alloc task and KV block `j`'s QK, SF, PV and UP follow at `base + 1 + 4j`. Returns
/// what `paged_attention_manual_scope` declares (`SF` on `QK`, `PV` on `SF`, `UP` on `PV` and
/// the previous `UP`, the last `UP` on the alloc task: the reference's whole manual graph) and
/// the creator edges no task declares (`SF → UP`, alloc → every `UP` but the last).
fn pa_tile_edges(base: usize, blocks: usize) -> TileEdges {
    let task = |j: usize, k: usize| base + 1 + 4 * j + k;
    let (qk, sf, pv, up) = (0, 1, 2, 3);
    let mut e = TileEdges::default();
    for j in 0..blocks {
        e.declared.push((task(j, qk), task(j, sf)));
        e.declared.push((task(j, sf), task(j, pv)));
        e.declared.push((task(j, pv), task(j, up)));
        if j > 0 {
            e.declared.push((task(j - 1, up), task(j, up)));
            e.chain.push((task(j - 1, up), task(j, up)));
        }
        e.creator_only.push((task(j, sf), task(j, up)));
        if j + 1 < blocks {
            e.creator_only.push((base, task(j, up)));
        }
    }
    e.declared.push((base, task(blocks - 1, up)));
    e
}

/// [`pa_tile_edges`]' answer, for one tile or several.
#[derive(Default)]
struct TileEdges {
    declared: Vec<(usize, usize)>,
    creator_only: Vec<(usize, usize)>,
    /// The declared `UP → UP` edges.
    chain: Vec<(usize, usize)>,
}

#[test]
fn the_manual_scope_graph_has_the_auto_graphs_tasks_and_pairs_and_declares_the_references() {
    // KV blocks per sequence: ceil(context length / 16); one query tile per sequence.
    for (case, blocks) in [("CaseSmall1", &[3][..]), ("CaseVarSeq4", &[3, 4, 8, 1][..])] {
        let auto = record("paged_attention", case);
        let auto = auto.lock().unwrap();
        let manual = record("paged_attention_manual_scope", case);
        let manual = manual.lock().unwrap();
        check_forward_and_unique(&manual);
        assert_eq!(
            placement_free(&manual),
            placement_free(&auto),
            "{case}: the same tasks"
        );

        let mut all = TileEdges::default();
        let mut base = 0;
        for &n in blocks {
            let e = pa_tile_edges(base, n);
            all.declared.extend(e.declared);
            all.creator_only.extend(e.creator_only);
            all.chain.extend(e.chain);
            base += 1 + 4 * n;
        }
        let TileEdges {
            declared,
            creator_only,
            chain,
        } = all;
        assert_eq!(base, manual.tasks().len(), "{case}");
        let pairs = |dag: &DagRecorder| -> Vec<(usize, usize)> {
            let mut p: Vec<_> = dag.edges().iter().map(|e| (e.from, e.to)).collect();
            p.sort();
            p
        };
        let mut expected: Vec<_> = declared.iter().chain(&creator_only).copied().collect();
        expected.sort();
        assert_eq!(pairs(&manual), expected, "{case}: manual pairs");
        assert_eq!(pairs(&auto), expected, "{case}: the auto graph's pairs");

        let edge = |dag: &DagRecorder, pair: (usize, usize)| {
            dag.edges()
                .iter()
                .find(|e| (e.from, e.to) == pair)
                .cloned()
                .unwrap()
        };
        for &pair in &declared {
            let e = edge(&manual, pair);
            assert!(e.reasons.contains(&"explicit"), "{case} {pair:?}: {e:?}");
            assert!(e.wait && e.retain, "{case} {pair:?}");
        }
        for &pair in &creator_only {
            assert_eq!(edge(&manual, pair).reasons, ["creator"], "{case} {pair:?}");
        }
        assert!(auto
            .edges()
            .iter()
            .all(|e| !e.reasons.contains(&"explicit")));
        // UP → UP: declared, it retains as well as waits; found in the TensorMap, it waits.
        assert_eq!(chain.len(), blocks.iter().map(|n| n - 1).sum::<usize>());
        for pair in chain {
            assert!(edge(&manual, pair).retain, "{case} {pair:?}");
            let e = edge(&auto, pair);
            assert!(e.wait && !e.retain, "{case} {pair:?}: {e:?}");
        }
    }
}
