//! `simpler`: run the example scenes on the bundled simulator.
//!
//! `simpler list` shows the scenes and their cases; `simpler run <scene>` runs one case for a
//! number of rounds on one simulated chip, checks every round against the golden and prints
//! a timing table. `RUST_LOG` controls logging.

use clap::{Parser, Subcommand};
use simpler_host::dag::DagRecorder;
use simpler_host::scenes::{self, Prepared};
use simpler_host::{ChipWorker, ErrorChain, RunOptions, Runtime, SharedHook, TraceSink};
use simpler_sim::{DeviceConfig, Topology};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "simpler",
    version,
    about = "Run task graphs on the simulated NPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the scenes and their cases.
    List,
    /// Run a scene's case, check it against its golden, and time it.
    Run {
        /// The scene (see `simpler list`).
        scene: String,
        /// The case (default: the scene's first).
        #[arg(long)]
        case: Option<String>,
        /// Rounds to run on the same chip (at least 1).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The simulated platform: a2a3sim or a5sim.
        #[arg(long, default_value = "a2a3sim")]
        platform: String,
        /// Clusters of 1 AIC + 2 AIV (default 8; a2a3sim has up to 24, a5sim up to 36).
        #[arg(long)]
        clusters: Option<u32>,
        /// Write the first round's task graph to this file.
        #[arg(long)]
        dag: Option<std::path::PathBuf>,
        /// The graph's format: `json` or `dot`.
        #[arg(long, default_value = "json")]
        dag_format: String,
        /// Write the first round's trace (Chrome trace-event JSON, for Perfetto) to this file.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Draw the first round as an SVG swimlane (one lane per core) to this file.
        #[arg(long)]
        swimlane: Option<std::path::PathBuf>,
        /// Print a scheduler report for the first round.
        #[arg(long)]
        report: bool,
        /// The runtime: `tmr` (graph built on the device while it runs) or `hbg` (built on
        /// the host into a mirror, shipped once).
        #[arg(long, default_value = "tmr")]
        runtime: String,
        /// hbg: print min / median / max per bind phase over the warm rounds (the first,
        /// cold, dropped), with minor page faults.
        #[arg(long)]
        phases: bool,
        /// hbg: build and measure the image only; skip the device run (no golden check). The
        /// entry tensors are staged once and bound every round (a host-only bind leaves them
        /// as they were), so each bind starts from the caches the previous one left.
        #[arg(long)]
        host_only: bool,
    },
    /// Level 3: vector_example on chips in child processes, chip 0's output feeding chip 1
    /// through a shared buffer, and a SUB worker summing the result.
    L3 {
        /// Chip children: the scene runs on exactly 2 (chip 0 feeds chip 1).
        #[arg(long, default_value_t = 2)]
        chips: usize,
        /// Rounds on the same Worker (at least 1).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
}

const ROUNDS_ZERO: &str = "--rounds 0 runs nothing: give at least 1";

/// The chips `simpler l3` runs: the scene feeds chip 0's output into chip 1, so it runs on
/// exactly two (a third would be forked and sit idle).
const L3_CHIPS: usize = 2;

/// Refuses an `l3` command line the scene cannot run as asked, instead of running another.
fn check_l3(chips: usize, rounds: usize) -> Result<(), String> {
    if rounds == 0 {
        return Err(ROUNDS_ZERO.into());
    }
    if chips != L3_CHIPS {
        return Err(format!(
            "--chips {chips}: l3_vector runs on exactly {L3_CHIPS} chips (chip 0 feeds chip 1)"
        ));
    }
    Ok(())
}

/// Exit status of a run: 0 when every check passed, 1 when a check failed,
/// 2 when the run could not be carried out at all.
fn exit(outcome: Result<bool, String>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    env_logger::init();
    match Cli::parse().command {
        Command::List => {
            let l3 = "l3_vector";
            let width = scenes::all()
                .iter()
                .map(|s| s.name().len())
                .fold(l3.len(), usize::max);
            for s in scenes::all() {
                println!("{:<width$} {}", s.name(), s.cases().join(" "));
            }
            println!("{l3:<width$} (simpler l3) two chips + a SUB worker in child processes");
            ExitCode::SUCCESS
        }
        Command::L3 { chips, rounds } => {
            exit(check_l3(chips, rounds).and_then(|()| run_l3(chips, rounds)))
        }
        Command::Run { rounds: 0, .. } => exit(Err(ROUNDS_ZERO.into())),
        Command::Run {
            scene,
            case,
            rounds,
            platform,
            clusters,
            runtime,
            phases,
            host_only,
            trace,
            ..
        } if runtime == "hbg" => exit(run_hbg(
            &scene,
            case.as_deref(),
            rounds,
            &platform,
            clusters,
            HbgOutputs {
                phases,
                host_only,
                trace,
            },
        )),
        Command::Run {
            scene,
            case,
            rounds,
            platform,
            clusters,
            dag,
            dag_format,
            trace,
            swimlane,
            report,
            runtime,
            ..
        } if runtime == "tmr" => exit(run(
            &scene,
            case.as_deref(),
            rounds,
            &platform,
            clusters,
            dag.zip(Some(dag_format)),
            Outputs {
                trace,
                swimlane,
                report,
            },
        )),
        Command::Run { runtime, .. } => {
            eprintln!("error: unknown --runtime {runtime} (tmr, hbg)");
            ExitCode::from(2)
        }
    }
}

