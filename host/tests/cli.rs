//! The `simpler` command refuses a command line it cannot run as asked, with exit status 2 and
//! a message that says what is wrong in words, instead of running something else; it lists the
//! project's scenes and its own `l3` and `l4` subcommands beside the framework's, and checks a scene.
//! The framework itself is tested in-process in `app.rs`.

use std::process::Command;

/// Runs `simpler` with `args`: its exit status and what it wrote to stderr.
fn simpler(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_simpler"))
        .args(args)
        .output()
        .expect("the simpler binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[track_caller]
fn refused(args: &[&str], message: &str) {
    let (code, stderr) = simpler(args);
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(message),
        "{args:?}: expected {message:?} in {stderr:?}"
    );
}

#[test]
fn zero_rounds_are_refused() {
    let msg = "--rounds 0 runs nothing: give at least 1";
    refused(&["run", "vector_example", "--rounds", "0"], msg);
    refused(
        &["run", "vector_example", "--runtime", "hbg", "--rounds", "0"],
        msg,
    );
    refused(&["l3", "--rounds", "0"], msg);
}

#[test]
fn an_observed_round_past_the_last_is_refused() {
    let msg = "--observe 2 is past the last round: --rounds 2 runs rounds 0 to 1";
    refused(
        &["run", "vector_example", "--rounds", "2", "--observe", "2"],
        msg,
    );
    refused(
        &[
            "run",
            "vector_example",
            "--runtime",
            "hbg",
            "--rounds",
            "2",
            "--observe",
            "2",
        ],
        msg,
    );
}

#[test]
fn a_later_round_is_traced_when_observed() {
    // The trace of round 2, not the first: written (its events and the graph that names
    // them are both gathered for the observed round) and naming each of the five tasks.
    let dir = std::env::temp_dir().join(format!("simpler-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join("t.json");
    let path_str = path.to_str().expect("a UTF-8 path");
    let out = Command::new(env!("CARGO_BIN_EXE_simpler"))
        .args(["run", "vector_example", "--rounds", "3", "--observe", "2"])
        .args(["--trace", path_str])
        .output()
        .expect("the simpler binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("the trace was written");
    let tasks = (0..5)
        .filter(|t| text.contains(&format!("\"task {t} k")))
        .count();
    assert_eq!(tasks, 5, "every task of the observed round in the trace");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clusters_outside_the_platform_are_refused_with_its_range() {
    refused(
        &["run", "vector_example", "--clusters", "25"],
        "--clusters: 25 clusters asked for; a2a3sim has from 1 to 24 clusters",
    );
    refused(
        &[
            "run",
            "vector_example",
            "--clusters",
            "0",
            "--platform",
            "a5sim",
        ],
        "--clusters: 0 clusters asked for; a5sim has from 1 to 36 clusters",
    );
    refused(
        &[
            "run",
            "vector_example",
            "--runtime",
            "hbg",
            "--clusters",
            "37",
            "--platform",
            "a5sim",
        ],
        "a5sim has from 1 to 36 clusters",
    );
}

#[test]
fn l3_chips_other_than_the_two_it_runs_are_refused() {
    for chips in ["0", "1", "3"] {
        refused(
            &["l3", "--chips", chips],
            &format!("--chips {chips}: l3_vector runs on exactly 2 chips (chip 0 feeds chip 1)"),
        );
    }
}

#[test]
fn the_largest_cluster_count_of_a_platform_runs() {
    let (code, stderr) = simpler(&["run", "vector_example", "--rounds", "1", "--clusters", "24"]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// `simpler l4` needs MPI: the default build refuses it in words; the MPI build, run outside
/// mpirun, refuses it naming the missing launcher; and zero rounds are refused before either.
#[test]
fn l4_is_refused_where_it_cannot_run() {
    refused(&["l4", "--rounds", "0"], "round");
    if cfg!(feature = "mpi") {
        refused(&["l4"], "run under mpirun");
    } else {
        refused(&["l4"], "--features mpi");
    }
}

/// Runs `simpler` with `args`: its exit status and what it wrote to stdout.
fn simpler_out(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_simpler"))
        .args(args)
        .output()
        .expect("the simpler binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn list_shows_every_scene_then_the_l3_scene_of_the_project_subcommand() {
    let (code, out) = simpler_out(&["list"]);
    assert_eq!(code, Some(0));
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    let mut want: Vec<&str> = simpler_host::scenes::all()
        .iter()
        .map(|s| s.name())
        .collect();
    want.push("l3_vector");
    want.push("l4");
    assert_eq!(names, want);
    assert!(
        out.lines()
            .next()
            .is_some_and(|l| l.starts_with("vector_example ")),
        "{out}"
    );
    assert!(
        out.contains(
            "l3_vector                    (simpler l3) two chips + a SUB worker in child processes\n"
        ),
        "{out}"
    );
    assert!(
        out.ends_with(
            "l4                           (mpirun -np 3 simpler l4; --features mpi) 2 worker ranks x 2 chips, gathered on rank 0\n"
        ),
        "{out}"
    );
    let (code, help) = simpler_out(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(
        help.starts_with("Run task graphs on the simulated NPU\n"),
        "{help}"
    );
    for sub in ["list", "run", "check", "l3"] {
        assert!(help.contains(&format!("  {sub} ")), "{sub} in {help}");
    }
}

#[test]
fn check_runs_a_scene_once_against_its_golden_and_counts() {
    let (code, out) = simpler_out(&["check", "vector_example"]);
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "vector_example default: PASS (max diff 1.121e-5, 5 tasks, 6 edges)",
            "PASS"
        ]
    );
}
