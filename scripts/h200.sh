#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
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

echo "== connection churn on the CUDA backend: segments made and registered off the io thread"
LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/reliability_tests" "[churn]" >"$OUT/churn.log" 2>&1
echo "reliability_tests [churn] exit: $?" | tee -a "$OUT/churn.log"
grep -A1 "warning" "$OUT/churn.log" | tail -1

echo "== the C++ wrapper on the CUDA backend"
FERRY_TEST_BACKEND=cuda "$B/tests/cpp_api_tests" >"$OUT/cpp_api.log" 2>&1
echo "cpp_api_tests exit: $?" | tee -a "$OUT/cpp_api.log"
tail -2 "$OUT/cpp_api.log"

echo "== sharing: grants on the CUDA backend, and a CUDA IPC export opened by a consumer"
LD_LIBRARY_PATH=$B/lib FERRY_TEST_BACKEND=cuda "$B/tests/sharing_tests" "[grant]" >"$OUT/sharing.log" 2>&1
echo "sharing_tests [grant] exit: $?" | tee -a "$OUT/sharing.log"
tail -2 "$OUT/sharing.log"
isock=/tmp/ferry-h200-ipc.sock
"$B/daemon/ferryd" --backend cuda --socket "$isock" --log-level warn &
i=$!
for _ in $(seq 200); do [[ -S $isock ]] && break; sleep 0.05; done
"$B/bench/cuda_ipc_check" "$isock" "$B/tests/producer_client" 2>&1 | tee "$OUT/cuda_ipc.txt"
echo "cuda_ipc_check exit: ${PIPESTATUS[0]}" | tee -a "$OUT/cuda_ipc.txt"
kill -TERM $i
wait $i

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
[[ ${SKIP_BENCH:-0} == 1 ]] && { kill -TERM $d; wait $d; exit 0; }
FERRY_STAGING_THREADS=${FERRY_STAGING_THREADS:-8} "$B/bench/cuda_bench" --socket "$sock" ${BENCH_ARGS:-} \
  >"$OUT/cuda_bench.md" 2>"$OUT/cuda_bench.err"
echo "cuda_bench exit: $?"
kill -TERM $d
wait $d
echo "ferryd exit: $?" | tee -a "$OUT/ferryd.log"
