#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the 2-GPU machine (the `device` tool, kind nvidia-h200-x2) with
# .device carried (scripts/h200-pack.sh): one ferryd per GPU (as ferryd@0 and
# ferryd@1 would run), and the data-loader benchmark on each GPU alone, then
# on both at once, to measure the aggregate rate and how evenly the two
# daemons share the host. Also the 4 MiB producer stream of multi_upload on
# both GPUs at once. Results under $OUT.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
W=${W:-8}
MIBS=${MIBS:-16,64}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
nvidia-smi -L | tee "$OUT/gpu2.txt"
nproc | tee -a "$OUT/gpu2.txt"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
$MPS -d || echo "no MPS"

pids=()
for g in 0 1; do
  "$B/daemon/ferryd" --backend cuda --device $g --socket /tmp/ferry$g.sock --slot-size 4194304 --slots 16 \
    --log-level warn 2>>"$OUT/ferryd2-$g.log" &
  pids+=($!)
done
for g in 0 1; do for _ in $(seq 200); do [[ -S /tmp/ferry$g.sock ]] && break; sleep 0.05; done; done

bench() {  # $1: gpu, $2: pattern
  "$B/bench/loader_bench" --socket /tmp/ferry$1.sock --ferryd-pid ${pids[$1]} --device $1 --only $2 \
    --workers $W --mib $MIBS --reps ${REPS:-3}
}
{
  for p in ferry pinned; do
    echo "## $p, GPU 0 alone"; bench 0 $p
    echo "## $p, GPU 0 and GPU 1 at once (GPU 0's table, then GPU 1's)"
    bench 0 $p >/tmp/l0.md 2>>"$OUT/loader2.err" & a=$!
    bench 1 $p >/tmp/l1.md 2>>"$OUT/loader2.err" & b=$!
    wait $a $b
    cat /tmp/l0.md /tmp/l1.md
  done
} 2>>"$OUT/loader2.err" | tee "$OUT/loader2.md"

jobs_=()
echo "## multi_upload: $W producers per GPU, 200 uploads of 4 MiB each (pageable), both GPUs at once" >"$OUT/multi2.txt"
echo "(time includes connect, a 800 MiB allocation per producer, and the verifying download)" >>"$OUT/multi2.txt"
for g in 0 1; do
  ( s=$(date +%s.%N); "$B/examples/multi_upload" -s /tmp/ferry$g.sock -p $W -n 200 -b 4194304 >/tmp/m$g.txt
    e=$(date +%s.%N)
    echo "GPU $g: $(tail -1 /tmp/m$g.txt); $(awk -v w=$W -v s=$s -v e=$e 'BEGIN{printf "%.1f", w*200*4194304/(e-s)/1e9}') GB/s" \
      >>"$OUT/multi2.txt" ) &
  jobs_+=($!)
done
wait "${jobs_[@]}"
cat "$OUT/multi2.txt"
for p in "${pids[@]}"; do kill -TERM $p; done
wait
echo quit | $MPS
