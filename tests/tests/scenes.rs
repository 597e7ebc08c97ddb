//! Every scene case on both simulated topologies, several rounds on one worker, against its
//! golden and the reference's task and edge counts.

use simpler_host::scenes::{self, Scene};
use simpler_host::ChipWorker;
use simpler_sim::{DeviceConfig, Topology};

fn run_case(worker: &mut ChipWorker, scene: &dyn Scene, case: &str, rounds: usize) {
    let prepared = scene.prepare(case).expect("a known case");
    let handle = worker.register_callable(
        prepared.orch.clone(),
        prepared.kernels.clone(),
        prepared.signature.clone(),
    );
    for round in 0..rounds {
        let mut tensors = prepared.tensors.clone();
        let report = worker
            .run(handle, &mut tensors, &prepared.scalars)
            .unwrap_or_else(|e| panic!("{} {case} round {round}: {e}", scene.name()));
        let check = (prepared.check)(&tensors);
        assert!(
            check.pass,
            "{} {case} round {round}: max diff {}",
            scene.name(),
            check.max_diff
        );
        assert_eq!(
            report.outcome.tasks,
            prepared.tasks,
            "{} {case}: tasks",
            scene.name()
        );
        assert_eq!(
            report.outcome.edges,
            prepared.edges,
            "{} {case}: edges",
            scene.name()
        );
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
