#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs on the GPU machine with .device carried (scripts/h200-pack.sh): what
# ferry-mps.service sets up, done by hand (no systemd there): the MPS control
# daemon with a pipe directory shared by ferryd and the applications; ferryd
# then reports the GPU shared through MPS. Without MPS it warns and says
# time-sliced. Results under $OUT/mps-check.txt.
set -u
B=${B:-.device}
OUT=${OUT:-/tmp/ferry-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$B/lib
MPS=/usr/local/nvidia/bin/nvidia-cuda-mps-control
log=$OUT/mps-check.txt
check() {  # $1: label
  local sock=/tmp/ferry-mps-$1.sock
  "$B/daemon/ferryd" --backend cuda --socket "$sock" 2>/tmp/ferryd-$1.log &
  local d=$!
  for _ in $(seq 200); do [[ -S $sock ]] && break; sleep 0.05; done
  echo "== $1" >>"$log"
  "$B/client/ferryctl" -s "$sock" status | grep -E "^(device|sharing)" >>"$log"
  "$B/client/ferryctl" -s "$sock" metrics | grep "^ferry_device_mps" >>"$log"
  kill -TERM $d
  wait $d
  grep -i "mps" /tmp/ferryd-$1.log | sed 's/^/ferryd: /' >>"$log"
}
: >"$log"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps-ferry CUDA_MPS_LOG_DIRECTORY=/tmp/nvidia-mps-ferry-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if $MPS -d; then
  check mps
  echo quit | $MPS
  sleep 1
  echo "after quit (the files stay; ferryd asks whether anyone answers):" >>"$log"
  ls -l "$CUDA_MPS_PIPE_DIRECTORY" >>"$log"
  check after-quit
else
  echo "MPS control daemon did not start" >>"$log"
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
check plain
cat "$log"
