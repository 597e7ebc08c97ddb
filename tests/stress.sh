#!/usr/bin/env bash
# Runs the slot-machine stress test (tests/tests/sched_stress.rs, its three-scheduler test)
# N times in a release build with debug assertions on, and prints how many runs failed, in
# the BENCHMARKS.md format:
#
#   tests/stress.sh 5000                           # default size: ~5 s a run on a quiet machine
#   SCHED_STRESS_TASKS=20000 tests/stress.sh 5000  # ~0.25 s a run
#
# Not in CI: at a few seconds a run, thousands of runs take hours. A failing run's output is
# kept in target/stress/fail-<run>.log. SCHED_STRESS_TASKS and SCHED_STRESS_SEED pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:?usage: tests/stress.sh N}"
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/stress}"
cargo test --release --locked -p simpler-tests --test sched_stress --no-run >/dev/null 2>&1 \
  || cargo test --release --locked -p simpler-tests --test sched_stress --no-run
bin=$(cargo test --release --locked -p simpler-tests --test sched_stress --no-run \
  --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*sched_stress[^"]*\)".*/\1/p' | tail -1)
mkdir -p "$CARGO_TARGET_DIR"
failures=0
for ((i = 1; i <= runs; i++)); do
  if ! "$bin" --exact slot_transitions_and_ready_queues_under_three_schedulers \
    >"$CARGO_TARGET_DIR/run.log" 2>&1; then
    failures=$((failures + 1))
    cp "$CARGO_TARGET_DIR/run.log" "$CARGO_TARGET_DIR/fail-$i.log"
    echo "run $i failed: $CARGO_TARGET_DIR/fail-$i.log" >&2
  fi
  if ((i % 100 == 0)); then
    echo "$(date +%T) $i runs, $failures failed" >&2
  fi
done
echo "bench stress sched_stress_runs $runs runs"
echo "bench stress sched_stress_failures $failures runs"
