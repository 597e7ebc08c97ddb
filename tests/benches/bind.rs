//! `bind`: the hbg runtime's bind, phase by phase, on bgemm Case1 (128 tasks), bgemm Case0
//! (1000 tasks) and the dsv4-shaped scene (8 Graph Definitions of 1679 recorded nodes, 66
//! Graph submissions and 63 ordinary ones per bind), and graph_vector (one Graph body, eight
//! invocations; its orchestration and body allocate nothing, so its allocation count is the
//! runtime's and the staging's), a2a3sim, 8 clusters.
//!
//! Each case: one cold bind, 10 settling binds (staging hundreds of MB of entry leaves the
//! kernel busy with that memory for a while: bgemm Case0's first 20 warm binds measured
//! 180-280 us of host_orch against 120 us after), then 20 warm binds in host-only mode of the
//! same staged entry tensors (the orchestration runs into the retained mirror and the image is
//! built; the device run is skipped, so the figures are the host's), then 3 full binds that
//! also run on the device and check the golden. Recorder threads have stood their storage up
//! before the first bind (`ChipWorker::wait_for_recorders`). Printed, median and minimum over
//! the warm host-only binds: `args` and each phase of the control plane
//! (`simpler_host::hbg::CONTROL_PLANE`) and their sum (`BindReport::control_plane`); minor page
//! faults per warm bind, of every thread of the process over the whole bind (`process`: the
//! recorder threads record inside the control plane) and of the binding thread alone over
//! exactly the clocked spans, the control plane's summed and the entry staging's apart; heap
//! allocations per warm bind, counted per thread by a counting global allocator: the whole
//! process, the binding thread, the SM mirror's phases (`arena_build`, `shared_mem`) and the
//! recording path (recorder threads, from taking a job to publishing its Definition;
//! `simpler_host::alloc_count`); host_orch per task (wall, over the tasks the bind built) and
//! the binding thread's CPU time in it; the image shipped; for Graph scenes the sub-phases
//! (graph_begin, record_node and build_definition summed over recorder threads,
//! recording_wait), ns per recorded node and the parked recorder threads the orchestration
//! thread woke during host_orch (each a futex system call on it). Host-only binds place the
//! entry tensors but do not copy them in (`arena_h2d` runs only with the device).
//!
//! Two sections compare arms bind by bind on one worker: the recording policy (dsv4-shaped,
//! recordings overlapping the orchestration or deferred to the commit) and the cache state a
//! bind starts from (bgemm Case0 and dsv4-shaped rebound with the same staged entry as in the
//! main section, or with the entry staged afresh before each bind, which for Case0 copies
//! 327 MB and evicts the mirror from every cache).
//!
//! Two more compare Graph policies: `retention` (Definitions retained across binds or recorded
//! every bind, graph_vector and dsv4-shaped on two workers binding in turn) and `commit_help`
//! (the commit recording the jobs no recorder has started, or waiting for the recorders, on
//! full binds).
//!
//! Every figure but `retention`'s retained arm is taken with retention off (every bind
//! records), so the recording figures keep their meaning.
//!
//! Not shown: the device run's own cost (see `scene`).
//!
//! Run: `cargo bench -p simpler-tests --bench bind` (`SIMPLER_BENCH_SMOKE=1`: bgemm Case1 in
//! Case0's place, one settling, two warm and one full bind per case, one bind per arm).

use simpler_host::hbg::{BindPhase, BindReplay, BindReport, GraphRetention, CONTROL_PLANE};
use simpler_host::scenes::{self, Prepared};
use simpler_host::{CallableHandle, ChipArg, ChipWorker, HostTensor};
use simpler_host::{RunOptions, Runtime};
use simpler_sim::{DeviceConfig, Topology};
use simpler_tests::alloc_count::{self as counter, Counting};
use simpler_tests::fixtures::host_only_bind;
use simpler_tests::measure::{process_minor_faults, report, report_summary, sized};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// `scene`'s `case` on its own worker (a2a3sim, 256 MiB heaps, 512 MiB of GM), its callable
/// registered and its recorder threads done standing their storage up (they do it as they
/// start; measure after that).
fn worker(scene: &str, case: &str) -> (Prepared, ChipWorker, CallableHandle) {
    let p = scenes::find(scene)
        .expect("scene")
        .prepare(case)
        .expect("case");
    let mut config = DeviceConfig::new(Topology::A2a3);
    config.ring.heap_bytes = 256 << 20;
    config.gm_bytes = 512 << 20;
    let mut w = ChipWorker::init(config).expect("device");
    // Retention off unless an arm turns it on: every bind records (the recording figures),
    // and the environment's default (the test suite's verification) does not reach them.
    w.set_graph_retention(GraphRetention::OFF)
        .expect("retention off");
    // Every bind runs its orchestration: the figures are of binds, not of replays.
    w.set_bind_replay(BindReplay {
        enabled: false,
        verify: false,
    });
    let h = w.register(p.callable.clone());
    w.wait_for_recorders();
    (p, w, h)
}

