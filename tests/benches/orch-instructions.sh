#!/usr/bin/env bash
# orch-instructions: instructions the host executes in a scene's orchestration function per
# warm hbg bind (host_orch's own work: the scene's views, every submit, the payload records,
# Graph acceptance), counted by callgrind. A count, not a duration: it does not move with the
# machine's load, so two builds compare across runs.
#
# For each scene the release `simpler` binary runs host-only hbg binds under callgrind with
# collection switched on only inside the scene's `orchestrate`, once with R rounds and once
# with 2R; the difference over R is the cost of one warm bind (the cold bind and start-up
# cancel out).
#
# Not shown: time. Cache misses, branch mispredictions and system calls (recorder wake-ups)
# cost time without instructions; the `bind` benchmark measures the time.
#
# Needs valgrind. Run: tests/benches/orch-instructions.sh [R]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
cargo build -q --release -p simpler-host
bin=${CARGO_TARGET_DIR:-target}/release/simpler
collected() {
  local scene=$1 fn=$2 n=$3
  shift 3
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="$fn" \
    "$bin" run "$scene" "$@" --runtime hbg --host-only --rounds "$n" 2>&1 >/dev/null |
    awk '/Collected :/ {print $NF}'
}
measure() {
  local name=$1 scene=$2 fn=$3 tasks=$4
  shift 4
  local one two per_bind
  one=$(collected "$scene" "$fn" "$rounds" "$@")
  two=$(collected "$scene" "$fn" $((2 * rounds)) "$@")
  per_bind=$(((two - one) / rounds))
  echo "bench orch_instructions ${name}_per_warm_bind $per_bind instructions"
  echo "bench orch_instructions ${name}_per_task $((per_bind / tasks)) instructions"
}
# bgemm Case0: 1000 tasks per bind.
measure bgemm_case0 bgemm '*bgemm*orchestrate*' 1000 --case Case0
# dsv4-shaped: 133 ring tasks per bind (66 Graph submissions, their preludes, 63 ordinary).
measure dsv4_shaped dsv4_shaped '*dsv4*orchestrate*' 133
