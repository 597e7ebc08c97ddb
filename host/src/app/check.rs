//! A scene's cases against their goldens and stated counts: [`check_case`] on a given chip,
//! [`check_scene`] every case on a fresh one, [`assert_scene`] for a test, and the `check`
//! subcommand.

use super::{chip_config, round_tensors, say, Check, Prepared, Scene};
use crate::chip_worker::ChipWorker;
use crate::error::ErrorChain;
use crate::transport::{RunOptions, Runtime};
use simpler_sim::Topology;
use std::fmt;
use std::io::Write;

/// A case that passed: its last round's check and counts.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseRun {
    /// The scene's name.
    pub scene: String,
    /// The case.
    pub case: String,
    /// The last round's golden comparison (passed).
    pub check: Check,
    /// Tasks the last round ran.
    pub tasks: u64,
    /// Edges the last round had.
    pub edges: u64,
}

/// A case that did not pass, and where.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseFailure {
    /// The scene's name.
    pub scene: String,
    /// The case.
    pub case: String,
    /// The round that failed; `None` when the case never ran.
    pub round: Option<usize>,
    /// What went wrong.
    pub failure: Failure,
}

/// What went wrong in a case.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The scene prepared nothing for the case (its `prepare` returned `None`).
    UnknownCase {
        /// The scene's cases.
        cases: Vec<&'static str>,
    },
    /// The chip could not be set up for the case, or the run returned an error.
    Run(String),
    /// An output was beyond the tolerance of its golden.
    Golden {
        /// The largest difference from the golden.
        max_diff: f64,
    },
    /// The run reported other counts than the scene states.
    Counts {
        /// Tasks run and the tasks stated (`None`: not stated).
        tasks: (u64, Option<u64>),
        /// Edges reported and the edges stated (`None`: not stated).
        edges: (u64, Option<u64>),
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::UnknownCase { cases } => {
                write!(f, "no such case; cases: {}", cases.join(" "))
            }
            Failure::Run(message) => write!(f, "the run failed: {message}"),
            Failure::Golden { max_diff } => {
                write!(
                    f,
                    "golden mismatch: max diff {max_diff:.3e} beyond the tolerance"
                )
            }
            Failure::Counts { tasks, edges } => {
                let stated = |n: Option<u64>| n.map_or("any".to_string(), |n| n.to_string());
                write!(
                    f,
                    "{} tasks and {} edges, the scene states {} and {}",
                    tasks.0,
                    edges.0,
                    stated(tasks.1),
                    stated(edges.1)
                )
            }
        }
    }
}

impl fmt::Display for CaseFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.scene, self.case)?;
        if let Some(round) = self.round {
            write!(f, " round {round}")?;
        }
        write!(f, ": {}", self.failure)
    }
}

impl std::error::Error for CaseFailure {}

/// Runs `prepared` (case `case` of `scene`) for `rounds` rounds on `worker` and `runtime`,
/// each round on the entry tensors as prepared (in buffers kept across its rounds), and checks every round against the golden and against
/// the counts `prepared` states ([`Prepared::tasks`], [`Prepared::edges`]; those it leaves
/// `None` are not checked). The first round that differs is the failure.
pub fn check_case(
    worker: &mut ChipWorker,
    scene: &dyn Scene,
    case: &str,
    prepared: &Prepared,
    runtime: Runtime,
    rounds: usize,
) -> Result<CaseRun, CaseFailure> {
    let fail = |round: Option<usize>, failure: Failure| CaseFailure {
        scene: scene.name().to_string(),
        case: case.to_string(),
        round,
        failure,
    };
    let handle = worker.register(prepared.callable.clone());
    let mut last = None;
    let mut kept = Vec::new();
    for round in 0..rounds {
        let tensors = round_tensors(prepared, &mut kept);
        let report = worker
            .run(handle, tensors, &prepared.scalars, RunOptions::on(runtime))
            .map_err(|e| fail(Some(round), Failure::Run(ErrorChain(&e).to_string())))?;
        let check = (prepared.check)(tensors);
        if !check.pass {
            return Err(fail(
                Some(round),
                Failure::Golden {
                    max_diff: check.max_diff,
                },
            ));
        }
        let (tasks, edges) = (report.outcome.tasks, report.outcome.edges);
        let differs = |got: u64, stated: Option<u64>, slack: u64| {
            stated.is_some_and(|s| got > s || got + slack < s)
        };
        let (want_tasks, want_edges) = prepared.counts(runtime);
        if differs(tasks, want_tasks, 0) || differs(edges, want_edges, prepared.edge_slack) {
            return Err(fail(
                Some(round),
                Failure::Counts {
                    tasks: (tasks, want_tasks),
                    edges: (edges, want_edges),
                },
            ));
        }
        last = Some((check, tasks, edges));
    }
    let (check, tasks, edges) =
        last.ok_or_else(|| fail(None, Failure::Run(super::ROUNDS_ZERO.to_string())))?;
    Ok(CaseRun {
        scene: scene.name().to_string(),
        case: case.to_string(),
        check,
        tasks,
        edges,
    })
}

