//! A sequential test runner for suites that fork.
//!
//! `fork` copies only the calling thread; a lock another thread holds at that moment stays
//! locked forever in the child. libtest runs tests on a pool of threads, so the L3 suites
//! (whose Workers fork their children in `init()`) use this runner instead (`harness = false`):
//! every test runs on the main thread, one after another, and each closes its Worker (joining
//! its scheduler thread) before the next one forks.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::time::Instant;

/// A test of a forking suite: its name (what the command-line filter matches, and what the
/// output prints) and its body, which fails by panicking.
pub type Test = (&'static str, fn());

/// Runs every test whose name contains the first command-line argument that is not a flag
/// (all of them when there is none), prints libtest-style lines, and fails if any test did.
pub fn run(tests: &[Test]) -> ExitCode {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let selected: Vec<&Test> = tests
        .iter()
        .filter(|(name, _)| filter.as_deref().is_none_or(|f| name.contains(f)))
        .collect();
    println!("\nrunning {} tests (sequentially, forking)", selected.len());
    let start = Instant::now();
    let mut failed = Vec::new();
    for (name, test) in &selected {
        let t = Instant::now();
        let ok = catch_unwind(AssertUnwindSafe(test)).is_ok();
        println!(
            "test {name} ... {} ({:.2}s)",
            if ok { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        if !ok {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        for name in failed {
            println!("failed: {name}");
        }
        ExitCode::FAILURE
    }
}
