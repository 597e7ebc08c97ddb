//! The scene framework in-process, on scenes defined here as a user crate defines its own: the
//! command's output and exit for `list`, `run` and `check`, its refusals in words, and the
//! test helpers' results and messages.

use simpler_host::app::{self, CaseFailure, Exit, Failure};
use simpler_host::prelude::*;

/// `y = -x` over one chunk of the local buffer (the cases here are small).
fn negate(ctx: &mut KernelCtx<'_>) -> Result<(), KernelFailure> {
    let [x, y] = kernel_args::tensors::<2>(ctx.args)?;
    let n = kernel_args::operand(x, 0)?;
    kernel_args::operand_of(y, 1, n)?;
    let buf = &mut ctx.local[..n];
    stage::load_range(ctx.gm, x, 0, 0, buf)?;
    buf.iter_mut().for_each(|v| *v = -*v);
    stage::store_range(ctx.gm, y, 1, 0, buf)
}

fn callable() -> Callable {
    let mut table = KernelTable::new();
    let negate = table.aiv(negate);
    let signature = Signature::new([ArgDirection::In, ArgDirection::Out]);
    Callable::new(table, signature, move |s, entry| {
        let [x, y] = entry.tensors;
        s.task(negate)
            .input(x)
            .output_existing(y)
            .submit()
            .map(drop)
    })
}

/// A negation scene: `golden_sign` -1 is the right golden, +1 a wrong one; `counts` the task
/// and edge counts it states.
struct Negate {
    name: &'static str,
    golden_sign: f64,
    counts: Option<(u64, u64)>,
}

impl Scene for Negate {
    fn name(&self) -> &'static str {
        self.name
    }

    fn cases(&self) -> &'static [&'static str] {
        &["n8", "n300"]
    }

    fn prepare(&self, case: &str) -> Option<Prepared> {
        let n: u32 = match case {
            "n8" => 8,
            "n300" => 300,
            _ => return None,
        };
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 + 1.0).collect();
        let golden = x.iter().map(|&v| self.golden_sign * v as f64).collect();
        let p = Prepared::new(
            callable(),
            vec![
                HostTensor::f32(&x, &[n], ArgDirection::In),
                HostTensor::f32(&vec![0.0; n as usize], &[n], ArgDirection::Out),
            ],
            golden_check(
                1,
                golden,
                Tolerance {
                    atol: 1e-6,
                    rtol: 0.0,
                },
            ),
        );
        Some(match self.counts {
            Some((tasks, edges)) => p.with_counts(tasks, edges),
            None => p,
        })
    }
}

const GOOD: Negate = Negate {
    name: "negate",
    golden_sign: -1.0,
    counts: Some((1, 0)),
};
const WRONG_GOLDEN: Negate = Negate {
    name: "negate_wrong_golden",
    golden_sign: 1.0,
    counts: None,
};
const WRONG_COUNTS: Negate = Negate {
    name: "negate_wrong_counts",
    golden_sign: -1.0,
    counts: Some((2, 1)),
};
const UNCOUNTED: Negate = Negate {
    name: "negate_uncounted",
    golden_sign: -1.0,
    counts: None,
};

/// Runs the command on `scenes` with `args` after the program name `app`: its exit, stdout
/// and stderr.
fn cli(scenes: &[&dyn Scene], args: &[&str]) -> (Exit, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = app::run_cli(
        scenes,
        std::iter::once("app").chain(args.iter().copied()),
        &mut out,
        &mut err,
    );
    (
        exit,
        String::from_utf8(out).expect("utf-8 output"),
        String::from_utf8(err).expect("utf-8 errors"),
    )
}

#[test]
fn list_prints_each_scene_and_its_cases_aligned() {
    let (exit, out, err) = cli(&[&GOOD, &WRONG_GOLDEN], &["list"]);
    assert_eq!((exit, err.as_str()), (Exit::Success, ""));
    assert_eq!(
        out,
        "negate              n8 n300\nnegate_wrong_golden n8 n300\n"
    );
}

