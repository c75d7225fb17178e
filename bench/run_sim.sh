#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ferry-run on the simulated device: an unmodified Level Zero program
# (tests/ze_upload.c) whose immediate list is held while it overwrites the
# source it just uploaded, at 1 KiB-256 MiB, plain and under ferry-run in one
# run, ROUNDS times (3), each size twice per process: the first call pays
# for the process's first lane or a new staging area (registering it), the
# second is the steady state. Prints per size what the device received and
# the append call's time, median (min-max).
#   bash bench/run_sim.sh [BUILD_DIR]          # default build/dev
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/dev}" && pwd)
ROUNDS=${ROUNDS:-3}
sizes="1024 1024 65536 65536 1048576 1048576 4194304 4194304 16777216 16777216 67108864 67108864 268435456 268435456"
tmp=$(mktemp -d)
sock=$tmp/ferry.sock
export ZE_ENABLE_ALT_DRIVERS=$build/sim/libze_ferry_sim.so.1
"$build/daemon/ferryd" --sim --socket "$sock" --log-level warn &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 500); do [[ -S $sock ]] && break; sleep 0.01; done
for r in $(seq "$ROUNDS"); do
  FERRY_SOCKET=$sock "$build/tests/ze_upload" --mode hazard $sizes | sed 's/^/plain /' >>"$tmp/out"
  FERRY_SOCKET=$sock "$build/interpose/ferry-run" -- "$build/tests/ze_upload" --mode hazard $sizes |
    sed 's/^/ferry-run /' >>"$tmp/out"
done
python3 - "$tmp/out" <<'EOF'
import collections, re, statistics, sys
calls, what = collections.defaultdict(list), collections.defaultdict(collections.Counter)
seen = collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\d+) (\w+) device \d+ call_ms=([\d.]+)", line)
    if m:
        who, size = m.group(1), int(m.group(2))
        seen[(who, size)] += 1
        call = "first" if seen[(who, size)] % 2 == 1 else "again"
        calls[(who, size, call)].append(float(m.group(4)))
        what[(who, size)][m.group(3)] += 1
print(f"{'size':>10} | {'plain: received':<16} {'call ms':<20} | {'ferry-run: received':<19} {'call ms, first':<22} {'again'}")
for size in sorted({k[1] for k in calls}):
    med = lambda v: f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
    plain = calls[("plain", size, "first")] + calls[("plain", size, "again")]
    got = lambda who: ", ".join(f"{n} {w}" for w, n in what[(who, size)].items())
    print(f"{size:>10} | {got('plain'):<16} {med(plain):<20} | {got('ferry-run'):<19} "
          f"{med(calls[('ferry-run', size, 'first')]):<22} {med(calls[('ferry-run', size, 'again')])}")
EOF
