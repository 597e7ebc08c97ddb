//! `run` on the hbg runtime: per round, one bind (host orchestration into the mirror, the image
//! shipped, the device scheduling), a table line per round; optionally the phase table over
//! the warm binds, the observed bind's trace, or host-only binds.

use super::{round_tensors, say, setup, RunArgs, Scene};
use crate::chip_worker::ChipWorker;
use crate::error::ErrorChain;
use crate::hbg::{BindPhase, BindReplay, GraphPhases, GraphRetention};
use crate::transport::{RunOptions, Runtime};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub(super) fn run(
    scenes: &[&dyn Scene],
    program: &str,
    args: &RunArgs,
    out: &mut dyn Write,
) -> Result<bool, String> {
    let RunArgs {
        rounds,
        platform,
        trace,
        phases,
        host_only,
        verify_graphs,
        no_retain_graphs,
        no_replay,
        observe,
        ..
    } = args;
    let (rounds, host_only) = (*rounds, *host_only);
    let (scene, case, prepared, config) = setup(scenes, program, args, Runtime::Hbg)?;
    let scene = scene.name();
    let clusters = config.clusters;
    let mut worker = ChipWorker::init(config).map_err(|e| ErrorChain(&e).to_string())?;
    // Set explicitly: the environment's default (the test suite's) does not reach the figures.
    let retention = if *no_retain_graphs {
        GraphRetention::OFF
    } else {
        GraphRetention {
            verify: *verify_graphs,
            ..GraphRetention::default()
        }
    };
    worker
        .set_graph_retention(retention)
        .map_err(|e| ErrorChain(&e).to_string())?;
    worker.set_bind_replay(BindReplay {
        enabled: !*no_replay,
        verify: *verify_graphs,
    });
    let handle = worker.register(prepared.callable.clone());
    say(
        out,
        format_args!(
            "{scene} {case} on {platform} ({clusters} clusters), hbg{}, {rounds} rounds",
            if host_only { " host-only" } else { "" }
        ),
    )?;
    say(
        out,
        format_args!(
            "{:>5} {:>10} {:>10} {:>12} {:>14} {:>8} {:>10}  result",
            "round", "host ms", "device ms", "host_orch ms", "bind_window ms", "tasks", "image KiB"
        ),
    )?;
    let mut all_pass = true;
    let mut binds = Vec::with_capacity(rounds);
    let mut kept = Vec::new();
    for round in 0..rounds {
        // A host-only bind leaves the entry as it was, so its rounds bind the first round's.
        let args = if host_only && round > 0 {
            &mut kept[..]
        } else {
            round_tensors(&prepared, &mut kept)
        };
        let sink = (round == *observe && trace.is_some()).then(|| Arc::new(Mutex::new(Vec::new())));
        let options = RunOptions {
            runtime: Runtime::Hbg,
            host_only,
            trace: sink.clone(),
            ..RunOptions::default()
        };
        let run = worker
            .run(handle, args, &prepared.scalars, options)
            .map_err(|e| format!("round {round}: {}", ErrorChain(&e)))?;
        let bind = run.bind.expect("an hbg run reports its bind");
        if let (Some(sink), Some(path)) = (&sink, trace) {
            let events = sink.lock().map_err(|_| "the trace failed".to_string())?;
            let text = crate::trace::to_chrome_json(&events, None);
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let verdict = if host_only {
            "built".to_string()
        } else {
            let check = (prepared.check)(args);
            all_pass &= check.pass;
            format!(
                "{} (max diff {:.3e})",
                if check.pass { "PASS" } else { "FAIL" },
                check.max_diff
            )
        };
        let verdict = if bind.replayed {
            format!("{verdict}, replayed")
        } else {
            verdict
        };
        say(
            out,
            format_args!(
                "{:>5} {:>10.3} {:>10.3} {:>12.3} {:>14.3} {:>8} {:>10.1}  {verdict}",
                round,
                run.host.as_secs_f64() * 1e3,
                run.outcome.device.as_secs_f64() * 1e3,
                bind.phase(BindPhase::HostOrch).time.as_secs_f64() * 1e3,
                bind.bind_window().as_secs_f64() * 1e3,
                bind.tasks,
                bind.image_bytes as f64 / 1024.0
            ),
        )?;
        binds.push(bind);
    }
    if *phases {
        if binds.len() < 2 {
            return Err("--phases needs at least 2 rounds (the first, cold, is dropped)".into());
        }
        say(
            out,
            format_args!(
                "bind phases over {} warm binds (the cold one dropped):",
                binds.len() - 1
            ),
        )?;
        say(
            out,
            format_args!(
                "{:<12} {:>10} {:>10} {:>10} {:>12} {:>10}",
                "phase", "min us", "median us", "max us", "cpu med us", "minflt med"
            ),
        )?;
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
            say(
                out,
                format_args!(
                    "{:<12} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>10}",
                    phase.name(),
                    t[0],
                    t[t.len() / 2],
                    t[t.len() - 1],
                    c[c.len() / 2],
                    f[f.len() / 2]
                ),
            )?;
        }
        // The reference's `host_orch`: orchestration start to the end of the commit.
        let mut w: Vec<f64> = binds[1..]
            .iter()
            .map(|b| b.bind_window().as_secs_f64() * 1e6)
            .collect();
        w.sort_by(f64::total_cmp);
        say(
            out,
            format_args!(
                "{:<12} {:>10.1} {:>10.1} {:>10.1}  (host_orch + graph_commit: the reference's host_orch)",
                "bind_window",
                w[0],
                w[w.len() / 2],
                w[w.len() - 1]
            ),
        )?;
        let median = |pick: fn(&GraphPhases) -> Duration| {
            let mut v: Vec<f64> = binds[1..]
                .iter()
                .map(|b| pick(&b.graph_phases).as_secs_f64() * 1e6)
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        say(
            out,
            format_args!(
                "graphs (median us): graph_begin {:.1} (orchestration thread), record_node {:.1} and build_definition {:.1} (recorder threads, summed), recording_wait {:.1} (in graph_commit)",
                median(|g| g.graph_begin),
                median(|g| g.record_node),
                median(|g| g.build_definition),
                median(|g| g.recording_wait)
            ),
        )?;
    }
    if !host_only {
        say(
            out,
            format_args!("{}", if all_pass { "PASS" } else { "FAIL" }),
        )?;
    }
    Ok(all_pass)
}
