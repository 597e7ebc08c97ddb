//! `simpler`: run the project's scenes on the bundled simulator.
//!
//! The command is [`simpler_host::app`] on [`scenes::all`] (`simpler list` shows the scenes and
//! their cases; `simpler run <scene>` runs one case for a number of rounds on one simulated
//! chip, checks every round against the golden and prints a timing table; `simpler check`
//! runs every case once), with one subcommand of the project's own: `simpler l3`, the level-3
//! scene, which forks chips and a SUB worker into child processes. `RUST_LOG` controls
//! logging.

use clap::Subcommand;
use simpler_host::app::{self, Extension, ROUNDS_ZERO};
use simpler_host::scenes;
use simpler_host::ErrorChain;
use std::io::Write;
use std::process::ExitCode;

/// The project's subcommands beside the framework's.
#[derive(Subcommand)]
enum Project {
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
    /// Level 4 (build with `--features mpi`, run under `mpirun -np 3`): a data-parallel step
    /// on two worker ranks' L3 Workers, gathered and reduced on rank 0.
    L4 {
        /// Rounds on the same group (at least 1).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Also run the refusal and failure checks.
        #[arg(long)]
        checks: bool,
        /// Also print the benchmark lines.
        #[arg(long)]
        bench: bool,
        /// After the rounds, kill rank 2 and check the group ends with a bounded error.
        #[arg(long)]
        kill: bool,
        /// How long rank 0 waits for a rank's answer, in milliseconds.
        #[arg(long, default_value_t = 20_000)]
        reply_timeout_ms: u64,
    },
}

impl Extension for Project {
    const LISTED: &'static [(&'static str, &'static str)] = &[
        (
            "l3_vector",
            "(simpler l3) two chips + a SUB worker in child processes",
        ),
        (
            "l4",
            "(mpirun -np 3 simpler l4; --features mpi) 2 worker ranks x 2 chips, gathered on rank 0",
        ),
    ];

    fn run(self, out: &mut dyn Write) -> Result<bool, String> {
        match self {
            Project::L3 { chips, rounds } => {
                check_l3(chips, rounds).and_then(|()| run_l3(chips, rounds, out))
            }
            Project::L4 {
                rounds,
                checks,
                bench,
                kill,
                reply_timeout_ms,
            } => {
                if rounds == 0 {
                    return Err(ROUNDS_ZERO.into());
                }
                let opts = L4Opts {
                    rounds,
                    checks,
                    bench,
                    kill,
                    reply_timeout: std::time::Duration::from_millis(reply_timeout_ms),
                };
                run_l4(opts, out)
            }
        }
    }
}

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

/// A write to the output that failed, as the command's refusal.
fn written(e: std::io::Error) -> String {
    format!("writing the output: {e}")
}

/// What `simpler l4` was asked to do.
// Read only by the MPI build's `run_l4`; the default build refuses the command.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
struct L4Opts {
    rounds: usize,
    checks: bool,
    bench: bool,
    kill: bool,
    reply_timeout: std::time::Duration,
}

#[cfg(not(feature = "mpi"))]
fn run_l4(_: L4Opts, _: &mut dyn Write) -> Result<bool, String> {
    Err("simpler l4 needs a build with --features mpi (and Open MPI installed)".into())
}

