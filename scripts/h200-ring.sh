#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine (the `device` tool) with .device carried
# (scripts/h200-pack.sh): the submission ring against the message path.
# cuda_bench's idle 1 KiB section with ferryd's poller (the default), with
# a poller that never polls (--poll-idle-us 0), and with a client that sends
# every transfer as a message (FERRY_SUBMIT=socket); RUNS times each.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
RUNS=${RUNS:-5}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
one() {  # $1: label, $2: ferryd flags, $3: client environment
  local sock=/tmp/ferry-ring-$1.sock
  "$B/daemon/ferryd" --backend cuda --socket "$sock" --log-level warn $2 2>>"$OUT/ferryd-ring.log" &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  for r in $(seq "$RUNS"); do
    env $3 "$B/bench/cuda_bench" --socket "$sock" --order-only 2>>"$OUT/ring.err" |
      awk -v l="$1" -v r="$r" '/^\| \*\*ferry\*\*|^\| pageable-async|^\| pinned-async|context switches/ {print l, r, $0}' >>"$OUT/ring.txt"
  done
  kill -TERM $d
  wait $d
}
one poll "" "FERRY_SUBMIT=ring"
one nopoll "--poll-idle-us 0" "FERRY_SUBMIT=ring"
one socket "" "FERRY_SUBMIT=socket"
cat "$OUT/ring.txt"
