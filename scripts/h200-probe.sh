#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine: ferry's medium uploads beside the floor of any
# staged path, in the same call. Alternately, three times: the bandwidth
# table up to 4 MiB (cuda_bench against a ferryd), then bench/submit_probe at
# 256 KiB and 1 MiB (one process, no daemon: memcpy into registered memory,
# the copy submitted by a spinning thread as ferryd's CUDA backend does).
# Results under $OUT: ferry_mid.md, probe.md.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
nvidia-smi -L >"$OUT/gpu.txt"
sock=/tmp/ferry-probe.sock
"$B/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn 2>"$OUT/ferryd.log" &
d=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
for r in 1 2 3; do
  echo "## run $r" | tee -a "$OUT/ferry_mid.md" >>"$OUT/probe.md"
  FERRY_BENCH_MAX_BYTES=4194304 FERRY_STAGING_THREADS=8 timeout 120 "$B/bench/cuda_bench" --socket "$sock" --bandwidth-only >>"$OUT/ferry_mid.md" 2>&1
  for b in 262144 1048576; do "$B/bench/submit_probe" --bytes $b --runs 41 >>"$OUT/probe.md" 2>&1; done
done
kill -TERM $d
wait $d
