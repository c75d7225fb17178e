#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): fences and fork safety on the CUDA backend, the
# CUDA tests of ferry.torch and ferry.device (python/tests/test_torch_cuda.py),
# then bench/torch_loader_bench.py without MPS and under MPS. Results under $OUT.
#   WORK=bytes16,bytes64,images,step16 WORKERS=1,8,16 REPS=3 MPS_WORK=bytes16,bytes64 bash scripts/h200-torch.sh
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib FERRY_LIBRARY=$PWD/$B/client/libferry.so.0 PYTHONUNBUFFERED=1
{ nvidia-smi -L; nproc; python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'; } |
  tee "$OUT/torch-gpu.txt"

echo "== fences and fork safety on the CUDA backend"
FERRY_TEST_BACKEND=cuda "$B/tests/fence_tests" "~[simonly]" >"$OUT/fence_tests.log" 2>&1
echo "fence_tests exit: $?" | tee -a "$OUT/fence_tests.log"
FERRY_TEST_BACKEND=cuda "$B/tests/fork_tests" >"$OUT/fork_tests.log" 2>&1
echo "fork_tests exit: $?" | tee -a "$OUT/fork_tests.log"
tail -2 "$OUT/fence_tests.log" "$OUT/fork_tests.log"

start() {  # $1: socket
  "$B/daemon/ferryd" --backend cuda --socket "$1" --slot-size 4194304 --slots 16 --log-level warn \
    2>>"$OUT/torch-ferryd.log" &
  D=$!
  for _ in $(seq 200); do [[ -S $1 ]] && break; sleep 0.05; done
}
stop() { kill -TERM "$D"; wait "$D"; }

sock=/tmp/ferry-torch.sock
start $sock
echo "== python/tests/test_torch_cuda.py, each test in a process of its own"
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  for t in $(grep -o 'def test_[a-z_]*' python/tests/test_torch_cuda.py | cut -c5-); do
    FERRY_SOCKET=$sock FERRY_TEST_HANG_S=50 timeout 60 python3 python/tests/test_torch_cuda.py -v \
      "CudaLoaderTest.$t" >>"$OUT/torch_cuda_tests.log" 2>&1
    echo "$t: exit $?" | tee -a "$OUT/torch_cuda_tests.log"
    "$B/client/ferryctl" --socket $sock status >>"$OUT/torch_cuda_tests.log" 2>&1
  done
  grep -E "launch returned|Error:|AssertionError|File \"/work" "$OUT/torch_cuda_tests.log" | head -40
fi
echo "== bench/torch_loader_bench.py, no MPS"
timeout ${BENCH_TIMEOUT:-420} python3 bench/torch_loader_bench.py --socket $sock --ferryd-pid $D --work "${WORK:-bytes16,bytes64,images,step16}" \
  --workers "${WORKERS:-1,8,16}" --reps "${REPS:-3}" --label "no MPS" 2>>"$OUT/torch_bench.err" | tee "$OUT/torch_bench_plain.md"
stop

if [[ -n ${MPS_WORK:-} ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
  if $MPS -d; then
    start $sock
    echo "== bench/torch_loader_bench.py, under MPS"
    timeout 300 python3 bench/torch_loader_bench.py --socket $sock --ferryd-pid $D --work "$MPS_WORK" --workers 8 \
      --reps "${REPS:-3}" --label "MPS" 2>>"$OUT/torch_bench.err" | tee "$OUT/torch_bench_mps.md"
    stop
    echo quit | $MPS
  else
    echo "no MPS control daemon" | tee "$OUT/torch_bench_mps.md"
  fi
fi
tail -5 "$OUT/torch_bench.err"