/// The figures' prefix for `scene`'s `case`.
fn figure_name(scene: &str, case: &str) -> String {
    if scene == "bgemm" {
        format!("bgemm_{case}")
    } else {
        scene.to_string()
    }
}

/// Microseconds.
fn us(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    simpler_host::alloc_count::install(counter::thread);
    // A smoke run leaves out bgemm Case0, whose 327 MB entry and golden take seconds.
    let big: &[_] = sized(&[("bgemm", "Case0")], &[]);
    let cases = [("bgemm", "Case1")]
        .iter()
        .chain(big)
        .chain(&[("graph_vector", "default"), ("dsv4_shaped", "default")]);
    for &(scene, case) in cases {
        let (p, mut w, h) = worker(scene, case);
        let args = || -> Vec<ChipArg> { p.tensors.iter().cloned().map(ChipArg::Host).collect() };
        // Cold. The warm host-only binds bind the same staged entry (a host-only bind leaves it
        // as it was), as a model served again binds its staged inputs; `entry_restaging`
        // compares this with staging the entry afresh before every bind.
        let mut a = args();
        host_only_bind(&mut w, h, &mut a, &p.scalars); // cold
        let (settle, warm) = (sized(10, 1), sized(20, 2));
        for _ in 0..settle {
            host_only_bind(&mut w, h, &mut a, &p.scalars);
        }
        // `args` and the control plane's phases, by name.
        let shown: Vec<BindPhase> = [BindPhase::Args]
            .into_iter()
            .chain(CONTROL_PLANE.iter().copied())
            .collect();
        let mut times = vec![Vec::with_capacity(warm); shown.len()];
        let mut control_plane = Vec::with_capacity(warm);
        let mut window = Vec::with_capacity(warm);
        let mut faults = Vec::with_capacity(warm);
        let mut thread_faults = Vec::with_capacity(warm);
        let mut args_faults = Vec::with_capacity(warm);
        let mut cpu_orch = Vec::with_capacity(warm);
        let mut per_task = Vec::with_capacity(warm);
        let mut per_node = Vec::with_capacity(warm);
        let mut nodes = 0;
        let mut sub: Vec<Vec<f64>> = (0..4).map(|_| Vec::with_capacity(warm)).collect();
        let mut wakes = Vec::with_capacity(warm);
        let mut allocs = Vec::with_capacity(warm);
        let mut thread_allocs = Vec::with_capacity(warm);
        let mut mirror_allocs = Vec::with_capacity(warm);
        let mut record_allocs = Vec::with_capacity(warm);
        let mut image = 0;
        let mut tasks = 0;
        let mut graphs = [0u64; 3];
        for _ in 0..warm {
            let faults_before = process_minor_faults();
            let before = counter::process();
            let bind = host_only_bind(&mut w, h, &mut a, &p.scalars);
            allocs.push((counter::process() - before) as f64);
            faults.push((process_minor_faults() - faults_before) as f64);
            thread_allocs.push(bind.phases().map(|(_, ph)| ph.allocs).sum::<u64>() as f64);
            mirror_allocs.push(
                (bind.phase(BindPhase::ArenaBuild).allocs + bind.phase(BindPhase::SharedMem).allocs)
                    as f64,
            );
            record_allocs.push(bind.graph_phases.record_allocs as f64);
            for (v, &p) in times.iter_mut().zip(&shown) {
                v.push(us(bind.phase(p).time));
            }
            let orch = bind.phase(BindPhase::HostOrch);
            cpu_orch.push(us(orch.cpu));
            per_task.push(orch.time.as_secs_f64() * 1e9 / bind.tasks as f64);
            let g = bind.graph_phases;
            wakes.push(g.host_orch_wakes as f64);
            if g.recorded_nodes > 0 {
                per_node.push(g.record_node.as_secs_f64() * 1e9 / g.recorded_nodes as f64);
                nodes = g.recorded_nodes;
            }
            for (k, d) in [
                g.graph_begin,
                g.record_node,
                g.build_definition,
                g.recording_wait,
            ]
            .iter()
            .enumerate()
            {
                sub[k].push(us(*d));
            }
            // The entry staging (args) copies the inputs and faults in proportion to their
            // size, so it is kept apart from the control plane.
            let cp = bind.control_plane();
            control_plane.push(us(cp.time));
            window.push(us(bind.bind_window()));
            thread_faults.push(cp.minflt as f64);
            args_faults.push(bind.phase(BindPhase::Args).minflt as f64);
            image = bind.image_bytes;
            tasks = bind.tasks;
            graphs = bind.graphs;
        }
        let name = figure_name(scene, case);
        for (v, phase) in times.iter_mut().zip(&shown) {
            report_summary("bind", &format!("{name}_{phase}"), v, "us");
        }
        report_summary(
            "bind",
            &format!("{name}_control_plane"),
            &mut control_plane,
            "us",
        );
        // The reference's host_orch: orchestration start to the end of the commit.
        report_summary("bind", &format!("{name}_bind_window"), &mut window, "us");
        if graphs[0] > 0 {
            for (k, label) in [
                "graph_begin",
                "record_node",
                "build_definition",
                "recording_wait",
            ]
            .iter()
            .enumerate()
            {
                report_summary("bind", &format!("{name}_{label}"), &mut sub[k], "us");
            }
            report_summary(
                "bind",
                &format!("{name}_record_node_per_node"),
                &mut per_node,
                "ns",
            );
            report(
                "bind",
                &format!("{name}_recorded_nodes"),
                nodes as f64,
                "nodes",
            );
            // Each a futex wake-up system call on the orchestration thread.
            report_summary(
                "bind",
                &format!("{name}_host_orch_recorder_wakes"),
                &mut wakes,
                "wakes",
            );
        }
        report_summary(
            "bind",
            &format!("{name}_host_orch_cpu"),
            &mut cpu_orch,
            "us",
        );
        report_summary(
            "bind",
            &format!("{name}_host_orch_per_task"),
            &mut per_task,
            "ns",
        );
        for (label, v) in [
            ("process", &mut faults),
            ("control_plane_binding_thread", &mut thread_faults),
            ("args_binding_thread", &mut args_faults),
        ] {
            report_summary(
                "bind",
                &format!("{name}_{label}_minflt_per_warm_bind"),
                v,
                "faults",
            );
        }
        report_summary(
            "bind",
            &format!("{name}_allocs_per_warm_bind"),
            &mut allocs,
            "allocs",
        );
        for (label, v) in [
            ("binding_thread", &mut thread_allocs),
            ("mirror", &mut mirror_allocs),
            ("recording_path", &mut record_allocs),
        ] {
            report_summary(
                "bind",
                &format!("{name}_{label}_allocs_per_warm_bind"),
                v,
                "allocs",
            );
        }
        report("bind", &format!("{name}_image_bytes"), image as f64, "B");
        report("bind", &format!("{name}_tasks"), tasks as f64, "tasks");
        report(
            "bind",
            &format!("{name}_graphs_recorded"),
            graphs[0] as f64,
            "graphs",
        );
        report(
            "bind",
            &format!("{name}_graphs_replayed"),
            graphs[1] as f64,
            "graphs",
        );
        report(
            "bind",
            &format!("{name}_graphs_inline"),
            graphs[2] as f64,
            "graphs",
        );
        // Full binds: the device runs the shipped image; the golden must hold.
        for _ in 0..sized(3, 1) {
            let mut a = args();
            let run = w
                .run(h, &mut a, &p.scalars, RunOptions::on(Runtime::Hbg))
                .expect("full bind");
            let tensors: Vec<HostTensor> = a
                .into_iter()
                .filter_map(|x| match x {
                    ChipArg::Host(t) => Some(t),
                    ChipArg::Device(_) => None,
                })
                .collect();
            assert!((p.check)(&tensors).pass, "{scene} {case}: golden");
            report(
                "bind",
                &format!("{name}_device_ms"),
                run.outcome.device.as_secs_f64() * 1e3,
                "ms",
            );
        }
    }
    recording_policy();
    entry_restaging();
    retention();
    commit_help();
}

