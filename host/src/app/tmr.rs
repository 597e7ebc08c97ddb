//! `run` on the tmr runtime: the rounds on one chip, the observed one's graph, trace, swimlane
//! and scheduler report written when asked, a table line per round.

use super::{round_tensors, say, setup, RunArgs, Scene};
use crate::chip_worker::ChipWorker;
use crate::dag::DagRecorder;
use crate::error::ErrorChain;
use crate::transport::{RunOptions, Runtime, SharedHook, TraceSink};
use std::io::Write;
use std::sync::{Arc, Mutex};

pub(super) fn run(
    scenes: &[&dyn Scene],
    program: &str,
    args: &RunArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<bool, String> {
    let RunArgs {
        rounds,
        platform,
        dag,
        dag_format: format,
        trace,
        swimlane,
        report: want_report,
        observe,
        ..
    } = args;
    let rounds = *rounds;
    let traced = trace.is_some() || swimlane.is_some() || *want_report;
    if dag.is_some() && format != "json" && format != "dot" {
        return Err(format!("unknown --dag-format {format} (json, dot)"));
    }
    let (scene, case, prepared, config) = setup(scenes, program, args, Runtime::Tmr)?;
    let scene = scene.name();
    let topology = config.topology;
    log::info!("{scene} {case} on {platform}: {} clusters", config.clusters);
    let clusters = config.clusters;
    let mut worker = ChipWorker::init(config).map_err(|e| ErrorChain(&e).to_string())?;
    let handle = worker.register(prepared.callable.clone());
    say(
        out,
        format_args!("{scene} {case} on {platform} ({clusters} clusters), {rounds} rounds"),
    )?;
    say(
        out,
        format_args!(
            "{:>5} {:>10} {:>10} {:>10} {:>8} {:>8} {:>12}  result",
            "round", "host ms", "device ms", "orch ms", "tasks", "edges", "tasks/s"
        ),
    )?;
    let mut all_pass = true;
    let mut kept = Vec::new();
    for round in 0..rounds {
        let tensors = round_tensors(&prepared, &mut kept);
        let recorder = (round == *observe && (dag.is_some() || traced))
            .then(|| Arc::new(Mutex::new(DagRecorder::new())));
        let sink: Option<TraceSink> =
            (round == *observe && traced).then(|| Arc::new(Mutex::new(Vec::new())));
        let options = RunOptions {
            hook: recorder.clone().map(|r| r as SharedHook),
            trace: sink.clone(),
            ..RunOptions::default()
        };
        let report = worker
            .run(handle, tensors, &prepared.scalars, options)
            .map_err(|e| format!("round {round}: {}", ErrorChain(&e)))?;
        if let (Some(sink), Some(recorder)) = (&sink, &recorder) {
            let events = sink.lock().map_err(|_| "the trace failed".to_string())?;
            let graph = recorder
                .lock()
                .map_err(|_| "the graph recorder failed".to_string())?;
            if let Some(path) = trace {
                let text = crate::trace::to_chrome_json(&events, Some(&graph));
                std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if let Some(path) = swimlane {
                let text = crate::trace::to_swimlane_svg(&events, &graph);
                std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if *want_report {
                let schedulers = topology.schedulers() as u32;
                write!(out, "{}", crate::trace::report(&events, &graph, schedulers))
                    .map_err(|e| format!("writing the output: {e}"))?;
            }
            if report.outcome.trace_dropped > 0 {
                let _ = writeln!(
                    err,
                    "trace: {} events dropped (buffers full)",
                    report.outcome.trace_dropped
                );
            }
        }
        if let (Some(recorder), Some(path)) = (&recorder, dag) {
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
        let check = (prepared.check)(tensors);
        all_pass &= check.pass;
        let o = report.outcome;
        say(
            out,
            format_args!(
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
            ),
        )?;
    }
    say(
        out,
        format_args!("{}", if all_pass { "PASS" } else { "FAIL" }),
    )?;
    Ok(all_pass)
}