/// Runs the L4 scene on this rank. Only rank 0 writes; a worker rank serves until rank 0
/// closes the group.
#[cfg(feature = "mpi")]
fn run_l4(opts: L4Opts, out: &mut dyn Write) -> Result<bool, String> {
    use scenes::l4::L4Scene;
    use simpler_host::l4::{L4Config, L4Error};
    let config = L4Config {
        reply_timeout: opts.reply_timeout,
        ..L4Config::default()
    };
    let e = |e: L4Error| ErrorChain(&e).to_string();
    let Some(mut scene) = L4Scene::start(config).map_err(e)? else {
        return Ok(true);
    };
    let mut pass = true;
    writeln!(
        out,
        "l4: rank 0 orchestrating {} ranks",
        scene.worker().size()
    )
    .map_err(written)?;
    for round in 0..opts.rounds {
        let r = scene.round(round).map_err(e)?;
        let parts: Vec<String> = r
            .partials
            .iter()
            .map(|(rank, got, want)| format!("rank {rank} {got:.3} (golden {want:.3})"))
            .collect();
        writeln!(
            out,
            "round {round}: {} | total {:.3} (golden {:.3}) | {:.1} ms | {}",
            parts.join(", "),
            r.total.0,
            r.total.1,
            r.wall.as_secs_f64() * 1e3,
            if r.pass() { "PASS" } else { "FAIL" }
        )
        .map_err(written)?;
        pass &= r.pass();
    }
    if opts.checks {
        match scene.checks() {
            Ok(lines) => {
                for l in lines {
                    writeln!(out, "check {l}").map_err(written)?;
                }
            }
            Err(m) => {
                writeln!(out, "check FAILED: {m}").map_err(written)?;
                pass = false;
            }
        }
        // The group still works after the refusals and the failed task.
        let r = scene.round(opts.rounds).map_err(e)?;
        writeln!(
            out,
            "check round after the checks: {}",
            if r.pass() { "PASS" } else { "FAIL" }
        )
        .map_err(written)?;
        pass &= r.pass();
    }
    if opts.bench {
        for l in scene.bench().map_err(e)? {
            writeln!(out, "{l}").map_err(written)?;
        }
    }
    if opts.kill {
        // Rank 2 is killed inside a run, ahead of a task sent to it; rank 1's task is
        // independent and must still complete.
        let t0 = std::time::Instant::now();
        let empty = simpler_host::task_args::TaskArgs::new();
        let r = scene.worker().run_collect(|o| {
            o.submit_sub(1, scenes::l4::NOP, &empty)?;
            o.kill_rank(2)?;
            o.submit_sub(2, scenes::l4::NOP, &empty)?;
            Ok(())
        });
        let waited = t0.elapsed();
        let lost_ok = match &r {
            Ok((s, errors)) => {
                s.tasks == 2
                    && errors.len() == 1
                    && matches!(errors[0], L4Error::RankLost { rank: 2, .. })
            }
            Err(_) => false,
        };
        writeln!(
            out,
            "kill: rank 2 killed mid-run; the run ended in {:.2} s with {:?}: {}",
            waited.as_secs_f64(),
            r.as_ref().map(|(_, errs)| errs
                .iter()
                .map(|x| ErrorChain(x).to_string())
                .collect::<Vec<_>>()),
            if lost_ok { "ok" } else { "WRONG" }
        )
        .map_err(written)?;
        let again = scene.round(0);
        let terminal_ok = matches!(again, Err(L4Error::GroupTerminal { lost: Some(2) }));
        writeln!(
            out,
            "kill: the next round is refused ({}): {}",
            again
                .as_ref()
                .err()
                .map_or("no error".into(), |x| ErrorChain(x).to_string()),
            if terminal_ok { "ok" } else { "WRONG" }
        )
        .map_err(written)?;
        let t0 = std::time::Instant::now();
        let closed = scene.worker().close();
        writeln!(
            out,
            "kill: close() {} in {:.2} s",
            closed
                .as_ref()
                .map_or_else(|x| ErrorChain(x).to_string(), |()| "ok".into()),
            t0.elapsed().as_secs_f64()
        )
        .map_err(written)?;
        pass &= lost_ok && terminal_ok && closed.is_ok();
        writeln!(out, "l4: {}", if pass { "PASS" } else { "FAIL" }).map_err(written)?;
        return Ok(pass);
    }
    let closed = scene.worker().close();
    writeln!(
        out,
        "close: {}",
        closed
            .as_ref()
            .map_or_else(|x| ErrorChain(x).to_string(), |()| "ok".into())
    )
    .map_err(written)?;
    pass &= closed.is_ok();
    writeln!(out, "l4: {}", if pass { "PASS" } else { "FAIL" }).map_err(written)?;
    Ok(pass)
}

fn main() -> ExitCode {
    app::main_with::<Project>(scenes::all())
}

/// Runs the L3 scene for `rounds` rounds on one Worker and closes it.
fn run_l3(chips: usize, rounds: usize, out: &mut dyn Write) -> Result<bool, String> {
    use scenes::l3::L3Vector;
    let setup = std::time::Instant::now();
    let mut scene = L3Vector::new(chips).map_err(|e| ErrorChain(&e).to_string())?;
    writeln!(
        out,
        "l3_vector: {} chip children + 1 SUB child forked in {:.1} ms",
        scene.worker().chips(),
        setup.elapsed().as_secs_f64() * 1e3
    )
    .map_err(written)?;
    writeln!(
        out,
        "{:>5} {:>6} {:>10} {:>12} {:>12} {:>6}",
        "round", "tasks", "wall_ms", "chip0_diff", "chip1_diff", "result"
    )
    .map_err(written)?;
    let mut all = true;
    for round in 0..rounds {
        let r = scene.round(round).map_err(|e| ErrorChain(&e).to_string())?;
        all &= r.pass();
        writeln!(
            out,
            "{:>5} {:>6} {:>10.3} {:>12.3e} {:>12.3e} {:>6}",
            round,
            r.summary.tasks,
            r.wall.as_secs_f64() * 1e3,
            r.chip0.max_diff,
            r.chip1.max_diff,
            if r.pass() { "PASS" } else { "FAIL" }
        )
        .map_err(written)?;
    }
    scene
        .worker_mut()
        .close(std::time::Duration::from_secs(30))
        .map_err(|e| ErrorChain(&e).to_string())?;
    writeln!(out, "{}", if all { "PASS" } else { "FAIL" }).map_err(written)?;
    Ok(all)
}
