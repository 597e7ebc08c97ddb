//! The `simpler` command for any program's scenes: one call gives a crate's own [`Scene`]s
//! `list`, `run` (with `--case`, `--rounds`, `--runtime`, `--platform`, `--clusters`, `--dag`,
//! `--trace`, `--swimlane`, `--report`, `--phases`, `--host-only`, `--verify-graphs`,
//! `--no-retain-graphs`, `--no-replay`) and `check`, and
//! [`check_scene`] runs every case of a scene from a test.
//!
//! - [`main`]: the whole command for `scenes`, from the process's arguments; a program's `main`
//!   is this one call. [`main_with`] adds a program's own subcommands ([`Extension`]).
//! - [`run_cli`] / [`run_cli_with`]: the same on a given argument list, writing to given
//!   streams, so a test runs the command in-process and reads what it printed.
//! - [`check_case`] / [`check_scene`] / [`assert_scene`]: a case's rounds (or every case once,
//!   on a fresh chip) against the golden and the counts the scene states, with a
//!   [`CaseFailure`] that names the scene, the case, the round and what differed.
//!
//! The subcommands:
//!
//! - `list`: each scene and its cases (the first is the default), then an extension's lines;
//! - `run <scene>`: one case for `--rounds` rounds on one simulated chip, every round checked
//!   against the golden, a timing table per round;
//! - `check [scene]...`: every case of the scenes named (all of them when none is) once, each
//!   on a fresh chip, against the golden and the counts ([`check_case`]), a line per case.
//!
//! The exit status ([`Exit`]) is 0 when every check passed, 1 when one failed, and 2 when the
//! command line could not be carried out as asked (the reason on stderr, in words).
//!
//! ## A scene of one's own
//!
//! A scene names itself and its cases, and prepares a case: its callable, its entry tensors
//! (the inputs generated, the outputs zeroed) and a check against a golden that independent
//! code computes ([`golden_check`] compares within a [`Tolerance`]).
//!
//! ```no_run
//! use simpler_host::app;
//! use simpler_host::prelude::*;
//!
//! /// `y = x + 1`, the whole tensor at once (the cases here fit the local buffer).
//! fn add_one(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
//!     let [x, y] = kernel_args::tensors::<2>(ctx.args)?;
//!     let n = kernel_args::operand(x, 0)?;
//!     kernel_args::operand_of(y, 1, n)?;
//!     let buf = &mut ctx.local[..n];
//!     stage::load_range(ctx.gm, x, 0, 0, buf)?;
//!     buf.iter_mut().for_each(|v| *v += 1.0);
//!     stage::store_range(ctx.gm, y, 1, 0, buf)
//! }
//!
//! fn callable() -> Callable {
//!     let mut table = KernelTable::new();
//!     let add_one = table.aiv(add_one);
//!     let signature = Signature::new([ArgDirection::In, ArgDirection::Out]);
//!     Callable::new(table, signature, move |s, entry| {
//!         let [x, y] = entry.tensors;
//!         s.task(add_one).input(x).output_existing(y).submit().map(drop)
//!     })
//! }
//!
//! struct AddOne;
//!
//! impl Scene for AddOne {
//!     fn name(&self) -> &'static str {
//!         "add_one"
//!     }
//!     fn cases(&self) -> &'static [&'static str] {
//!         &["n64", "n1000"]
//!     }
//!     fn prepare(&self, case: &str) -> Option<Prepared> {
//!         let n: u32 = case.strip_prefix('n')?.parse().ok()?;
//!         let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
//!         let golden: Vec<f64> = x.iter().map(|&v| v as f64 + 1.0).collect();
//!         let tensors = vec![
//!             HostTensor::f32(&x, &[n], ArgDirection::In),
//!             HostTensor::f32(&vec![0.0; n as usize], &[n], ArgDirection::Out),
//!         ];
//!         let check = golden_check(1, golden, Tolerance { atol: 1e-6, rtol: 0.0 });
//!         Some(
//!             Prepared::new(callable(), tensors, check).with_counts(1, 0),
//!         )
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     app::main(&[&AddOne])
//! }
//! ```
//!
//! and in its tests, `app::assert_scene(&AddOne, Runtime::Tmr);` runs both cases.
//!
//! ## Round buffers
//!
//! Every round of `run` (and of [`check_case`]) starts from the case's entry tensors as
//! prepared, in buffers kept across the rounds: the first round clones them, later ones copy
//! the prepared outputs back in place, so a warm round allocates and faults nothing for them.

mod check;
mod hbg;
mod tmr;

#[doc(no_inline)]
pub use crate::scenes::{
    compare, golden_check, golden_checks, Check, CheckFn, Prepared, Scene, Tolerance,
};
pub use check::{assert_scene, check_case, check_scene, CaseFailure, CaseRun, Failure};

