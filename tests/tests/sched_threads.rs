//! The AICPU schedulers on fewer host threads than schedulers (`DeviceConfig::sched_threads`):
//! each host thread steps whole schedulers in turn, and every run is the same run as with a
//! thread per scheduler.

use simpler_host::scenes::{self, Prepared};
use simpler_host::{ChipWorker, RunOptions};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::fixtures::{host_args, host_tensors, register_prepared};

fn config(threads: usize) -> DeviceConfig {
    let mut c = DeviceConfig::new(Topology::A2a3);
    c.sched_threads = threads;
    c
}

#[test]
fn the_thread_count_is_what_was_asked_within_one_and_the_schedulers() {
    assert_eq!(config(1).scheduler_threads(), 1);
    assert_eq!(config(2).scheduler_threads(), 2);
    assert_eq!(config(3).scheduler_threads(), 3);
    assert_eq!(
        config(9).scheduler_threads(),
        3,
        "never more than a2a3's three schedulers"
    );
    let cpus = std::thread::available_parallelism().map_or(3, |n| n.get());
    assert_eq!(
        config(0).scheduler_threads(),
        cpus.clamp(1, 3),
        "one per host CPU"
    );
    let mut a5 = DeviceConfig::new(Topology::A5);
    a5.sched_threads = 9;
    assert_eq!(a5.scheduler_threads(), Topology::A5.schedulers());
}

#[test]
fn every_thread_count_runs_the_scenes_to_their_goldens() {
    for threads in [1, 2, 3] {
        let mut w = ChipWorker::init(config(threads)).expect("device");
        for (scene, case) in [("paged_attention", "CaseVarSeq4"), ("bgemm", "Case1")] {
            let p: Prepared = scenes::find(scene)
                .expect("scene")
                .prepare(case)
                .expect("case");
            let h = register_prepared(&mut w, &p);
            for round in 0..2 {
                let mut args = host_args(&p);
                let run = w
                    .run(h, &mut args, &p.scalars, RunOptions::default())
                    .unwrap_or_else(|e| panic!("{threads} threads, {scene}/{case}: {e}"));
                let check = (p.check)(&host_tensors(args));
                assert!(
                    check.pass,
                    "{threads} threads, {scene}/{case} round {round}: max diff {}",
                    check.max_diff
                );
                assert_eq!(Some(run.outcome.tasks), p.tasks, "{scene}/{case}: tasks");
                assert_eq!(Some(run.outcome.edges), p.edges, "{scene}/{case}: edges");
            }
        }
    }
}
