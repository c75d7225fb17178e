#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the 2-GPU machine (kind nvidia-h200-x2) with .device carried: one
# ferryd per GPU; P producer processes per GPU upload 4 MiB pageable pieces
# for 2 s (cuda_bench --producers-only), first on GPU 0 alone, then on both
# GPUs at once; first from pageable memory, then written in place into
# ferry's staging memory (FERRY_PRODUCER_IN_PLACE). Prints the aggregate
# ratio and Jain's fairness over all producers of both. Results under
# $OUT/producers2.txt.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
P=${P:-4}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
log=$OUT/producers2.txt
: >"$log"
pids=()
for g in 0 1; do
  "$B/daemon/ferryd" --backend cuda --device $g --socket /tmp/ferry-p$g.sock --slot-size 4194304 --slots 16 -q &
  pids+=($!)
done
for g in 0 1; do for _ in $(seq 200); do [[ -S /tmp/ferry-p$g.sock ]] && break; sleep 0.05; done; done
rates() { grep "^| $P |" "$1" | awk -F'|' '{print $5}'; }
for mode in pageable in-place; do
[[ $mode == in-place ]] && export FERRY_PRODUCER_IN_PLACE=1
echo "-- $mode" | tee -a "$log"
for round in 1 2 3; do
  "$B/bench/cuda_bench" --socket /tmp/ferry-p0.sock --producers-only --procs $P >/tmp/alone.md
  "$B/bench/cuda_bench" --socket /tmp/ferry-p0.sock --producers-only --procs $P >/tmp/both0.md & a=$!
  "$B/bench/cuda_bench" --socket /tmp/ferry-p1.sock --producers-only --procs $P >/tmp/both1.md & b=$!
  wait $a $b
  python3 - "$(rates /tmp/alone.md)" "$(rates /tmp/both0.md)" "$(rates /tmp/both1.md)" "$P" <<'PY' | tee -a "$log"
import sys
alone = [float(x) for x in sys.argv[1].split()]
g0 = [float(x) for x in sys.argv[2].split()]
g1 = [float(x) for x in sys.argv[3].split()]
both = g0 + g1
jain = sum(both) ** 2 / (len(both) * sum(x * x for x in both))
print(f"{sys.argv[4]} producers per GPU: one GPU {sum(alone):.1f} GB/s; both {sum(g0):.1f} + {sum(g1):.1f} = "
      f"{sum(both):.1f} GB/s ({sum(both) / sum(alone):.2f}x); Jain over all {len(both)} producers {jain:.3f}; "
      f"each: {' '.join(f'{x:.1f}' for x in both)}")
PY
done
done
for p in "${pids[@]}"; do kill -TERM $p; done
for p in "${pids[@]}"; do wait $p; done