/// Whether the commit should record the jobs no recorder thread has started itself
/// (`ChipWorker::set_commit_helps`): graph_vector and the dsv4-shaped scene, retention off (every
/// bind records), full binds (the device runs, so the recorder threads park between binds as
/// in a served model), the two policies alternating bind by bind on one worker (15 pairs after
/// 2 settling ones). Printed per arm (`commit_helps`, `commit_waits`): the bind window and the
/// commit's recording wait.
fn commit_help() {
    let (settle, binds) = (sized(2, 1), sized(15, 1));
    for scene in ["graph_vector", "dsv4_shaped"] {
        let (p, mut w, h) = worker(scene, "default");
        let mut figures = vec![[Vec::new(), Vec::new()]; 2];
        for round in 0..settle + binds {
            for (arm, f) in figures.iter_mut().enumerate() {
                w.set_commit_helps(arm == 0);
                let mut a: Vec<ChipArg> = p.tensors.iter().cloned().map(ChipArg::Host).collect();
                let run = w
                    .run(h, &mut a, &p.scalars, RunOptions::on(Runtime::Hbg))
                    .expect("full bind");
                let bind = run.bind.expect("an hbg bind");
                if round >= settle {
                    f[0].push(us(bind.bind_window()));
                    f[1].push(us(bind.graph_phases.recording_wait));
                }
            }
        }
        for (label, f) in ["commit_helps", "commit_waits"]
            .iter()
            .zip(figures.iter_mut())
        {
            for (metric, v) in ["bind_window", "recording_wait"].iter().zip(f.iter_mut()) {
                report_summary("bind", &format!("{scene}_{label}_{metric}"), v, "us");
            }
        }
    }
}

