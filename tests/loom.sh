#!/usr/bin/env bash
# Runs every loom model (the shared lock-free state checked over all interleavings of small
# models) and prints one line per model: `loom <model> <N> interleavings`.
#
#   tests/loom.sh
#
# Each model sets its own preemption bound in its source (LOOM_MAX_PREEMPTIONS overrides every
# bound). The models build in their own target dir: `--cfg loom` swaps the atomics of core's
# shared state for the checker's (core/src/sync.rs), which no other build may see.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom"
# The state machines' debug assertions are part of what the models check.
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  if ! cargo test --release --locked "$@" -- --nocapture --test-threads 1 >"$log" 2>&1; then
    cat "$log" >&2
    echo "loom: models failed: $*" >&2
    exit 1
  fi
  grep -oE 'loom [a-z0-9_]+ [0-9]+ interleavings' "$log" || true
}
start=$SECONDS
run -p simpler-core --test loom_sched
for t in core/tests/loom_*.rs; do
  name=$(basename "$t" .rs)
  [[ $name == loom_sched ]] || run -p simpler-core --test "$name"
done
for t in sim/tests/loom_*.rs; do
  [[ -e $t ]] && run -p simpler-sim --test "$(basename "$t" .rs)"
done
echo "loom: every model passed in $((SECONDS - start)) s"
