//! `pipeline`: consecutive dsv4-shaped runs on one chip (a2a3sim, 8 clusters, hbg, retained
//! Graph Definitions), with the pipeline at depth one (`ChipWorker::run`: bind, then the device
//! run, then the next bind) and at depth two (`submit` the next run, then `wait` for this one:
//! the host binds run k+1 into the other slot while the device runs run k).
//!
//! Arms alternate in blocks of 10 runs, 5 blocks each (50 runs per arm), after a settling block
//! each. Printed: wall time per run of each arm (a block's wall over its runs; median and
//! minimum over blocks), `pipeline_overlap_ratio` (depth-one wall over depth-two wall, block
//! pair by block pair), and the ideal overlap, `(bind + device) / max(bind, device)`, from the
//! depth-one runs' own reports: bind = the host's phases up to the launch (`args` through
//! `arena_h2d`), device = `runtime_init` + `device_run`. Every run's golden is checked after
//! the blocks (a check inside them would add to the wall).
//!
//! Not shown: copy-back, which both arms pay after the device run.
//!
//! Run: `cargo bench -p simpler-tests --bench pipeline` (`SIMPLER_BENCH_SMOKE=1`: blocks of 2,
//! one per arm).

use simpler_host::hbg::{BindPhase, GraphRetention};
use simpler_host::scenes;
use simpler_host::{ChipArg, ChipWorker, RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::measure::{report, report_summary, sized};
use std::time::Instant;

fn main() {
    let p = scenes::find("dsv4_shaped")
        .expect("scene")
        .prepare("default")
        .expect("case");
    let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
    w.set_graph_retention(GraphRetention {
        verify: false,
        ..GraphRetention::default()
    })
    .expect("retention");
    let h = w.register(p.callable.clone());
    w.wait_for_recorders();
    let opts = || RunOptions::on(Runtime::Hbg);
    let entry = || -> Vec<ChipArg> { p.tensors.iter().cloned().map(ChipArg::Host).collect() };
    let (block, blocks) = (sized(10, 2), sized(5, 1));
    let mut kept: Vec<Vec<ChipArg>> = Vec::new();
    let mut walls = [Vec::new(), Vec::new()];
    let (mut binds, mut devices) = (Vec::new(), Vec::new());
    for b in 0..=blocks {
        // Depth one.
        let t = Instant::now();
        for _ in 0..block {
            let mut a = entry();
            let r = w.run(h, &mut a, &p.scalars, opts()).expect("depth-one run");
            let bind = r.bind.expect("hbg");
            let host: std::time::Duration = [
                BindPhase::Args,
                BindPhase::ArenaBuild,
                BindPhase::HostOrch,
                BindPhase::GraphCommit,
                BindPhase::SharedMem,
                BindPhase::GraphUpload,
                BindPhase::ArenaH2d,
            ]
            .iter()
            .map(|&ph| bind.phase(ph).time)
            .sum();
            let device =
                bind.phase(BindPhase::RuntimeInit).time + bind.phase(BindPhase::DeviceRun).time;
            if b > 0 {
                binds.push(host.as_secs_f64() * 1e6);
                devices.push(device.as_secs_f64() * 1e6);
            }
            kept.push(a);
        }
        let one = t.elapsed().as_secs_f64() * 1e6 / block as f64;
        // Depth two.
        let t = Instant::now();
        let mut in_flight = std::collections::VecDeque::new();
        for _ in 0..block {
            in_flight.push_back(w.submit(h, entry(), &p.scalars, opts()));
            if in_flight.len() == 2 {
                let done = w.wait(in_flight.pop_front().unwrap()).expect("own handle");
                done.result.expect("depth-two run");
                kept.push(done.args);
            }
        }
        while let Some(run) = in_flight.pop_front() {
            let done = w.wait(run).expect("own handle");
            done.result.expect("depth-two run");
            kept.push(done.args);
        }
        let two = t.elapsed().as_secs_f64() * 1e6 / block as f64;
        if b > 0 {
            walls[0].push(one);
            walls[1].push(two);
        }
    }
    let mut ratio: Vec<f64> = walls[0].iter().zip(&walls[1]).map(|(a, b)| a / b).collect();
    report_summary(
        "pipeline",
        "pipeline_wall_per_run_depth_one",
        &mut walls[0],
        "us",
    );
    report_summary(
        "pipeline",
        "pipeline_wall_per_run_depth_two",
        &mut walls[1],
        "us",
    );
    report_summary("pipeline", "pipeline_overlap_ratio", &mut ratio, "x");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (bind, device) = (median(&mut binds), median(&mut devices));
    report("pipeline", "pipeline_bind_us_median", bind, "us");
    report("pipeline", "pipeline_device_us_median", device, "us");
    report(
        "pipeline",
        "pipeline_overlap_ideal",
        (bind + device) / bind.max(device),
        "x",
    );
    for (i, a) in kept.iter().enumerate() {
        let host: Vec<_> = a.iter().filter_map(ChipArg::host).cloned().collect();
        let c = (p.check)(&host);
        assert!(c.pass, "run {i}: golden (max diff {})", c.max_diff);
    }
}