/// The scene's case, prepared, and a device configuration for it: the platform's topology,
/// the clusters asked for, and GM for the entry tensors with room to spare beyond the heaps.
fn setup<'c>(
    scene: &str,
    case: Option<&'c str>,
    platform: &str,
    clusters: Option<u32>,
) -> Result<(&'c str, Prepared, DeviceConfig), String> {
    let topology = match platform {
        "a2a3sim" => Topology::A2a3,
        "a5sim" => Topology::A5,
        other => return Err(format!("unknown platform {other} (a2a3sim, a5sim)")),
    };
    let found =
        scenes::find(scene).ok_or_else(|| format!("unknown scene {scene}; see `simpler list`"))?;
    let case: &'c str = match case {
        Some(c) => c,
        None => found.cases()[0],
    };
    let prepared = found.prepare(case).ok_or_else(|| {
        format!(
            "{scene} has no case {case}; cases: {}",
            found.cases().join(" ")
        )
    })?;
    let mut config = DeviceConfig::new(topology);
    if let Some(c) = clusters {
        config.clusters = c;
    }
    config
        .check_clusters()
        .map_err(|e| format!("--clusters: {}", ErrorChain(&e)))?;
    let entry: u64 = prepared
        .tensors
        .iter()
        .map(|t| t.data.len() as u64 + 1024)
        .sum();
    config.gm_bytes = config.gm_bytes.max(entry + (64 << 20));
    Ok((case, prepared, config))
}

/// Heap per ring for hbg runs (forward-only: a graph's intermediates all stay live).
const HBG_HEAP_BYTES: u64 = 256 << 20;

/// Runs a scene on the hbg runtime: per round, one bind (host orchestration into the mirror,
/// the image shipped, the device scheduling); optionally the phase table over warm binds.
/// What an hbg run prints or writes besides its per-round lines.
struct HbgOutputs {
    /// Per-phase statistics over the warm binds.
    phases: bool,
    /// Build the image only.
    host_only: bool,
    /// The first bind's trace: its phases on the host track, and the device's events.
    trace: Option<std::path::PathBuf>,
}

