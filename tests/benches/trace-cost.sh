#!/usr/bin/env bash
# trace-cost: what trace recording costs when it is compiled in but switched off.
#
# Builds the `dispatch` benchmark twice — with the simulator's `trace` feature (the default:
# recording compiled in, off at run time because the benchmark asks for no trace) and without
# it (every event site compiled out) — then runs the two builds alternately, ROUNDS times
# each (on, off, on, off, ...), and prints the median over rounds of each build's median
# us/task for the 100,000-task fan graph and the 10,000-task chain, and their ratio.
#
# Run: tests/benches/trace-cost.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
on_dir=target/trace-on
off_dir=target/trace-off
cargo bench -q -p simpler-tests --bench dispatch --no-run --target-dir "$on_dir" 2>/dev/null
cargo bench -q -p simpler-tests --bench dispatch --no-run --target-dir "$off_dir" \
  --no-default-features 2>/dev/null
bin() { ls -t "$1"/release/deps/dispatch-* | grep -v '\.d$' | head -1; }
on_bin=$(bin "$on_dir")
off_bin=$(bin "$off_dir")
tmp=$(mktemp -d)
for _ in $(seq "$rounds"); do
  "$on_bin" --bench >>"$tmp/on"
  "$off_bin" --bench >>"$tmp/off"
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for figure in fan_100k_us_per_task_median chain_10k_us_per_task_median; do
  on=$(grep " $figure " "$tmp/on" | awk '{print $4}' | median)
  off=$(grep " $figure " "$tmp/off" | awk '{print $4}' | median)
  echo "bench trace_cost ${figure}_compiled_in_off $on us/task"
  echo "bench trace_cost ${figure}_compiled_out $off us/task"
  echo "bench trace_cost ${figure}_ratio $(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.3f", a / b}') x"
done
rm -rf "$tmp"
