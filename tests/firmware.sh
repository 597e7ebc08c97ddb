#!/usr/bin/env bash
# The firmware images: builds the AICPU and AICore images and the qemu test image for
# aarch64-unknown-none, prints their sizes, counts the panic call sites reachable from the hot
# paths (tests/firmware/panic_paths.py), and boots the qemu image, which runs vector_example on
# four CPUs and reports PASS or FAIL through semihosting; then builds and boots it again with
# the `defmt` feature, whose log goes to defmt.log through semihosting. Exits 0 only if both
# images printed PASS with qemu's exit code saying so, the default image links no defmt, the
# defmt one logged, and no hot-path panic site remains above the ceiling in
# tests/firmware/panic_sites_max (0).
#
# Needs: the aarch64-unknown-none target, rustup's llvm-tools component and qemu-system-aarch64
# (Debian: qemu-system-arm); .ci/run installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target_dir="${CARGO_TARGET_DIR:-$root/target}/firmware"
out="$target_dir/aarch64-unknown-none/release"
bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
objdump="$bin/llvm-objdump"
size="$bin/llvm-size"
for tool in "$objdump" "$size"; do
  [ -x "$tool" ] || { echo "firmware: $tool missing (rustup component add llvm-tools)"; exit 1; }
done

build() {
  (cd "$1" && CARGO_TARGET_DIR="${3:-$target_dir}" cargo build --locked --release \
     --target aarch64-unknown-none ${2:+--features "$2"})
}
build aicore/firmware
build aicpu/firmware

# Sizes, from the image's sections: text is code and read-only data (.text, .rodata), data is
# .data, bss is .bss; the stacks (.stack, NOLOAD) are reported apart as the reserve per CPU.
sizes() {
  sizes_in "$out/$1"
}
sizes_in() {
  "$size" -A "$1" | awk '
    $1 == ".text" || $1 == ".rodata" { text += $2 }
    $1 == ".data" { data += $2 }
    $1 == ".bss" { bss += $2 }
    END { print text + 0, data + 0, bss + 0 }'
}
for pair in "aicpu simpler-aicpu" "aicore simpler-aicore" "qemu qemu-vector"; do
  set -- $pair
  read -r text data bss < <(sizes "$2")
  echo "bench firmware ${1}_text_bytes $text bytes"
  echo "bench firmware ${1}_data_bytes $data bytes"
  echo "bench firmware ${1}_bss_bytes $bss bytes"
done

# Panic reachability: the submit path and the scheduler pass in the AICPU image, the core loop
# (and the kernels its table reaches) in the AICore image.
check() {
  python3 tests/firmware/panic_paths.py "$objdump" "$out/$1" "${@:2}" | tee "$target_dir/panic-$1.txt" \
    | sed -n 's/^bench firmware hot_path_panic_sites \([0-9]*\) sites$/\1/p'
}
aicpu_sites=$(check simpler-aicpu simpler_fw_orchestrate_vector simpler_fw_sched_pass aicpu_scheduler_main)
aicore_sites=$(check simpler-aicore simpler_fw_core_step)
sites=$((aicpu_sites + aicore_sites))
grep '^  site ' "$target_dir/panic-simpler-aicpu.txt" "$target_dir/panic-simpler-aicore.txt" \
  | sed 's/^[^:]*://' | head -40 || true
echo "bench firmware aicpu_hot_path_panic_sites $aicpu_sites sites"
echo "bench firmware aicore_hot_path_panic_sites $aicore_sites sites"
echo "bench firmware hot_path_panic_sites $sites sites"
max=$(cat tests/firmware/panic_sites_max)
status=0
if [ "$sites" -gt "$max" ]; then
  echo "FAIL: $sites hot-path panic sites, more than the $max allowed (tests/firmware/panic_sites_max)"
  status=1
fi

# boot IMAGE DIR [qemu arguments...]
boot() {
  local image=$1 dir=$2
  shift 2
  (cd "$dir" && timeout 300 qemu-system-aarch64 -M virt -cpu cortex-a57 -smp 5 -m 512M \
     -nographic -nic none -semihosting-config enable=on,target=native -kernel "$image" "$@")
}

# Boot: CPU 0 the loader and the AICPU's orchestration, CPUs 1-3 one cluster of AICores, CPU 4
# the AICPU's scheduler.
log="$target_dir/qemu.log"
set +e
boot "$out/qemu-vector" "$target_dir" >"$log" 2>&1
rc=$?
set -e
cat "$log"
sed -n 's/^stack \(aicpu\|aicore\|scheduler\) \([0-9]*\) bytes$/bench firmware \1_stack_bytes \2 bytes/p' "$log"
sed -n 's/^work aicpu \([0-9]*\) bytes$/bench firmware aicpu_work_bytes \1 bytes/p' "$log"
if [ "$rc" -ne 0 ] || ! grep -q '^PASS' "$log"; then
  echo "FAIL: the qemu image exited with $rc"
  status=1
fi

# The fault test: the boot table names CPU 4 as the scheduler's but it is never started; the
# run must end with SchedulerSilent after the watchdog period (5 s), not hang.
silent_log="$target_dir/qemu-silent.log"
set +e
boot "$out/qemu-vector" "$target_dir" -append silent-scheduler >"$silent_log" 2>&1
rc=$?
set -e
cat "$silent_log"
if [ "$rc" -ne 0 ] || ! grep -q '^PASS silent scheduler CPU' "$silent_log"; then
  echo "FAIL: the silent-scheduler qemu run exited with $rc"
  status=1
fi

# defmt: off by default (no .defmt section, no logger linked); with the feature, the qemu image
# logs its cold-path events through semihosting into defmt.log and still passes.
if "$size" -A "$out/qemu-vector" | grep -q '^\.defmt'; then
  echo "FAIL: the default qemu image links defmt"
  status=1
fi
defmt_dir="${CARGO_TARGET_DIR:-$root/target}/firmware-defmt"
DEFMT_LOG=info build aicpu/firmware defmt "$defmt_dir"
defmt_out="$defmt_dir/aarch64-unknown-none/release"
rm -f "$defmt_dir/defmt.log"
set +e
boot "$defmt_out/qemu-vector" "$defmt_dir" >"$defmt_dir/qemu.log" 2>&1
rc=$?
set -e
read -r text _ _ < <(sizes_in "$defmt_out/qemu-vector")
echo "bench firmware qemu_defmt_text_bytes $text bytes"
frames=$(stat -c %s "$defmt_dir/defmt.log" 2>/dev/null || echo 0)
echo "bench firmware defmt_log_bytes $frames bytes"
if [ "$rc" -ne 0 ] || ! grep -q '^PASS' "$defmt_dir/qemu.log" || [ "$frames" -eq 0 ]; then
  cat "$defmt_dir/qemu.log"
  echo "FAIL: the defmt qemu image exited with $rc and logged $frames bytes"
  status=1
fi
exit "$status"
