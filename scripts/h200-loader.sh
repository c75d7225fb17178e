#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): loader_bench, the pin-memory data-loader pattern
# against ferry, under MPS (the default a CUDA host should run ferryd with)
# and without it. Markdown tables under $OUT.
#   WORKERS=1,4,8,16 MIB=1,16,64 REPS=3 bash scripts/h200-loader.sh
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
nvidia-smi -L | tee "$OUT/loader-gpu.txt"
nproc | tee -a "$OUT/loader-gpu.txt"

run() {  # $1: label
  local label=$1 sock=/tmp/ferry-loader-$1.sock
  "$B/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn \
    2>>"$OUT/loader-ferryd-$label.log" &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "## $label" | tee -a "$OUT/loader-$label.md"
  "$B/bench/loader_bench" --socket "$sock" --ferryd-pid $d --workers "${WORKERS:-1,4,8,16}" --mib "${MIB:-1,16,64}" \
    --reps "${REPS:-3}" 2>>"$OUT/loader-$label.err" | tee -a "$OUT/loader-$label.md"
  echo "loader_bench $label exit: ${PIPESTATUS[0]}" | tee -a "$OUT/loader-$label.md"
  kill -TERM $d
  wait $d
}

export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
if [[ -x $MPS ]] && $MPS -d; then
  run mps
  echo quit | $MPS
  sleep 1
else
  echo "MPS control daemon unavailable" | tee "$OUT/loader-mps.md"
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
[[ ${PLAIN:-1} == 1 ]] && run plain