/// Graph Definitions retained across binds, against recorded every bind: graph_vector and the
/// dsv4-shaped scene on two workers, one with retention off (every bind records every
/// Definition: the cold-key case) and one with it on (verification off), binding in turn,
/// pair by pair (20 warm host-only pairs after 3 settling ones). Printed: the bind window of
/// each arm (`retention_off`, `retained`) and the pairs' off / on ratio; for the retained
/// arm, per warm bind, the nodes recorded, Definitions built, Definition bytes uploaded and
/// recorder threads woken (each must be 0), the whole process's heap allocations and minor
/// page faults, and the Graph submissions accepted by following the bind before
/// (`GraphPhases::followed`).
fn retention() {
    let (settle, binds) = (sized(3, 1), sized(20, 2));
    for scene in ["graph_vector", "dsv4_shaped"] {
        let (p, mut off, h_off) = worker(scene, "default");
        let (_, mut on, h_on) = worker(scene, "default");
        on.set_graph_retention(GraphRetention {
            verify: false,
            ..GraphRetention::default()
        })
        .expect("retention on");
        let mut a_off: Vec<ChipArg> = p.tensors.iter().cloned().map(ChipArg::Host).collect();
        let mut a_on: Vec<ChipArg> = p.tensors.iter().cloned().map(ChipArg::Host).collect();
        let mut window = [Vec::new(), Vec::new()];
        let mut speedup = Vec::new();
        let mut counts: Vec<Vec<f64>> = (0..7).map(|_| Vec::new()).collect();
        for round in 0..settle + binds {
            let b_off = host_only_bind(&mut off, h_off, &mut a_off, &p.scalars);
            let faults_before = process_minor_faults();
            let before = counter::process();
            let b_on: BindReport = host_only_bind(&mut on, h_on, &mut a_on, &p.scalars);
            let allocs = counter::process() - before;
            let faults = process_minor_faults() - faults_before;
            if round < settle {
                continue;
            }
            let (w_off, w_on) = (us(b_off.bind_window()), us(b_on.bind_window()));
            window[0].push(w_off);
            window[1].push(w_on);
            speedup.push(w_off / w_on);
            let g = b_on.graph_phases;
            for (v, x) in counts.iter_mut().zip([
                g.recorded_nodes,
                g.definitions_built,
                g.definition_bytes_uploaded,
                g.recorder_wakes,
                allocs,
                faults,
                g.followed,
            ]) {
                v.push(x as f64);
            }
            assert_eq!(
                [
                    g.recorded_nodes,
                    g.definitions_built,
                    g.definition_bytes_uploaded,
                    g.recorder_wakes
                ],
                [0; 4],
                "{scene}: a retained warm bind records, builds, uploads and wakes nothing"
            );
        }
        for (label, v) in ["retention_off", "retained"].iter().zip(window.iter_mut()) {
            report_summary("bind", &format!("{scene}_{label}_bind_window"), v, "us");
        }
        report_summary(
            "bind",
            &format!("{scene}_retained_speedup"),
            &mut speedup,
            "x",
        );
        for ((label, unit), v) in [
            ("recorded_nodes", "nodes"),
            ("definitions_built", "definitions"),
            ("definition_bytes_uploaded", "B"),
            ("recorder_wakes", "wakes"),
            ("process_allocs", "allocs"),
            ("process_minflt", "faults"),
            ("followed_submissions", "graphs"),
        ]
        .iter()
        .zip(counts.iter_mut())
        {
            report_summary(
                "bind",
                &format!("{scene}_retained_{label}_per_warm_bind"),
                v,
                unit,
            );
        }
    }
}

