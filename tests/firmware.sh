#!/usr/bin/env bash
# The firmware images: builds the AICPU and AICore images and the qemu test image for
# aarch64-unknown-none, prints their sizes, counts the panic call sites reachable from the hot
# paths (tests/firmware/panic_paths.py), and boots the qemu image, which runs vector_example on
# four CPUs and reports PASS or FAIL through semihosting. Exits 0 only if the image printed
# PASS, qemu's exit code said so, and no hot-path panic site remains above the ceiling in
# tests/firmware/panic_sites_max.
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
  (cd "$1" && CARGO_TARGET_DIR="$target_dir" cargo build --locked --release \
     --target aarch64-unknown-none ${2:+--features "$2"})
}
build aicore/firmware
build aicpu/firmware

# Sizes, from the image's sections: text is code and read-only data (.text, .rodata), data is
# .data, bss is .bss; the stacks (.stack, NOLOAD) are reported apart as the reserve per CPU.
sizes() {
  "$size" -A "$out/$1" | awk '
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
aicpu_sites=$(check simpler-aicpu simpler_fw_orchestrate_vector simpler_fw_sched_pass)
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

# Boot: CPU 0 the loader and the AICPU, CPUs 1-3 one cluster of AICores.
log="$target_dir/qemu.log"
set +e
timeout 300 qemu-system-aarch64 -M virt -cpu cortex-a57 -smp 4 -m 512M -nographic -nic none \
  -semihosting-config enable=on,target=native -kernel "$out/qemu-vector" >"$log" 2>&1
rc=$?
set -e
cat "$log"
sed -n 's/^stack \(aicpu\|aicore\) \([0-9]*\) bytes$/bench firmware \1_stack_bytes \2 bytes/p' "$log"
if [ "$rc" -ne 0 ] || ! grep -q '^PASS' "$log"; then
  echo "FAIL: the qemu image exited with $rc"
  status=1
fi
exit "$status"