use crate::chip_worker::HostTensor;
use crate::error::ErrorChain;
use crate::transport::Runtime;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use simpler_sim::{DeviceConfig, Topology};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// How a command line ended; it maps to the process's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Every check passed, or there was nothing to check (`list`, `--help`): status 0.
    Success,
    /// A check failed: status 1.
    CheckFailed,
    /// The command line could not be carried out as asked: status 2, the reason on stderr.
    Refused,
}

impl Exit {
    /// The process exit status: 0, 1 or 2.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::CheckFailed => 1,
            Exit::Refused => 2,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// A program's own subcommands beside `list`, `run` and `check` (the project's `simpler l3`
/// is one): a clap [`Subcommand`] enum whose variants the command line may name, written with
/// clap 4's derive (the program depends on `clap` for it; [`main`] alone needs no clap).
pub trait Extension: Subcommand {
    /// Lines `list` prints after the scenes, each a name and what to print beside it.
    const LISTED: &'static [(&'static str, &'static str)] = &[];

    /// Runs the subcommand, printing to `out`: `Ok(true)` when every check passed,
    /// `Ok(false)` when one failed, `Err` with the reason when it could not run as asked.
    fn run(self, out: &mut dyn Write) -> Result<bool, String>;
}

/// No subcommands beyond the framework's: what [`main`] and [`run_cli`] use.
#[derive(Clone, Copy, Debug)]
pub enum NoExtension {}

impl FromArgMatches for NoExtension {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))
    }

    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        match *self {}
    }
}

impl Subcommand for NoExtension {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn has_subcommand(_: &str) -> bool {
        false
    }
}

impl Extension for NoExtension {
    fn run(self, _: &mut dyn Write) -> Result<bool, String> {
        match self {}
    }
}

/// The command for `scenes` on the process's arguments, printing to stdout and stderr, with
/// `RUST_LOG` controlling logging: a program's whole `main`.
pub fn main(scenes: &[&dyn Scene]) -> ExitCode {
    main_with::<NoExtension>(scenes)
}

/// [`main`] with extension `E`'s subcommands.
pub fn main_with<E: Extension>(scenes: &[&dyn Scene]) -> ExitCode {
    // A second call (a program that runs the command twice) keeps the first logger.
    let _ = env_logger::try_init();
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    run_cli_with::<E, _, _>(scenes, std::env::args_os(), &mut out, &mut err).into()
}

/// The command for `scenes` on `args` (the program's name first, as `std::env::args_os`
/// gives them), printing its tables to `out` and its refusals to `err`.
pub fn run_cli<I, T>(
    scenes: &[&dyn Scene],
    args: I,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    run_cli_with::<NoExtension, I, T>(scenes, args, out, err)
}

/// [`run_cli`] with extension `E`'s subcommands.
pub fn run_cli_with<E, I, T>(
    scenes: &[&dyn Scene],
    args: I,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit
where
    E: Extension,
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let program = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_stem())
        .map_or("simpler".into(), |s| s.to_string_lossy().into_owned());
    let outcome = match parse::<E>(args) {
        Ok(Parsed::Builtin(command)) => {
            run_command(scenes, &program, *command, E::LISTED, out, err)
        }
        Ok(Parsed::Extension(e)) => e.run(out),
        Err(e) => {
            let mut text = e.render().to_string();
            if !text.ends_with('\n') {
                text.push('\n');
            }
            let _ = if e.use_stderr() {
                write!(err, "{text}")
            } else {
                write!(out, "{text}")
            };
            return if e.exit_code() == 0 {
                Exit::Success
            } else {
                Exit::Refused
            };
        }
    };
    match outcome {
        Ok(true) => Exit::Success,
        Ok(false) => Exit::CheckFailed,
        Err(message) => {
            let _ = writeln!(err, "error: {message}");
            Exit::Refused
        }
    }
}

enum Parsed<E> {
    Builtin(Box<Command>),
    Extension(E),
}

