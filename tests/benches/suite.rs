//! `suite`: the reference's simulator scene suite, every case on one a2a3sim chip each (8
//! clusters, the case's own ring sizes where it states them): its task and edge counts and
//! its warm device time.
//!
//! Each case gets one `ChipWorker`, one warm-up round, then `ROUNDS` rounds on buffers reset
//! in place; every round is checked against the case's golden and its stated counts (a case
//! whose edges depend on timing, `ringbuffer_stress` on its small rings, states a slack).
//! Printed per case: the task and edge counts of the last round and the median and minimum
//! device time (orchestration start to the last scheduler stopping).
//!
//! Not shown: the reference publishes no simulator timings for these scenes; they are
//! correctness tests there. Host time per run (staging, copy-back) is in the `scene` bench.
//!
//! Run: `cargo bench -p simpler-tests --bench suite` (`SIMPLER_BENCH_SMOKE=1`: one round).

use simpler_host::scenes;
use simpler_host::ChipWorker;
use simpler_host::RunOptions;
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::measure::{report, report_summary, sized};

const ROUNDS: usize = 10;

/// The reference's suite, as ported (issue 18), and the MANUAL-scope example before it.
const SUITE: &[&str] = &[
    "dummy_task",
    "spmd_multiblock_aiv",
    "spmd_multiblock_mix",
    "mixed_example",
    "scalar_data",
    "batch_paged_attention",
    "multi_round_paged_attention",
    "paged_attention_ringbuffer",
    "paged_attention_manual_scope",
];

fn main() {
    let rounds = sized(ROUNDS, 1);
    for &name in SUITE {
        let scene = scenes::find(name).unwrap_or_else(|| panic!("{name} is registered"));
        for &case in scene.cases() {
            let prepared = scene.prepare(case).expect("a listed case");
            let mut config = DeviceConfig::new(Topology::A2a3);
            if let Some(ring) = prepared.ring {
                config.ring = ring;
            }
            let mut worker = ChipWorker::init(config).expect("a device");
            let handle = worker.register(prepared.callable.clone());
            let mut tensors = prepared.tensors.clone();
            let (mut device, mut counts) = (Vec::new(), (0, 0));
            for round in 0..=rounds {
                for (t, fresh) in tensors.iter_mut().zip(&prepared.tensors) {
                    t.reset_outputs_from(fresh);
                }
                let r = worker
                    .run(
                        handle,
                        &mut tensors,
                        &prepared.scalars,
                        RunOptions::default(),
                    )
                    .unwrap_or_else(|e| panic!("{name} {case}: {e}"));
                let check = (prepared.check)(&tensors);
                assert!(check.pass, "{name} {case} round {round}: {check:?}");
                let (tasks, edges) = (r.outcome.tasks, r.outcome.edges);
                assert_eq!(Some(tasks), prepared.tasks, "{name} {case}: tasks");
                let stated = prepared.edges.expect("the suite states its edges");
                assert!(
                    edges <= stated && edges + prepared.edge_slack >= stated,
                    "{name} {case}: {edges} edges, {stated} stated (slack {})",
                    prepared.edge_slack
                );
                counts = (tasks, edges);
                if round > 0 {
                    device.push(r.outcome.device.as_secs_f64() * 1e3);
                }
            }
            let figure = format!("{name}_{case}");
            report(
                "suite",
                &format!("{figure}_tasks"),
                counts.0 as f64,
                "tasks",
            );
            report(
                "suite",
                &format!("{figure}_edges"),
                counts.1 as f64,
                "edges",
            );
            report_summary("suite", &format!("{figure}_device_ms"), &mut device, "ms");
        }
    }
}
