//! Every scene case small enough for the debug profile on both simulated topologies, several
//! rounds on one worker, against its golden and the reference's task and edge counts (for
//! `paged_attention_manual_scope`, the counts of its graph here, which keeps the creator edges
//! the reference's MANUAL scope drops; that scene's docs count both). bgemm's
//! Case0, Case2 and Case3 and paged attention's Bench16704 are left to `simpler run`.

use simpler_host::app::{self, check_case};
use simpler_host::scenes::{self, Prepared, Scene};
use simpler_host::{ChipWorker, Runtime};
use simpler_sim::{DeviceConfig, Topology};

fn run_case(worker: &mut ChipWorker, scene: &dyn Scene, case: &str, rounds: usize) {
    let prepared = scene.prepare(case).expect("a known case");
    run_prepared(worker, scene, case, &prepared, rounds);
}

/// `rounds` rounds of `prepared` on `worker`, each against the golden and the reference's
/// counts, which every project scene states.
fn run_prepared(
    worker: &mut ChipWorker,
    scene: &dyn Scene,
    case: &str,
    prepared: &Prepared,
    rounds: usize,
) {
    assert!(
        prepared.tasks.is_some() && prepared.edges.is_some(),
        "{} {case}: the reference's counts are stated",
        scene.name()
    );
    if let Err(failure) = check_case(worker, scene, case, prepared, Runtime::Tmr, rounds) {
        panic!("{failure}");
    }
}

#[test]
fn vector_example_on_both_topologies_over_three_rounds() {
    for topology in [Topology::A2a3, Topology::A5] {
        let mut worker = ChipWorker::init(DeviceConfig::new(topology)).unwrap();
        run_case(
            &mut worker,
            scenes::find("vector_example").unwrap(),
            "default",
            3,
        );
    }
}

#[test]
fn paged_attention_sim_cases_on_both_topologies_over_three_rounds() {
    let scene = scenes::find("paged_attention").unwrap();
    for topology in [Topology::A2a3, Topology::A5] {
        let mut worker = ChipWorker::init(DeviceConfig::new(topology)).unwrap();
        for case in ["CaseSmall1", "CaseSmall2", "CaseVarSeq2", "CaseVarSeq4"] {
            run_case(&mut worker, scene, case, 3);
        }
    }
}

#[test]
fn paged_attention_manual_scope_sim_cases_on_both_topologies_over_three_rounds() {
    let scene = scenes::find("paged_attention_manual_scope").unwrap();
    assert_eq!(
        scene.cases(),
        ["CaseSmall1", "CaseSmall2", "CaseVarSeq2", "CaseVarSeq4"]
    );
    for topology in [Topology::A2a3, Topology::A5] {
        let mut worker = ChipWorker::init(DeviceConfig::new(topology)).unwrap();
        for case in scene.cases() {
            run_case(&mut worker, scene, case, 3);
        }
    }
}

/// Case0, Case2 and Case3 are left to `simpler run`: each is 4x to 16x Case1's work, and
/// Case0's entry tensors need more GM than `DeviceConfig::new` gives. Case1 and Case4 run one
/// round per topology, because a round of either is about 5 s of matmul in the debug profile;
/// each case is prepared once (its f64 golden costs about as much again) for both workers.
#[test]
fn bgemm_small_cases_on_both_topologies() {
    let scene = scenes::find("bgemm").unwrap();
    let mut workers =
        [Topology::A2a3, Topology::A5].map(|t| ChipWorker::init(DeviceConfig::new(t)).unwrap());
    for (case, rounds) in [("Case1", 3), ("Case4", 3), ("Bgemm64", 3)] {
        let prepared = scene.prepare(case).expect("a known case");
        for worker in &mut workers {
            run_prepared(worker, scene, case, &prepared, rounds);
        }
    }
}

/// The framework's helper on the project's own scenes: every case once on a fresh chip, on
/// both runtimes (a Graph replays as one outer task per invocation on hbg, so `graph_vector`
/// states other counts for it).
#[test]
fn check_scene_passes_every_case_of_the_small_scenes() {
    for runtime in [Runtime::Tmr, Runtime::Hbg] {
        let runs = app::assert_scene(scenes::find("vector_example").unwrap(), runtime);
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].tasks, runs[0].edges), (5, 6), "{runtime:?}");
    }
    let graph = scenes::find("graph_vector").unwrap();
    let runs = app::assert_scene(graph, Runtime::Tmr);
    assert_eq!((runs[0].tasks, runs[0].edges), (40, 48));
    let runs = app::assert_scene(graph, Runtime::Hbg);
    assert_eq!((runs[0].tasks, runs[0].edges), (8, 0));
}