#[test]
fn a_passing_run_prints_a_line_per_round_and_exits_0() {
    let (exit, out, err) = cli(
        &[&GOOD],
        &["run", "negate", "--case", "n300", "--rounds", "2"],
    );
    assert_eq!(exit, Exit::Success, "{out}{err}");
    assert_eq!(exit.code(), 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "negate n300 on a2a3sim (8 clusters), 2 rounds");
    assert_eq!(lines.len(), 5, "{out}");
    assert!(
        lines[2..4].iter().all(|l| l.contains("PASS (max diff")),
        "{out}"
    );
    assert_eq!(lines[4], "PASS");
}

#[test]
fn the_default_case_is_the_first_and_hbg_runs_it() {
    let (exit, out, err) = cli(
        &[&GOOD],
        &["run", "negate", "--runtime", "hbg", "--rounds", "1"],
    );
    assert_eq!(exit, Exit::Success, "{out}{err}");
    assert!(
        out.starts_with("negate n8 on a2a3sim (8 clusters), hbg, 1 rounds\n"),
        "{out}"
    );
}

#[test]
fn an_unknown_scene_or_case_is_refused_in_words_with_exit_2() {
    let (exit, out, err) = cli(&[&GOOD], &["run", "nope"]);
    assert_eq!((exit, out.as_str()), (Exit::Refused, ""));
    assert_eq!(exit.code(), 2);
    assert_eq!(err, "error: unknown scene nope; see `app list`\n");
    let (exit, _, err) = cli(&[&GOOD], &["run", "negate", "--case", "n9"]);
    assert_eq!(exit, Exit::Refused);
    assert_eq!(err, "error: negate has no case n9; cases: n8 n300\n");
    let (exit, _, err) = cli(&[&GOOD], &["check", "negate", "nope"]);
    assert_eq!(exit, Exit::Refused);
    assert_eq!(err, "error: unknown scene nope; see `app list`\n");
    let (exit, _, err) = cli(&[&GOOD], &["run", "negate", "--runtime", "xla"]);
    assert_eq!(exit, Exit::Refused);
    assert_eq!(err, "error: unknown --runtime xla (tmr, hbg)\n");
    let (exit, _, err) = cli(&[&GOOD], &["run", "negate", "--rounds", "0"]);
    assert_eq!(exit, Exit::Refused);
    assert_eq!(err, "error: --rounds 0 runs nothing: give at least 1\n");
}

#[test]
fn a_command_line_clap_rejects_is_exit_2_and_help_is_exit_0() {
    let (exit, out, err) = cli(&[&GOOD], &["walk"]);
    assert_eq!((exit, out.as_str()), (Exit::Refused, ""));
    assert!(err.contains("unrecognized subcommand 'walk'"), "{err}");
    let (exit, out, err) = cli(&[&GOOD], &["--help"]);
    assert_eq!((exit, err.as_str()), (Exit::Success, ""));
    assert!(out.contains("Usage: app <COMMAND>"), "{out}");
    for sub in ["list", "run", "check"] {
        assert!(out.contains(&format!("  {sub} ")), "{sub} in {out}");
    }
}

