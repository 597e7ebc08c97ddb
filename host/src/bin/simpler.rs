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
}

impl Extension for Project {
    const LISTED: &'static [(&'static str, &'static str)] = &[(
        "l3_vector",
        "(simpler l3) two chips + a SUB worker in child processes",
    )];

    fn run(self, out: &mut dyn Write) -> Result<bool, String> {
        match self {
            Project::L3 { chips, rounds } => {
                check_l3(chips, rounds).and_then(|()| run_l3(chips, rounds, out))
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
