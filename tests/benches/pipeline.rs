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
//! Both arms bind every run (whole-bind replay off). A third section turns replay on and binds
//! the same staged entry again in host-only binds (the image is kept, not shipped):
//! `guarded_replay_host_us` is a replayed bind's host time (the entry's placement, `args`; the
//! guard check and the heap blocks' placement, `arena_build`), next to the same span of a bind
//! that runs its orchestration (`bind_host_us`: `args` to `shared_mem`), binds alternating
//! between two workers; `guarded_replay_moved_host_us`, the same span on a third worker whose
//! entry is device memory in two sets of buffers used in turn (every replay relocates the
//! image to the other set); allocations and minor faults per replayed bind, whole process. Not
//! shown: shipping the image and copying the entry in and out, which every run pays whether
//! it replays or not.
//!
//! Run: `cargo bench -p simpler-tests --bench pipeline` (`SIMPLER_BENCH_SMOKE=1`: blocks of 2,
//! one per arm).

use simpler_host::hbg::{BindPhase, BindReplay, BindReport, GraphRetention};
use simpler_host::scenes;
use simpler_host::{ChipArg, ChipWorker, DeviceTensor, RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::alloc_count::{self as counter, Counting};
use simpler_tests::measure::{process_minor_faults, report, report_summary, sized};
use std::time::Instant;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The host's phases of a bind up to the launch.
const TO_LAUNCH: [BindPhase; 7] = [
    BindPhase::Args,
    BindPhase::ArenaBuild,
    BindPhase::HostOrch,
    BindPhase::GraphCommit,
    BindPhase::SharedMem,
    BindPhase::GraphUpload,
    BindPhase::ArenaH2d,
];

fn us(report: &BindReport, phases: &[BindPhase]) -> f64 {
    phases
        .iter()
        .map(|&ph| report.phase(ph).time.as_secs_f64() * 1e6)
        .sum()
}

fn main() {
    simpler_host::alloc_count::install(counter::thread);
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
    w.set_bind_replay(BindReplay {
        enabled: false,
        verify: false,
    });
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
            let device = us(&bind, &[BindPhase::RuntimeInit, BindPhase::DeviceRun]);
            if b > 0 {
                binds.push(us(&bind, &TO_LAUNCH));
                devices.push(device);
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
    replay(&p);
    for (i, a) in kept.iter().enumerate() {
        let host: Vec<_> = a.iter().filter_map(ChipArg::host).cloned().collect();
        let c = (p.check)(&host);
        assert!(c.pass, "run {i}: golden (max diff {})", c.max_diff);
    }
}

/// Replayed binds against binds that run, on two workers binding the same entry in turn.
fn replay(p: &simpler_host::scenes::Prepared) {
    let mut workers: Vec<_> = [true, false, true]
        .into_iter()
        .map(|enabled| {
            let mut w = ChipWorker::init(DeviceConfig::new(Topology::A2a3)).expect("device");
            w.set_graph_retention(GraphRetention {
                verify: false,
                ..GraphRetention::default()
            })
            .expect("retention");
            w.set_bind_replay(BindReplay {
                enabled,
                verify: false,
            });
            let h = w.register(p.callable.clone());
            w.wait_for_recorders();
            (w, h)
        })
        .collect();
    let (settle, binds) = (sized(3, 1), sized(30, 2));
    let replayed_phases = [
        BindPhase::Args,
        BindPhase::ArenaBuild,
        BindPhase::GraphUpload,
    ];
    let (mut replayed, mut bound, mut moved) = (Vec::new(), Vec::new(), Vec::new());
    let (mut allocs, mut faults) = (Vec::new(), Vec::new());
    let mut entries: Vec<Vec<ChipArg>> = (0..2)
        .map(|_| p.tensors.iter().cloned().map(ChipArg::Host).collect())
        .collect();
    // The third worker's entry lives in persistent device memory, in two sets of buffers
    // used in turn: every replay relocates the image to the other set.
    let device_sets: Vec<Vec<ChipArg>> = {
        let w = &mut workers[2].0;
        (0..2)
            .map(|_| {
                p.tensors
                    .iter()
                    .map(|t| {
                        let addr = w.malloc(t.data.len() as u64).expect("malloc");
                        ChipArg::Device(DeviceTensor::contiguous(addr, &t.shapes, t.dtype, t.dir))
                    })
                    .collect()
            })
            .collect()
    };
    entries.push(device_sets[0].clone());
    for round in 0..settle + binds {
        entries[2].clone_from(&device_sets[round % 2]);
        for (i, (w, h)) in workers.iter_mut().enumerate() {
            let (f0, a0) = (process_minor_faults(), counter::process());
            let r = w
                .run(*h, &mut entries[i], &p.scalars, RunOptions::host_only_hbg())
                .expect("run");
            let (f, a) = (process_minor_faults() - f0, counter::process() - a0);
            let bind = r.bind.expect("hbg");
            assert_eq!(
                bind.replayed,
                i != 1 && round > 0,
                "worker {i}, round {round}"
            );
            if round < settle {
                continue;
            }
            match i {
                0 => {
                    replayed.push(us(&bind, &replayed_phases));
                    allocs.push(a as f64);
                    faults.push(f as f64);
                }
                1 => bound.push(us(&bind, &TO_LAUNCH[..6])),
                _ => moved.push(us(&bind, &replayed_phases)),
            }
        }
    }
    report_summary("pipeline", "guarded_replay_host_us", &mut replayed, "us");
    report_summary("pipeline", "guarded_replay_moved_host_us", &mut moved, "us");
    report_summary("pipeline", "bind_host_us", &mut bound, "us");
    report_summary(
        "pipeline",
        "guarded_replay_process_allocs_per_bind",
        &mut allocs,
        "allocs",
    );
    report_summary(
        "pipeline",
        "guarded_replay_process_minflt_per_bind",
        &mut faults,
        "faults",
    );
}