#[test]
fn a_failing_golden_fails_every_round_and_exits_1() {
    let (exit, out, err) = cli(
        &[&WRONG_GOLDEN],
        &["run", "negate_wrong_golden", "--rounds", "2"],
    );
    assert_eq!((exit, err.as_str()), (Exit::CheckFailed, ""));
    assert_eq!(exit.code(), 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    // The first element is 1.0 against a golden of 1.0; the largest difference is the last
    // element's: 2 * (7 * 0.25 + 1) = 5.5.
    assert!(
        lines[2..4]
            .iter()
            .all(|l| l.ends_with("FAIL (max diff 5.500e0)")),
        "{out}"
    );
    assert_eq!(lines[4], "FAIL");
}

#[test]
fn check_runs_every_case_and_names_the_failures() {
    let (exit, out, _) = cli(&[&GOOD, &WRONG_GOLDEN], &["check"]);
    assert_eq!(exit, Exit::CheckFailed);
    assert_eq!(
        out,
        "negate n8: PASS (max diff 0.000e0, 1 tasks, 0 edges)\n\
         negate n300: PASS (max diff 0.000e0, 1 tasks, 0 edges)\n\
         negate_wrong_golden n8 round 0: FAIL, golden mismatch: max diff 5.500e0 beyond the tolerance\n\
         negate_wrong_golden n300 round 0: FAIL, golden mismatch: max diff 1.515e2 beyond the tolerance\n\
         FAIL\n"
    );
    let (exit, out, _) = cli(
        &[&GOOD, &WRONG_GOLDEN],
        &["check", "negate", "--runtime", "hbg"],
    );
    assert_eq!(exit, Exit::Success, "{out}");
    assert_eq!(out.lines().last(), Some("PASS"));
}

#[test]
fn check_scene_gives_a_result_per_case_and_compares_only_the_counts_stated() {
    let runs = app::assert_scene(&GOOD, Runtime::Tmr);
    let got: Vec<(&str, u64, u64)> = runs
        .iter()
        .map(|r| (r.case.as_str(), r.tasks, r.edges))
        .collect();
    assert_eq!(got, [("n8", 1, 0), ("n300", 1, 0)]);
    assert!(runs.iter().all(|r| r.scene == "negate" && r.check.pass));
    // Counts left unstated are not compared.
    assert_eq!(app::assert_scene(&UNCOUNTED, Runtime::Hbg).len(), 2);
    let results = app::check_scene(&WRONG_COUNTS, Runtime::Tmr);
    let failure = results[0].clone().expect_err("the counts differ");
    assert_eq!(
        failure,
        CaseFailure {
            scene: "negate_wrong_counts".into(),
            case: "n8".into(),
            round: Some(0),
            failure: Failure::Counts {
                tasks: (1, Some(2)),
                edges: (0, Some(1)),
            },
        }
    );
    assert_eq!(
        failure.to_string(),
        "negate_wrong_counts n8 round 0: 1 tasks and 0 edges, the scene states 2 and 1"
    );
}

#[test]
fn check_case_names_the_round_that_failed_and_passes_rounds_on_one_worker() {
    let mut worker = ChipWorker::init(DeviceConfig::new(Topology::A5)).expect("a device");
    let prepared = WRONG_GOLDEN.prepare("n8").expect("a case");
    let failure = app::check_case(&mut worker, &WRONG_GOLDEN, "n8", &prepared, Runtime::Tmr, 3)
        .expect_err("the golden is wrong");
    assert_eq!(
        failure.to_string(),
        "negate_wrong_golden n8 round 0: golden mismatch: max diff 5.500e0 beyond the tolerance"
    );
    let prepared = GOOD.prepare("n8").expect("a case");
    let run = app::check_case(&mut worker, &GOOD, "n8", &prepared, Runtime::Tmr, 3)
        .expect("the good scene passes three rounds on one worker");
    assert_eq!((run.tasks, run.edges), (1, 0));
}

/// A scene that lists a case it cannot prepare.
struct Ghost;

impl Scene for Ghost {
    fn name(&self) -> &'static str {
        "ghost"
    }

    fn cases(&self) -> &'static [&'static str] {
        &["boo"]
    }

    fn prepare(&self, _: &str) -> Option<Prepared> {
        None
    }
}

#[test]
fn a_listed_case_the_scene_cannot_prepare_fails_check_and_is_refused_by_run() {
    let failure = app::check_scene(&Ghost, Runtime::Tmr)
        .pop()
        .expect("one case")
        .expect_err("nothing to run");
    assert_eq!(failure.round, None);
    assert_eq!(failure.to_string(), "ghost boo: no such case; cases: boo");
    let (exit, _, err) = cli(&[&Ghost], &["run", "ghost"]);
    assert_eq!(exit, Exit::Refused);
    assert_eq!(err, "error: ghost has no case boo; cases: boo\n");
}

#[test]
#[should_panic(expected = "negate_wrong_golden failed on Tmr:\n\
    negate_wrong_golden n8 round 0: golden mismatch: max diff 5.500e0 beyond the tolerance\n\
    negate_wrong_golden n300 round 0: golden mismatch")]
fn assert_scene_panics_with_a_line_per_failed_case() {
    app::assert_scene(&WRONG_GOLDEN, Runtime::Tmr);
}
