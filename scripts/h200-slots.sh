#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): cuda_bench's bandwidth table under three slot
# geometries of the same 16 MiB segment, to choose ferryd's default.
set -u
B=${B:-.device}
export LD_LIBRARY_PATH=$B/lib FERRY_STAGING_THREADS=8
for rep in 1 2; do
  for cfg in "--slots 16 --slot-size 1048576" "--slots 32 --slot-size 524288" "--slots 64 --slot-size 262144" \
             "--slots 16 --slot-size 4194304"; do
    sock=/tmp/ferry-slots.sock
    "$B/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn $cfg &
    d=$!
    for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
    echo "#### $cfg (round $rep)"
    "$B/bench/cuda_bench" --socket "$sock" --bandwidth-only | grep '^| [0-9]'
    kill -TERM $d
    wait $d
  done
done