fn run_hbg(
    scene: &str,
    case: Option<&str>,
    rounds: usize,
    platform: &str,
    clusters: Option<u32>,
    out: HbgOutputs,
) -> Result<bool, String> {
    let HbgOutputs {
        phases,
        host_only,
        trace,
    } = out;
    use simpler_host::hbg::BindPhase;
    use simpler_host::ChipArg;
    let (case, prepared, mut config) = setup(scene, case, platform, clusters)?;
    // Nothing retires while the host builds: each ring's heap must hold the whole graph's
    // intermediates (the reference runs dsv4 with a 2 GiB heap).
    config.ring.heap_bytes = HBG_HEAP_BYTES;
    let mut worker = ChipWorker::init(config).map_err(|e| ErrorChain(&e).to_string())?;
    let handle = worker.register_callable(
        prepared.orch.clone(),
        prepared.kernels.clone(),
        prepared.signature.clone(),
    );
    println!(
        "{scene} {case} on {platform} ({} clusters), hbg{}, {rounds} rounds",
        config.clusters,
        if host_only { " host-only" } else { "" }
    );
    println!(
        "{:>5} {:>10} {:>10} {:>12} {:>8} {:>10}  result",
        "round", "host ms", "device ms", "host_orch ms", "tasks", "image KiB"
    );
    let mut all_pass = true;
    let mut binds = Vec::with_capacity(rounds);
    let stage = || -> Vec<ChipArg> {
        prepared
            .tensors
            .iter()
            .cloned()
            .map(ChipArg::Host)
            .collect()
    };
    let mut staged = None;
    for round in 0..rounds {
        let mut args = staged.take().unwrap_or_else(stage);
        let sink = (round == 0 && trace.is_some())
            .then(|| std::sync::Arc::new(std::sync::Mutex::new(Vec::new())));
        let options = RunOptions {
            runtime: Runtime::Hbg,
            host_only,
            trace: sink.clone(),
            ..RunOptions::default()
        };
        let run = worker
            .run(handle, &mut args, &prepared.scalars, options)
            .map_err(|e| format!("round {round}: {}", ErrorChain(&e)))?;
        let bind = run.bind.expect("an hbg run reports its bind");
        if let (Some(sink), Some(path)) = (&sink, &trace) {
            let events = sink.lock().map_err(|_| "the trace failed".to_string())?;
            let text = simpler_host::trace::to_chrome_json(&events, None);
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let verdict = if host_only {
            staged = Some(args);
            "built".to_string()
        } else {
            let tensors: Vec<_> = args.into_iter().filter_map(ChipArg::into_host).collect();
            let check = (prepared.check)(&tensors);
            all_pass &= check.pass;
            format!(
                "{} (max diff {:.3e})",
                if check.pass { "PASS" } else { "FAIL" },
                check.max_diff
            )
        };
        println!(
            "{:>5} {:>10.3} {:>10.3} {:>12.3} {:>8} {:>10.1}  {verdict}",
            round,
            run.host.as_secs_f64() * 1e3,
            run.outcome.device.as_secs_f64() * 1e3,
            bind.phase(BindPhase::HostOrch).time.as_secs_f64() * 1e3,
            bind.tasks,
            bind.image_bytes as f64 / 1024.0
        );
        binds.push(bind);
    }
    if phases {
        if binds.len() < 2 {
            return Err("--phases needs at least 2 rounds (the first, cold, is dropped)".into());
        }
        println!(
            "bind phases over {} warm binds (the cold one dropped):",
            binds.len() - 1
        );
        println!(
            "{:<12} {:>10} {:>10} {:>10} {:>12} {:>10}",
            "phase", "min us", "median us", "max us", "cpu med us", "minflt med"
        );
        for phase in BindPhase::ALL {
            let mut t: Vec<f64> = binds[1..]
                .iter()
                .map(|b| b.phase(phase).time.as_secs_f64() * 1e6)
                .collect();
            let mut c: Vec<f64> = binds[1..]
                .iter()
                .map(|b| b.phase(phase).cpu.as_secs_f64() * 1e6)
                .collect();
            let mut f: Vec<u64> = binds[1..].iter().map(|b| b.phase(phase).minflt).collect();
            t.sort_by(f64::total_cmp);
            c.sort_by(f64::total_cmp);
            f.sort_unstable();
            println!(
                "{:<12} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>10}",
                phase.name(),
                t[0],
                t[t.len() / 2],
                t[t.len() - 1],
                c[c.len() / 2],
                f[f.len() / 2]
            );
        }
        let median = |pick: fn(&simpler_host::hbg::GraphPhases) -> std::time::Duration| {
            let mut v: Vec<f64> = binds[1..]
                .iter()
                .map(|b| pick(&b.graph_phases).as_secs_f64() * 1e6)
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "graphs (median us): graph_begin {:.1} (orchestration thread), record_node {:.1} and build_definition {:.1} (recorder threads, summed), recording_wait {:.1} (in graph_commit)",
            median(|g| g.graph_begin),
            median(|g| g.record_node),
            median(|g| g.build_definition),
            median(|g| g.recording_wait)
        );
    }
    if !host_only {
        println!("{}", if all_pass { "PASS" } else { "FAIL" });
    }
    Ok(all_pass)
}

/// Runs the L3 scene for `rounds` rounds on one Worker and closes it.
fn run_l3(chips: usize, rounds: usize) -> Result<bool, String> {
    use scenes::l3::L3Vector;
    let setup = std::time::Instant::now();
    let mut scene = L3Vector::new(chips).map_err(|e| ErrorChain(&e).to_string())?;
    println!(
        "l3_vector: {} chip children + 1 SUB child forked in {:.1} ms",
        scene.worker().chips(),
        setup.elapsed().as_secs_f64() * 1e3
    );
    println!(
        "{:>5} {:>6} {:>10} {:>12} {:>12} {:>6}",
        "round", "tasks", "wall_ms", "chip0_diff", "chip1_diff", "result"
    );
    let mut all = true;
    for round in 0..rounds {
        let r = scene.round(round).map_err(|e| ErrorChain(&e).to_string())?;
        all &= r.pass();
        println!(
            "{:>5} {:>6} {:>10.3} {:>12.3e} {:>12.3e} {:>6}",
            round,
            r.summary.tasks,
            r.wall.as_secs_f64() * 1e3,
            r.chip0.max_diff,
            r.chip1.max_diff,
            if r.pass() { "PASS" } else { "FAIL" }
        );
    }
    scene
        .worker_mut()
        .close(std::time::Duration::from_secs(30))
        .map_err(|e| ErrorChain(&e).to_string())?;
    println!("{}", if all { "PASS" } else { "FAIL" });
    Ok(all)
}

/// What to write besides the timing table.
struct Outputs {
    trace: Option<std::path::PathBuf>,
    swimlane: Option<std::path::PathBuf>,
    report: bool,
}

fn run(
    scene: &str,
    case: Option<&str>,
    rounds: usize,
    platform: &str,
    clusters: Option<u32>,
    dag: Option<(std::path::PathBuf, String)>,
    outputs: Outputs,
) -> Result<bool, String> {
    let Outputs {
        trace,
        swimlane,
        report: want_report,
    } = outputs;
    let traced = trace.is_some() || swimlane.is_some() || want_report;
    if let Some((_, format)) = &dag {
        if format != "json" && format != "dot" {
            return Err(format!("unknown --dag-format {format} (json, dot)"));
        }
    }
    let (case, prepared, config) = setup(scene, case, platform, clusters)?;
    let topology = config.topology;
    log::info!("{scene} {case} on {platform}: {} clusters", config.clusters);
    let mut worker = ChipWorker::init(config).map_err(|e| ErrorChain(&e).to_string())?;
    let handle = worker.register_callable(
        prepared.orch.clone(),
        prepared.kernels.clone(),
        prepared.signature.clone(),
    );
    println!(
        "{scene} {case} on {platform} ({} clusters), {rounds} rounds",
        config.clusters
    );
    println!(
        "{:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>12}  result",
        "round", "host ms", "device ms", "orch ms", "tasks", "edges", "tasks/s"
    );
    let mut all_pass = true;
    for round in 0..rounds {
        let mut tensors = prepared.tensors.clone();
        let recorder = (round == 0 && (dag.is_some() || traced))
            .then(|| std::sync::Arc::new(std::sync::Mutex::new(DagRecorder::new())));
        let sink: Option<TraceSink> =
            (round == 0 && traced).then(|| std::sync::Arc::new(std::sync::Mutex::new(Vec::new())));
        let options = RunOptions {
            hook: recorder.clone().map(|r| r as SharedHook),
            trace: sink.clone(),
            ..RunOptions::default()
        };
        let report = worker
            .run(handle, &mut tensors, &prepared.scalars, options)
            .map_err(|e| format!("round {round}: {}", ErrorChain(&e)))?;
        if let (Some(sink), Some(recorder)) = (&sink, &recorder) {
            let events = sink.lock().map_err(|_| "the trace failed".to_string())?;
            let graph = recorder
                .lock()
                .map_err(|_| "the graph recorder failed".to_string())?;
            if let Some(path) = &trace {
                let text = simpler_host::trace::to_chrome_json(&events, Some(&graph));
                std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if let Some(path) = &swimlane {
                let text = simpler_host::trace::to_swimlane_svg(&events, &graph);
                std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if want_report {
                let schedulers = topology.schedulers() as u32;
                print!(
                    "{}",
                    simpler_host::trace::report(&events, &graph, schedulers)
                );
            }
            if report.outcome.trace_dropped > 0 {
                eprintln!(
                    "trace: {} events dropped (buffers full)",
                    report.outcome.trace_dropped
                );
            }
        }
        if let (Some(recorder), Some((path, format))) = (&recorder, &dag) {
            let graph = recorder
                .lock()
                .map_err(|_| "the graph recorder failed".to_string())?;
            let text = if format == "dot" {
                graph.to_dot()
            } else {
                graph.to_json()
            };
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let check = (prepared.check)(&tensors);
        all_pass &= check.pass;
        let o = report.outcome;
        println!(
            "{:>5} {:>10.3} {:>10.3} {:>10.3} {:>8} {:>8} {:>12.0}  {} (max diff {:.3e})",
            round,
            report.host.as_secs_f64() * 1e3,
            o.device.as_secs_f64() * 1e3,
            o.orchestration.as_secs_f64() * 1e3,
            o.tasks,
            o.edges,
            o.tasks as f64 / o.device.as_secs_f64().max(1e-9),
            if check.pass { "PASS" } else { "FAIL" },
            check.max_diff
        );
    }
    println!("{}", if all_pass { "PASS" } else { "FAIL" });
    Ok(all_pass)
}
