#!/usr/bin/env bash
# Runs on the GPU machine (the `device` tool), from the repository root, with
# a folder of binaries built here (scripts/h200-pack.sh) carried as .device.
# Writes results under $OUT: the CUDA integration tests, the CUDA benchmark,
# and ferryctl's view of the daemon while producers upload.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
nproc >>"$OUT/gpu.txt"

echo "== integration tests on the CUDA backend"
FERRY_TEST_BACKEND=cuda "$B/tests/upload_tests" "~[simonly]" >"$OUT/tests.log" 2>&1
echo "upload_tests exit: $?" | tee -a "$OUT/tests.log"
tail -3 "$OUT/tests.log"

sock=/tmp/ferry-h200.sock
"$B/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 2>"$OUT/ferryd.log" &
d=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
echo "== multi_upload example against ferryd --backend cuda"
"$B/examples/multi_upload" -s "$sock" -p 4 -n 100 -b 1048576 | tee "$OUT/multi_upload.txt"
"$B/examples/multi_upload" -s "$sock" -p 8 -n 400 -b 4194304 >/dev/null &
sleep 0.5
"$B/client/ferryctl" --socket "$sock" status | tee "$OUT/ferryctl.txt"
wait %2 2>/dev/null
echo "== cuda_bench"
FERRY_STAGING_THREADS=${FERRY_STAGING_THREADS:-8} "$B/bench/cuda_bench" --socket "$sock" ${BENCH_ARGS:-} \
  >"$OUT/cuda_bench.md" 2>"$OUT/cuda_bench.err"
echo "cuda_bench exit: $?"
kill -TERM $d
wait $d
echo "ferryd exit: $?" | tee -a "$OUT/ferryd.log"
