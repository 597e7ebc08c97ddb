#!/usr/bin/env bash
# orch-instructions: instructions the host executes in a scene's orchestration function per
# warm hbg bind (host_orch's own work: the scene's views, every submit, the payload records,
# Graph acceptance), counted by callgrind. A count, not a duration: it does not move with the
# machine's load, so two builds compare across runs.
#
# For each scene the release `simpler` binary runs host-only hbg binds under callgrind with
# collection switched on only inside the scene's `orchestrate`, once with R rounds and once
# with 2R; the difference over R is the cost of one warm bind (the cold bind and start-up
# cancel out). Per task divides it by the tasks a bind built, as the run reports them.
#
# Not shown: time. Cache misses, branch mispredictions and system calls (recorder wake-ups)
# cost time without instructions; the `bind` benchmark measures the time.
#
# Needs valgrind. Run: tests/benches/orch-instructions.sh [R]   (default 3)
#      SIMPLER_BIN=/path/to/simpler tests/benches/orch-instructions.sh [R]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
# SIMPLER_BIN names another build of `simpler` to count (for example an older commit's, to
# compare two builds); by default the tree's release build is made and counted.
if [[ -n ${SIMPLER_BIN:-} ]]; then
  bin=$SIMPLER_BIN
else
  cargo build -q --release -p simpler-host
  bin=${CARGO_TARGET_DIR:-target}/release/simpler
fi
# Instructions collected inside $fn over N host-only binds, and the tasks each bind built
# (the run's own table: round, host ms, device ms, host_orch ms, bind_window ms, tasks,
# image KiB; every round
# must agree).
collected() {
  local scene=$1 fn=$2 n=$3
  shift 3
  local table collected tasks
  table=$(mktemp)
  collected=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="$fn" \
    "$bin" run "$scene" "$@" --runtime hbg --host-only --no-replay --rounds "$n" 2>&1 >"$table" |
    awk '/Collected :/ {print $NF}')
  if [[ -z $collected || $collected == 0 ]]; then
    echo "orch-instructions: $scene: nothing collected inside $fn (renamed or inlined?)" >&2
    exit 1
  fi
  tasks=$(awk '$1 ~ /^[0-9]+$/ && $NF == "built" {print $6}' "$table" | sort -u)
  rm -f "$table"
  if [[ -z $tasks || $tasks == *$'\n'* ]]; then
    echo "orch-instructions: $scene: no single task count per bind (${tasks:-none})" >&2
    exit 1
  fi
  echo "$collected $tasks"
}
measure() {
  local name=$1 scene=$2 fn=$3
  shift 3
  local out one two tasks per_bind
  out=$(collected "$scene" "$fn" "$rounds" "$@")
  read -r one tasks <<<"$out"
  out=$(collected "$scene" "$fn" $((2 * rounds)) "$@")
  read -r two _ <<<"$out"
  per_bind=$(((two - one) / rounds))
  echo "bench orch_instructions ${name}_per_warm_bind $per_bind instructions"
  echo "bench orch_instructions ${name}_tasks_per_bind $tasks tasks"
  echo "bench orch_instructions ${name}_per_task $((per_bind / tasks)) instructions"
}
measure bgemm_case0 bgemm '*bgemm*orchestrate*' --case Case0
measure dsv4_shaped dsv4_shaped '*dsv4*orchestrate*'