/// Whether Graph recordings should overlap the orchestration on this machine: the
/// dsv4-shaped scene with recordings running while the orchestration builds (the default: one
/// fewer at once than the CPUs) and with every recording deferred to `graph_commit`, the two
/// policies alternating bind by bind on one worker (20 warm host-only binds each). Printed per
/// arm: host_orch wall and the orchestration thread's CPU time in it, and host_orch +
/// graph_commit (the host's time to a committed graph).
fn recording_policy() {
    let (settle, binds) = (sized(2, 1), sized(20, 1));
    let (p, mut w, h) = worker("dsv4_shaped", "default");
    let mut a: Vec<ChipArg> = p.tensors.iter().cloned().map(ChipArg::Host).collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arms = [("overlapped", (cpus - 1).max(1)), ("deferred", 0)];
    let mut figures = vec![[Vec::new(), Vec::new(), Vec::new()]; arms.len()];
    for round in 0..settle + binds {
        for (arm, &(_, n)) in arms.iter().enumerate() {
            w.set_recordings_while_building(n);
            let bind = host_only_bind(&mut w, h, &mut a, &p.scalars);
            if round >= settle {
                let f = &mut figures[arm];
                let (orch, commit) = (
                    bind.phase(BindPhase::HostOrch),
                    bind.phase(BindPhase::GraphCommit),
                );
                f[0].push(us(orch.time));
                f[1].push(us(orch.cpu));
                f[2].push(us(orch.time + commit.time));
            }
        }
    }
    for ((label, _), f) in arms.iter().zip(figures.iter_mut()) {
        for (metric, v) in ["host_orch", "host_orch_cpu", "host_orch_plus_commit"]
            .iter()
            .zip(f.iter_mut())
        {
            report_summary("bind", &format!("dsv4_{label}_{metric}"), v, "us");
        }
    }
}

/// What the caches hold when a bind starts: a case bound again with the same staged entry
/// tensors (`rebound`: the caches hold what the previous bind left) and with the entry staged
/// afresh before each bind (`restaged`: for bgemm Case0 the harness clones 327 MB of inputs,
/// which evicts the mirror from every cache level), the two arms alternating bind by bind on
/// one worker (15 warm host-only binds each). Printed per arm: host_orch, the binding thread's
/// CPU time in it, and shared_mem (the live image's export).
fn entry_restaging() {
    let (settle, binds) = (sized(2, 1), sized(15, 1));
    for (scene, case) in [
        ("bgemm", sized("Case0", "Case1")),
        ("dsv4_shaped", "default"),
    ] {
        let name = figure_name(scene, case);
        let (p, mut w, h) = worker(scene, case);
        let stage = || -> Vec<ChipArg> { p.tensors.iter().cloned().map(ChipArg::Host).collect() };
        let mut staged = stage();
        // The restaged arm's previous entry is dropped when the next is staged, before its own
        // bind: freeing hundreds of MB evicts the caches too, and must not land before a
        // rebound bind.
        let mut fresh: Vec<ChipArg>;
        let mut figures = vec![[Vec::new(), Vec::new(), Vec::new()]; 2];
        for round in 0..settle + binds {
            for (arm, f) in figures.iter_mut().enumerate() {
                let a = if arm == 0 {
                    &mut staged
                } else {
                    fresh = stage();
                    &mut fresh
                };
                let bind = host_only_bind(&mut w, h, a, &p.scalars);
                if round >= settle {
                    let orch = bind.phase(BindPhase::HostOrch);
                    f[0].push(us(orch.time));
                    f[1].push(us(orch.cpu));
                    f[2].push(us(bind.phase(BindPhase::SharedMem).time));
                }
            }
        }
        for (label, f) in ["rebound", "restaged"].iter().zip(figures.iter_mut()) {
            for (metric, v) in ["host_orch", "host_orch_cpu", "shared_mem"]
                .iter()
                .zip(f.iter_mut())
            {
                report_summary("bind", &format!("{name}_{label}_{metric}"), v, "us");
            }
        }
    }
}
