#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# On an NVIDIA GPU machine: the same CUDA benchmarks against two builds side
# by side, alternating (A B A B ...), so both see the same machine on the same
# day. Each build is a folder made by scripts/h200-pack.sh.
#   A=.device-before B=.device ROUNDS=2 SECTIONS="order bandwidth producers" bash scripts/gpu-ab.sh
# Writes $OUT/<section>-<build>-<round>.md and the CUDA integration tests'
# logs of build B.
set -u
A=${A:-.device-before}
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-ab}
ROUNDS=${ROUNDS:-2}
SECTIONS=${SECTIONS:-order bandwidth producers}
mkdir -p "$OUT"
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
  esac
  rm -f "$sock"
  "$dir/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn \
    2>"$OUT/ferryd-$section-$(basename "$dir")-$round.log" &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  FERRY_STAGING_THREADS=8 timeout 200 "$dir/bench/cuda_bench" --socket "$sock" $args \
    >"$OUT/$section-$(basename "$dir")-$round.md" 2>&1
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
