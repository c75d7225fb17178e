#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine: the CUDA tests, then the bandwidth table up to
# 4 MiB under several settings (medium uploads against pageable
# cudaMemcpy), each three times. Results under $OUT.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
nvidia-smi -L >"$OUT/gpu.txt"
# SKIP_TESTS=1: the measurements only.
[[ ${SKIP_TESTS:-0} == 1 ]] || {
  FERRY_TEST_BACKEND=cuda "$B/tests/upload_tests" "~[simonly]" 2>&1 | tail -2
  echo "upload_tests exit: ${PIPESTATUS[0]}"
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/ring_tests" 2>&1 | tail -2
  FERRY_TEST_BACKEND=cuda "$B/tests/cpp_api_tests" 2>&1 | tail -2
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/sharing_tests" "[grant]" 2>&1 | tail -2
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/reliability_tests" "[churn]" 2>&1 | tail -2
  LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/ordering_tests" "[timeline],[isolation]" 2>&1 | tail -2
} >"$OUT/tests.txt" 2>&1
sock=/tmp/ferry-mid.sock
"$B/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn 2>"$OUT/ferryd.log" &
d=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
# Variants alternate run by run, in reversed order every other run, so the
# machine's drift spreads over all. VARIANTS: settings separated by spaces
# ("default": none); RUNS: runs of each (3); MAX_BYTES: the largest size (4 MiB).
read -r -a vs <<<"${VARIANTS:-default FERRY_FIRST_PIECE=0}"
for r in $(seq "${RUNS:-3}"); do
  order=("${vs[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#vs[@]} - 1; i >= 0; i--)); do order+=("${vs[i]}"); done
  fi
  for v in "${order[@]}"; do
    echo "## $v (run $r)" >>"$OUT/mid.md"
    env $([[ $v == default ]] || echo "$v") FERRY_BENCH_MAX_BYTES=${MAX_BYTES:-4194304} FERRY_STAGING_THREADS=8 \
      timeout 120 "$B/bench/cuda_bench" --socket "$sock" --bandwidth-only >>"$OUT/mid.md" 2>&1
  done
done
kill -TERM $d
wait $d
