#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): cuda_bench's bandwidth table under the settings
# whose defaults were chosen from it: streaming stores in the staging copy
# (FERRY_STAGE_NT=0 turns them off), how many pieces a mid-size upload is
# cut into (FERRY_MIN_PIECES), where the staging threads start
# (FERRY_PARALLEL_FROM), and the poller's naps (--poll-nap-us 0: none).
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib FERRY_STAGING_THREADS=8
one() {  # $1: label, $2: ferryd flags, $3: client environment
  local sock=/tmp/ferry-tune-$1.sock
  "$B/daemon/ferryd" --backend cuda --socket "$sock" --slot-size 4194304 --slots 16 --log-level warn $2 &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "#### $1 (ferryd $2; $3)"
  env $3 "$B/bench/cuda_bench" --socket "$sock" --bandwidth-only | grep '^| [0-9]'
  kill -TERM $d
  wait $d
}
for rep in ${REPS:-1 2}; do
  one "defaults-$rep" "" "FERRY_STAGE_NT=1"
  one "2-pieces-$rep" "" "FERRY_MIN_PIECES=2"
  one "no-streaming-stores-$rep" "" "FERRY_STAGE_NT=0"
  one "staging-threads-from-8MiB-$rep" "" "FERRY_PARALLEL_FROM=8388608"
  one "no-naps-$rep" "--poll-nap-us 0" "FERRY_STAGE_NT=1"
done
