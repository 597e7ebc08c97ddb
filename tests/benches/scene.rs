//! `scene`: warm wall time per run of the example scenes on one simulated chip (a2a3sim,
//! 8 clusters), and bgemm's GFLOP/s.
//!
//! Each scene case gets one `ChipWorker` (device set up once), one warm-up round, then
//! `ROUNDS` rounds; a round is one `ChipWorker::run` with its outputs reset. Printed per case:
//! median and minimum device time per run (orchestration start to the last scheduler
//! stopping) and host time per run (staging the entry tensors, the run, copying back), and for
//! bgemm the GFLOP/s of the device time (2·tile³·loop per GEMM task). Cases whose scene is not
//! registered are skipped.
//!
//! Not shown: the reference's figures come from its own C++ simulator on the same kind of
//! machine (vector_example 58.7 ms, Bgemm64 65.5 ms, bgemm Case0 3.3 GFLOP/s); the kernels here
//! are plain Rust loops, so bgemm measures them as much as the runtime.
//!
//! Run: `cargo bench -p simpler-tests --bench scene` (`SCENE_ROUNDS=n`, `SCENE_CASES=a,b`).

use simpler_host::scenes;
use simpler_host::ChipWorker;
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::measure::report_summary;

const ROUNDS: usize = 20;

/// (scene, case, GFLOP per run or 0).
const CASES: &[(&str, &str, f64)] = &[
    ("vector_example", "default", 0.0),
    (
        "bgemm",
        "Bgemm64",
        32.0 * 2.0 * 64.0 * 64.0 * 64.0 * 1.0 / 1e9,
    ),
    ("paged_attention", "CaseSmall1", 0.0),
    ("paged_attention", "Bench16704", 0.0),
    (
        "bgemm",
        "Case0",
        500.0 * 2.0 * 128.0 * 128.0 * 128.0 * 4.0 / 1e9,
    ),
];

fn main() {
    let rounds = std::env::var("SCENE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS);
    let only = std::env::var("SCENE_CASES").ok();
    for &(scene, case, gflop) in CASES {
        let name = format!("{scene}_{case}");
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|c| c == case || c == scene))
        {
            continue;
        }
        let Some(prepared) = scenes::find(scene).and_then(|s| s.prepare(case)) else {
            continue;
        };
        let mut config = DeviceConfig::new(Topology::A2a3);
        let entry: u64 = prepared
            .tensors
            .iter()
            .map(|t| t.data.len() as u64 + 1024)
            .sum();
        config.gm_bytes = config.gm_bytes.max(entry + (64 << 20));
        let mut worker = ChipWorker::init(config).expect("a device");
        let handle = worker.register_callable(
            prepared.orch.clone(),
            prepared.kernels.clone(),
            prepared.signature.clone(),
        );
        let (mut device, mut host, mut rate) = (Vec::new(), Vec::new(), Vec::new());
        let case_rounds = if gflop > 1.0 { rounds.min(5) } else { rounds };
        for round in 0..=case_rounds {
            let mut tensors = prepared.tensors.clone();
            let r = worker
                .run(handle, &mut tensors, &prepared.scalars)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                (prepared.check)(&tensors).pass,
                "{name} round {round} failed its golden"
            );
            if round == 0 {
                continue;
            }
            let d = r.outcome.device.as_secs_f64();
            device.push(d * 1e3);
            host.push(r.host.as_secs_f64() * 1e3);
            if gflop > 0.0 {
                rate.push(gflop / d);
            }
        }
        report_summary("scene", &format!("{name}_device_ms"), &mut device, "ms");
        report_summary("scene", &format!("{name}_host_ms"), &mut host, "ms");
        if !rate.is_empty() {
            report_summary("scene", &format!("{name}_gflops"), &mut rate, "GFLOP/s");
        }
    }
}
