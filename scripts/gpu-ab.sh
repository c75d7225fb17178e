#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# On an NVIDIA GPU machine: the same CUDA benchmarks against two builds side
# by side, alternating (A B A B ...), so both see the same machine on the same
# day. Each build is a folder made by scripts/h200-pack.sh.
#   A=.device-before B=.device ROUNDS=2 SECTIONS="order bandwidth producers flood" bash scripts/gpu-ab.sh
# MPS=1 runs everything under an MPS control daemon of its own (pipe and log
# directories under /tmp), stopped at the end.
# Writes $OUT/<section>-<build>-<round>.md and the CUDA integration tests'
# logs of build B.
set -u
A=${A:-.device-before}
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-ab}
ROUNDS=${ROUNDS:-2}
SECTIONS=${SECTIONS:-order bandwidth producers}
mkdir -p "$OUT"
if [[ ${MPS:-0} == 1 ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/ferry-ab-mps CUDA_MPS_LOG_DIRECTORY=/tmp/ferry-ab-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  /usr/local/nvidia/bin/nvidia-cuda-mps-control -d || { echo "no MPS control daemon" >"$OUT/mps.txt"; exit 1; }
  trap 'echo quit | /usr/local/nvidia/bin/nvidia-cuda-mps-control' EXIT
fi
nvidia-smi -L >"$OUT/gpu.txt"
nproc >>"$OUT/gpu.txt"
if [[ ${TESTS:-1} == 1 ]]; then
  for t in upload_tests ordering_tests fence_tests cpp_api_tests; do
    LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda timeout 240 "$B/tests/$t" "~[simonly]" >"$OUT/$t.log" 2>&1
    echo "$t exit: $?" | tee -a "$OUT/tests.txt"
  done
fi
run() {  # build section round
  local dir=$1 section=$2 round=$3 sock=/tmp/ferry-ab.sock args
  case $section in
    order) args=--order-only ;;
    bandwidth) args=--bandwidth-only ;;
    producers) args="--producers-only --procs 1,4" ;;
    flood) args="" ;;
  esac
  rm -f "$sock"
  "$dir/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn \
    2>"$OUT/ferryd-$section-$(basename "$dir")-$round.log" &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  if [[ $section == flood ]]; then
    timeout 200 "$dir/bench/flood_bench" --socket "$sock" --daemon-pid $d --phase-seconds 20 \
      >"$OUT/$section-$(basename "$dir")-$round.md" 2>&1
  else
    FERRY_STAGING_THREADS=8 timeout 200 "$dir/bench/cuda_bench" --socket "$sock" $args $([[ ${MPS:-0} == 1 ]] && echo --mps) \
      >"$OUT/$section-$(basename "$dir")-$round.md" 2>&1
  fi
  echo "$section $(basename "$dir") round $round exit: $?" | tee -a "$OUT/runs.txt"
  kill -TERM $d
  wait $d
}
for r in $(seq "$ROUNDS"); do
  for s in $SECTIONS; do
    run "$A" "$s" "$r"
    run "$B" "$s" "$r"
  done
done
# One file back: the device tool returns a bounded number of files.
tar -C "$OUT" -czf "$OUT.tgz" . && mv "$OUT.tgz" "$OUT/all.tgz"
