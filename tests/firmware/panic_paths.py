#!/usr/bin/env python3
"""Counts the panic call sites reachable from the firmware's hot-path roots in a linked image.

Usage: panic_paths.py OBJDUMP IMAGE ROOT...

A call-graph walk over `llvm-objdump -d` of the linked image (after LTO and inlining, so the
graph is the one the device runs). Nodes are the image's function symbols; an edge is a direct
branch (`bl`, `b`, conditional and compare-and-branch forms) whose target lies in another
function. An indirect branch (`blr`/`br`) may reach any function whose address the image takes
(an 8-byte word in `.rodata`/`.data` equal to a function's start, which is how vtables and the
kernel table hold them, or an `adr`/`adrp`+`add` in code): the walk follows all of them, except
the formatting machinery (`core::fmt` and the `Debug`/`Display`/`Write` impls), which only a
`core::fmt::write` call reaches, itself reported as a panic-class sink when a root reaches it.

A panic entry point is a function whose name is one of core's panic paths (`core::panicking`,
`panic_bounds_check`, `slice_*_fail`, `unwrap_failed`, `expect_failed`, `rust_begin_unwind`,
`core::fmt::write`). A site is one branch from a reachable function into one. Prints each site
with its function and the chain from a root, then `bench firmware hot_path_panic_sites N sites`.
"""
import re
import subprocess
import sys
from collections import deque

PANIC = re.compile(
    r"panicking|panic_bounds_check|panic_const|slice_index_fail|slice_start_index_len_fail|"
    r"slice_end_index_len_fail|slice_index_order_fail|slice_error_fail|len_mismatch_fail|"
    r"unwrap_failed|expect_failed|rust_begin_unwind|assert_failed|core::fmt::write\b|"
    r"core\.\.fmt\.\.write\b|fw_exception"
)
# The entry code and vectors: their addresses are taken (PSCI's entry point, VBAR), but no
# Rust code calls them.
ENTRY = re.compile(r"^(_start|_secondary_start|fw_entry|fw_vectors)$")
FORMATTING = re.compile(r"fmt|Debug|Display|Write|PadAdapter|flt2dec|bignum|unicode")
BRANCH = re.compile(r"^\s*([0-9a-f]+):\s+(bl|b|b\.\w+|cbz|cbnz|tbz|tbnz)\s+.*?0x([0-9a-f]+)")
INDIRECT = re.compile(r"^\s*([0-9a-f]+):\s+(blr|br)\s")
ADR = re.compile(r"^\s*[0-9a-f]+:\s+adr\s+(\w+),\s+0x([0-9a-f]+)")
ADRP = re.compile(r"^\s*[0-9a-f]+:\s+adrp\s+(\w+),\s+0x([0-9a-f]+)")
ADD = re.compile(r"^\s*[0-9a-f]+:\s+add\s+(\w+),\s+(\w+),\s+#0x([0-9a-f]+)")
LABEL = re.compile(r"^([0-9a-f]+) <(.*)>:$")


def main():
    objdump, image, roots = sys.argv[1], sys.argv[2], sys.argv[3:]
    dis = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", image],
                         check=True, capture_output=True, text=True).stdout
    starts = {}  # address -> name
    body = {}  # name -> list of lines
    cur = None
    for line in dis.splitlines():
        m = LABEL.match(line)
        if m:
            cur = m.group(2)
            starts[int(m.group(1), 16)] = cur
            body.setdefault(cur, [])
            continue
        if cur is not None and line.strip():
            body[cur].append(line)
    order = sorted(starts)
    bounds = {}
    for i, a in enumerate(order):
        bounds[starts[a]] = (a, order[i + 1] if i + 1 < len(order) else a + 1 << 40)

    def owner(addr):
        lo, hi = 0, len(order) - 1
        if addr < order[0]:
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if order[mid] <= addr:
                lo = mid
            else:
                hi = mid - 1
        return starts[order[lo]]

    # Address-taken functions: words in data sections, adr / adrp+add in code.
    taken = set()
    dump = subprocess.run([objdump, "-s", "-j", ".rodata", "-j", ".data", image],
                          capture_output=True, text=True).stdout
    raw = bytearray()
    base = None
    for line in dump.splitlines():
        m = re.match(r"^ ([0-9a-f]{8,16}) ((?:[0-9a-f]{2,8} ?){1,4})", line)
        if not m:
            if line.startswith("Contents of section"):
                if raw and base is not None:
                    scan(raw, base, starts, taken)
                raw, base = bytearray(), None
            continue
        if base is None:
            base = int(m.group(1), 16)
        for word in m.group(2).split():
            raw += bytes.fromhex(word)
    if raw and base is not None:
        scan(raw, base, starts, taken)
    edges = {name: set() for name in body}
    indirect = {name: 0 for name in body}
    sites = {}
    for name, lines in body.items():
        pages = {}
        for line in lines:
            m = ADR.match(line)
            if m and int(m.group(2), 16) in starts:
                taken.add(starts[int(m.group(2), 16)])
            m = ADRP.match(line)
            if m:
                pages[m.group(1)] = int(m.group(2), 16)
            m = ADD.match(line)
            if m and m.group(2) in pages:
                a = pages[m.group(2)] + int(m.group(3), 16)
                if a in starts:
                    taken.add(starts[a])
            m = BRANCH.match(line)
            if m:
                target = owner(int(m.group(3), 16))
                if target is not None and target != name:
                    edges[name].add(target)
                    if PANIC.search(target):
                        sites.setdefault(name, []).append((m.group(1), target))
                continue
            if INDIRECT.match(line):
                indirect[name] += 1
    callable_taken = {t for t in taken
                      if not FORMATTING.search(t) and not PANIC.search(t) and not ENTRY.match(t)}

    missing = [r for r in roots if not any(n == r or n.startswith(r + "::") for n in body)]
    if missing:
        print(f"panic check: roots not in the image: {missing}", file=sys.stderr)
        sys.exit(2)
    start = [n for n in body if any(n == r or n.startswith(r + "::") for r in roots)]
    parent = {n: None for n in start}
    queue = deque(start)
    while queue:
        n = queue.popleft()
        if PANIC.search(n):
            continue
        nexts = set(edges.get(n, ()))
        if indirect.get(n):
            nexts |= callable_taken
        for t in sorted(nexts):
            if t not in parent:
                parent[t] = n
                queue.append(t)
    total = 0
    for n in sorted(parent):
        if PANIC.search(n):
            continue
        for addr, target in sites.get(n, []):
            total += 1
            chain, p = [], parent[n]
            while p is not None and len(chain) < 6:
                chain.append(p)
                p = parent[p]
            via = " <- ".join(chain) if chain else "(root)"
            print(f"  site {addr}: {n} -> {target}   via {via}")
    reach = sum(1 for n in parent if not PANIC.search(n))
    for t in sorted(callable_taken):
        print(f"  indirect target: {t}")
    print(f"panic check: {len(start)} roots, {reach} reachable functions, "
          f"{len(callable_taken)} address-taken targets of indirect calls")
    print(f"bench firmware hot_path_panic_sites {total} sites")


def scan(raw, base, starts, taken):
    pad = (-base) % 8
    for off in range(pad, len(raw) - 7, 8):
        v = int.from_bytes(raw[off:off + 8], "little")
        if v in starts:
            taken.add(starts[v])


if __name__ == "__main__":
    main()