/// The framework's subcommands and `E`'s in one clap command (its usage lines name the
/// program as `args[0]` does).
fn parse<E: Extension>(args: Vec<OsString>) -> Result<Parsed<E>, clap::Error> {
    let base = Cli::command();
    // Augmenting takes the extension enum's doc comment as the command's about: keep ours.
    let about = base.get_about().cloned().unwrap_or_default();
    let cmd = E::augment_subcommands(base).about(about);
    let matches = cmd.try_get_matches_from(args)?;
    match matches.subcommand_name() {
        Some(name) if E::has_subcommand(name) => {
            E::from_arg_matches(&matches).map(Parsed::Extension)
        }
        _ => Cli::from_arg_matches(&matches).map(|cli| Parsed::Builtin(Box::new(cli.command))),
    }
}

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
    Run(RunArgs),
    /// Run every case of the scenes named (default: every scene) once, each on a fresh chip,
    /// against its golden and the task and edge counts the scene states.
    Check {
        /// The scenes (see `list`); none means every scene.
        scenes: Vec<String>,
        /// The runtime: `tmr` or `hbg`.
        #[arg(long, default_value = "tmr")]
        runtime: String,
        /// The simulated platform: a2a3sim or a5sim.
        #[arg(long, default_value = "a2a3sim")]
        platform: String,
        /// Clusters of 1 AIC + 2 AIV (default 8; a2a3sim has up to 24, a5sim up to 36).
        #[arg(long)]
        clusters: Option<u32>,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// The scene (see `list`).
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
    /// Write the observed round's task graph to this file.
    #[arg(long)]
    dag: Option<PathBuf>,
    /// The graph's format: `json` or `dot`.
    #[arg(long, default_value = "json")]
    dag_format: String,
    /// Write the observed round's trace (Chrome trace-event JSON, for Perfetto) to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Draw the observed round as an SVG swimlane (one lane per core) to this file.
    #[arg(long)]
    swimlane: Option<PathBuf>,
    /// Print a scheduler report for the observed round.
    #[arg(long)]
    report: bool,
    /// The round `--dag`, `--trace`, `--swimlane` and `--report` describe, from 0: the first
    /// round by default, which starts from cold caches and untouched pages; a later one shows
    /// a warm round.
    #[arg(long, default_value_t = 0)]
    observe: usize,
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
    /// hbg: record every Graph anyway and check its Definition against the one retained from
    /// an earlier round (a mismatch fails the round, naming the key and the first differing
    /// node).
    #[arg(long)]
    verify_graphs: bool,
    /// hbg: retain no Graph Definition across rounds (every round records every Graph).
    #[arg(long)]
    no_retain_graphs: bool,
    /// hbg: never replay a whole bind (every round runs its orchestration, even when its guard
    /// matches the last round's).
    #[arg(long)]
    no_replay: bool,
}

/// The refusal of `--rounds 0`, which `simpler l3` shares.
pub const ROUNDS_ZERO: &str = "--rounds 0 runs nothing: give at least 1";

fn run_command(
    scenes: &[&dyn Scene],
    program: &str,
    command: Command,
    listed: &[(&str, &str)],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<bool, String> {
    match command {
        Command::List => {
            let width = scenes
                .iter()
                .map(|s| s.name().len())
                .chain(listed.iter().map(|(name, _)| name.len()))
                .fold(0, usize::max);
            for s in scenes {
                say(
                    out,
                    format_args!("{:<width$} {}", s.name(), s.cases().join(" ")),
                )?;
            }
            for (name, what) in listed {
                say(out, format_args!("{name:<width$} {what}"))?;
            }
            Ok(true)
        }
        Command::Run(RunArgs { rounds: 0, .. }) => Err(ROUNDS_ZERO.into()),
        Command::Run(RunArgs {
            rounds, observe, ..
        }) if observe >= rounds => Err(format!(
            "--observe {observe} is past the last round: --rounds {rounds} runs rounds 0 to {}",
            rounds - 1
        )),
        Command::Run(args) => match runtime(&args.runtime)? {
            Runtime::Tmr => tmr::run(scenes, program, &args, out, err),
            Runtime::Hbg => hbg::run(scenes, program, &args, out),
        },
        Command::Check {
            scenes: names,
            runtime: rt,
            platform,
            clusters,
        } => {
            let runtime = runtime(&rt)?;
            let topology = topology(&platform)?;
            let chosen: Vec<&dyn Scene> = if names.is_empty() {
                scenes.to_vec()
            } else {
                names
                    .iter()
                    .map(|n| find(scenes, program, n))
                    .collect::<Result<_, _>>()?
            };
            check::run_check(&chosen, runtime, topology, clusters, out)
        }
    }
}

/// Writes one line to `out`; a stream that cannot be written ends the command.
fn say(out: &mut dyn Write, line: std::fmt::Arguments<'_>) -> Result<(), String> {
    writeln!(out, "{line}").map_err(|e| format!("writing the output: {e}"))
}

fn runtime(name: &str) -> Result<Runtime, String> {
    match name {
        "tmr" => Ok(Runtime::Tmr),
        "hbg" => Ok(Runtime::Hbg),
        other => Err(format!("unknown --runtime {other} (tmr, hbg)")),
    }
}

fn topology(platform: &str) -> Result<Topology, String> {
    match platform {
        "a2a3sim" => Ok(Topology::A2a3),
        "a5sim" => Ok(Topology::A5),
        other => Err(format!("unknown platform {other} (a2a3sim, a5sim)")),
    }
}

fn find<'s>(scenes: &[&'s dyn Scene], program: &str, name: &str) -> Result<&'s dyn Scene, String> {
    scenes
        .iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| format!("unknown scene {name}; see `{program} list`"))
}

