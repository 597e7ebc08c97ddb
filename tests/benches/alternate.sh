#!/usr/bin/env bash
# alternate: two builds of `simpler` compared on one scene case by short runs taken in turn
# (A, B, A, B, ...), so that the machine's drift, which on the shared development machines
# moves a run's speed by up to twice within minutes, falls on both arms alike.
#
# Each run is `simpler run <scene> --case <case> --rounds R`; its figure is the median device
# time of its warm rounds (every round but the first two). Each pair gives the ratio A / B of
# the two medians (above 1: B is faster). Printed: the median of each arm's run medians, and
# the median and quartiles of the pairs' ratios. Short runs (R = 12, under a second each)
# keep the two runs of a pair within one spell of the machine; many pairs then give a ratio
# whose quartiles show how far to trust it (the same build against itself reads 0.97-1.03).
#
# Not shown: where the time goes (callgrind counts instructions, `perf record` samples
# time); a change that moves less than the quartiles' spread.
#
# Run: tests/benches/alternate.sh BIN_A BIN_B [PAIRS] [ROUNDS] [SCENE] [CASE]
#      (defaults: 30 pairs, 12 rounds, paged_attention Bench16704)
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BIN_A BIN_B [PAIRS] [ROUNDS] [SCENE] [CASE]" >&2
  exit 2
fi
a=$1 b=$2 pairs=${3:-30} rounds=${4:-12} scene=${5:-paged_attention} case=${6:-Bench16704}
if (( rounds < 3 )); then
  echo "alternate: ROUNDS must be at least 3 (the first two rounds are not counted)" >&2
  exit 2
fi
# The median device ms of one run's warm rounds; the run must pass its golden.
run_median() {
  local out
  out=$("$1" run "$scene" --case "$case" --rounds "$rounds" 2>&1) || {
    echo "$out" >&2
    echo "alternate: $1 failed" >&2
    exit 1
  }
  awk '$1 ~ /^[0-9]+$/ && $1 >= 2 { print $3 }' <<<"$out" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }'
}
pick() { # quantile q (0..1) of the numbers on stdin
  sort -n | awk -v q="$1" '{ v[NR] = $1 } END { i = int(q * (NR - 1) + 1.5); print v[i] }'
}
rows=()
for ((i = 0; i < pairs; i++)); do
  ma=$(run_median "$a")
  mb=$(run_median "$b")
  rows+=("$ma $mb $(awk -v x="$ma" -v y="$mb" 'BEGIN { printf "%.4f", x / y }')")
done
col() { printf '%s\n' "${rows[@]}" | awk -v c="$1" '{ print $c }'; }
name="${scene}_${case}"
echo "bench alternate ${name}_a_device_ms_median $(col 1 | pick 0.5) ms"
echo "bench alternate ${name}_b_device_ms_median $(col 2 | pick 0.5) ms"
echo "bench alternate ${name}_ratio_median $(col 3 | pick 0.5) times"
echo "bench alternate ${name}_ratio_q1 $(col 3 | pick 0.25) times"
echo "bench alternate ${name}_ratio_q3 $(col 3 | pick 0.75) times"
echo "bench alternate ${name}_pairs $pairs pairs"