/// Case `case` of `scene`, prepared and checked once on a fresh chip of `topology` (sized as
/// `run` sizes it) on `runtime`.
fn check_fresh(
    scene: &dyn Scene,
    case: &str,
    runtime: Runtime,
    topology: Topology,
    clusters: Option<u32>,
) -> Result<CaseRun, CaseFailure> {
    let fail = |failure| CaseFailure {
        scene: scene.name().to_string(),
        case: case.to_string(),
        round: None,
        failure,
    };
    let prepared = scene.prepare(case).ok_or_else(|| {
        fail(Failure::UnknownCase {
            cases: scene.cases().to_vec(),
        })
    })?;
    let config =
        chip_config(topology, clusters, &prepared, runtime).map_err(|e| fail(Failure::Run(e)))?;
    let mut worker =
        ChipWorker::init(config).map_err(|e| fail(Failure::Run(ErrorChain(&e).to_string())))?;
    check_case(&mut worker, scene, case, &prepared, runtime, 1)
}

/// Every case of `scene`, once each on a fresh default chip (a2a3sim, 8 clusters, GM sized
/// for the entry) on `runtime`: one result per case, in the scene's order.
pub fn check_scene(scene: &dyn Scene, runtime: Runtime) -> Vec<Result<CaseRun, CaseFailure>> {
    scene
        .cases()
        .iter()
        .map(|case| check_fresh(scene, case, runtime, Topology::A2a3, None))
        .collect()
}

/// [`check_scene`], panicking with one line per failed case when any fails; the passed
/// cases otherwise.
#[track_caller]
pub fn assert_scene(scene: &dyn Scene, runtime: Runtime) -> Vec<CaseRun> {
    let (passed, failed): (Vec<_>, Vec<_>) = check_scene(scene, runtime)
        .into_iter()
        .partition(Result::is_ok);
    if !failed.is_empty() {
        let lines: Vec<String> = failed
            .into_iter()
            .filter_map(Result::err)
            .map(|f| f.to_string())
            .collect();
        panic!(
            "{} failed on {runtime:?}:\n{}",
            scene.name(),
            lines.join("\n")
        );
    }
    passed.into_iter().filter_map(Result::ok).collect()
}

/// The `check` subcommand: every case of `scenes` on a fresh chip, a line each, then PASS
/// or FAIL.
pub(super) fn run_check(
    scenes: &[&dyn Scene],
    runtime: Runtime,
    topology: Topology,
    clusters: Option<u32>,
    out: &mut dyn Write,
) -> Result<bool, String> {
    let mut all = true;
    for scene in scenes {
        for case in scene.cases() {
            match check_fresh(*scene, case, runtime, topology, clusters) {
                Ok(run) => say(
                    out,
                    format_args!(
                        "{} {}: PASS (max diff {:.3e}, {} tasks, {} edges)",
                        run.scene, run.case, run.check.max_diff, run.tasks, run.edges
                    ),
                )?,
                Err(CaseFailure {
                    scene,
                    case,
                    round,
                    failure,
                }) => {
                    all = false;
                    let round = round.map_or(String::new(), |r| format!(" round {r}"));
                    say(out, format_args!("{scene} {case}{round}: FAIL, {failure}"))?;
                }
            }
        }
    }
    say(out, format_args!("{}", if all { "PASS" } else { "FAIL" }))?;
    Ok(all)
}
