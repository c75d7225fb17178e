#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried (scripts/h200-pack.sh):
# the ordering tests on the CUDA backend, then cuda_bench's ordering sections
# (idle call, the reused-region loop, the call behind a 30 ms kernel) five
# times without MPS and five times under MPS. Results under $OUT.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
RUNS=${RUNS:-5}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
nvidia-smi -L | tee "$OUT/gpu.txt"

echo "== ordering tests on the CUDA backend (the timeline and the hold isolation)"
FERRY_TEST_BACKEND=cuda "$B/tests/ordering_tests" "[timeline],[isolation]" >"$OUT/ordering.log" 2>&1
echo "ordering_tests exit: $?" | tee -a "$OUT/ordering.log"
tail -2 "$OUT/ordering.log"

bench() {  # $1: label, $2...: extra cuda_bench flags
  local label=$1
  shift
  local sock=/tmp/ferry-order-$label.sock
  "$B/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn 2>>"$OUT/ferryd-$label.log" &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  for r in $(seq "$RUNS"); do
    echo "## run $r ($label)" >>"$OUT/bench-$label.md"
    "$B/bench/cuda_bench" --socket "$sock" --order-only "$@" >>"$OUT/bench-$label.md" 2>>"$OUT/bench-$label.err"
    echo "cuda_bench $label run $r exit: $?"
  done
  kill -TERM $d
  wait $d
}
bench plain

export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
if [[ -x $MPS ]] && $MPS -d; then
  bench mps --mps
  echo quit | $MPS
  sleep 1
else
  echo "MPS control daemon unavailable" | tee "$OUT/bench-mps.md"
fi
grep -h "known ≤\|loop correct\|pinned ring\|^| \*\*ferry\|^| in-process\|^| pageable-sync\|^| ferry, host" "$OUT"/bench-*.md | head -80