/// Heap per ring for hbg runs (forward-only: a graph's intermediates all stay live).
const HBG_HEAP_BYTES: u64 = 256 << 20;

/// A device configuration for `prepared` on `runtime`: `topology`, the clusters asked for,
/// GM for the entry tensors with room to spare beyond the heaps, the case's ring sizes on tmr
/// ([`Prepared::ring`]), and on hbg a heap per ring that holds the whole graph's intermediates
/// (nothing retires while the host builds, so a case's small rings could not hold its graph;
/// the reference runs dsv4 with a 2 GiB heap).
fn chip_config(
    topology: Topology,
    clusters: Option<u32>,
    prepared: &Prepared,
    runtime: Runtime,
) -> Result<DeviceConfig, String> {
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
    match (runtime, prepared.ring) {
        (Runtime::Hbg, _) => config.ring.heap_bytes = HBG_HEAP_BYTES,
        (Runtime::Tmr, Some(ring)) => config.ring = ring,
        (Runtime::Tmr, None) => {}
    }
    Ok(config)
}

/// Scene `args.scene` of `scenes`, its case (its first when none is asked) prepared, and a
/// device configuration for it on `args.platform`; refusals in the order the command checks.
fn setup<'a>(
    scenes: &[&'a dyn Scene],
    program: &str,
    args: &'a RunArgs,
    runtime: Runtime,
) -> Result<(&'a dyn Scene, &'a str, Prepared, DeviceConfig), String> {
    let topology = topology(&args.platform)?;
    let scene = find(scenes, program, &args.scene)?;
    let case: &'a str = match &args.case {
        Some(c) => c,
        None => scene
            .cases()
            .first()
            .copied()
            .ok_or_else(|| format!("{} has no cases", scene.name()))?,
    };
    let prepared = scene.prepare(case).ok_or_else(|| {
        format!(
            "{} has no case {case}; cases: {}",
            scene.name(),
            scene.cases().join(" ")
        )
    })?;
    let config = chip_config(topology, args.clusters, &prepared, runtime)?;
    Ok((scene, case, prepared, config))
}

/// A round's entry tensors: the one place a round's buffers are produced (every round of
/// `run`, on either runtime, and of [`check_case`]). The buffers in `kept` are reused: the
/// first round clones the prepared entry into them, every later one copies the prepared
/// outputs back over the last round's in place ([`HostTensor::reset_outputs_from`]), so a
/// round starts from the entry as generated (outputs zeroed) without allocating or faulting.
fn round_tensors<'k>(prepared: &Prepared, kept: &'k mut Vec<HostTensor>) -> &'k mut [HostTensor] {
    if kept.len() == prepared.tensors.len() {
        for (t, fresh) in kept.iter_mut().zip(&prepared.tensors) {
            t.reset_outputs_from(fresh);
        }
    } else {
        kept.clone_from(&prepared.tensors);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callable::{Callable, Signature};
    use crate::task::KernelTable;
    use simpler_core::ArgDirection::{In, InOut, Out};

    fn case() -> Prepared {
        let signature = Signature::new([In, InOut, Out]);
        let callable = Callable::new(KernelTable::new(), signature, |_, _| Ok(()));
        let tensors = vec![
            HostTensor::f32(&[1.0, 2.0], &[2], In),
            HostTensor::f32(&[3.0, 4.0], &[2], InOut),
            HostTensor::f32(&[0.0, 0.0], &[2], Out),
        ];
        Prepared::new(
            callable,
            tensors,
            golden_check(
                2,
                vec![],
                Tolerance {
                    atol: 0.0,
                    rtol: 0.0,
                },
            ),
        )
    }

    #[test]
    fn later_rounds_reset_the_outputs_in_the_first_rounds_buffers() {
        let prepared = case();
        let mut kept = Vec::new();
        let first: Vec<*const u8> = round_tensors(&prepared, &mut kept)
            .iter()
            .map(|t| t.data.as_ptr())
            .collect();
        // A round writes its INOUT and OUT tensors.
        for t in &mut kept[1..] {
            t.data.fill(0xAB);
        }
        let again = round_tensors(&prepared, &mut kept);
        let second: Vec<*const u8> = again.iter().map(|t| t.data.as_ptr()).collect();
        assert_eq!(first, second, "the same buffers, not new ones");
        for (got, fresh) in again.iter().zip(&prepared.tensors) {
            assert_eq!(
                got.to_f32(),
                fresh.to_f32(),
                "{:?} back as prepared",
                fresh.dir
            );
        }
    }
}
