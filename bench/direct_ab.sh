#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The direct upload's own cost, two libferry builds side by side: instructions
# per call inside ferry_upload_direct (callgrind, which counts the same on
# any machine), then the call's median and p99 (bench/direct_uploads, the two
# builds alternating, ROUNDS each). One ferryd (B's) on the simulated device;
# A's libferry is loaded into B's program (the C ABI is the same).
# usage: bench/direct_ab.sh A_BUILD B_BUILD [BYTES] [ROUNDS]
set -euo pipefail
a=$1 b=$2 bytes=${3:-1024} rounds=${4:-3}
work=$(mktemp -d)
trap 'kill "$daemon" 2>/dev/null || true; rm -rf "$work"' EXIT
FERRY_SIM_DRIVER=$b/sim/libze_ferry_sim.so.1 "$b/daemon/ferryd" --sim --socket "$work/s" --log-level warn &
daemon=$!
for _ in $(seq 100); do [[ -S $work/s ]] && break; sleep 0.05; done
prog=$b/bench/direct_uploads
if command -v valgrind >/dev/null; then
  for x in a b; do
    dir=${!x}
    LD_LIBRARY_PATH=$dir/client valgrind --tool=callgrind --toggle-collect=ferry_upload_direct \
      --callgrind-out-file="$work/$x.cg" "$prog" "$work/s" 5000 "$bytes" >/dev/null 2>&1
    ir=$(callgrind_annotate "$work/$x.cg" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$x: $((ir / 5000)) instructions per call of $bytes B ($dir)"
  done
else
  echo "valgrind not installed: no instruction counts"
fi
for _ in $(seq "$rounds"); do
  for x in a b; do
    echo "$x: $(LD_LIBRARY_PATH=${!x}/client "$prog" "$work/s" 200000 "$bytes")"
  done
done
